"""``tickwheel serve`` (the HTTP API, for every language) and ``tickwheel tokens`` (who
may call it)."""

from __future__ import annotations

import datetime
import os
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import click

from timer.errors import ConfigError, NotFound, quoted

from . import embedded
from .app import (
    App,
    TimerCommandError,
    errors,
    hides_globals,
    pass_app,
    require_extra,
    say_ignored,
    starts_server,
    warn,
)
from .choice import Choice
from .dashboard_cmd import is_loopback, stop_started_server
from .durations import format_ms
from .output import emit, table
from .service import bind_port
from .starting import running

if TYPE_CHECKING:
    from timer.httpapi.tokens import Token, TokenFile

TOKENS_ENV = "TICKWHEEL_TOKENS"


def default_tokens() -> Path:
    """$TICKWHEEL_TOKENS, else tokens.json in the embedded server's home: a config error
    (exit 4) when that home cannot be used (it was the OS's traceback)."""
    given = os.environ.get(TOKENS_ENV)
    if given:
        return Path(given)
    with errors():
        return embedded.home() / "tokens.json"


tokens_option = click.option(
    "--tokens",
    "tokens_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"The token file [env {TOKENS_ENV}; default: tokens.json in the state directory].",
)


@starts_server
@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=8000,
    show_default=True,
    help="The port the API listens on.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Processes serving (uvicorn workers).",
)
@tokens_option
@click.option("--no-auth", is_flag=True, help="Accept requests without a token (loopback only).")
@click.option(
    "--certfile",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="TLS certificate (PEM); with --keyfile the API speaks HTTPS.",
)
@click.option(
    "--keyfile",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="TLS private key (PEM).",
)
@click.option(
    "--callback-host",
    "callback_hosts",
    multiple=True,
    metavar="HOST",
    help="A host a timer's callback_url may name (repeat; none: no callbacks). "
    "`tickwheel handle --callbacks` delivers them.",
)
@pass_app
def serve(
    app: App,
    host: str,
    port: int,
    workers: int,
    tokens_path: Path | None,
    no_auth: bool,
    certfile: str | None,
    keyfile: str | None,
    callback_hosts: tuple[str, ...],
) -> None:
    """Serve the HTTP/JSON API (/v1): schedule, get, cancel, complete, reschedule, notify
    and wait for timers from any language. The OpenAPI document is at /v1/openapi.json.

    Every call needs a bearer token (tickwheel tokens create), scoped to namespaces and
    to read, write or admin; --no-auth drops that, on loopback only.

    \b
    Example (tokens create prints the token alone on stdout):
      tickwheel init
      TOKEN=$(tickwheel tokens create --scope write --namespace default)
      tickwheel serve --port 8000 &
      curl -H "Authorization: Bearer $TOKEN" \\
        localhost:8000/v1/namespaces/default/timers/x
    """
    if (certfile is None) != (keyfile is None):
        raise click.UsageError("give both --certfile and --keyfile, or neither")
    if no_auth and not is_loopback(host):
        raise click.UsageError(
            f"--no-auth on {host}: anyone who reaches it could cancel timers; use tokens "
            "(tickwheel tokens create) beyond loopback"
        )
    require_extra("http", "tickwheel serve")
    from timer.httpapi import serve as web  # noqa: PLC0415 - the web stack, only here
    from timer.httpapi.context import MULTIPROC_ENV  # noqa: PLC0415
    from timer.httpapi.tokens import TokenFile  # noqa: PLC0415

    path = tokens_path or default_tokens()
    if not no_auth:
        with errors():
            if not TokenFile(path).load():  # a setting missing, not a mistyped command: exit 4
                raise ConfigError(
                    f"no tokens in {path}: create one with `tickwheel tokens create --scope "
                    f"write --namespace NS"
                    + (f" --tokens {path}" if tokens_path is not None else "")
                    + "`, or give --no-auth (loopback only)"
                )
    try:
        with errors():
            app.client.meta  # noqa: B018 - a namespace never initialised fails here, clearly
        # uvicorn binds the port itself (in this process, for its workers to share): a port
        # in use is found here first, so the error is ours and no line said it serves.
        bind_port("serve the HTTP API", host, port).close()
    except BaseException:
        stop_started_server(app)  # refused: a server started for it alone does not run on
        raise
    os.environ[web.URL_ENV] = app.url  # for uvicorn's workers; never printed
    os.environ[web.TOKENS_ENV] = "" if no_auth else str(path.resolve())
    os.environ[web.CALLBACK_HOSTS_ENV] = ",".join(callback_hosts)
    import uvicorn  # noqa: PLC0415

    from timer.httpapi.serve import NoDelayHttpToolsProtocol  # noqa: PLC0415 - with uvicorn

    metrics_dir = None
    if workers > 1:  # /metrics of every worker, whichever answers (prometheus-client)
        metrics_dir = tempfile.mkdtemp(prefix="tickwheel-serve-metrics-")
        os.environ[MULTIPROC_ENV] = metrics_dir

    scheme = "https" if certfile else "http"
    auth = "no authentication" if no_auth else f"tokens from {path}"
    click.echo(
        f"HTTP API at {scheme}://{host}:{port}/v1 ({auth}; {workers} worker"
        f"{'s' if workers > 1 else ''}) over {app.safe_url}",
        err=True,
    )
    running()  # uvicorn raises the SIGTERM it stopped on again, once stopped: exit 0
    try:
        uvicorn.run(
            "timer.httpapi.serve:app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level="warning",
            ssl_certfile=certfile,
            ssl_keyfile=keyfile,
            timeout_graceful_shutdown=5,
            http=NoDelayHttpToolsProtocol,
        )
    except SystemExit as exc:  # that SIGTERM (see cli.starting)
        if exc.code not in (0, None):
            raise
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    click.echo("HTTP API stopped", err=True)


def _token_file(given: Path | None) -> TokenFile:
    """The token file given, or the state directory's (made if missing)."""
    from timer.httpapi.tokens import TokenFile  # noqa: PLC0415

    return (
        TokenFile(given, make_dirs=False) if given else TokenFile(default_tokens(), make_dirs=True)
    )


TOKENS_NOT_IN_REDIS = "tokens live in the file --tokens names, not in Redis"


def _say_ignored(app: App) -> None:
    """For `tokens list` and `revoke`: a --redis-url or TICKWHEEL_REDIS_URL given is said
    to be ignored, and a --namespace given on the command line; not TICKWHEEL_NAMESPACE,
    which `tokens create` takes as the namespace a token may use, without a note."""
    say_ignored(app, TOKENS_NOT_IN_REDIS, "--redis-url")
    say_ignored(app, TOKENS_NOT_IN_REDIS, "--namespace", env=False)


@hides_globals("--redis-url", "--namespace")
@click.group()
def tokens() -> None:
    """Bearer tokens of the HTTP API (`tickwheel serve`), stored hashed in a file.

    Each is scoped to namespaces ('*' for all) and to read (get, wait), write (also
    schedule, cancel, complete, reschedule, notify) or admin (everything).

    The file is tokens.json in the state directory (where `tickwheel serve` looks), or
    the one --tokens or $TICKWHEEL_TOKENS names. They live in it, not in Redis: these
    commands say they ignore a --redis-url or TICKWHEEL_REDIS_URL given.
    """


@hides_globals("--redis-url")
@tokens.command()
@click.option(
    "--scope",
    type=Choice(["read", "write", "admin"]),
    required=True,
    help="What it may do: read, write (and read), or admin (everything).",
)
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    help="A namespace it may use (repeat; '*' for all) [default: the global --namespace].",
)
@click.option("--name", default="", help="What it is for (shown by `tokens list`).")
@tokens_option
@pass_app
def create(
    app: App, scope: str, namespaces: tuple[str, ...], name: str, tokens_path: Path | None
) -> None:
    """Create a token and print it once: keep it, it is stored only hashed.

    The token is scoped to the namespaces given (the global --namespace by default) and
    to one of read, write or admin; give it to one service.
    """
    say_ignored(app, TOKENS_NOT_IN_REDIS, "--redis-url")
    with errors():
        file = _token_file(tokens_path)
        # the same name again (the HTTP guide's lines run twice): made, as scripts rely
        # on, but said, with how to revoke the old (trial 30)
        named = [t for t in file.load().values() if name and t.name == name]
        token, bearer = file.create(scope, list(namespaces) or [app.namespace], name)
    path = file.path.absolute()
    emit(
        app.json,
        {
            "id": token.id,
            "token": bearer,
            "scope": scope,
            "namespaces": list(token.namespaces),
            "file": str(path),
        },
        bearer,
    )
    if not app.json:
        click.echo(
            f"(token {token.id}: {scope} on {', '.join(token.namespaces)}; shown only now)",
            err=True,
        )
        given = "" if tokens_path is None else f" --tokens {shlex.quote(str(path))}"
        click.echo(
            f"Stored hashed in {path}: `tickwheel serve{given}` reads it; `tickwheel "
            f"dashboard --tokens {shlex.quote(str(path))}` signs users in with its tokens.",
            err=True,
        )
    if named:
        _say_named_before(named, name, tokens_path, path)


def _say_named_before(named: list[Token], name: str, tokens_path: Path | None, path: Path) -> None:
    """A warning that ``tokens create --name NAME`` made another token of a name the file
    had: how many had it, their ids, and the command revoking one."""
    given = "" if tokens_path is None else f" --tokens {shlex.quote(str(path))}"
    ids = ", ".join(t.id for t in named)
    old = named[0].id if len(named) == 1 else "ID"
    had = (
        f"a token named {quoted(name)} existed already (id {ids})"
        if len(named) == 1
        else f"{len(named)} tokens named {quoted(name)} existed already (ids {ids})"
    )
    warn(
        f"{had}; this one is another, and each works until revoked: revoke "
        f"{'the old' if len(named) == 1 else 'an old one'} with `tickwheel tokens revoke "
        f"{old}{given}`"
    )


@hides_globals("--redis-url", "--namespace")
@tokens.command("list")
@tokens_option
@pass_app
def list_(app: App, tokens_path: Path | None) -> None:
    """The tokens: id, scope, namespaces, name, created.

    Their secrets are not stored, so they are never shown again after `tokens create`.
    """
    _say_ignored(app)
    with errors():
        file = _token_file(tokens_path)
        found = list(file.load().values())
    rows = [(t.id, t.scope, ",".join(t.namespaces), t.name, _created(t.created)) for t in found]
    emit(
        app.json,
        [
            {
                "id": t.id,
                "scope": t.scope,
                "namespaces": list(t.namespaces),
                "name": t.name,
                "created": t.created,
            }
            for t in found
        ],
        table(rows, ("id", "scope", "namespaces", "name", "created"))
        if rows
        else f"No tokens in {file.path.absolute()}."
        if file.path.exists()
        else f"No token file at {file.path.absolute()} (`tickwheel tokens create` makes it).",
    )


@hides_globals("--redis-url", "--namespace")
@tokens.command()
@click.argument("token_id")
@tokens_option
@click.option(
    "--yes",
    is_flag=True,
    help="Revoke never asks; taken so scripts can pass --yes to every deleting command.",
)
@pass_app
def revoke(app: App, token_id: str, tokens_path: Path | None, yes: bool) -> None:
    """Revoke token TOKEN_ID (as `tokens list` shows it; the whole token works too).

    A running `tickwheel serve` reads the file again and refuses it from its next request.
    """
    from timer.httpapi.tokens import id_in  # noqa: PLC0415

    _say_ignored(app)
    pasted = id_in(token_id)  # the whole token, pasted: its id names it
    with errors():
        if not _token_file(tokens_path).revoke(pasted or token_id):
            raise TimerCommandError(NotFound(_not_found(token_id, pasted)))
    emit(app.json, {"revoked": pasted or token_id}, f"Revoked token {pasted or token_id}")


def _created(stored: str) -> str:
    """When a token was made, as the CLI shows an instant (``2026-12-03T16:46:03.000Z``):
    the file keeps ISO-8601 with an offset (``+00:00``), as --json gives it; what does
    not read as one (an older or hand-edited file), as it is."""
    try:
        when = datetime.datetime.fromisoformat(stored)
    except ValueError:
        return stored
    if when.tzinfo is None:
        return stored
    return format_ms(round(when.timestamp() * 1000))


def _not_found(given: str, pasted: str | None) -> str:
    """No such token, said without a secret back (a whole token given was echoed whole):
    the id in it, the text if short enough to be an id, else its length alone (it may be
    a secret, or a token cut short)."""
    see = "see `tickwheel tokens list`"
    if pasted is not None:
        return f"no token {quoted(pasted)} (the id in the token given; {see})"
    if len(given) <= 16:  # an id is 12 hex digits; a secret, 43 characters
        return f"no token {quoted(given)} ({see})"
    return (
        f"no token has the {len(given)}-character id given (not shown; an id is 12 hex "
        f"digits: {see})"
    )
