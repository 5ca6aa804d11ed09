"""A master, its replicas and Sentinels as real processes on loopback, for tests
(``redis_sentinel``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from ..errors import StoreError
from .binaries import find_server_binary
from .server import RedisServer, free_port


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

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        if self.process is not None and self.running:
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

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of each Sentinel's log, for a failing test to show."""
        parts = []
        for s in self.sentinels:
            log = s.data_dir / "sentinel.log"
            text = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else []
            parts.append(f"--- sentinel :{s.port}\n" + "\n".join(text))
        return "\n".join(parts)

    @property
    def url(self) -> str:
        """The ``redis+sentinel://`` URL of the set (every Sentinel, the service)."""
        hosts = ",".join(f"{s.host}:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}"

    def master_address(self) -> tuple[str, int] | None:
        """What a live Sentinel says the master is now (None if none answers)."""
        for s in self.sentinels:
            if not s.running:
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

    def settled(self) -> bool:
        """Whether every live Sentinel names one master, flagged only ``master`` and
        saying it is one, and sees every other running server as its replica, linked and
        saying it is one, with no failover under way.

        A failover started before then can be undone: a Sentinel that has not yet seen
        the last failover's old master demoted, and has not heard the new epoch, takes
        the replica just promoted for a master gone rogue and turns it back into a
        replica (``+convert-to-slave``); the failover then aborts or fails over again."""
        live = [s for s in self.sentinels if s.running]
        named: set[tuple[str, int]] = set()
        for s in live:
            with redis.Redis(
                host=s.host, port=s.port, socket_timeout=1.0, decode_responses=True
            ) as r:
                try:
                    m = _fields(r.execute_command("SENTINEL", "MASTER", self.service))
                    replicas = [
                        _fields(x) for x in r.execute_command("SENTINEL", "REPLICAS", self.service)
                    ]
                except redis.RedisError:
                    return False
            if m.get("flags") != "master" or m.get("role-reported") != "master":
                return False
            addr = (str(m["ip"]), int(m["port"]))
            named.add(addr)
            linked = {
                (str(x["ip"]), int(x["port"]))
                for x in replicas
                if x.get("flags") == "slave"
                and x.get("role-reported") == "slave"
                and x.get("master-link-status") == "ok"
                and (x.get("master-host"), int(x.get("master-port", 0))) == addr
            }
            others = {(v.host, v.port) for v in self.servers if v.running} - {addr}
            if not others <= linked:
                return False
        return len(named) == 1

    def wait_settled(self, timeout_s: float = 60.0) -> None:
        """Until :meth:`settled` (StoreError after ``timeout_s``): what a test waits for
        before it starts a failover, so that it fails over the set it means to."""
        deadline = time.monotonic() + timeout_s
        while not self.settled():
            if time.monotonic() > deadline:
                raise StoreError(f"the Sentinel set did not settle in {timeout_s:.0f}s")
            time.sleep(0.05)  # polling the Sentinels: a failover has no readiness signal


def _fields(reply: Any) -> dict[str, Any]:
    """A Sentinel's instance as a dict (RESP2 sends it as a flat list)."""
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2], strict=True))


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
                    "--replicaof",
                    master.host,
                    str(master.port),
                    "--repl-diskless-sync-delay",
                    "0",
                ),
            )
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
                fields = _fields(r.execute_command("SENTINEL", "MASTER", service))
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
