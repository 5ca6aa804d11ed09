"""One contract test per Lua script, each run fresh and again after SCRIPT FLUSH."""

from __future__ import annotations

import hashlib
from typing import Any, cast

import msgpack
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timer import Fenced, TimerClient
from timer.durable.model.codec import decode_pending, decode_result
from timer.durable.model.leader import FireResult
from timer.durable.model.models import COARSE_MS
from timer.durable.model.scripts import ScriptName, include, source
from timer.durable.shards.calls import Hand

from .conftest import bucket_members, retained, server_now_ms

Entries = list[tuple[bytes, dict[bytes, bytes]]]  # XRANGE of a client without decode_responses

pytestmark = pytest.mark.redis


@pytest.fixture(params=["cached", "after-flush"])
def c(
    client: TimerClient, redis_client: redis.Redis, request: pytest.FixtureRequest
) -> TimerClient:
    """The client, with the server's script cache emptied first in the second run."""
    if request.param == "after-flush":
        for name in ScriptName:  # load every script, then lose them all
            redis_client.script_load(source(name))
        redis_client.script_flush()
        assert not any(redis_client.script_exists(*(sha(n) for n in ScriptName)))
    return client


def sha(name: ScriptName) -> str:
    return hashlib.sha1(source(name).encode()).hexdigest()


def acquire(c: TimerClient, shard: int, worker: str = "w1", ttl_ms: int = 5_000) -> int:
    grant = c.shard_store(shard).acquire(worker, ttl_ms)
    assert grant.acquired
    return grant.epoch


def fire(c: TimerClient, shard: int, worker: str, epoch: int, ids: list[str]) -> FireResult:
    return c.shard_store(shard).fire(worker, epoch, ids, ttl_ms=60_000)


def test_schedule_indexes_timer_bucket_and_watch(c: TimerClient, redis_client: redis.Redis) -> None:
    """schedule writes the record, its durable bucket, the bucket mirror and watch sets."""
    t = c.schedule("job:{1}", delay_ms=5_000, payload=[1, 2], watch=["job:{1}:done"])
    sk = c.keys.shard(t.shard)
    n = t.deadline_ms // c.meta.bucket_ms
    rec = decode_pending(cast(bytes, redis_client.hget(sk.timers, "job:{1}")))
    assert rec["deadline_ms"] == t.deadline_ms and rec["watch"] == ["job:{1}:done"]
    assert rec["need"] == 1
    assert bucket_members(redis_client, sk.bucket(n)) == ["job:{1}"]
    assert redis_client.type(sk.bucket(n)) == b"list"  # format 3: a lazy bucket
    assert redis_client.zscore(sk.buckets, str(n)) == n * c.meta.bucket_ms
    assert redis_client.sismember(sk.watch("job:{1}:done"), "job:{1}")
    now = server_now_ms(redis_client)
    assert now <= t.deadline_ms <= now + 5_000


def test_cancel_decides_once_and_cleans_every_index(
    c: TimerClient, redis_client: redis.Redis
) -> None:
    """cancel removes the timer from its record and watch index, appends one outcome and
    retains it; its fine bucket (a list) keeps the id until the sweep takes it."""
    t = c.schedule("job:{2}", delay_ms=5_000, watch=["job:{2}:a"])
    sk = c.keys.shard(t.shard)
    assert c.cancel("job:{2}") is True
    assert c.cancel("job:{2}") is False
    assert not redis_client.hexists(sk.timers, "job:{2}")
    assert bucket_members(redis_client, sk.bucket(t.deadline_ms // c.meta.bucket_ms)) == [
        "job:{2}"
    ]  # stale: no record, so nothing reads it as pending
    assert not redis_client.exists(sk.watch("job:{2}:a"))
    assert redis_client.xlen(sk.outcomes) == 1
    raw, expiry_ms = retained(redis_client, sk, "job:{2}")
    assert raw is not None and expiry_ms is not None
    assert decode_result(raw)["outcome"] == "cancelled"
    assert 0 < expiry_ms - server_now_ms(redis_client) <= 24 * 3600 * 1000 + 1000


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
    new = sk.bucket(moved.deadline_ms // c.meta.bucket_ms)
    assert "job:{4}" in bucket_members(redis_client, new)
    # the old bucket keeps the id, stale: its record's deadline is in the new one
    assert "job:{4}" in bucket_members(redis_client, sk.bucket(t.deadline_ms // c.meta.bucket_ms))
    assert redis_client.zcard(sk.buckets) == 2
    c.cancel("job:{4}")
    assert c.reschedule("job:{4}", delay_ms=10) is None


def test_notify_completes_watchers(c: TimerClient, redis_client: redis.Redis) -> None:
    """notify completes every timer watching the key now and publishes the notification."""
    pubsub = redis_client.pubsub()  # type: ignore[no-untyped-call,unused-ignore]  # typed from redis-py 8.2
    pubsub.subscribe(c.keys.key_channel("job:{5}:done"))
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
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
    done = fire(c, due.shard, "w1", epoch, ["due", "missing"])
    assert done.fired == ["due"] and done.early == {}
    e2 = epoch if later.shard == due.shard else acquire(c, later.shard)
    done = fire(c, later.shard, "w1", e2, ["later"])
    assert done.fired == [] and done.early == {"later": later.deadline_ms}
    with pytest.raises(Fenced):
        fire(c, later.shard, "w1", e2 - 1, ["later"])
    with pytest.raises(Fenced):
        fire(c, later.shard, "intruder", e2, ["later"])
    info = c.get("due")
    assert info is not None and info.state == "expired"


def test_fire_together_answers_each_shard_alone(c: TimerClient) -> None:
    """Several shards' fire calls in one round trip (the worker's firer, #32): each call's
    result or its own error; a fenced shard does not stop the others."""
    ids = [f"together:{i}" for i in range(40)]
    c.schedule_many([{"id": t, "delay_ms": 0} for t in ids])
    by_shard: dict[int, list[str]] = {}
    for t in ids:
        by_shard.setdefault(c.shard_of(t), []).append(t)
    shards = sorted(by_shard)
    assert len(shards) >= 3
    epochs = {s: acquire(c, s) for s in shards}
    stale = shards[1]  # fenced: a past epoch
    calls = [
        c.shard_store(s).fire_call("w1", epochs[s] - (s == stale), by_shard[s], ttl_ms=60_000)
        for s in shards
    ]
    [alone] = c.shards.fire_together(calls[1:2])  # the same, on its own
    assert isinstance(alone, Fenced)
    c.redis.script_flush()  # a restarted server: the pipeline loads the script, runs again
    results = c.shards.fire_together(calls)
    for s, result in zip(shards, results, strict=True):
        if s == stale:
            assert isinstance(result, Fenced)
            assert {c.get(t).state for t in by_shard[s]} == {"pending"}  # type: ignore[union-attr]
        else:
            assert isinstance(result, FireResult) and sorted(result.fired) == sorted(by_shard[s])
            assert {c.get(t).state for t in by_shard[s]} == {"expired"}  # type: ignore[union-attr]


def test_fire_of_a_batch_decides_each_id_once_and_clears_every_index(
    c: TimerClient, redis_client: redis.Redis
) -> None:
    """A batch with an id twice (a rescheduled timer's old and new task) decides it once;
    the coalesced writes leave no record or watch entry behind, and the sweep then takes
    the ids left in the ended buckets (lists) without deciding any again."""
    now = server_now_ms(redis_client)
    ids = [f"b:{{f}}:{i}" for i in range(6)]
    for n, tid in enumerate(ids):  # two durable buckets, watch keys on some
        c.schedule(
            tid,
            deadline_ms=now - 5_000 - 2_000 * (n % 2),
            watch=[f"b:{{f}}:k{n % 3}"] if n % 2 else [],
        )
    shard = c.shard_of(ids[0])
    epoch = acquire(c, shard)
    done = fire(c, shard, "w1", epoch, [ids[0], *ids, ids[3]])
    assert done.fired == ids and done.early == {}
    entries = cast(Entries, redis_client.xrange(c.keys.shard(shard).outcomes))
    assert sorted(e[1][b"i"].decode() for e in entries) == sorted(ids)  # once each
    sk = c.keys.shard(shard)
    assert redis_client.hlen(sk.timers) == 0
    assert not list(redis_client.scan_iter(match=f"{sk.prefix}:w:*", count=1000))
    swept = c.shard_store(shard).sweep("w1", epoch, ttl_ms=60_000, limit=1_000)
    assert swept.fired == [] and not swept.more
    assert redis_client.zcard(sk.buckets) == 0  # both buckets emptied and dropped
    assert not list(redis_client.scan_iter(match=f"{sk.prefix}:b:*", count=1000))
    assert all(c.get(t).state == "expired" for t in ids)  # type: ignore[union-attr]


def test_sweep_expires_ended_buckets_only(c: TimerClient, redis_client: redis.Redis) -> None:
    """sweep fires every timer of buckets whose end has passed, and drops those buckets."""
    now = server_now_ms(redis_client)
    shard = c.shard_of("old:{s}")
    for i in range(5):
        c.schedule(f"old:{{s}}:{i}", deadline_ms=now - 10_000 - i)
    c.schedule("new:{s}", deadline_ms=now + 60_000)
    assert c.shard_of("new:{s}") == shard
    epoch = acquire(c, shard)
    sk, store = c.keys.shard(shard), c.shard_store(shard)
    first = store.sweep("w1", epoch, ttl_ms=60_000, limit=3)
    assert len(first.fired) == 3 and first.more  # limit 3: three ids with their deadlines
    second = store.sweep("w1", epoch, ttl_ms=60_000, limit=100)
    assert len(second.fired) == 2 and not second.more
    assert all(deadline <= now - 10_000 for _, deadline in first.fired + second.fired)
    assert redis_client.hlen(sk.timers) == 1 and redis_client.zcard(sk.buckets) == 1
    with pytest.raises(Fenced):
        store.sweep("w2", epoch, ttl_ms=60_000, limit=100)


def test_sweep_of_a_list_bucket_decides_each_pending_due_id_once_and_none_early(
    c: TimerClient, redis_client: redis.Redis
) -> None:
    """A fine bucket that is a list keeps ids decided or moved since, and may hold an id
    twice: the sweep expires each pending, due timer once, never a cancelled one, never
    one moved to a later deadline (not early: it stays pending in its new bucket), and
    empties the bucket it read."""
    now = server_now_ms(redis_client)
    at = (now - 10_000) // 1_000 * 1_000  # the start of an ended 1 s bucket
    for tid in ("twice:{l}", "gone:{l}", "later:{l}", "plain:{l}"):
        c.schedule(tid, deadline_ms=at + 1)
    sk = c.keys.shard(c.shard_of("twice:{l}"))
    assert c.reschedule("twice:{l}", deadline_ms=now + 30_000) is not None  # away...
    assert c.reschedule("twice:{l}", deadline_ms=at + 2) is not None  # ...and back: twice
    assert c.cancel("gone:{l}")
    assert c.reschedule("later:{l}", deadline_ms=now + 60_000) is not None
    assert bucket_members(redis_client, sk.bucket(at // 1_000)).count("twice:{l}") == 2
    store = c.shard_store(c.shard_of("twice:{l}"))
    epoch = acquire(c, c.shard_of("twice:{l}"))
    fired: list[str] = []
    while True:
        swept = store.sweep("w1", epoch, ttl_ms=60_000, limit=100)
        fired += [tid for tid, _ in swept.fired]
        if not swept.more:
            break
    assert sorted(fired) == ["plain:{l}", "twice:{l}"]
    assert sorted(e[1][b"i"] for e in cast(Entries, redis_client.xrange(sk.outcomes))) == [
        b"gone:{l}",
        b"plain:{l}",
        b"twice:{l}",
    ]  # each once (gone by its cancel)
    assert c.get("later:{l}").state == "pending"  # type: ignore[union-attr]
    assert not redis_client.exists(sk.bucket(at // 1_000))  # read, so emptied


def test_lease_acquire_renew_release(c: TimerClient, redis_client: redis.Redis) -> None:
    """A lease has one holder; each acquisition raises the epoch; renew/release check it."""
    sk, store = c.keys.shard(0), c.shard_store(0)
    e1 = acquire(c, 0, "w1", 5_000)
    held = store.acquire("w2", 5_000)
    assert not held.acquired and held.holder == "w1" and 0 < held.pttl_ms <= 5_000
    assert store.renew("w1", e1, 5_000).renewed
    assert not store.renew("w2", e1, 5_000).renewed
    assert store.release("w1", e1 + 1) is False
    assert store.release("w1", e1) is True
    assert not redis_client.exists(sk.lease)
    e2 = acquire(c, 0, "w2", 5_000)
    assert e2 == e1 + 1
    assert not store.renew("w1", e1, 5_000).renewed


def test_a_lease_given_back_is_a_handover_one_left_to_expire_a_takeover(
    c: TimerClient, redis_client: redis.Redis
) -> None:
    """The next holder learns which: the first lease is neither, one after a release is a
    handover, one after an expiry (the holder crashed) is not."""
    sk, store = c.keys.shard(1), c.shard_store(1)
    first = store.acquire("w1", 5_000)
    assert first.acquired and not first.handover
    assert store.release("w1", first.epoch)
    handed = store.acquire("w2", 5_000)
    assert handed.acquired and handed.handover and handed.epoch == first.epoch + 1
    redis_client.delete(sk.lease)  # w2's lease expires: it never gave it back
    taken = store.acquire("w3", 5_000)
    assert taken.acquired and not taken.handover


def test_lua_key_helpers_match_the_python_key_format(
    client: TimerClient, redis_client: redis.Redis
) -> None:
    """The keys the Lua builds from the shard prefix (include/keys.lua) are the ones
    keys.py names."""
    sk = client.keys.shard(2)
    lib = include("keys")
    built = redis_client.eval(
        lib + "\nreturn {bucket_key(ARGV[1], 1234), watch_key(ARGV[1], 'job:{7}:done'),"
        " coarse_key(ARGV[1], 56), coarse_mirror(ARGV[1]),"
        " COARSE_MS, rx_state_key(ARGV[1]), rx_key(ARGV[1], 9), migrate_state_key(ARGV[1]),"
        " migrate_copy_key(ARGV[1], 's'), sched_key(ARGV[1]), sched_queue_key(ARGV[1]),"
        " head_key(ARGV[1]), head_bound_key(ARGV[1])}",
        0,
        sk.prefix,
    )
    assert [x if isinstance(x, int) else x.decode() for x in built] == [
        sk.bucket(1234), sk.watch("job:{7}:done"), sk.coarse(56),
        sk.coarse_buckets, COARSE_MS, sk.results_table, sk.results_part(9), sk.migration,
        sk.migration_copy("s"), sk.schedules, sk.schedule_queue, sk.head, sk.head_bound,
    ]  # fmt: skip


LEAN_CHECK = """
local out, packed = {}, {}
local names = {'expired', 'cancelled', 'completed'}
for i, k in ipairs(cmsgpack.unpack(ARGV[1])) do  -- {d, p, c, s, n, w, now, code}
  local w = NONE
  if #k[6] > 0 then w = k[6] end
  local raw = pack_rec({d = k[1], p = k[2], c = k[3], s = k[4], n = k[5], w = w, g = NONE,
    fmt = 2})
  local d, rec = peek_rec(raw)
  local want = pack_result(read_rec(raw), names[k[8]], k[7])
  local got
  if rec then got = pack_result(rec, names[k[8]], k[7])
  else got = lean_result(raw, d, k[8], k[7], packed) end
  out[i] = {d, rec and 1 or 0, got == want and 1 or 0}
end
return out
"""

lean_cases = st.lists(
    st.tuples(
        st.one_of(st.integers(1, 2**32 + 5), st.integers(1_600_000_000_000, 2**52)),  # d
        st.binary(max_size=300),  # p: fixstr, str8 and str16 lengths
        st.integers(-(2**40), 2**45),  # c
        st.sampled_from([b"", b"batch-7", b"x" * 40]),  # s
        st.sampled_from([1, 1, 1, 2]),  # n
        st.sampled_from([[], [], [b"k1", b"k2"]]),  # w
        st.integers(-(2**33), 2**33),  # now - d
        st.integers(1, 3),  # outcome code
    ),
    min_size=1,
    max_size=40,
)


LeanCase = tuple[int, bytes, int, bytes, int, list[bytes], int, int]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cases=lean_cases)
def test_a_lean_record_is_decided_from_its_bytes_as_pack_result_would(
    redis_client: redis.Redis, cases: list[LeanCase]
) -> None:
    """peek_rec reads the deadline of a record with no need, watch or notified keys from
    its bytes (and unpacks any other), and lean_result makes the same outcome record as
    pack_result, byte for byte, for any payload size, deadline, lateness (negative too:
    cancelled before the deadline) and outcome."""
    lib = include("records")
    args = [[d, p, d - c, s, n, w, d + late, code] for d, p, c, s, n, w, late, code in cases]
    got = redis_client.eval(lib + LEAN_CHECK, 0, msgpack.packb(args, use_bin_type=False))
    for (d, _, _, _, n, w, _, _), (read_d, unpacked, same) in zip(cases, got, strict=True):
        lean = n == 1 and not w and d >= 2**32  # a deadline below 2^32 is not a uint64
        assert (read_d, unpacked, same) == (d, 0 if lean else 1, 1)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(
        st.sampled_from([0, 1, 29, 30, 31, 32, 253, 254, 255, 256, 65_532, 65_533, 65_534, 70_000])
        | st.integers(0, 600),
        min_size=1,
        max_size=6,
    ),
    times=st.lists(
        st.tuples(st.sampled_from(["delay_ms", "deadline_ms"]), st.integers(0, 2**33)),
        min_size=1,
        max_size=6,
    ),
    origin=st.sampled_from(["", "o", "spark-job:" + "x" * 40]),
)
def test_a_plain_timer_is_stored_as_pack_rec_would_write_it(
    client: TimerClient,
    redis_client: redis.Redis,
    sizes: list[int],
    times: list[tuple[str, int]],
    origin: str,
) -> None:
    """schedule's plain path (#55: an id, a time and a payload, put together without a
    table) writes each record byte for byte as cmsgpack packs the same array, whatever
    the payload's size (each msgpack string header), the deadline (below 2^32 too, and in
    the past: a negative d - c) and the origin."""
    now = server_now_ms(redis_client)
    items: list[dict[str, Any]] = []
    for k, (size, (kind, value)) in enumerate(zip(sizes, times * len(sizes), strict=False)):
        when = value % 3_600_000 if kind == "delay_ms" else value
        if kind == "deadline_ms" and when > now:
            when = now + when % 3_600_000
        items.append({"id": f"plain:{{p}}:{k}:{size}", kind: when, "payload": "x" * size})
    got = client.schedule_many(items, origin=origin)
    assert all(not isinstance(t, Exception) and t.created for t in got), got
    tkey = client.keys.shard(client.shard_of("plain:{p}:0:0")).timers
    for item in items:
        raw = cast(bytes, redis_client.hget(tkey, item["id"]))
        assert raw is not None
        again = redis_client.eval("return cmsgpack.pack(cmsgpack.unpack(ARGV[1]))", 0, raw)
        assert raw == again, (item["id"], raw[:16].hex(), again[:16].hex())
        rec = decode_pending(raw)
        assert rec["origin"] == origin and msgpack.unpackb(rec["payload"]) == item["payload"]
    redis_client.delete(tkey)


def test_fire_and_sweep_publish_no_echo_but_cancel_does(
    c: TimerClient, redis_client: redis.Redis
) -> None:
    """The leader's own fire and sweep publish no decided event (it knows what it
    decided); cancel, from anyone, still tells the leader."""
    now = server_now_ms(redis_client)
    for tid in ("a:{e}", "b:{e}", "c:{e}"):
        c.schedule(tid, deadline_ms=now - 5_000)
    c.schedule("d:{e}", deadline_ms=now + 60_000)
    shard = c.shard_of("a:{e}")
    pubsub = redis_client.pubsub()  # type: ignore[no-untyped-call,unused-ignore]  # typed from redis-py 8.2
    pubsub.subscribe(c.keys.shard(shard).events)
    try:
        assert pubsub.get_message(timeout=5)["type"] == "subscribe"
        epoch = acquire(c, shard)
        assert fire(c, shard, "w1", epoch, ["a:{e}"]).fired == ["a:{e}"]
        swept = c.shard_store(shard).sweep("w1", epoch, ttl_ms=60_000, limit=10)
        assert sorted(tid for tid, _ in swept.fired) == ["b:{e}", "c:{e}"]
        assert c.cancel("d:{e}")
        got: list[str] = []
        while not got or not got[-1].startswith("X cancelled"):  # published in this order
            message = pubsub.get_message(timeout=5)
            assert message is not None, f"no cancel event; got {got}"
            got.append(message["data"].decode())
        assert got == ["X cancelled d:{e}"]
    finally:
        pubsub.close()


def test_fire_hands_new_outcomes_to_the_callers_consumer(
    c: TimerClient, redis_client: redis.Redis
) -> None:
    """With a hand, fire reads up to that many entries the group had not delivered, the
    oldest first, for the caller's consumer in the same step: they are in its pending
    list, and the rest are left for any reader. None for a group the stream lacks, and
    no read at all when the call fired nothing."""
    shard = c.schedule("h:{7}:old", delay_ms=60_000).shard
    sk = c.keys.shard(shard)
    c.consumer("g", "me").ensure()
    c.cancel("h:{7}:old")  # an older entry the group has not read yet
    ids = [f"h:{{7}}:{i}" for i in range(4)]
    for tid in ids:
        c.schedule(tid, delay_ms=0)
    epoch = acquire(c, shard)
    store = c.shard_store(shard)
    got = c.shards.fire_together(
        [store.fire_call("w1", epoch, ids[:2], ttl_ms=60_000, hand=Hand(2, "g", "me"))]
    )[0]
    assert isinstance(got, FireResult) and got.fired == ids[:2]
    assert [f[b"i"] for _, f in got.handed] == [b"h:{7}:old", b"h:{7}:0"]  # oldest first
    pending: Any = redis_client.xpending_range(sk.outcomes, "g", "-", "+", 10)
    assert [(p["message_id"].decode(), p["consumer"]) for p in pending] == [
        (eid, b"me") for eid, _ in got.handed
    ]
    again = c.shards.fire_together(  # decided already: nothing fired, nothing read
        [store.fire_call("w1", epoch, ids[:2], ttl_ms=60_000, hand=Hand(5, "g", "me"))]
    )[0]
    assert isinstance(again, FireResult) and again.fired == [] and again.handed == []
    other = c.shards.fire_together(
        [store.fire_call("w1", epoch, ids[2:], ttl_ms=60_000, hand=Hand(5, "nope", "me"))]
    )[0]
    assert isinstance(other, FireResult) and other.fired == ids[2:] and other.handed == []
    rest: Any = redis_client.xreadgroup("g", "them", {sk.outcomes: ">"})
    assert [f[b"i"] for _, f in rest[0][1]] == [b"h:{7}:1", b"h:{7}:2", b"h:{7}:3"]
