"""Coarse buckets (formats 2 and 3, #14): far timers wait in one bucket per hour, the
sweep moves them into the fine buckets an hour ahead, and the indexes stay sound: each
pending timer in the fine bucket its deadline names or in its hour's coarse bucket, every
bucket in its mirror, no empty bucket left behind."""

from __future__ import annotations

import random
import threading
from typing import Any

from timer import TimerClient
from timer.durable.model.codec import FORMAT_VERSION, decode_pending
from timer.durable.model.models import COARSE_MS
from timer.worker import Worker, WorkerSettings

from ..conftest import wait_for
from .conftest import SHARDS, bucket_members, server_now_ms

HOUR = COARSE_MS


def indexes(c: TimerClient) -> dict[str, Any]:
    """Where each pending timer is indexed, and the index invariants checked on the way.

    Each pending timer is in the bucket its deadline names: its fine bucket, or (if not
    there) its hour's coarse bucket. Buckets (the lazy lists of lua/include/buckets.lua)
    may also hold ids decided or moved since. No bucket is empty or outside its mirror."""
    r, where = c.redis, {}
    bucket_ms = c.meta.bucket_ms
    for s in range(c.meta.shards):
        sk = c.keys.shard(s)
        records = {k.decode(): decode_pending(v) for k, v in r.hgetall(sk.timers).items()}
        held: dict[tuple[str, int], set[str]] = {}
        for kind, mirror, key in (("fine", sk.buckets, sk.bucket),
                                  ("coarse", sk.coarse_buckets, sk.coarse)):  # fmt: skip
            for n in (int(x) for x in r.zrange(mirror, 0, -1)):
                members = bucket_members(r, key(n))
                assert members, f"{kind} bucket {n} is in its mirror but empty"
                held[(kind, n)] = set(members)
        for pattern, kind in (("b", "fine"), ("c", "coarse")):  # no bucket outside its mirror
            keys = {  # count: the shared server holds every earlier test's keys too
                int(k.decode().rsplit(":", 1)[1])
                for k in r.scan_iter(f"{sk.prefix}:{pattern}:*", count=10_000)
            }
            assert keys == {n for (k, n) in held if k == kind}, (pattern, keys)
        for tid, rec in records.items():
            if tid in held.get(("fine", rec["deadline_ms"] // bucket_ms), set()):
                where[tid] = "fine"
            else:
                coarse = held.get(("coarse", rec["deadline_ms"] // HOUR), set())
                assert tid in coarse, f"{tid} is lost"
                where[tid] = "coarse"
    return where


def move_to_coarse(c: TimerClient, tid: str) -> None:
    """Put a pending timer in its coarse bucket, as if it had been scheduled more than an
    hour earlier (a test cannot wait for the clock): the state the sweep must cascade."""
    r = c.redis
    sk = c.keys.shard(c.shard_of(tid))
    d = decode_pending(r.hget(sk.timers, tid))["deadline_ms"]
    n, m = d // c.meta.bucket_ms, d // HOUR
    assert r.lrem(sk.bucket(n), 0, tid) == 1
    if not r.exists(sk.bucket(n)):
        r.zrem(sk.buckets, str(n))
    r.rpush(sk.coarse(m), tid)
    r.zadd(sk.coarse_buckets, {str(m): m * HOUR})


def sweep_all(c: TimerClient) -> tuple[list[str], int]:
    fired, moved = [], 0
    for shard in range(c.meta.shards):
        store = c.shard_store(shard)
        epoch = store.acquire("sweeper", 5_000).epoch
        while True:
            swept = store.sweep("sweeper", epoch, ttl_ms=60_000, limit=1_000)
            fired += [tid for tid, _ in swept.fired]
            moved += swept.moved
            if not swept.more:
                break
        store.release("sweeper", epoch)
    return fired, moved


def test_far_timers_wait_in_coarse_buckets(client: TimerClient) -> None:
    """A timer whose hour starts an hour or more ahead goes to that hour's coarse bucket;
    nearer ones to fine buckets. Many far timers share few buckets."""
    assert client.meta.version == FORMAT_VERSION
    now = server_now_ms(client.redis)
    rng = random.Random(3)
    far: list[dict[str, Any]] = [
        {"id": f"far{i}", "deadline_ms": now + 2 * HOUR + rng.randrange(24 * HOUR)}
        for i in range(400)
    ]
    near: list[dict[str, Any]] = [
        {"id": f"near{i}", "deadline_ms": now + rng.randrange(HOUR)} for i in range(50)
    ]
    client.schedule_many(far + near)
    where = indexes(client)
    assert all(where[t["id"]] == "coarse" for t in far)
    assert all(where[t["id"]] == "fine" for t in near)
    sk = client.keys.shard(client.shard_of("far0"))
    for mirror, key in ((sk.buckets, sk.bucket), (sk.coarse_buckets, sk.coarse)):
        assert {client.redis.type(key(int(n))) for n in client.redis.zrange(mirror, 0, -1)} == {
            b"list"
        }  # a new namespace's buckets are lists (format 3)
    coarse = sum(client.redis.zcard(client.keys.shard(s).coarse_buckets) for s in range(SHARDS))
    assert coarse <= SHARDS * 25  # a bucket per shard and hour, not one per timer
    assert client.memory()["coarse_buckets"] == coarse
    # next_due (the dashboard's) reads the far timers when the fine buckets run out
    shard = client.shard_of("far0")
    mine = sorted(
        (t["deadline_ms"], t["id"]) for t in far + near if client.shard_of(t["id"]) == shard
    )
    near_here = sum(1 for t in near if client.shard_of(t["id"]) == shard)
    due = client.next_due(shard, 1000)
    assert due == mine[: len(due)] and len(due) > near_here


def test_every_decision_and_move_keeps_the_indexes_exact(client: TimerClient) -> None:
    """Random schedules (near and far), reschedules across the boundary both ways,
    cancels, completions, notifies, fires and sweeps: after each step every pending
    timer is in exactly one bucket and no empty or orphan bucket is left."""
    rng = random.Random(11)
    now = server_now_ms(client.redis)
    live: set[str] = set()
    decided: set[str] = set()
    store = client.shard_store(client.shard_of("{0}"))
    epoch = store.acquire("w", 60_000).epoch
    for step in range(300):
        op = rng.choice(["schedule", "schedule", "reschedule", "cancel", "notify", "fire"])
        tid = f"t{rng.randrange(60)}{{0}}"  # one hash tag: all on one shard with its keys
        far = rng.random() < 0.5
        deadline = now + (2 * HOUR + rng.randrange(48 * HOUR) if far else rng.randrange(HOUR))
        if op == "schedule" and tid not in live | decided:
            client.schedule(tid, deadline_ms=deadline, watch=[tid + ":k"])
            live.add(tid)
        elif op == "reschedule" and tid in live:
            assert client.reschedule(tid, deadline_ms=deadline) is not None
        elif op == "cancel" and tid in live:
            assert client.cancel(tid)
            live.discard(tid)
            decided.add(tid)
        elif op == "notify" and tid in live:
            assert client.notify(tid + ":k") == 1
            live.discard(tid)
            decided.add(tid)
        elif op == "fire" and tid in live:
            client.reschedule(tid, deadline_ms=now - 10)
            assert store.fire("w", epoch, [tid], ttl_ms=60_000).fired == [tid]
            live.discard(tid)
            decided.add(tid)
        if step % 10 == 0:
            assert set(indexes(client)) == live
    where = indexes(client)
    assert set(where) == live and "coarse" in where.values() and "fine" in where.values()


def test_the_sweep_moves_a_coarse_bucket_an_hour_ahead_and_fires_overdue_ones(
    client: TimerClient,
) -> None:
    """A coarse bucket that starts within the hour is moved into the fine buckets (then
    loaded by the leader as usual); one already past is moved and expired in the same
    sweep, each timer exactly once."""
    now = server_now_ms(client.redis)
    soon = [f"soon{i}" for i in range(30)]
    late = [f"late{i}" for i in range(30)]
    client.schedule_many([{"id": t, "deadline_ms": now + HOUR // 2} for t in soon])
    client.schedule_many([{"id": t, "deadline_ms": now - 60_000} for t in late])
    for t in soon + late:
        move_to_coarse(client, t)
    assert set(indexes(client).values()) == {"coarse"}
    lags = [x["lag_ms"] for x in client.stats(servers=False)["shards"]]
    assert max(lags) >= 60_000  # stats sees an overdue coarse bucket as lag
    fired, moved = sweep_all(client)
    assert moved == 60
    assert sorted(fired) == sorted(late)
    assert indexes(client) == dict.fromkeys(soon, "fine")
    assert sweep_all(client) == ([], 0)  # nothing left to move or fire
    assert max(x["lag_ms"] for x in client.stats(servers=False)["shards"]) == 0
    outcomes = [o.id for o in client.all_outcomes()]
    assert sorted(outcomes) == sorted(late)


def test_a_worker_fires_overdue_timers_left_in_coarse_buckets_once(
    client: TimerClient,
) -> None:
    """After a long outage far timers are overdue in coarse buckets: a worker taking the
    shards moves and fires every one, exactly once."""
    now = server_now_ms(client.redis)
    ids = [f"o{i}" for i in range(200)]
    client.schedule_many([{"id": t, "deadline_ms": now - 5_000 - i} for i, t in enumerate(ids)])
    for t in ids:
        move_to_coarse(client, t)
    settings = WorkerSettings(worker_id="w1", lease_ms=2_000, sweep_interval_ms=50)
    w = Worker(TimerClient.from_url(client.where, client.namespace), settings)
    thread = threading.Thread(target=w.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: sum(1 for _ in client.all_outcomes()) >= len(ids), 20, "all fired")
    finally:
        w.stop()
        thread.join(10)
        w.client.close()
    assert not thread.is_alive()
    outcomes = [o.id for o in client.all_outcomes()]
    assert sorted(outcomes) == sorted(ids)  # each once
    assert w.stats.cascaded == len(ids)  # every one moved once, by the sweep
    assert indexes(client) == {}


def test_stale_and_repeated_ids_in_a_coarse_list_are_skipped(client: TimerClient) -> None:
    """A coarse list keeps the ids of timers cancelled or moved while in it, and an id
    may be in it twice: the cascade moves each pending one once, into the fine bucket
    its deadline names, fires each overdue one once, and never one cancelled or one
    whose deadline moved to another hour (not early)."""
    now = server_now_ms(client.redis)
    due = [f"due{i}{{c}}" for i in range(20)]  # overdue: the sweep fires them
    soon = [f"soon{i}{{c}}" for i in range(20)]  # later this hour: moved, not fired
    client.schedule_many([{"id": t, "deadline_ms": now - 60_000} for t in due])
    client.schedule_many([{"id": t, "deadline_ms": now + HOUR // 2} for t in soon])
    for t in due + soon:
        move_to_coarse(client, t)
    for t in due[:5]:
        coarse = client.keys.shard(client.shard_of(t)).coarse
        client.redis.rpush(coarse((now - 60_000) // HOUR), t)  # twice
    for t in due[5:10]:
        assert client.cancel(t)  # stays in the list, decided
    for t in due[10:15]:  # moved to another hour, far ahead: a stale entry here
        assert client.reschedule(t, deadline_ms=now + 5 * HOUR) is not None
    where = indexes(client)
    assert all(where[t] == "coarse" for t in due[10:15])
    fired, moved = sweep_all(client)
    fired_ids = sorted(fired)
    expect = sorted(due[:5] + due[15:])
    assert fired_ids == expect  # once each: repeated ids too; cancelled and moved never
    assert moved == len(expect) + len(soon)
    assert indexes(client) == {**dict.fromkeys(soon, "fine"), **dict.fromkeys(due[10:15], "coarse")}
    assert sorted(o.id for o in client.all_outcomes() if o.outcome == "expired") == expect
