"""Where a client finds Redis when it is given no URL: in a ``tickwheel handle`` process,
the server the runner was given (:func:`runs_on`); else ``$TICKWHEEL_REDIS_URL``,
else the user's running embedded server (the one ``tickwheel server start`` runs; its
state file is in ``state_dir()``), else a clear error. The CLI's ``timer.cli.embedded``
starts and stops that server; this module only reads where it is. Its ``default_url`` is
public as ``timer.default_url`` (the rest is the library's own)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from ..errors import ConfigError
from .redaction import redact_url

log = logging.getLogger("tickwheel.client")

HOME_ENV = "TICKWHEEL_HOME"
URL_ENV = "TICKWHEEL_REDIS_URL"
STATE_FILE = "server.json"


def state_dir() -> Path:
    """Where the user's embedded server keeps its data and state: ``$TICKWHEEL_HOME``,
    else ``$XDG_STATE_HOME/tickwheel``, else ``~/.local/state/tickwheel``."""
    home = os.environ.get(HOME_ENV)
    if home:
        return Path(home).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "tickwheel"


def embedded_url(base: Path | None = None) -> str | None:
    """The URL of the user's embedded server if its state file names a live process."""
    try:
        raw = json.loads(((base or state_dir()) / STATE_FILE).read_text())
        pid, port = int(raw["pid"]), int(raw["port"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's pid namespace: the port says the rest
    return f"redis://127.0.0.1:{port}/0"


# the server a `tickwheel handle` process runs its handlers against, while it runs
_runner_url: str | None = None


@contextlib.contextmanager
def runs_on(url: str) -> Iterator[None]:
    """While within: :func:`default_url` answers ``url``, the server a handler runner was
    given, so code its handlers call that finds Redis by itself (the Django backend, a
    Celery app's claims) finds the runner's (``--redis-url``'s included), not the
    environment's or an embedded one. Where $TICKWHEEL_REDIS_URL names another server,
    it is kept (an app's handlers may mean it, as a release before this one gave them),
    with one warning."""
    env = os.environ.get(URL_ENV)
    if env and env != url:
        # what a release before this one did: the environment's, which an app may mean
        # (its handlers writing elsewhere); kept, and said once
        log.warning(
            "$%s names %s, not the server this runner reads (%s): code its handlers call "
            "that finds Redis by itself uses $%s, as before; unset it to use the runner's",
            URL_ENV, redact_url(env), redact_url(url), URL_ENV,
        )  # fmt: skip
        yield
        return
    global _runner_url  # the process's one runner: set, and put back after
    previous, _runner_url = _runner_url, url
    try:
        yield
    finally:
        _runner_url = previous


def default_url() -> str:
    """The Redis URL a client uses when it is given none (``TimerClient.from_url()``
    with no URL): ``$TICKWHEEL_REDIS_URL`` if it is set, else your running embedded
    server's (the one ``tickwheel server start`` runs), else a ``ConfigError`` saying to
    pass a URL, set the variable, or run ``tickwheel server start``. It starts nothing,
    and says in the log (INFO) which one it took. Inside a ``tickwheel handle`` process
    it is the server that runner was given, for the code its handlers call.

    For what takes a URL and should find the same server (a Spark job's executors, a
    Celery app's broker): ``from timer import default_url``."""
    if _runner_url is not None:
        log.debug("no Redis URL given: using the server this handler runner runs on")
        return _runner_url
    env = os.environ.get(URL_ENV)
    if env:
        log.info("no Redis URL given: using $%s", URL_ENV)
        return env
    url = embedded_url()
    if url is not None:
        log.info("no Redis URL given: using the embedded server at %s (%s)", url, state_dir())
        return url
    raise ConfigError(
        f"no Redis URL given, ${URL_ENV} is not set and no embedded server is running: "
        "pass a URL (redis://host:port/db), set the variable, or start one with "
        "`tickwheel server start`"
    )
