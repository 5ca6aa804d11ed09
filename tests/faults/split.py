"""A Sentinel set whose master can be partitioned from its replicas and Sentinels while
clients still reach it, and one run of that split: what was acknowledged, what was lost,
what was decided twice. The tests (tests/chaos/test_partition.py) and the benchmark
(benchmarks/redis_faults.py) run it per durability.

The master M listens behind one proxy, its address for everyone: the Sentinels monitor
it there (so they give it to clients too) and the replicas replicate from it there. The
cut drops the Sentinels' and the replicas' links only (each known by its first bytes):
the Sentinels see M gone and promote a replica, while the clients they sent to M keep
writing there until they learn the new master. On healing, the Sentinels make M a
replica of the new master, and what it alone acknowledged is gone.

The replicas once replicated through a second proxy, cut whole. But the Sentinels fix a
replica that replicates from an address other than the master's as they know it
(`+fix-slave-config`, a failover timeout after they find it): on a loaded machine the
cut came after that, the replicas were linked through the first proxy, and one of them
kept replicating from M after the other's promotion, until the Sentinels reconfigured
it. Its acknowledgements let M answer `WAIT 1` for a second, and what they covered was
lost with its full resync from the promoted one (320 timers acknowledged under
replicas:1, in the test's fourth run of ten under two busy loops). The set's premise is
checked before each cut: both replicas linked through the proxy.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import redis

from timer import Handlers, Outcome, TimerClient, TimerError
from timer.testing import RedisServer, SentinelProcess, SentinelSet, wait_sentinel_ready

from .partition import Proxy

SERVICE = "split"
# The Sentinels' down-after. At 1 s a Sentinel that had just switched to the promoted
# replica sometimes marked it down 1 s later (its new link not yet answered, under load)
# and failed it over again: under none, what the handler runner acknowledged and the
# promoted replica had not received was lost with it, and tens of thousands of outcomes
# were handled twice. One split, one failover is what these runs measure.
DOWN_AFTER_MS = 2000


class Splittable(Protocol):
    """What ``run_split`` needs of a set: a URL, a cut and a heal, and two questions."""

    @property
    def url(self) -> str: ...

    def cut(self) -> None: ...

    def heal(self) -> None: ...

    def promoted(self) -> bool: ...

    def demoted(self) -> bool: ...


@dataclass
class SplitSet:
    sentinel_set: SentinelSet
    master: RedisServer
    front: Proxy  # the master's address as the Sentinels, its replicas and clients know it

    @property
    def url(self) -> str:
        return self.sentinel_set.url

    def cut(self) -> None:
        links = self.front.links("replicas")
        if links != 2:  # what the split measures: M alone, with no replica to answer WAIT
            raise RuntimeError(f"{links} replica links through the proxy, not 2")
        self.front.cut("sentinels", "replicas")

    def heal(self) -> None:
        self.front.heal()

    def promoted(self) -> bool:
        """The Sentinels name a master other than M (behind the proxy)."""
        addr = self.sentinel_set.master_address()
        return addr is not None and addr[1] != self.front.port

    def demoted(self) -> bool:
        """M says it is a replica now (the Sentinels reconfigured it after the heal)."""
        with (
            redis.Redis(host=self.master.host, port=self.master.port, socket_timeout=1) as r,
            contextlib.suppress(redis.RedisError),
        ):
            return bool(r.info("replication").get("role") == "slave")
        return False


@contextlib.contextmanager
def split_set(
    base: Path, *, binary: str | Path | None = None, extra: tuple[str, ...] = ()
) -> Iterator[SplitSet]:
    """A master behind a proxy, two replicas, three Sentinels (down after 2 s)."""
    sync = ("--repl-diskless-sync-delay", "0", *extra)
    master = RedisServer(base / "m", binary=binary, extra_args=sync).start()
    servers = [master]
    procs: list[SentinelProcess] = []
    front = Proxy((master.host, master.port))
    try:
        for i in range(2):
            replica = RedisServer(
                base / f"r{i}", binary=binary,
                extra_args=("--replicaof", front.host, str(front.port), *sync),
            )  # fmt: skip
            servers.append(replica.start())
        for i in range(3):
            procs.append(
                SentinelProcess(
                    base / f"s{i}",
                    master=(front.host, front.port),
                    service=SERVICE,
                    binary=binary,
                    down_after_ms=DOWN_AFTER_MS,
                ).start()
            )
        wait_sentinel_ready(master, procs, SERVICE, replicas=2)
        s = SentinelSet(servers, procs, SERVICE)
        yield SplitSet(s, master, front)
    finally:
        front.close()
        for proc in procs:
            proc.stop()
        for server in servers:
            server.stop()


@dataclass
class SplitResult:
    durability: str
    acknowledged: int = 0
    refused: int = 0  # schedule calls answered with an error (NotDurable, NOREPLICAS…)
    acknowledged_during_cut: int = 0
    lost: list[str] = field(default_factory=list)
    decided_twice: list[str] = field(default_factory=list)
    handled_lost: list[str] = field(default_factory=list)  # of lost: a handler had run
    failover_ms: int = 0

    def figures(self) -> dict[str, Any]:
        return {
            "durability": self.durability,
            "acknowledged": self.acknowledged,
            "acknowledged_during_cut": self.acknowledged_during_cut,
            "refused": self.refused,
            "lost": len(self.lost),
            "decided_twice": len(self.decided_twice),
            "failover_ms": self.failover_ms,
        }


class Watcher:
    """A handler runner on the set's URL (group ``split``, the run's durability), as an
    application runs one: it records every handler run. A timer handled twice was decided
    twice (once on the old master, then again by the new side)."""

    def __init__(self, url: str, namespace: str, durability: str) -> None:
        self.client = TimerClient.from_url(
            url, namespace, durability=durability, socket_timeout_s=2.0
        )
        self.seen: dict[str, int] = {}
        self._lock = threading.Lock()
        self.runner = Handlers(self.client, group="split", consumer="watcher")
        for kind in ("expired", "completed", "cancelled"):
            self.runner.add(kind, self._handled)
        self._thread = threading.Thread(target=self.runner.run, daemon=True)
        self._thread.start()

    def _handled(self, o: Outcome) -> None:
        with self._lock:
            self.seen[o.id] = self.seen.get(o.id, 0) + 1

    def handled(self, ids: set[str] | list[str]) -> bool:
        with self._lock:
            return all(i in self.seen for i in ids)

    def stop(self) -> None:
        self.runner.stop()
        self._thread.join(40)
        self.client.close()


def run_split(
    s: Splittable, namespace: str, durability: str, *, wait_s: float = 40.0
) -> tuple[SplitResult, set[str]]:
    """Schedule timers before, during and after a cut (a worker of the caller's firing
    them), heal, and count. Returns the result and the ids acknowledged."""
    result = SplitResult(durability)
    c = TimerClient.from_url(s.url, namespace, durability=durability, socket_timeout_s=2.0)
    acked: set[str] = set()
    watcher = Watcher(s.url, namespace, durability)
    n = 0

    def batch(during: bool, spread_ms: int = 10) -> None:
        nonlocal n
        items = [{"id": f"t{n + i}", "delay_ms": 800 + spread_ms * i} for i in range(20)]
        n += 20
        try:
            replies: list[Any] = c.schedule_many(items)
        except TimerError as exc:
            replies = [exc] * len(items)
        for item, reply in zip(items, replies, strict=True):
            if isinstance(reply, Exception):
                result.refused += 1
            else:
                acked.add(str(item["id"]))
                result.acknowledged_during_cut += during

    try:
        # the worker leads every shard first: a timer on each is decided
        probes = [f"probe{i}" for i in range(32)]
        c.schedule_many([{"id": p, "delay_ms": 10} for p in probes])
        deadline = time.monotonic() + 30
        while not watcher.handled(probes):
            if time.monotonic() > deadline:
                raise TimeoutError("no worker fired the probes in 30 s")
            time.sleep(0.05)  # polling the outcomes the watcher reads
        for _ in range(5):
            batch(False, spread_ms=150)  # due over the first ~3 s of the cut
        s.cut()
        cut_at = time.monotonic()
        while not s.promoted():
            batch(True)
            time.sleep(0.05)  # a client's pace; the loop ends on the Sentinels' word
            if time.monotonic() - cut_at > 30:
                raise TimeoutError("no replica was promoted in 30 s")
        result.failover_ms = int((time.monotonic() - cut_at) * 1000)
        # The clients move over meanwhile: a second at least, and until the new master
        # has acknowledged a batch (under replicas:1 it refuses them until its replica
        # is attached, which took the whole second once).
        settle, before = time.monotonic() + 1.0, len(acked)
        while time.monotonic() < settle or len(acked) == before:
            batch(True)
            if time.monotonic() - cut_at > 60:
                raise TimeoutError("the new master acknowledged nothing in 60 s")
        s.heal()
        deadline = time.monotonic() + 30
        while not s.demoted():
            if time.monotonic() > deadline:
                raise TimeoutError("the old master was not demoted in 30 s")
            time.sleep(0.1)  # polling: the Sentinels' reconfiguration has no signal
        for _ in range(3):
            batch(False)
        result.acknowledged = len(acked)
        deadline = time.monotonic() + wait_s
        while True:
            with contextlib.suppress(TimerError):
                decided = {o.id for o in c.all_outcomes()}
                pending = {i for i in acked - decided if c.get(i) is not None}
                if decided | pending >= acked and not pending:
                    break
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)  # polling the outcome streams
        decided = {o.id for o in c.all_outcomes()}
        result.lost = sorted(i for i in acked - decided if c.get(i) is None)
    finally:
        watcher.stop()
        c.close()
    result.decided_twice = sorted(i for i, runs in watcher.seen.items() if runs > 1)
    result.handled_lost = [i for i in result.lost if i in watcher.seen]
    return result, acked
