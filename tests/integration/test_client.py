"""TimerClient behaviour on a real server: idempotency, k-of-n, get/wait, outcomes, stats."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from functools import partial

import pytest
import redis

from timer import ClientSettings, DuplicateTimer, TimerClient, TimerNotFound, WaitTimeout
from timer.client.shard_store import ShardStore
from timer.testing import RedisServer

from .conftest import server_now_ms

pytestmark = pytest.mark.redis


def test_schedule_is_idempotent(client: TimerClient) -> None:
    """Scheduling a pending id again returns it, unchanged, with created=False."""
    first = client.schedule("job:{1}", delay_ms=60_000, payload={"a": 1}, watch=["job:{1}:k"])
    again = client.schedule("job:{1}", delay_ms=60_000, payload={"a": 1}, watch=["job:{1}:k"])
    assert first.created and not again.created
    assert again.deadline_ms == first.deadline_ms and again.state == "pending"
    assert client.stats()["pending"] == 1


def test_rearm_schedules_an_ended_id_again(client: TimerClient) -> None:
    """Without rearm an ended id answers with its outcome; with rearm it is a new timer
    (with its own outcome later), and a pending id is still returned as it is."""
    client.schedule("r:{1}", delay_ms=60_000)
    client.cancel("r:{1}")
    assert client.schedule("r:{1}", delay_ms=60_000).state == "cancelled"
    again = client.schedule("r:{1}", delay_ms=60_000, rearm=True)
    assert (again.created, again.state) == (True, "pending")
    info = client.get("r:{1}")
    assert info is not None and info.state == "pending"
    assert client.schedule("r:{1}", delay_ms=60_000, rearm=True).created is False
    assert client.complete("r:{1}") is True
    outs = [o.outcome for o in client.outcomes("g", "c", stop_when_idle=True) if o.id == "r:{1}"]
    assert outs == ["cancelled", "completed"]  # one outcome per arming
    batch = client.schedule_many([{"id": "r:{1}", "delay_ms": 1_000, "rearm": True}])
    assert batch[0].created  # type: ignore[union-attr]


def test_conflicting_reschedule_is_a_clear_error(client: TimerClient) -> None:
    """The same id with another payload, watch list or need raises DuplicateTimer, which
    names the timer, the fields that differ and what to do instead."""
    client.schedule("job:{2}", delay_ms=60_000, payload=1, watch=["job:{2}:a", "job:{2}:b"])
    for kwargs, differ, todo in (
        ({"payload": 2, "watch": ["job:{2}:a", "job:{2}:b"]}, ("payload",), "debounce"),
        ({"payload": 1, "watch": ["job:{2}:a"]}, ("watch",), "cancel it"),
        ({"payload": 1, "watch": ["job:{2}:a", "job:{2}:b"], "need": 2}, ("need",), "cancel it"),
        ({"payload": 3, "watch": ["job:{2}:c"]}, ("payload", "watch"), "cancel it"),
    ):
        with pytest.raises(DuplicateTimer, match=r"job:\{2\}") as caught:
            client.schedule("job:{2}", delay_ms=60_000, **kwargs)  # type: ignore[arg-type]
        assert (caught.value.timer_id, caught.value.differ) == ("job:{2}", differ)
        assert f"its {' and '.join(differ)} differ" in str(caught.value).replace(", ", " and ")
        assert todo in str(caught.value)
    # a debounce call keeps the watch list and need: one that differs in them says which
    with pytest.raises(DuplicateTimer, match="its watch differs") as caught:
        client.schedule("job:{2}", delay_ms=60_000, watch=["job:{2}:a"], debounce=True)
    assert caught.value.differ == ("watch",) and "debounce" not in str(caught.value)


def test_schedule_after_decision_returns_outcome(client: TimerClient) -> None:
    """A retried schedule of a decided id returns its outcome instead of a second timer."""
    client.schedule("job:{3}", delay_ms=60_000)
    client.cancel("job:{3}")
    again = client.schedule("job:{3}", delay_ms=60_000)
    assert again.state == "cancelled" and not again.created
    assert client.stats()["pending"] == 0


def test_absolute_deadline_in_redis_time(client: TimerClient, redis_client: redis.Redis) -> None:
    """deadline_ms is kept exactly; a retry with another deadline conflicts."""
    at = server_now_ms(redis_client) + 120_000
    t = client.schedule("job:{4}", deadline_ms=at)
    assert t.deadline_ms == at
    assert not client.schedule("job:{4}", deadline_ms=at).created
    with pytest.raises(DuplicateTimer, match=r"its deadline differs\. To move it: reschedule it"):
        client.schedule("job:{4}", deadline_ms=at + 1)


def test_need_k_of_n_keys(client: TimerClient) -> None:
    """need=2 of 3 keys: one key (even twice) does not complete; a second distinct key does."""
    keys = ["job:{5}:a", "job:{5}:b", "job:{5}:c"]
    client.schedule("job:{5}", delay_ms=60_000, watch=keys, need=2)
    assert client.notify("job:{5}:a") == 0
    assert client.notify("job:{5}:a") == 0
    info = client.get("job:{5}")
    assert info is not None and info.state == "pending" and info.got == ("job:{5}:a",)
    assert client.notify("job:{5}:c") == 1
    info = client.get("job:{5}")
    assert info is not None and info.state == "completed"


def test_get_of_a_completed_timer_names_the_keys_that_completed_it(client: TimerClient) -> None:
    """A completed timer's retained outcome says which watch keys were notified."""
    client.schedule("job:{6}", delay_ms=60_000, watch=["job:{6}:a", "job:{6}:b"], need=2)
    client.notify("job:{6}:b")
    client.notify("job:{6}:a")
    info = client.get("job:{6}")
    assert info is not None and info.state == "completed"
    assert sorted(info.got) == ["job:{6}:a", "job:{6}:b"]


def test_notification_counts_only_for_current_watchers(client: TimerClient) -> None:
    """A timer scheduled after a notification is not completed by it."""
    assert client.notify("job:{6}:done") == 0
    client.schedule("job:{6}", delay_ms=60_000, watch=["job:{6}:done"])
    info = client.get("job:{6}")
    assert info is not None and info.state == "pending"


def test_notify_many_watchers_in_batches(redis_server: RedisServer, namespace: str) -> None:
    """notify handles more watchers than one script call's limit, completing all of them."""
    c = TimerClient.from_url(redis_server.url, namespace)
    c.settings = ClientSettings(notify_batch=7)
    c.init(shards=2)
    res = c.schedule_many(
        [{"id": f"j:{{x}}:{i}", "delay_ms": 60_000, "watch": ["j:{x}:go"]} for i in range(50)]
    )
    assert all(r.created for r in res)  # type: ignore[union-attr]
    assert c.notify("j:{x}:go") == 50
    assert c.stats()["pending"] == 0
    c.close()


def test_get_and_wait(client: TimerClient) -> None:
    """get shows pending then decided state; wait returns the outcome or times out."""
    client.schedule("job:{7}", delay_ms=60_000, payload={"job": 7})
    info = client.get("job:{7}")
    assert info is not None and info.state == "pending" and info.payload == {"job": 7}
    with pytest.raises(WaitTimeout):
        client.wait("job:{7}", timeout=0.05)
    client.complete("job:{7}")
    out = client.wait("job:{7}", timeout=5)
    assert out.outcome == "completed" and out.payload == {"job": 7}
    assert client.get("nope") is None
    with pytest.raises(TimerNotFound):
        client.wait("nope", timeout=0.1)
    with pytest.raises(TimerNotFound):
        client.cancel("nope")


def test_schedule_many_per_item_results(client: TimerClient) -> None:
    """schedule_many returns one result per item, in order, errors in their own slots."""
    res = client.schedule_many(
        [
            {"id": "a", "delay_ms": 1_000},
            {"id": "", "delay_ms": 1_000},
            {"id": "a", "delay_ms": 1_000},
            {"id": "b", "delay_ms": 1_000, "payload": "x"},
            {"id": "b", "delay_ms": 1_000, "payload": "y"},
        ]
    )
    assert res[0].created and not res[2].created  # type: ignore[union-attr]
    assert type(res[1]).__name__ == "InvalidInput"
    assert res[3].created  # type: ignore[union-attr]
    assert isinstance(res[4], DuplicateTimer)
    assert client.stats()["pending"] == 2


def test_payload_round_trip(client: TimerClient) -> None:
    """Payloads of every msgpack type come back as they went in (binary included)."""
    payload = {"s": "ü", "b": b"\x00\xff", "n": [1, 2.5, None, True], "big": 2**62}
    client.schedule("p:{1}", delay_ms=60_000, payload=payload)
    info = client.get("p:{1}")
    assert info is not None and info.payload == payload
    client.cancel("p:{1}")
    out = client.wait("p:{1}", timeout=5)
    assert out.payload == payload


def test_races_decide_exactly_once(client: TimerClient) -> None:
    """cancel, complete, notify and a leader's fire hammered on one due timer: one outcome."""
    rounds = 20
    for round_ in range(rounds):
        tid, key = f"race:{{{round_}}}", f"race:{{{round_}}}:done"
        timer = client.schedule(tid, delay_ms=0, watch=[key])  # due at once: fire may win too
        store = client.shard_store(timer.shard)
        lease = store.acquire("w", 60_000)
        epoch = lease.epoch if lease.acquired else int(redis_epoch(client, timer.shard))
        barrier = threading.Barrier(12)
        wins: list[str] = []

        def fire(tid: str = tid, store: ShardStore = store, epoch: int = epoch) -> bool:
            return bool(store.fire("w", epoch, [tid], ttl_ms=60_000).fired)

        actions: dict[str, Callable[[], object]] = {
            "cancel": partial(client.cancel, tid),
            "complete": partial(client.complete, tid),
            "notify": partial(client.notify, key),
            "fire": fire,
        }

        def hammer(
            kind: str,
            barrier: threading.Barrier = barrier,
            wins: list[str] = wins,
            actions: dict[str, Callable[[], object]] = actions,
        ) -> None:
            barrier.wait()
            if actions[kind]():
                wins.append(kind)

        threads = [threading.Thread(target=hammer, args=(k,)) for k in list(actions) * 3]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1, wins
    outs = list(client.outcomes("g", "c", stop_when_idle=True))
    assert Counter(o.id for o in outs) == {f"race:{{{r}}}": 1 for r in range(rounds)}


def redis_epoch(client: TimerClient, shard: int) -> bytes:
    return client.redis.get(client.keys.shard(shard).epoch)  # type: ignore[no-any-return]


def test_outcomes_consumer_group_ack_and_reclaim(client: TimerClient) -> None:
    """Outcomes are delivered once per group; unacked ones are reclaimed by another consumer."""
    for i in range(6):
        client.schedule(f"o:{i}", delay_ms=60_000)
        client.cancel(f"o:{i}")
    first = list(client.outcomes("handlers", "h1", stop_when_idle=True))
    assert sorted(o.id for o in first) == [f"o:{i}" for i in range(6)]
    for o in first[:4]:
        o.ack()
    # h1 "dies" holding two; h2 reclaims them once idle (min idle 0 ms here).
    reclaimed = list(client.outcomes("handlers", "h2", reclaim_idle_ms=0, stop_when_idle=True))
    assert sorted(o.id for o in reclaimed) == sorted(o.id for o in first[4:])
    for o in reclaimed:
        o.ack()
    assert list(client.outcomes("handlers", "h2", reclaim_idle_ms=0, stop_when_idle=True)) == []
    assert list(client.outcomes("handlers", "h3", stop_when_idle=True)) == []
    # another group sees everything again
    assert len(list(client.outcomes("audit", "a1", stop_when_idle=True))) == 6


def test_stats_per_shard(client: TimerClient, redis_client: redis.Redis) -> None:
    """stats counts pending timers and outcomes per shard and reports lag of ended buckets."""
    now = server_now_ms(redis_client)
    client.schedule("late", deadline_ms=now - 5_000)
    client.schedule("soon", delay_ms=60_000)
    client.schedule("gone", delay_ms=60_000)
    client.cancel("gone")
    st = client.stats()
    assert st["pending"] == 2 and st["outcomes"] == 1
    assert len(st["shards"]) == 4
    assert st["max_lag_ms"] >= 3_000


def test_a_shard_with_nothing_pending_is_not_late(
    client: TimerClient, redis_client: redis.Redis
) -> None:
    """A bucket whose ids were all cancelled stays until a sweep clears it; with no worker
    sweeping, its shard showed a lag, and the dashboard an alarm for a shard with nothing
    pending. Nothing pending: nothing late (the bucket is there, which the test checks)."""
    now = server_now_ms(redis_client)
    client.schedule("gone", deadline_ms=now - 10_000)
    client.cancel("gone")
    shard = client.shard_of("gone")
    assert redis_client.zcard(client.keys.shard(shard).buckets) == 1
    st = client.stats(servers=False)
    assert st["pending"] == 0
    assert st["shards"][shard]["lag_ms"] == 0 and st["max_lag_ms"] == 0


def test_origin_tells_a_retry_from_a_duplicate(client: TimerClient) -> None:
    """A batch retried under the same origin sees its own timers; another origin does not."""
    items = [{"id": f"s:{i}", "delay_ms": 60_000} for i in range(3)]
    first = client.schedule_many(items, origin="job-7/part-0")
    assert all(r.created and r.origin == "job-7/part-0" for r in first)  # type: ignore[union-attr]
    retry = client.schedule_many(items, origin="job-7/part-0")
    assert all(not r.created and r.origin == "job-7/part-0" for r in retry)  # type: ignore[union-attr]
    client.cancel("s:0")
    other = client.schedule_many(items, origin="job-8/part-0")
    assert [r.origin for r in other] == ["job-7/part-0"] * 3  # type: ignore[union-attr]
    assert other[0].state == "cancelled"  # type: ignore[union-attr]


def test_memory_estimates_the_bytes_held_per_timer(
    client: TimerClient, redis_server: RedisServer
) -> None:
    """memory() estimates bytes per pending timer close to what used_memory grew by, and
    bytes per decided timer close to the exact sum of every stream and results-table hash."""
    r = redis.Redis.from_url(redis_server.url)
    empty = client.memory()
    assert empty["bytes_per_pending_timer"] is None and empty["bytes_per_decided_timer"] is None
    client.schedule_many([{"id": f"few:{i}", "delay_ms": 0} for i in range(2)])
    for i in range(2):
        client.cancel(f"few:{i}")
    few = client.memory()  # an empty stream's own kilobytes are not two outcomes' bytes
    assert few["outcomes"] == 2 and few["bytes_per_decided_timer"] is None
    rng = random.Random(7)
    now = client.server_time_ms()
    before = int(r.info("memory")["used_memory"])
    client.schedule_many([
        {"id": f"m:{i}", "deadline_ms": now + 3_600_000 + rng.randrange(7 * 86_400_000),
         "payload": {"job": i}} for i in range(3_000)
    ])  # fmt: skip
    grown = (int(r.info("memory")["used_memory"]) - before) / 3_000
    for i in range(600):
        client.cancel(f"m:{i}")
    held = client.memory()
    assert held["pending"] == 2_400 and held["outcomes"] == 602
    assert 0.5 * grown <= held["bytes_per_pending_timer"] <= 1.5 * grown, (held, grown)
    results = r.scan_iter(match=f"{{tw:{client.namespace}:*:R:*", count=1000)
    exact = sum(int(r.memory_usage(k) or 0) for k in results)
    exact += sum(int(r.memory_usage(client.keys.shard(s).outcomes) or 0) for s in range(4))
    assert abs(held["bytes_per_decided_timer"] - exact / 602) <= 0.25 * exact / 602, held


def test_a_url_pasted_with_blanks_around_it_is_taken(
    redis_server: RedisServer, namespace: str
) -> None:
    """`--redis-url " redis://…"` (a copy with the space before it) was refused as the
    unsupported scheme " redis"."""
    with TimerClient.from_url(f" {redis_server.url}\n", namespace) as c:
        c.init(shards=2)
        c.schedule("pasted", 60_000)
        assert c.get("pasted") is not None
