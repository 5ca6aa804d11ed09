"""schedule_many keeps one pipeline in flight while it validates the next (Send/Collect).

The blocking client writes a pipeline and returns before reading its replies, on one
connection it holds until the last reply is read, so the server runs the pipelines in
the order they were sent. These tests drive the two steps by hand on a real server: the
calls go out before they are collected; a broken connection runs the unread pipelines
again; an operation that fails with replies unread leaves no connection holding them;
a lost script cache is reloaded.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import msgpack
import redis

from tests.conftest import wait_for
from timer import DuplicateTimer, Timer, TimerClient
from timer.durable.model import steps
from timer.durable.timers.calls import parse_schedule, schedule_call
from timer.durable.timers.items import schedule_item_of
from timer.testing import RedisServer


def pipeline(client: TimerClient, *items: dict[str, Any]) -> steps.Pipeline:
    """One schedule call per item (the items may share a shard)."""
    ns = client._ns()
    calls = [schedule_call(ns, [schedule_item_of(ns, item)], "") for item in items]
    return steps.Pipeline(calls, errors_in_slots=True)


def results(client: TimerClient, p: steps.Pipeline, replies: list[Any]) -> list[Any]:
    ns = client._ns()
    out: list[Any] = []
    for call, reply in zip(p.calls, replies, strict=True):
        assert isinstance(call, steps.ScriptCall)
        tid = msgpack.unpackb(call.args[5], raw=True)[0].decode()  # its one timer's id
        item = schedule_item_of(ns, {"id": tid, "delay_ms": 60_000})
        out += [reply] if isinstance(reply, Exception) else parse_schedule(reply, [item], "")
    return out


def exists(r: redis.Redis, client: TimerClient, tid: str) -> bool:
    return bool(r.hexists(client.keys.shard(client.shard_of(tid)).timers, tid))


def send_two(
    client: TimerClient,
    r: redis.Redis,
    first: steps.Pipeline,
    second: steps.Pipeline,
    *,
    first_id: str,
    between: Callable[[], object],
) -> tuple[list[Any], list[Any]]:
    """Send ``first``, wait until the server ran it (``first_id`` exists) with nothing read
    yet, call ``between``, send ``second``, then collect both, oldest first."""

    def op() -> Generator[Any, Any, tuple[list[Any], list[Any]]]:
        t1 = yield steps.Send(first)
        wait_for(lambda: exists(r, client, first_id), what="the first pipeline to run")
        between()
        t2 = yield steps.Send(second)
        return (yield steps.Collect(t1)), (yield steps.Collect(t2))

    return client._run(op())


def test_a_pipeline_runs_before_it_is_collected_and_in_the_order_sent(
    client: TimerClient, redis_server: RedisServer
) -> None:
    r = redis.Redis.from_url(redis_server.url)
    first = pipeline(client, {"id": "ahead:1", "delay_ms": 60_000, "payload": "a"})
    second = pipeline(
        client,
        {"id": "ahead:1", "delay_ms": 60_000, "payload": "b"},  # the same id: CONFLICT
        {"id": "ahead:2", "delay_ms": 60_000},
    )

    def op() -> Generator[Any, Any, tuple[list[Any], list[Any]]]:
        t1 = yield steps.Send(first)
        # The server has run it although nothing was read yet.
        wait_for(lambda: exists(r, client, "ahead:1"), what="the first pipeline to run")
        t2 = yield steps.Send(second)
        wait_for(lambda: exists(r, client, "ahead:2"), what="the second pipeline to run")
        return (yield steps.Collect(t1)), (yield steps.Collect(t2))

    one, two = client._run(op())
    [made] = results(client, first, one)
    conflict, other = results(client, second, two)
    assert isinstance(made, Timer) and made.created
    assert isinstance(conflict, DuplicateTimer)  # the first pipeline ran first
    assert isinstance(other, Timer) and other.created
    assert client.get("ahead:1").payload == "a"  # type: ignore[union-attr]


def test_a_broken_connection_runs_the_unread_pipelines_again_in_order(
    client: TimerClient, redis_server: RedisServer
) -> None:
    r = redis.Redis.from_url(redis_server.url)
    first = pipeline(client, {"id": "broken:1", "delay_ms": 60_000})
    second = pipeline(client, {"id": "broken:2", "delay_ms": 60_000})

    def kill_every_other_connection() -> None:  # the held one too: the second is sent
        killed = r.client_kill_filter(_type="normal", skipme=True)  # on a dead connection
        assert killed >= 1

    one, two = send_two(
        client, r, first, second, first_id="broken:1", between=kill_every_other_connection
    )
    [res1] = results(client, first, one)  # read from what arrived, or run again: pending
    assert isinstance(res1, Timer) and res1.id == "broken:1" and res1.state == "pending"
    [res2] = results(client, second, two)  # run again on a new connection: created
    assert isinstance(res2, Timer) and res2.id == "broken:2" and res2.created
    assert client.stats()["pending"] == 2
    assert client.get("broken:2") is not None  # the pool is usable afterwards


def test_an_operation_failing_with_replies_unread_leaves_no_connection_holding_them(
    client: TimerClient,
) -> None:
    class Stop(Exception):
        pass

    sent = pipeline(client, *({"id": f"left:{i}", "delay_ms": 60_000} for i in range(20)))

    def op() -> Generator[Any, Any, None]:
        yield steps.Send(sent)
        raise Stop

    for _ in range(3):  # a connection left with those replies would answer the next call
        try:
            client._run(op())
        except Stop:
            pass
        else:
            raise AssertionError("the operation's error was swallowed")
        client.schedule("probe:1", delay_ms=60_000, payload={"k": 1})
        info = client.get("probe:1")
        assert info is not None and info.payload == {"k": 1} and info.state == "pending"
        assert client.server_time_ms() > 0


def test_a_lost_script_cache_is_reloaded_for_a_pipeline_sent_ahead(
    client: TimerClient, redis_server: RedisServer
) -> None:
    r = redis.Redis.from_url(redis_server.url)
    first = pipeline(client, {"id": "flush:1", "delay_ms": 60_000})
    second = pipeline(client, {"id": "flush:2", "delay_ms": 60_000})

    # the second is sent by SHA after the cache was flushed: NOSCRIPT
    one, two = send_two(client, r, first, second, first_id="flush:1", between=r.script_flush)
    for p, replies in ((first, one), (second, two)):
        [res] = results(client, p, replies)
        assert isinstance(res, Timer) and res.created
    assert client.stats()["pending"] == 2
