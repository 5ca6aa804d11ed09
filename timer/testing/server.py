"""One private Redis-compatible server process (:class:`RedisServer`); finding its binary
and its allocator is :mod:`.binaries`' (its names are here too, as before)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..errors import StoreError, quoted
from .binaries import (
    allocator_library,
    binary_version,
    check_server_binary,
    find_server_binary,
)


def free_port(host: str = "127.0.0.1", *, bus_offset: int = 0) -> int:
    """A port free right now on ``host``; with ``bus_offset``, one whose ``port +
    bus_offset`` is free too (a cluster node listens on port + 10000 for its bus, and an
    outgoing connection may hold that port, and the node would then fail to start)."""
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
            if not bus_offset:
                return port
            if port + bus_offset > 65535:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bus:
                try:
                    bus.bind((host, port + bus_offset))
                except OSError:
                    continue
                return port
    raise OSError(f"no free port on {host} with port + {bus_offset} free too")


CLUSTER_BUS_OFFSET = 10000  # a cluster node's bus port is its port + 10000


# Values up to this many bytes keep a small hash a listpack (`hash-max-listpack-value`,
# 64 by default; set by its older name, which Redis 6.2 to Valkey 9 all take). A retained
# outcome is its record after 4 bytes of expiry, so at 64 one with a payload over ~40
# bytes turned its results-table hash into a hash table, about twice the memory an
# outcome.
LISTPACK_VALUE_BYTES = 512


class ServerExited(StoreError):
    """The server process exited while it was starting (it cannot read its data, its
    port is taken, ...): the message is one line, with the last line of its log that
    says why; ``tail`` is what it logged at this start (what it printed, if it logged
    nothing)."""

    def __init__(self, message: str, *, tail: str = "") -> None:
        super().__init__(message)
        self.tail = tail


# A line the server logs: "pid:role day month year time level message", level one of
# . - * # (debug, verbose, notice, warning); a crash report's lines have no prefix.
_LOG_LINE = re.compile(r"^(\d+):[A-Z] \d+ \w+ \d+ [\d:.]+ ([.*#-]) (.*)$")


def last_said(log: str) -> str:
    """The line of a server's log that says why it stopped: its last warning (``#``,
    where Redis and Valkey say why they exit, or a crash's signal), else its last
    line, without the pid and time."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in reversed(lines):
        m = _LOG_LINE.match(line)
        if m and m[2] == "#":
            return m[3]
    if not lines:
        return ""
    m = _LOG_LINE.match(lines[-1])
    return m[3] if m else lines[-1]


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs: it exists and (on Linux) is not a zombie, as an
    exited daemon is until whoever adopted it reaps it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: it exists
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


class RedisServer:
    """One server process on ``host:port`` with its data in ``data_dir``: AOF on, no
    snapshots, small hashes compact for values up to ``LISTPACK_VALUE_BYTES``."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        binary: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        appendfsync: str = "everysec",
        password: str | None = None,
        detached: bool = False,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        allocator: str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.binary = Path(binary) if binary else find_server_binary()
        self.host = host
        self.port = port or free_port(host)
        self.appendfsync = appendfsync
        self.password = password
        # Detached: the server daemonizes (and outlives this process); we track its pidfile.
        self.detached = detached
        self.extra_args = tuple(extra_args)
        # more environment for the server process (LD_PRELOAD of a fault shim, say)
        self.env = dict(env or {})
        # auto / jemalloc / libc / a library's path; None: $TICKWHEEL_SERVER_ALLOCATOR
        # (allocator_library says what each does)
        self.allocator = allocator
        self.preloaded: Path | None = None  # the allocator preloaded by start(), if any
        self.process: subprocess.Popen[bytes] | None = None
        # where this start's lines begin in the log, and the pid a detached server's
        # pidfile held before it (left by a server killed earlier), for _exited
        self._log_from = 0
        self._stale_pid: int | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.log"

    @property
    def pid_path(self) -> Path:
        return self.data_dir / "server.pid"

    @property
    def pid(self) -> int | None:
        if self.detached:
            return self._pidfile_pid()
        return self.process.pid if self.process else None

    def command(self) -> list[str]:
        return [
            str(self.binary),
            "--port",
            str(self.port),
            "--bind",
            self.host,
            "--dir",
            str(self.data_dir),
            "--appendonly",
            "yes",
            "--appendfsync",
            self.appendfsync,
            "--save",
            "",
            "--hash-max-ziplist-value",
            str(LISTPACK_VALUE_BYTES),
            "--daemonize",
            "yes" if self.detached else "no",
            *(("--pidfile", str(self.pid_path)) if self.detached else ()),
            "--logfile",
            str(self.log_path),
            *(("--requirepass", self.password) if self.password else ()),
            *self.extra_args,
        ]

    def start(self, timeout_s: float = 15.0) -> RedisServer:
        if self.process is not None and self.process.poll() is None:
            return self
        check_server_binary(self.binary)  # not a server (/bin/true): said now, nothing made
        self.preloaded = allocator_library(self.binary, self.allocator)  # refused: nothing made
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._log_from = self.log_path.stat().st_size
        except OSError:
            self._log_from = 0
        self._stale_pid = self._pidfile_pid() if self.detached else None
        env = dict(self.env)
        if self.preloaded is not None:  # before any other preload (a fault shim, say)
            others = env.get("LD_PRELOAD", os.environ.get("LD_PRELOAD", ""))
            env["LD_PRELOAD"] = f"{self.preloaded} {others}".strip()
        # what it prints before it opens its log (a refused argument), for an error to
        # show when there is no log; a detached server's daemon prints nowhere
        with tempfile.TemporaryFile() as printed:
            self.process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=printed,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **env} if env else None,
            )
            if self.detached:
                self.process.wait(timeout_s)  # the launcher exits once the daemon has forked
            self._wait_ready(timeout_s, printed)
        return self

    def _unlogged(self, printed: IO[bytes]) -> tuple[str, str]:
        """For an error when this start logged nothing: what the process printed (a
        refused argument is, before the log is opened), and that its log says nothing,
        or that there is none (not a log to see that does not exist)."""
        printed.seek(0)
        out = printed.read()[-4096:].decode(errors="replace")
        if self.log_path.exists():
            return out, f"its log ({self.log_path}) says nothing of this start"
        return out, f"it wrote no log ({self.log_path} does not exist)"

    def _wait_ready(self, timeout_s: float, printed: IO[bytes]) -> None:
        deadline = time.monotonic() + timeout_s
        # no retries: redis-py's own (backoff up to seconds) would keep a server that
        # exited from being seen until they ran out
        client = redis.Redis(
            host=self.host,
            port=self.port,
            password=self.password,
            socket_timeout=1.0,
            retry=Retry(NoBackoff(), 0),
        )
        try:
            while True:
                how = self._exited()
                if how is not None:
                    said = self.start_log()
                    why = last_said(said)
                    exited = f"{self.binary.name} exited at start{how}"
                    if why:
                        raise ServerExited(f"{exited}: {why} (its log: {self.log_path})", tail=said)
                    out, nolog = self._unlogged(printed)
                    why = last_said(out)
                    raise ServerExited(
                        f"{exited}: {why} (what it printed; {nolog})"
                        if why
                        else f"{exited}, and {nolog} and printed nothing",
                        tail=out,
                    )
                try:
                    # LOADING while the AOF replays: not ready yet.
                    if client.ping():
                        return
                except (redis.ConnectionError, redis.BusyLoadingError, redis.TimeoutError):
                    pass
                if time.monotonic() > deadline:
                    late = (
                        f"{self.binary.name} on {self.host}:{self.port} did not answer within "
                        f"{timeout_s:.0f}s"
                    )
                    if self.start_log().strip():
                        raise StoreError(f"{late}; see {self.log_path}")
                    out, nolog = self._unlogged(printed)
                    why = last_said(out)
                    output = f"; it printed {quoted(why, 200)}" if why else " and printed nothing"
                    raise StoreError(f"{late}: {nolog}{output}")
                time.sleep(0.02)  # polling a subprocess that has no readiness signal
        finally:
            client.close()

    def _exited(self) -> str | None:
        """How the starting server exited (" with code N", or "" when a detached one's
        code is not ours to read), or None while it runs or has not said its pid yet.

        A detached server's launcher exits once it has forked the daemon, so the
        daemon is the one to watch: its pid is in the pidfile once it writes it (Redis
        7.0 does after binding its port, Valkey 9 before), and at the head of every
        line it logs, which is how one that exits before writing it is seen."""
        proc = self.process
        assert proc is not None
        if not self.detached:
            code = proc.poll()
            if code is None:
                return None
            if code < 0:
                with contextlib.suppress(ValueError):
                    return f" (killed by {signal.Signals(-code).name})"
            return f" with code {code}"
        if proc.returncode not in (None, 0):  # the launcher failed before forking
            return f" with code {proc.returncode}"
        pid = self._daemon_pid()
        if pid is None or process_alive(pid):
            return None
        return ""

    def _pidfile_pid(self) -> int | None:
        try:
            return int(self.pid_path.read_text().strip())
        except (OSError, ValueError):
            return None

    def _daemon_pid(self) -> int | None:
        """The pid of the daemon a detached start forked: its pidfile's, once it wrote
        one, else the first one its log lines since the start name (not the
        launcher's); None before either says it."""
        written = self._pidfile_pid()
        if written is not None and written != self._stale_pid:
            return written
        launcher = self.process.pid if self.process else None
        for line in self.start_log().splitlines():
            m = _LOG_LINE.match(line)
            if m and int(m[1]) != launcher:
                return int(m[1])
        return None

    def start_log(self) -> str:
        """What the server logged since its last start()."""
        try:
            with self.log_path.open("rb") as f:
                if f.seek(0, os.SEEK_END) >= self._log_from:
                    f.seek(self._log_from)
                else:  # the log was replaced: all of it is this start's
                    f.seek(0)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout_s: float = 10.0) -> None:
        """Graceful stop (SIGTERM: the server flushes its AOF and exits)."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        """SIGKILL: what a crash looks like. Data survives per the fsync policy."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        proc.kill()
        proc.wait()

    def restart(self, timeout_s: float = 15.0) -> RedisServer:
        """Start again on the same port and data directory (after ``kill`` or ``stop``)."""
        self.stop()
        self.process = None
        return self.start(timeout_s)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def version(self) -> str:
        return binary_version(str(self.binary))

    def allocator_name(self) -> str:
        """What allocates the server's memory: ``jemalloc (preloaded: <path>)`` or the
        binary's own, as its ``--version`` says (``malloc=...``)."""
        if self.preloaded is not None:
            return f"jemalloc (preloaded: {self.preloaded})"
        for word in self.version().split():
            if word.startswith("malloc="):
                return word.removeprefix("malloc=")
        return "unknown"

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.stop()
