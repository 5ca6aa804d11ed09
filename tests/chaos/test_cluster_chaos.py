"""Chaos on a real Redis Cluster: its own operations are faults like kill -9.

A 3-master + 3-replica cluster on loopback (``cluster-node-timeout`` 2 s, AOF on every
node), 16 shards, three ``python -m timer.worker`` processes (2 s leases), a sync client and an
asyncio client scheduling, cancelling and notifying throughout (``durability=replicas:1``:
an acknowledged write is on a replica too), ``tickwheel serve`` taking timers over HTTP,
and a handler runner handling every outcome through a consumer group. Each test does one
operation to the cluster in the middle of the traffic, then asserts: every acknowledged
timer decided exactly once and never early, and handled; every acknowledged cancel and
notify stuck; no worker, runner or server exited; the touched shards fired again after
their recovery (a promotion, a slot's move) and the untouched ones throughout. How late
(the untouched shards' p99, the touched shards' resumption against the lease + 250 ms) is
printed as JSON, not asserted: a bound on time holds only when the machine keeps up, so
`tickwheel bench cluster-scale` measures it against those goals (docs/measured.md).
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from tests.conftest import wait_for
from timer import Handlers, Outcome, StoreError, TimerClient, TimerError
from timer.aio import AsyncTimerClient
from timer.durable.model.keys import NamespaceKeys
from timer.durable.model.models import DurabilityWarning
from timer.testing import RedisServer, free_port, redis_cluster

from . import cluster_ops as ops
from .conftest import Workers, assert_exactly_once, read_all_outcomes

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.redis]

SHARDS = 16
LEASE_MS = 2_000
NODE_TIMEOUT_MS = 2_000
MASTERS = 3


@pytest.fixture
def cluster(tmp_path: Path, server_binary: Path) -> Iterator[list[RedisServer]]:
    with redis_cluster(tmp_path / "cluster", binary=server_binary, masters=MASTERS,
                       replicas=1, node_timeout_ms=NODE_TIMEOUT_MS) as servers:  # fmt: skip
        yield servers


@dataclass
class Ledger:
    """What the clients were told: acknowledged timers, cancels and notifies."""

    scheduled: set[str] = field(default_factory=set)
    cancelled: set[str] = field(default_factory=set)
    completed: set[str] = field(default_factory=set)
    errors: int = 0
    last_error: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)


class Traffic:
    """A sync client, an asyncio client and ``tickwheel serve`` (through HTTP) scheduling,
    cancelling and notifying until stopped: short timers (due 1-3 s out) and watched
    ones, each watched timer later cancelled or completed (or left to expire); and a
    handler runner (``Handlers``, a consumer group) handling every outcome."""

    def __init__(self, url: str, namespace: str, tmp_path: Path) -> None:
        self.url, self.namespace = url, namespace
        self.ledger = Ledger()
        self.stop = threading.Event()
        self.handled: set[str] = set()
        self.runner_client = TimerClient.from_url(url, namespace, socket_timeout_s=1.0)
        self.handlers = Handlers(self.runner_client, group="chaos")
        for kind in ("expired", "cancelled", "completed"):
            self.handlers.add(kind, self._handle)
        self.runner_ok: list[bool] = []
        self.serve_port = free_port()
        self.serve_log = tmp_path / "serve.log"
        self.serve: subprocess.Popen[bytes] | None = None
        self.serve_survived = False
        self.fault_ms = 0.0  # wall time the fault began (set by the fault)
        self.threads = [
            threading.Thread(target=self._sync, daemon=True),
            threading.Thread(target=lambda: asyncio.run(self._async()), daemon=True),
            threading.Thread(target=self._http, daemon=True),
        ]
        self.runner = threading.Thread(target=self._run_handlers, daemon=True)

    def __enter__(self) -> Traffic:
        with self.serve_log.open("wb") as log:
            self.serve = subprocess.Popen(
                [sys.executable, "-m", "timer.cli", "--redis-url", self.url, "--namespace",
                 self.namespace, "serve", "--no-auth", "--port", str(self.serve_port)],
                stdout=log, stderr=log)  # fmt: skip
        wait_for(lambda: self._post("/healthz", None) == 200, 30, "tickwheel serve to answer")
        for t in [*self.threads, self.runner]:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)
        if self.serve is not None:
            self.serve_survived = self.serve.poll() is None
            self.serve.terminate()
            self.serve.wait(30)

    def drain(self, decided: set[str]) -> None:
        """Until the runner has handled every outcome in ``decided``; then stop it."""
        try:
            wait_for(lambda: decided <= self.handled, 60, "every outcome handled")
        finally:
            self.handlers.stop()
            self.runner.join(30)
            self.runner_client.close()
        assert self.runner_ok == [True], "the handler runner did not drain cleanly"

    def _handle(self, o: Outcome) -> None:
        self.handled.add(o.id)

    def _run_handlers(self) -> None:
        self.runner_ok.append(self.handlers.run(concurrency=4))

    def _post(self, path: str, body: object) -> int:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.serve_port}{path}",
            data=data,
            method="GET" if body is None else "POST",
        )
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)
        except OSError:
            return 0

    def _http(self) -> None:
        """One timer a request through ``tickwheel serve``; 201 is an acknowledgement."""
        rng, n = random.Random(3), 0
        while not self.stop.is_set():
            n += 1
            tid = f"h:{n}"
            body = {"id": tid, "delay_ms": rng.randrange(1_000, 3_000)}
            status = self._post(f"/v1/namespaces/{self.namespace}/timers", body)
            with self.ledger.lock:
                if status == 201:
                    self.ledger.scheduled.add(tid)
                else:
                    self.ledger.errors += 1
                    self.ledger.last_error = f"HTTP {status}"
            self.stop.wait(0.05)  # the pace of a client's requests

    def wait_acked(self, n: int) -> None:
        """Until ``n`` timers in all were acknowledged."""
        wait_for(
            lambda: len(self.ledger.scheduled) >= n,
            60,
            f"{n} timers acknowledged (last error: {self.ledger.last_error})",
        )

    def wait_errors(self, n: int) -> None:
        """Until ``n`` more calls than now failed (they met the fault)."""
        target = self.ledger.errors + n
        wait_for(lambda: self.ledger.errors >= target, 30, f"{n} calls meeting the fault")

    def _sync(self) -> None:
        c = TimerClient.from_url(
            self.url, self.namespace, durability="replicas:1", socket_timeout_s=1.5
        )
        rng, led, n = random.Random(1), self.ledger, 0
        watched: list[str] = []
        try:
            while not self.stop.is_set():
                n += 1
                items = [
                    {"id": f"s:{n}:{i}", "delay_ms": rng.randrange(1_000, 3_000)} for i in range(8)
                ]
                items.append({"id": f"{{w:{n}}}", "delay_ms": 4_000, "watch": [f"{{w:{n}}}:done"]})
                replies = self._try(functools.partial(c.schedule_many, items))
                for item, res in zip(items, replies if isinstance(replies, list) else [],
                                     strict=False):  # fmt: skip
                    if isinstance(res, Exception):
                        with led.lock:
                            led.errors += 1
                            led.last_error = str(res)
                    else:
                        with led.lock:
                            led.scheduled.add(str(item["id"]))
                        if str(item["id"]).startswith("{w:"):
                            watched.append(str(item["id"]))
                if len(watched) > 4:
                    tid = watched.pop(0)
                    if rng.random() < 0.5:
                        if self._try(functools.partial(c.cancel, tid)) is True:
                            with led.lock:
                                led.cancelled.add(tid)
                    elif self._try(functools.partial(c.notify, f"{tid}:done")) == 1:
                        with led.lock:
                            led.completed.add(tid)
                self.stop.wait(0.05)
        finally:
            c.close()

    def _try(self, call: Callable[[], object]) -> object:
        try:
            return call()
        except TimerError as exc:
            with self.ledger.lock:
                self.ledger.errors += 1
                self.ledger.last_error = str(exc)
            return None

    async def _async(self) -> None:
        c = await AsyncTimerClient.connect(
            self.url, self.namespace, durability="replicas:1", socket_timeout_s=1.5
        )
        rng, n = random.Random(2), 0
        try:
            while not self.stop.is_set():
                n += 1
                items = [
                    {"id": f"a:{n}:{i}", "delay_ms": rng.randrange(1_000, 3_000)} for i in range(8)
                ]
                try:
                    res = await c.schedule_many(items)
                except TimerError as exc:
                    with self.ledger.lock:
                        self.ledger.errors += 1
                        self.ledger.last_error = str(exc)
                    res = []
                with self.ledger.lock:
                    self.ledger.scheduled.update(
                        str(it["id"])
                        for it, r in zip(items, res, strict=False)
                        if not isinstance(r, Exception)
                    )
                await asyncio.sleep(0.1)  # the pace of a client's requests
        finally:
            await c.aclose()


NAMESPACE = "chaos"


def shard_ports(seen_from: RedisServer) -> dict[int, int]:
    """Each shard's master (its port), as ``seen_from`` sees the slots."""
    return {s: ops.owner_port(seen_from, shard_slot(s)) or 0 for s in range(SHARDS)}


def shard_slot(shard: int) -> int:
    return key_slot(NamespaceKeys(NAMESPACE).shard(shard).prefix)


def run_scenario(
    servers: list[RedisServer],
    tmp_path: Path,
    namespace: str,
    fault: Callable[[Traffic], tuple[set[int], dict[int, float]]],
) -> dict[str, object]:
    """Workers and traffic; ``fault`` (run once 400 timers were acknowledged, its
    traffic going on until 450 more are) returns the shards it touched and,
    per touched shard, the wall time (ms) from which it could be served again. Then
    every promise is checked; the figures returned."""
    url = servers[0].url
    c = TimerClient.from_url(url, namespace, socket_timeout_s=1.0)
    with pytest.warns(DurabilityWarning, match="replica.* but writes do not wait"):
        c.init(shards=SHARDS, bucket_ms=200)  # none, as most users run it
    pool = Workers(url, namespace, tmp_path, LEASE_MS, horizon_ms=3_000)
    try:
        procs = [pool.start(f"w{i}") for i in range(3)]
        traffic = Traffic(url, namespace, tmp_path)
        with traffic:
            traffic.wait_acked(400)  # traffic before the fault
            touched, recovered_ms = fault(traffic)
            traffic.wait_acked(len(traffic.ledger.scheduled) + 450)  # and after it
        led = traffic.ledger
        with led.lock:
            acked = set(led.scheduled)

        def all_decided() -> bool:
            decided = {o.id for o in read_all_outcomes(c)}
            return acked <= decided

        wait_for(all_decided, 60, "every acknowledged timer decided")
        outcomes = read_all_outcomes(c)
        traffic.drain({o.id for o in outcomes})  # every outcome handled (at least once)
        assert_exactly_once(outcomes, acked)
        by_id = {o.id: o for o in outcomes}
        assert all(by_id[t].outcome == "cancelled" for t in led.cancelled), "a cancel undone"
        assert all(by_id[t].outcome == "completed" for t in led.completed), "a notify undone"
        assert all(p.alive() for p in procs), [p.log_text()[-2000:] for p in procs]
        assert traffic.serve_survived, traffic.serve_log.read_text()[-2000:]
        return figures(
            c, [by_id[t] for t in acked], touched, recovered_ms, led, fault_ms=traffic.fault_ms
        )
    finally:
        pool.stop_all()
        c.close()


def figures(
    c: TimerClient,
    outcomes: list[Outcome],
    touched: set[int],
    recovered_ms: dict[int, float],
    led: Ledger,
    *,
    fault_ms: float,
) -> dict[str, object]:
    """Lateness of the untouched shards' timers and of the touched shards' past their
    recovery, printed: both kinds of shard had timers through the fault. How late is a
    figure of speed, not a pass condition (a busy machine makes any bound a coin toss):
    `tickwheel bench cluster-scale` measures it against its goals (p99, and the touched
    shards firing again within the lease + 250 ms)."""
    healthy = sorted(
        o.decided_ms - o.deadline_ms
        for o in outcomes
        if o.outcome == "expired" and c.shard_of(o.id) not in touched
    )
    past: list[float] = []
    for o in outcomes:
        shard = c.shard_of(o.id)
        if o.outcome == "expired" and shard in touched:
            past.append(o.decided_ms - max(o.deadline_ms, recovered_ms[shard]))
    p99 = healthy[int(0.99 * (len(healthy) - 1))] if healthy else 0
    out: dict[str, object] = {
        "acknowledged": len(outcomes),
        "cancels": len(led.cancelled),
        "notifies": len(led.completed),
        "client_errors": led.errors,
        "healthy_p50_ms": healthy[len(healthy) // 2] if healthy else 0,
        "healthy_p99_ms": p99,
        "healthy_max_ms": healthy[-1] if healthy else 0,
        "touched_shards": len(touched),
        "touched_timers": len(past),
        "recovery_after_fault_ms": round(max(recovered_ms.values()) - fault_ms),
        "touched_past_recovery_max_ms": max(past, default=0),
    }
    print(json.dumps(out))
    assert healthy and past, out  # both kinds of shard had timers through the fault
    return out


def key_slot(key: str) -> int:
    from redis.crc import key_slot as slot_of  # noqa: PLC0415 - redis-py's own CRC16

    return int(slot_of(key.encode()))


def test_a_master_killed_fails_over_and_its_shards_fire_again(
    cluster: list[RedisServer], tmp_path: Path
) -> None:
    """kill -9 of a master: its replica is promoted, its shards get a leader again and
    fire what is due; then the old master is restarted and rejoins as a replica."""
    victim, replica = cluster[1], cluster[MASTERS + 1]

    def fault(t: Traffic) -> tuple[set[int], dict[int, float]]:
        touched = {s for s, port in shard_ports(cluster[0]).items() if port == victim.port}
        t.fault_ms = time.time() * 1000
        victim.kill()
        ops.wait_promoted(replica, [cluster[0], cluster[2]], 30)
        promoted = time.time() * 1000
        victim.restart()  # (c): the old master comes back, as a replica of the new one
        wait_for(lambda: not ops.is_master(victim), 20, "the old master rejoined as a replica")
        return touched, dict.fromkeys(touched, promoted)

    run_scenario(cluster, tmp_path, NAMESPACE, fault)


def test_a_graceful_failover_moves_no_timer(cluster: list[RedisServer], tmp_path: Path) -> None:
    """CLUSTER FAILOVER on a replica: the master hands over, its shards go on firing."""
    old, replica = cluster[2], cluster[MASTERS + 2]

    def fault(t: Traffic) -> tuple[set[int], dict[int, float]]:
        touched = {s for s, port in shard_ports(cluster[0]).items() if port == old.port}
        start = t.fault_ms = time.time() * 1000
        with ops.node(replica) as r:
            r.execute_command("CLUSTER", "FAILOVER")
        ops.wait_promoted(replica, [cluster[0], cluster[1]], 20)
        return touched, dict.fromkeys(touched, start)

    run_scenario(cluster, tmp_path, NAMESPACE, fault)


def test_a_live_resharding_to_a_new_master(cluster: list[RedisServer], tmp_path: Path) -> None:
    """A fourth master joins (with its replica) and the slots of every shard of one
    master move to it, one slot at a time as redis-cli --cluster reshard moves them."""
    src = cluster[0]

    def fault(t: Traffic) -> tuple[set[int], dict[int, float]]:
        dst = ops.add_master(tmp_path / "n-new", src, cluster)
        cluster.append(dst)  # stopped with the others
        # with its replica, as an operator adds one (the clients' writes wait for one)
        cluster.append(ops.add_replica(tmp_path / "n-new-replica", dst, cluster))
        touched = {s for s, port in shard_ports(src).items() if port == src.port}
        moved: dict[int, float] = {}
        t.fault_ms = time.time() * 1000
        for s in sorted(touched):
            ops.move_slot(src, dst, shard_slot(s), [m for m in cluster if ops.is_master(m)])
            moved[s] = time.time() * 1000
        return touched, moved

    run_scenario(cluster, tmp_path, NAMESPACE, fault)


def test_a_resharding_stopped_half_way_then_fixed(
    cluster: list[RedisServer], tmp_path: Path
) -> None:
    """A slot's move stops with its keys split between two masters (calls of every kind
    in flight meet it), stays so for 2 s, then is finished as redis-cli --cluster fix
    would: no call writes half, and nothing acknowledged is lost or decided twice."""
    src, dst = cluster[0], cluster[1]

    def fault(t: Traffic) -> tuple[set[int], dict[int, float]]:
        ports = shard_ports(src)
        touched = {min(s for s, port in ports.items() if port == src.port)}
        slot = shard_slot(next(iter(touched)))
        t.fault_ms = time.time() * 1000
        ops.open_slot(src, dst, slot)
        assert ops.move_keys(src, dst, slot, limit=ops.MIGRATE_BATCH) > 0
        t.wait_errors(5)  # the operator is away: calls meet the slot half-moved
        ops.move_keys(src, dst, slot)
        ops.close_slot(src, dst, slot, cluster[:MASTERS])
        return touched, dict.fromkeys(touched, time.time() * 1000)

    run_scenario(cluster, tmp_path, NAMESPACE, fault)


def test_store_error_for_a_script_on_a_half_moved_slot_writes_nothing(
    cluster: list[RedisServer],
) -> None:
    """While a shard's slot is half-moved, a schedule or cancel on it fails (after its
    retries) with a StoreError and writes nothing anywhere: the guard stops every script
    before its first write."""
    src, dst = cluster[0], cluster[1]
    c = TimerClient.from_url(src.url, NAMESPACE)
    try:
        with pytest.warns(DurabilityWarning, match="replica.* but writes do not wait"):
            c.init(shards=SHARDS)
        c.cluster_retry_s = 0.1
        shard = min(s for s, port in shard_ports(src).items() if port == src.port)
        ids = [t for t in (f"{{x{i}}}" for i in range(10_000)) if c.shard_of(t) == shard][:42]
        tid, other = ids[0], ids[1]
        c.schedule(tid, delay_ms=60_000, watch=[f"{tid}:done"])
        c.schedule_many([{"id": t, "delay_ms": 60_000 + i} for i, t in enumerate(ids[2:])])
        slot = shard_slot(shard)
        before = dump_slot(src, slot)
        ops.open_slot(src, dst, slot)
        assert ops.move_keys(src, dst, slot, limit=3) == 3
        moved = {r.port: dump_slot(r, slot) for r in (src, dst)}
        with pytest.raises(StoreError, match=r"non local key|TRYAGAIN|ASK"):
            c.cancel(tid)
        with pytest.raises(StoreError):
            c.notify(f"{tid}:done")
        with pytest.raises(StoreError):
            c.schedule(other, delay_ms=10_000)
        assert {r.port: dump_slot(r, slot) for r in (src, dst)} == moved
        assert {**moved[src.port], **moved[dst.port]} == before  # nothing written either
        ops.move_keys(src, dst, slot)
        ops.close_slot(src, dst, slot, cluster[:MASTERS])
        c.cluster_retry_s = 1.5
        assert c.cancel(tid) is True
    finally:
        c.close()


def dump_slot(server: RedisServer, slot: int) -> dict[str, bytes]:
    """Every key of ``slot`` on ``server`` and its DUMP (what a write would change);
    ASKING first, as the importing node answers MOVED otherwise."""
    with ops.node(server) as r:
        keys = r.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100_000)
    with redis.Redis(host=server.host, port=server.port) as raw:
        pipe = raw.pipeline(transaction=False)
        for k in keys:
            pipe.execute_command("ASKING")
            pipe.dump(k)
        replies = pipe.execute()
    return dict(zip(keys, replies[1::2], strict=True))
