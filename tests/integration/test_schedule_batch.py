"""schedule_many sends one script call per shard batch: it must behave exactly like its
timers scheduled one by one (the oracle), and publish one event per call."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.conftest import wait_for
from timer import DuplicateTimer, Timer, TimerClient, TimerError
from timer.durable.model.entries import parse_events
from timer.durable.model.models import MAX_DELAY_MS
from timer.testing import RedisServer

from .conftest import SHARDS, server_now_ms

FAR = MAX_DELAY_MS + 3_600_000  # beyond the default max_delay_ms: TOOFAR


@pytest.fixture
def oracle(redis_server: RedisServer, namespace: str) -> Iterator[TimerClient]:
    """A second namespace on the same server, scheduled one timer per call."""
    c = TimerClient.from_url(redis_server.url, f"{namespace}-oracle")
    c.init(shards=SHARDS)
    try:
        yield c
    finally:
        c.close()


def items_for(now_ms: int) -> list[dict[str, Any]]:
    at = now_ms + 3_600_000
    return [
        {"id": "a:{1}", "delay_ms": 60_000, "payload": {"n": 1}},
        {"id": "a:{1}", "delay_ms": 60_000, "payload": {"n": 1}},  # same again: pending
        {"id": "a:{1}", "delay_ms": 60_000, "payload": {"n": 2}},  # other payload: CONFLICT
        {"id": "w:{2}", "delay_ms": 60_000, "watch": ["w:{2}:x", "w:{2}:y"], "need": 2},
        {"id": "w:{2}", "delay_ms": 60_000, "watch": ["w:{2}:y"]},  # other watch list
        {"id": "t:{3}", "deadline_ms": at},
        {"id": "t:{3}", "deadline_ms": at + 1},  # other deadline: CONFLICT
        {"id": "far:{3}", "deadline_ms": now_ms + FAR},  # TOOFAR, the rest go on
        {"id": "old:{4}", "delay_ms": 60_000},  # pending before the batch: same
        {"id": "old:{5}", "delay_ms": 60_000, "payload": "new"},  # pending, other: CONFLICT
        {"id": "done:{6}", "delay_ms": 60_000},  # decided before: its outcome
        {"id": "again:{7}", "delay_ms": 60_000, "rearm": True},  # decided, re-armed
        {"id": "again:{7}", "delay_ms": 60_000, "rearm": True},  # ... and now pending
        *({"id": f"many:{{8}}:{i}", "delay_ms": 1_000 + i} for i in range(250)),
        {"id": "many:{8}:0", "delay_ms": 1_000},  # a duplicate in a later call
    ]


def prepare(c: TimerClient) -> None:
    c.schedule("old:{4}", delay_ms=60_000)
    c.schedule("old:{5}", delay_ms=60_000, payload="old")
    for tid in ("done:{6}", "again:{7}"):
        c.schedule(tid, delay_ms=60_000)
        c.cancel(tid)


def summary(result: Timer | TimerError) -> tuple[Any, ...]:
    if isinstance(result, TimerError):  # a conflict: with the fields that differ
        return (type(result).__name__, getattr(result, "differ", None), None)
    return (result.id, result.state, result.created, result.origin)


@pytest.mark.parametrize("pipeline_batch", [1000, 7], ids=["one-pipeline", "sent-ahead"])
def test_a_batch_behaves_like_its_timers_one_by_one(
    client: TimerClient, oracle: TimerClient, redis_server: RedisServer, pipeline_batch: int
) -> None:
    """Duplicates, conflicts, TOOFAR, pending, decided, re-armed: every result and every
    stored timer is what one schedule call per timer gives. With small pipelines, many
    are sent ahead of their replies: duplicates and conflicts then span pipelines."""
    client.settings = dataclasses.replace(client.settings, pipeline_batch=pipeline_batch)
    r = redis.Redis.from_url(redis_server.url)
    items = items_for(server_now_ms(r))
    for c in (client, oracle):
        prepare(c)
    batch = client.schedule_many(items, origin="job-1")
    one_by_one: list[Any] = []
    for item in items:
        fields = {k: v for k, v in item.items() if k != "id"}
        try:
            one_by_one.append(oracle.schedule(item["id"], **fields))
        except TimerError as exc:
            one_by_one.append(exc)
    # schedule() has no origin; everything else must agree
    assert [summary(x)[:3] for x in batch] == [summary(x)[:3] for x in one_by_one]
    assert isinstance(batch[2], DuplicateTimer) and type(batch[7]).__name__ == "InvalidInput"
    differ = {i: x.differ for i, x in enumerate(batch) if isinstance(x, DuplicateTimer)}
    assert differ == {2: ("payload",), 4: ("watch", "need"), 6: ("deadline",), 9: ("payload",)}
    created = [x for x in batch if not isinstance(x, TimerError) and x.created]
    assert created and all(x.origin == "job-1" for x in created)
    for tid in {item["id"] for item in items}:
        mine, theirs = client.get(tid), oracle.get(tid)
        if mine is None or theirs is None:
            assert mine is theirs
            continue
        assert (mine.state, mine.payload, mine.watch, mine.need) == (
            theirs.state,
            theirs.payload,
            theirs.watch,
            theirs.need,
        )
        if tid == "t:{3}":
            assert mine.deadline_ms == theirs.deadline_ms
    assert client.stats()["pending"] == oracle.stats()["pending"] == 256
    # The watch index and the durable buckets were written: notify and cancel work.
    assert client.notify("w:{2}:x") == 0 and client.notify("w:{2}:y") == 1
    assert client.cancel("many:{8}:249") is True
    assert client.get("old:{5}").payload == "old"  # type: ignore[union-attr]


def test_one_event_per_call_names_every_timer_it_created(
    client: TimerClient, redis_server: RedisServer
) -> None:
    """A batch of one shard publishes one event; the worker's parser reads every timer."""
    r = redis.Redis.from_url(redis_server.url)
    shard = client.shard_of("{7}")
    pubsub = r.pubsub()  # type: ignore[no-untyped-call,unused-ignore]  # typed from redis-py 8.2
    pubsub.subscribe(client.keys.shard(shard).events)
    assert pubsub.get_message(timeout=5) is not None  # the subscribe confirmation
    ids = [f"job {i} é:{{7}}" for i in range(5)]  # spaces and non-ASCII in ids
    res = client.schedule_many([{"id": i, "delay_ms": 60_000} for i in [*ids, ids[0]]])
    assert [x.created for x in res] == [True] * 5 + [False]  # type: ignore[union-attr]
    client.schedule("sentinel:{7}", delay_ms=60_000)  # one event after the batch's
    messages: list[bytes] = []

    def sentinel_seen() -> bool:
        message = pubsub.get_message(timeout=0.05)
        if message is not None and message["type"] == "message":
            messages.append(message["data"])
        return bool(messages) and messages[-1].endswith(b" sentinel:{7}")

    wait_for(sentinel_seen, timeout_s=5, what="the sentinel's event")
    assert len(messages) == 2, f"one event for the batch, then the sentinel's: {messages!r}"
    events = parse_events(messages[0].decode("utf-8", "surrogatepass"))
    assert [(e.kind, e.timer_id) for e in events] == [("scheduled", i) for i in ids]
    assert [e.deadline_ms for e in events] == [x.deadline_ms for x in res[:5]]  # type: ignore[union-attr]
    pubsub.close()
