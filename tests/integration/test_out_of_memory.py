"""Redis out of memory (maxmemory reached, noeviction): the worker says so, keeps its
leases, and fires everything as soon as memory is freed (#39)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import wait_for
from timer import StoreError, TimerClient
from timer.testing import RedisServer
from timer.worker.metrics import WorkerCollector

from .test_worker import make_worker, running

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.chaos]  # leases held by time

LEASE_MS = 1_500


@pytest.fixture
def server(tmp_path: Path, server_binary: Path) -> Iterator[RedisServer]:
    """A server of the test's own: its memory limit is changed."""
    with RedisServer(tmp_path / "oom", binary=server_binary) as s:
        yield s


def refusing(w: object) -> float:
    fam = next(
        f
        for f in WorkerCollector(w).collect()  # type: ignore[arg-type]
        if f.name == "tickwheel_redis_refusing_writes"
    )
    return float(fam.samples[0].value)


def test_out_of_memory_is_visible_and_survived(server: RedisServer, namespace: str) -> None:
    """With maxmemory below what is used, the worker's /ready says Redis refuses writes
    (OOM) and the metric is 1; it keeps every lease through several lease times; once
    memory is freed, the timers that came due meanwhile fire, none before (how soon is
    printed: a bound on time holds only when the machine keeps up)."""
    c = TimerClient.from_url(server.url, namespace)
    r = redis.Redis.from_url(server.url)
    try:
        c.init(shards=4, bucket_ms=100)
        w = make_worker(c, "oom", lease_ms=LEASE_MS)
        with running(w):
            wait_for(lambda: len(w.shards) == 4 and w.health().ready, 20, "the worker ready")
            assert refusing(w) == 0
            for lead_ms in (1_000, 2_000, 4_000, 8_000, 16_000):
                # timers due lead_ms from now, and memory full before they fall due: a
                # machine too busy to get there first (they fired: not this test's case)
                # tries again with a longer lead, not a wrong verdict
                due = c.server_time_ms() + lead_ms
                ids = [f"m{lead_ms}.{i}" for i in range(40)]
                c.schedule_many([{"id": t, "deadline_ms": due} for t in ids])
                r.config_set("maxmemory", 1)  # noeviction (the default): writes refused
                full = c.server_time_ms()
                wait_for(lambda: refusing(w) == 1, 10, "the worker to see Redis refuse writes")
                if full < due and not any(c.get(t).state != "pending" for t in ids):  # type: ignore[union-attr]
                    break
                r.config_set("maxmemory", 0)
                wait_for(lambda: refusing(w) == 0, 10, "the worker to see writes taken again")
            else:
                raise AssertionError("memory was never full before the timers fell due")
            with pytest.raises(StoreError) as refused:  # a client's write: Redis's own word
                c.schedule("late", delay_ms=60_000)
            assert refused.value.code == "OOM" and "OOM" in str(refused.value)
            health = w.health()
            assert not health.ready
            assert any("out of memory (OOM)" in why for why in health.reasons), health
            lost = w.stats.leases_lost
            start = c.server_time_ms()
            wait_for(
                lambda: c.server_time_ms() >= max(start, due) + 3 * LEASE_MS,
                20,
                "three lease times under OOM",
            )
            assert w.stats.leases_lost == lost and len(w.shards) == 4  # every lease kept
            assert {c.get(t).state for t in ids} == {"pending"}  # type: ignore[union-attr]
            freeing = c.server_time_ms()
            r.config_set("maxmemory", 0)
            freed = c.server_time_ms()
            outcomes = [c.wait(t, timeout=10) for t in ids]
            assert all(o.outcome == "expired" for o in outcomes)
            assert min(o.decided_ms for o in outcomes) >= freeing, outcomes  # none under OOM
            last = max(o.decided_ms for o in outcomes)
            print(json.dumps({"last_fired_after_freed_ms": last - freed}))
            wait_for(lambda: refusing(w) == 0 and w.health().ready, 10, "ready again")
    finally:
        r.config_set("maxmemory", 0)
        r.close()
        c.close()


def test_a_sweep_or_fire_under_oom_decides_nothing(server: RedisServer, namespace: str) -> None:
    """Redis checks a script's memory only until its first write, and only at a command
    that may grow memory: a sweep whose first write was a bucket's LPOP expired overdue
    timers whole under OOM (a CI run on a busy machine: the wheel missed the bucket and
    the sweep took it). fire and sweep are refused before they write anything, and
    decide everything once memory is freed."""
    c = TimerClient.from_url(server.url, namespace)
    r = redis.Redis.from_url(server.url)
    try:
        c.init(shards=1, bucket_ms=100)
        now = c.server_time_ms()
        ids = [f"due{i}" for i in range(5)]
        c.schedule_many([{"id": t, "deadline_ms": now - 5_000 - i} for i, t in enumerate(ids)])
        store = c.shard_store(0)
        grant = store.acquire("w1", 60_000)
        assert grant.acquired
        before = {k: r.dump(k) for k in r.scan_iter()}
        r.config_set("maxmemory", 1)
        for decide in (
            lambda: store.sweep("w1", grant.epoch, ttl_ms=60_000, limit=100),
            lambda: store.fire("w1", grant.epoch, ids, ttl_ms=60_000),
        ):
            with pytest.raises(StoreError) as refused:
                decide()
            assert refused.value.code == "OOM", refused.value
        r.config_set("maxmemory", 0)
        assert {k: r.dump(k) for k in r.scan_iter()} == before  # nothing written
        assert {c.get(t).state for t in ids} == {"pending"}  # type: ignore[union-attr]
        swept = store.sweep("w1", grant.epoch, ttl_ms=60_000, limit=100)
        assert sorted(t for t, _ in swept.fired) == ids
    finally:
        r.config_set("maxmemory", 0)
        r.close()
        c.close()
