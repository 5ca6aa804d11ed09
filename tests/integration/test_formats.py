"""Data formats (#14): compact records, the results table and two-field outcome entries
in new namespaces, the old formats still read and written where a namespace has not
migrated, a newer format refused, `migrate` one way (outcomes retained before it still
answer after it, entries written before it still read)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import msgpack
import pytest
import redis

from timer import Backoff, Handlers, Outcome, TimerClient
from timer.durable.codec import FORMAT_VERSION
from timer.durable.models import TimerInfo
from timer.errors import ConfigError
from timer.testing import RedisServer

from .conftest import SHARDS, namespace_keys, retained, server_now_ms


def make_client(server: RedisServer, namespace: str, version: int) -> TimerClient:
    """A client on a fresh namespace whose records are created in format ``version``
    (format 1 is what earlier releases made: their meta has version 1)."""
    c = TimerClient.from_url(server.url, namespace)
    c.init(shards=SHARDS)
    if version != FORMAT_VERSION:
        c.redis.hset(c.keys.meta, "version", version)
        tables = [c.keys.shard(s).results_table for s in range(SHARDS)]
        if version < 3:  # as an earlier release made it: no results tables
            c.redis.delete(*tables)
        elif version < 4:  # five-field outcome entries
            for table in tables:
                c.redis.hdel(table, "E")
        c = TimerClient.from_url(server.url, namespace)  # reads the meta again
    assert c.meta.version == version
    return c


@pytest.fixture
def pair(redis_server: RedisServer, namespace: str) -> Iterator[tuple[TimerClient, TimerClient]]:
    """The same fresh namespace twice over: one in format 1, one in the newest."""
    old = make_client(redis_server, namespace + "-f1", 1)
    new = make_client(redis_server, namespace + "-f2", FORMAT_VERSION)
    try:
        yield old, new
    finally:
        old.close()
        new.close()


def raw_record(c: TimerClient, tid: str) -> Any:
    sk = c.keys.shard(c.shard_of(tid))
    return msgpack.unpackb(c.redis.hget(sk.timers, tid), raw=True)


def result_bytes(c: TimerClient, tid: str) -> bytes:
    raw, _ = retained(c.redis, c.keys.shard(c.shard_of(tid)), tid)
    assert raw is not None, f"no retained outcome for {tid!r}"
    return raw


def raw_result(c: TimerClient, tid: str) -> Any:
    return msgpack.unpackb(result_bytes(c, tid), raw=True)


def stream_entries(c: TimerClient) -> dict[str, dict[bytes, bytes]]:
    """Every outcome stream entry of the namespace, by timer id (either layout)."""
    out = {}
    for s in range(SHARDS):
        for _, fields in c.redis.xrange(c.keys.shard(s).outcomes):
            out[(fields.get(b"id") or fields[b"i"]).decode()] = fields
    return out


def test_new_namespaces_create_compact_records(client: TimerClient) -> None:
    """A new namespace is at the newest format: its pending records and retained
    outcomes are arrays without field names or default values, and read back whole;
    its outcome stream entries are two fields, the id and that same outcome record."""
    assert client.meta.version == FORMAT_VERSION == 4
    t = client.schedule("plain", delay_ms=60_000, payload={"job": 7})
    assert isinstance(raw_record(client, "plain"), list)
    assert len(raw_record(client, "plain")) == 3  # deadline, payload, created: the rest default
    info = client.get("plain")
    assert info is not None
    assert (info.state, info.deadline_ms, info.payload) == ("pending", t.deadline_ms, {"job": 7})
    assert (info.watch, info.need, info.got) == ((), 1, ())
    assert client.cancel("plain")
    result = raw_result(client, "plain")
    assert isinstance(result, list) and result[0] == 2  # cancelled, as a code
    decided = client.get("plain")
    assert decided is not None and decided.state == "cancelled" and decided.payload == {"job": 7}
    assert stream_entries(client)["plain"] == {b"i": b"plain", b"r": result_bytes(client, "plain")}


def test_the_compact_format_is_smaller(pair: tuple[TimerClient, TimerClient]) -> None:
    """The same timer takes fewer bytes in format 2, pending and retained."""
    old, new = pair
    for c in (old, new):
        c.schedule("x", delay_ms=60_000, payload={"job": 1})
    sizes = {}
    for name, c in (("old", old), ("new", new)):
        sk = c.keys.shard(c.shard_of("x"))
        pending = len(c.redis.hget(sk.timers, "x"))
        c.cancel("x")
        sizes[name] = (pending, len(result_bytes(c, "x")))
    assert sizes["new"][0] <= sizes["old"][0] - 20, sizes
    assert sizes["new"][1] <= sizes["old"][1] - 30, sizes


def _same(info: TimerInfo | None) -> TimerInfo | None:
    """What must agree between formats: everything but the server's clock readings."""
    return None if info is None else replace(info, created_ms=None, decided_ms=None)


def test_both_formats_answer_alike(pair: tuple[TimerClient, TimerClient]) -> None:
    """The same calls on a format-1 and a format-2 namespace give the same answers and the
    same records: every script reads and writes both (schedule, retries, reschedule,
    notify with need > 1, complete, cancel, fire, rearm)."""
    old, new = pair
    seen: dict[str, list[Any]] = {"old": [], "new": []}
    now = server_now_ms(old.redis)
    items: list[dict[str, Any]] = [
        {"id": "a", "deadline_ms": now + 60_000, "payload": {"k": [1, 2]}},
        {"id": "b{b}", "deadline_ms": now + 60_000, "payload": b"\x00bin", "watch": ["{b}kb"]},
        {"id": "c{c}", "deadline_ms": now + 60_000, "watch": ["{c}k1", "{c}k2"], "need": 2},
        {"id": "d", "deadline_ms": now - 5, "payload": "due"},
        {"id": "e", "deadline_ms": now + 60_000, "payload": None},
        {"id": "f", "deadline_ms": now + 5 * 3_600_000, "payload": "far"},  # a coarse bucket
        {"id": "g", "deadline_ms": now + 60_000, "payload": "near, then far"},
    ]
    for name, c in (("old", old), ("new", new)):
        out = seen[name]
        out.append(c.schedule_many(items, origin="batch-7"))
        out.append(c.schedule_many(items, origin="retry"))  # pending: returned as they are
        out.append(c.reschedule("a", deadline_ms=now + 90_000))
        out.append(c.notify("{c}k1"))  # c: one of two keys
        out.append(_same(c.get("c{c}")))
        out.append(c.notify("{b}kb"))  # b: completed
        out.append(c.notify("{c}k2"))  # c: completed
        out.append(c.cancel("e"))
        out.append(c.reschedule("f", deadline_ms=now + 90_000))  # far -> near
        out.append(c.reschedule("g", deadline_ms=now + 7 * 3_600_000))  # near -> far
        out.append(c.cancel("g"))
        shard = c.shard_of("d")
        store = c.shard_store(shard)
        epoch = store.acquire("w", 5_000).epoch
        out.append(store.fire("w", epoch, ["d"], ttl_ms=60_000).fired)
        out.append(c.schedule("d", deadline_ms=now - 5, payload="due"))  # decided: retained
        out.append(c.schedule("d", deadline_ms=now + 60_000, payload="again", rearm=True))
        out.append([_same(c.get(i)) for i in ("a", "b{b}", "c{c}", "d", "e", "f", "g", "nope")])
        out.append(sorted((o.id, o.outcome, o.payload) for o in c.all_outcomes()))
    assert seen["old"] == seen["new"]
    # and the records really were in each format
    assert isinstance(raw_record(old, "a"), dict) and isinstance(raw_record(new, "a"), list)
    assert isinstance(raw_result(old, "b{b}"), dict) and isinstance(raw_result(new, "b{b}"), list)
    for c in (old, new):
        completed = c.get("c{c}")
        assert completed is not None and completed.got == ("{c}k1", "{c}k2")


@pytest.mark.parametrize("version", [1, 2])
def test_migrate_moves_new_timers_to_the_compact_format(
    redis_server: RedisServer, namespace: str, version: int
) -> None:
    """After `migrate` new timers are compact and new outcomes go to the results table;
    the old timers keep their format and still fire, cancel and answer get, each decided
    exactly once; an outcome retained before (a P:r:<id> string) still answers get and
    still makes a repeated schedule an idempotent retry."""
    c = make_client(redis_server, namespace, version)
    now = server_now_ms(c.redis)
    due = now - 5_000  # in a durable bucket that has ended: the sweep takes it
    c.schedule_many([{"id": f"old{i}", "deadline_ms": due, "payload": i} for i in range(20)])
    c.schedule("old-later", delay_ms=60_000, payload="later")
    c.schedule("old-done", delay_ms=60_000, payload="done")
    assert c.cancel("old-done")
    old_done = c.redis.get(c.keys.shard(c.shard_of("old-done")).result("old-done"))
    assert old_done is not None  # retained as a string, as formats 1 and 2 do
    assert c.migrate() == (version, FORMAT_VERSION)
    assert c.meta.version == FORMAT_VERSION
    assert c.migrate() == (FORMAT_VERSION, FORMAT_VERSION)  # again: nothing to do
    again = c.schedule("old-done", delay_ms=60_000, payload="done")
    assert (again.created, again.state) == (False, "cancelled")
    assert not c.cancel("old-done")
    info = c.get("old-done")
    assert info is not None and (info.state, info.payload) == ("cancelled", "done")
    c.schedule_many([{"id": f"new{i}", "deadline_ms": due, "payload": i} for i in range(20)])
    assert isinstance(raw_record(c, "old0"), dict if version == 1 else list)
    assert isinstance(raw_record(c, "new0"), list)
    fired = []
    for shard in range(SHARDS):
        store = c.shard_store(shard)
        epoch = store.acquire("w", 5_000).epoch
        fired += store.sweep("w", epoch, ttl_ms=60_000, limit=1000).fired
    ids = sorted(tid for tid, _ in fired)
    assert ids == sorted([f"old{i}" for i in range(20)] + [f"new{i}" for i in range(20)])
    assert c.cancel("old-later") and not c.cancel("old-later")
    got = {i: c.get(i) for i in ("old3", "new3", "old-later")}
    assert {i: (g.state, g.payload) for i, g in got.items() if g} == {
        "old3": ("expired", 3), "new3": ("expired", 3), "old-later": ("cancelled", "later"),
    }  # fmt: skip
    assert sorted(o.id for o in c.all_outcomes()) == sorted([*ids, "old-later", "old-done"])
    new3 = c.keys.shard(c.shard_of("new3"))
    assert retained(c.redis, new3, "new3")[0] is not None and not c.redis.exists(
        new3.result("new3")
    )  # decided after the migration: in the results table, not a key of its own
    c.close()


def test_migrate_from_3_writes_two_field_entries_and_reads_both(
    redis_server: RedisServer, namespace: str
) -> None:
    """From format 3, migrate changes the outcome stream entries written after it: the
    id and the outcome record (the bytes the results table holds), not five fields. A
    stream holding both is read whole: by all_outcomes, by a consumer group, and as a
    dead letter of an entry from before, redelivered after and handled again."""
    c = make_client(redis_server, namespace, 3)
    now = server_now_ms(c.redis)
    c.schedule_many([{"id": f"b{i}", "deadline_ms": now + 60_000, "payload": {"n": i}}
                     for i in range(3)])  # fmt: skip
    for i in range(3):
        assert c.cancel(f"b{i}")
    handled: list[tuple[str, object, int]] = []
    failing = {"b0"}

    def handler(o: Outcome) -> None:
        handled.append((o.id, o.payload, o.deadline_ms))
        if o.id in failing:
            raise ValueError("not now")

    h = Handlers(c, group="g", max_attempts=1, backoff=Backoff(initial_s=0.02, max_s=0.05))
    h.add("cancelled", handler)
    h.add("expired", handler)
    assert h.run(stop_when_idle=True)
    (letter,) = c.dead_letters()
    assert letter.outcome is not None and (letter.outcome.id, letter.outcome.payload) == (
        "b0", {"n": 0},
    )  # fmt: skip
    assert c.migrate() == (3, FORMAT_VERSION)
    assert all(c.redis.hget(c.keys.shard(s).results_table, "E") == b"1" for s in range(SHARDS))
    c.schedule_many([{"id": "a0", "deadline_ms": now + 60_000, "payload": [0]},
                     {"id": "a1", "deadline_ms": now - 5, "payload": None}])  # fmt: skip
    assert c.cancel("a0")
    store = c.shard_store(c.shard_of("a1"))
    assert store.fire("w", store.acquire("w", 5_000).epoch, ["a1"], ttl_ms=60_000).fired == ["a1"]
    entries = stream_entries(c)
    assert set(entries["b1"]) == {b"id", b"outcome", b"deadline", b"decided", b"payload"}
    for tid in ("a0", "a1"):
        assert entries[tid] == {b"i": tid.encode(), b"r": result_bytes(c, tid)}
    got = {o.id: (o.outcome, o.payload, o.deadline_ms) for o in c.all_outcomes()}
    assert got == {
        **{f"b{i}": ("cancelled", {"n": i}, now + 60_000) for i in range(3)},
        "a0": ("cancelled", [0], now + 60_000), "a1": ("expired", None, now - 5),
    }  # fmt: skip
    failing.clear()
    before = len(handled)
    assert c.redeliver(letter.ref) is not None
    assert h.run(stop_when_idle=True)
    assert sorted(handled[before:], key=str) == sorted(
        [("b0", {"n": 0}, now + 60_000), ("a0", [0], now + 60_000), ("a1", None, now - 5)],
        key=str,
    )  # the old entry put back, and the new ones, through the same group
    assert c.dead_letters() == []
    c.close()


def test_outcomes_of_the_old_layout_are_read_only_until_they_have_expired(
    redis_server: RedisServer, namespace: str
) -> None:
    """migrate keeps reading P:r:<id> strings until result_ttl after it (when Redis has
    expired them); past that time a string left there is not looked for."""
    c = make_client(redis_server, namespace, 2)
    c.schedule("gone", delay_ms=60_000)
    assert c.cancel("gone")
    c.migrate()
    sk = c.keys.shard(c.shard_of("gone"))
    until = int(c.redis.hget(sk.results_table, "G"))
    assert until >= server_now_ms(c.redis) + c.settings.result_ttl_ms - 60_000
    assert c.get("gone") is not None
    c.redis.hset(sk.results_table, "G", server_now_ms(c.redis) - 1)
    assert c.get("gone") is None
    c.close()


def test_init_and_migrate_never_reset_a_results_table(client: TimerClient) -> None:
    """A second init (or a migrate) of a new namespace leaves each table's state."""
    for i in range(200):
        client.schedule(f"t{i}", delay_ms=60_000)
        client.cancel(f"t{i}")
    state = [client.redis.hgetall(client.keys.shard(s).results_table) for s in range(SHARDS)]
    assert sum(int(st[b"N"]) for st in state) == 200
    client.init(shards=SHARDS)
    assert client.migrate() == (FORMAT_VERSION, FORMAT_VERSION)
    assert [client.redis.hgetall(client.keys.shard(s).results_table)
            for s in range(SHARDS)] == state  # fmt: skip


def test_a_newer_format_is_refused_and_nothing_written(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str
) -> None:
    """A namespace a newer tickwheel made is refused with what to do; nothing is written."""
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=SHARDS)
    redis_client.hset(c.keys.meta, "version", FORMAT_VERSION + 1)
    before = namespace_keys(redis_client, namespace)
    late = TimerClient.from_url(redis_server.url, namespace)
    with pytest.raises(ConfigError, match=r"newer tickwheel.*upgrade tickwheel"):
        late.schedule("x", delay_ms=1_000)
    with pytest.raises(ConfigError, match="newer tickwheel"):
        late.migrate()
    assert namespace_keys(redis_client, namespace) == before
    late.close()
    c.close()
