"""One contract test per Lua script, each run fresh and again after SCRIPT FLUSH."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from timer import Fenced, TimerClient
from timer.codec import decode_record
from timer.scripts import NAMES, source
from timer.store import map_errors

from .conftest import server_now_ms

pytestmark = pytest.mark.redis


@pytest.fixture(params=["cached", "after-flush"])
def c(
    client: TimerClient, redis_client: redis.Redis, request: pytest.FixtureRequest
) -> TimerClient:
    """The client, with the server's script cache emptied first in the second run."""
    if request.param == "after-flush":
        for name in NAMES:  # load every script, then lose them all
            redis_client.script_load(source(name))
        redis_client.script_flush()
        assert not any(redis_client.script_exists(*(s.sha for s in scripts(client))))
    return client


def scripts(c: TimerClient) -> list[Any]:
    return [getattr(c.scripts, name) for name in NAMES]


def acquire(c: TimerClient, shard: int, worker: str = "w1", ttl_ms: int = 5_000) -> int:
    sk = c.keys.shard(shard)
    reply = c.scripts.lease_acquire(keys=[sk.lease, sk.epoch], args=[worker, ttl_ms])
    assert reply[0] == 1
    return int(reply[1])


def fire(c: TimerClient, shard: int, worker: str, epoch: int, ids: list[str]) -> Any:
    sk = c.keys.shard(shard)
    return c.scripts.fire(
        keys=[sk.timers, sk.buckets, sk.outcomes, sk.lease, sk.epoch,
              *(sk.result(i) for i in ids)],
        args=[sk.prefix, worker, epoch, c.meta.bucket_ms, 60_000, sk.events, *ids],
    )  # fmt: skip


def test_schedule_indexes_timer_bucket_and_watch(c: TimerClient, redis_client: redis.Redis) -> None:
    """schedule writes the record, its durable bucket, the bucket mirror and watch sets."""
    t = c.schedule("job:{1}", delay_ms=5_000, payload=[1, 2], watch=["job:{1}:done"])
    sk = c.keys.shard(t.shard)
    n = t.deadline_ms // c.meta.bucket_ms
    rec = decode_record(redis_client.hget(sk.timers, "job:{1}"))
    assert rec["d"] == t.deadline_ms and rec["w"] == ["job:{1}:done"] and rec["n"] == 1
    assert redis_client.sismember(sk.bucket(n), "job:{1}")
    assert redis_client.zscore(sk.buckets, str(n)) == n * c.meta.bucket_ms
    assert redis_client.sismember(sk.watch("job:{1}:done"), "job:{1}")
    now = server_now_ms(redis_client)
    assert now <= t.deadline_ms <= now + 5_000


def test_cancel_decides_once_and_cleans_every_index(
    c: TimerClient, redis_client: redis.Redis
) -> None:
    """cancel removes the timer everywhere, appends one outcome and retains it."""
    t = c.schedule("job:{2}", delay_ms=5_000, watch=["job:{2}:a"])
    sk = c.keys.shard(t.shard)
    assert c.cancel("job:{2}") is True
    assert c.cancel("job:{2}") is False
    assert not redis_client.hexists(sk.timers, "job:{2}")
    assert not redis_client.exists(sk.bucket(t.deadline_ms // c.meta.bucket_ms))
    assert redis_client.zcard(sk.buckets) == 0
    assert not redis_client.exists(sk.watch("job:{2}:a"))
    assert redis_client.xlen(sk.outcomes) == 1
    assert decode_record(redis_client.get(sk.result("job:{2}")))["o"] == "cancelled"
    assert 0 < redis_client.pttl(sk.result("job:{2}")) <= 24 * 3600 * 1000


def test_complete_decides_as_completed(c: TimerClient) -> None:
    """complete decides a pending timer as completed, once."""
    c.schedule("job:{3}", delay_ms=5_000)
    assert c.complete("job:{3}") is True
    assert c.complete("job:{3}") is False
    info = c.get("job:{3}")
    assert info is not None and info.state == "completed"


def test_reschedule_moves_bucket(c: TimerClient, redis_client: redis.Redis) -> None:
    """reschedule moves the timer to its new durable bucket; a decided timer gives None."""
    t = c.schedule("job:{4}", delay_ms=5_000)
    sk = c.keys.shard(t.shard)
    moved = c.reschedule("job:{4}", delay_ms=3_600_000)
    assert moved is not None and moved.deadline_ms > t.deadline_ms + 3_000_000
    assert redis_client.zcard(sk.buckets) == 1
    assert redis_client.sismember(sk.bucket(moved.deadline_ms // c.meta.bucket_ms), "job:{4}")
    assert not redis_client.exists(sk.bucket(t.deadline_ms // c.meta.bucket_ms))
    c.cancel("job:{4}")
    assert c.reschedule("job:{4}", delay_ms=10) is None


def test_notify_completes_watchers(c: TimerClient, redis_client: redis.Redis) -> None:
    """notify completes every timer watching the key now and publishes the notification."""
    pubsub = redis_client.pubsub()
    pubsub.subscribe(c.keys.key_channel("job:{5}:done"))
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"  # type: ignore[index]
    c.schedule("job:{5}", delay_ms=60_000, watch=["job:{5}:done"])
    c.schedule("job:{5}:b", delay_ms=60_000, watch=["job:{5}:done"])
    assert c.notify("job:{5}:done") == 2
    assert c.notify("job:{5}:done") == 0
    msg = pubsub.get_message(timeout=5)
    assert msg is not None and msg["data"] == b"2"
    pubsub.close()


def test_fire_expires_due_reports_early_and_is_fenced(
    c: TimerClient, redis_client: redis.Redis
) -> None:
    """fire expires due timers, hands back early ones, and refuses a stale epoch."""
    due = c.schedule("due", delay_ms=0)
    later = c.schedule("later", deadline_ms=server_now_ms(redis_client) + 60_000)
    epoch = acquire(c, due.shard)
    fired, early = fire(c, due.shard, "w1", epoch, ["due", "missing"])
    assert fired == [b"due"] and early == []
    e2 = epoch if later.shard == due.shard else acquire(c, later.shard)
    fired, early = fire(c, later.shard, "w1", e2, ["later"])
    assert fired == [] and early == [b"later", str(later.deadline_ms).encode()]
    with pytest.raises(redis.ResponseError, match="FENCED"):
        fire(c, later.shard, "w1", e2 - 1, ["later"])
    with pytest.raises(redis.ResponseError, match="FENCED"):
        fire(c, later.shard, "intruder", e2, ["later"])
    info = c.get("due")
    assert info is not None and info.state == "expired"


def test_sweep_expires_ended_buckets_only(c: TimerClient, redis_client: redis.Redis) -> None:
    """sweep fires every timer of buckets whose end has passed, and drops those buckets."""
    now = server_now_ms(redis_client)
    shard = c.shard_of("old:{s}")
    for i in range(5):
        c.schedule(f"old:{{s}}:{i}", deadline_ms=now - 10_000 - i)
    c.schedule("new:{s}", deadline_ms=now + 60_000)
    assert c.shard_of("new:{s}") == shard
    epoch = acquire(c, shard)
    sk = c.keys.shard(shard)
    fired, more = c.scripts.sweep(
        keys=[sk.timers, sk.buckets, sk.outcomes, sk.lease, sk.epoch],
        args=[sk.prefix, "w1", epoch, c.meta.bucket_ms, 60_000, sk.events, 3],
    )
    assert len(fired) == 6 and more == 1  # limit 3: three ids with their deadlines
    fired2, more2 = c.scripts.sweep(
        keys=[sk.timers, sk.buckets, sk.outcomes, sk.lease, sk.epoch],
        args=[sk.prefix, "w1", epoch, c.meta.bucket_ms, 60_000, sk.events, 100],
    )
    assert len(fired2) == 4 and more2 == 0
    assert redis_client.hlen(sk.timers) == 1 and redis_client.zcard(sk.buckets) == 1
    with pytest.raises(Fenced), map_errors("test"):
        c.scripts.sweep(
            keys=[sk.timers, sk.buckets, sk.outcomes, sk.lease, sk.epoch],
            args=[sk.prefix, "w2", epoch, c.meta.bucket_ms, 60_000, sk.events, 100],
        )


def test_lease_acquire_renew_release(c: TimerClient, redis_client: redis.Redis) -> None:
    """A lease has one holder; each acquisition raises the epoch; renew/release check it."""
    sk = c.keys.shard(0)
    keys = [sk.lease, sk.epoch]
    e1 = acquire(c, 0, "w1", 5_000)
    held = c.scripts.lease_acquire(keys=keys, args=["w2", 5_000])
    assert held[0] == 0 and held[1] == b"w1" and 0 < held[2] <= 5_000
    assert c.scripts.lease_renew(keys=keys, args=["w1", e1, 5_000])[0] == 1
    assert c.scripts.lease_renew(keys=keys, args=["w2", e1, 5_000])[0] == 0
    assert c.scripts.lease_release(keys=keys, args=["w1", e1 + 1]) == 0
    assert c.scripts.lease_release(keys=keys, args=["w1", e1]) == 1
    assert not redis_client.exists(sk.lease)
    e2 = acquire(c, 0, "w2", 5_000)
    assert e2 == e1 + 1
    assert c.scripts.lease_renew(keys=keys, args=["w1", e1, 5_000])[0] == 0
