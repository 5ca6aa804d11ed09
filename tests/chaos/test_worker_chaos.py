"""Chaos: real worker processes killed with SIGKILL, paused with SIGSTOP, a Redis killed
and restarted, pub/sub connections dropped. Every timer must end exactly once, never early.
"""

from __future__ import annotations

import json
import random
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import wait_for
from timer import TimerClient
from timer.testing import RedisServer

from .conftest import Workers, assert_exactly_once, read_all_outcomes

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

LEASE_MS = 1_000


def schedule_spread(c: TimerClient, n: int, start_ms: int, span_ms: int) -> set[str]:
    rng = random.Random(n)
    now = c.server_time_ms()
    items = [
        {"id": f"job:{i}", "deadline_ms": now + start_ms + rng.randrange(span_ms)} for i in range(n)
    ]
    assert all(not isinstance(r, Exception) for r in c.schedule_many(items))
    return {str(item["id"]) for item in items}


@pytest.fixture
def chaos_client(redis_server: RedisServer, namespace: str) -> Iterator[TimerClient]:
    if not redis_server.running:
        redis_server.restart()
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=8, bucket_ms=200)
    yield c
    c.close()


def test_kill_9_workers_while_firing(
    chaos_client: TimerClient, workers_factory: list[Workers], tmp_path: Path
) -> None:
    """Three workers; kill -9 one at each quarter of the firing, start a fresh one each time."""
    c = chaos_client
    n = 3_000
    ids = schedule_spread(c, n, start_ms=1_000, span_ms=6_000)
    pool = Workers(c.where, c.namespace, tmp_path, LEASE_MS, horizon_ms=3_000)
    workers_factory.append(pool)
    procs = [pool.start(f"w{i}") for i in range(3)]
    for round_, fraction in enumerate((0.25, 0.5, 0.75)):

        def decided(f: float = fraction) -> bool:
            return c.outcomes_total() >= f * n

        wait_for(decided, 60, f"{fraction:.0%} decided")
        victim = procs.pop(0)
        victim.kill9()
        procs.append(pool.start(f"r{round_}"))
    wait_for(lambda: c.outcomes_total() >= n, 60, "every timer decided")
    outcomes = read_all_outcomes(c)
    assert len(outcomes) == n
    assert_exactly_once(outcomes, ids)
    assert c.stats()["pending"] == 0


def test_sigstop_leader_past_its_lease(
    chaos_client: TimerClient, workers_factory: list[Workers], tmp_path: Path
) -> None:
    """A paused leader loses its shards; resumed, it fires nothing twice and notices."""
    c = chaos_client
    n = 800
    ids = schedule_spread(c, n, start_ms=1_500, span_ms=4_000)
    pool = Workers(c.where, c.namespace, tmp_path, LEASE_MS, horizon_ms=3_000)
    workers_factory.append(pool)
    a, b = pool.start("a"), pool.start("b")

    def leaders() -> dict[int, bytes | None]:
        return {s: c.redis.get(c.keys.shard(s).lease) for s in range(8)}

    wait_for(lambda: all(v is not None for v in leaders().values()), 20, "all shards led")
    wait_for(lambda: c.outcomes_total() >= n // 5, 60, "firing under way")
    a.proc.send_signal(signal.SIGSTOP)
    wait_for(lambda: set(leaders().values()) == {b"b"}, 20, "b took every shard over")
    a.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: c.outcomes_total() >= n, 60, "every timer decided")
    assert_exactly_once(read_all_outcomes(c), ids)
    log = a.log_text()
    assert "fenced" in log or "renewed in time" in log or "lease lost" in log, log[-2000:]
    assert a.alive() and b.alive()


def test_redis_kill_9_and_restart(
    namespace: str, workers_factory: list[Workers], tmp_path: Path, server_binary: Path
) -> None:
    """kill -9 of Redis (appendfsync always) mid-firing, restart on the same port: every
    acknowledged timer fires exactly once, and the workers ride it out without a restart."""
    server = RedisServer(tmp_path / "redis", binary=server_binary, appendfsync="always").start()
    try:
        c = TimerClient.from_url(server.url, namespace)
        c.init(shards=8, bucket_ms=200)
        n = 1_500
        ids = schedule_spread(c, n, start_ms=1_000, span_ms=5_000)
        pool = Workers(server.url, namespace, tmp_path, LEASE_MS, horizon_ms=3_000)
        workers_factory.append(pool)
        procs = [pool.start("a"), pool.start("b")]
        wait_for(lambda: c.outcomes_total() >= n // 3, 60, "a third decided")
        server.kill()
        server.restart()
        wait_for(lambda: c.outcomes_total() >= n, 90, "every timer decided after the restart")
        assert_exactly_once(read_all_outcomes(c), ids)
        assert all(p.alive() for p in procs), [p.log_text()[-1500:] for p in procs]
        c.close()
    finally:
        server.stop()


def test_pubsub_killed_timers_still_fire(
    chaos_client: TimerClient, workers_factory: list[Workers], tmp_path: Path
) -> None:
    """CLIENT KILL TYPE pubsub on a worker process: the worker subscribes again and the
    timers scheduled after the kill fire, each once, none early. How late is printed, not
    asserted (a bound on time holds only when the machine keeps up)."""
    c = chaos_client
    pool = Workers(c.where, c.namespace, tmp_path, LEASE_MS, horizon_ms=3_000)
    workers_factory.append(pool)
    pool.start("solo")
    channels = [c.keys.shard(s).events for s in range(8)]
    wait_for(lambda: all(k for _, k in c.redis.pubsub_numsub(*channels)), 20, "subscribed")
    c.redis.client_kill_filter(_type="pubsub")
    ids = schedule_spread(c, 300, start_ms=300, span_ms=1_500)
    wait_for(lambda: c.outcomes_total() >= 300, 30, "every timer decided")
    outcomes = read_all_outcomes(c)
    assert_exactly_once(outcomes, ids)
    wait_for(lambda: all(k for _, k in c.redis.pubsub_numsub(*channels)), 20, "subscribed again")
    print(json.dumps({"worst_lateness_ms": max(o.lateness_ms for o in outcomes)}))


def test_sigterm_releases_leases_and_exits_cleanly(
    chaos_client: TimerClient, workers_factory: list[Workers], tmp_path: Path
) -> None:
    """SIGTERM: the worker releases every lease and leaves the membership within seconds,
    so a survivor takes its shards at once, without waiting for a lease to expire."""
    c = chaos_client
    pool = Workers(c.where, c.namespace, tmp_path, lease_ms=30_000, horizon_ms=3_000)
    workers_factory.append(pool)
    a = pool.start("a")
    wait_for(lambda: all(c.redis.get(c.keys.shard(s).lease) == b"a" for s in range(8)), 20)
    b = pool.start("b")
    a.proc.terminate()
    assert a.proc.wait(10) == 0
    assert c.redis.zscore(c.keys.workers, "a") is None
    # With a 30 s lease, b can only have them this fast because a released them.
    wait_for(lambda: all(c.redis.get(c.keys.shard(s).lease) == b"b" for s in range(8)), 10)
    assert b.alive()
