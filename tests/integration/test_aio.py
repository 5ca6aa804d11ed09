"""AsyncTimerClient on the real server: the same results as TimerClient, awaited.

Each test drives its coroutine with asyncio.run (no plugin needed) and checks what it
wrote through the sync client, so both clients are held to one contract.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
import redis

from timer import (
    ConfigError,
    DuplicateTimer,
    InvalidInput,
    StoreError,
    Timer,
    TimerClient,
    TimerNotFound,
    WaitTimeout,
)
from timer.aio import AsyncTimerClient
from timer.testing import RedisServer, free_port

from .conftest import namespace_keys

pytestmark = pytest.mark.redis

T = TypeVar("T")


def with_async(client: TimerClient, body: Callable[[AsyncTimerClient], Awaitable[T]]) -> T:
    """Run body with an AsyncTimerClient on the same server and namespace as client."""

    async def main() -> T:
        async with await AsyncTimerClient.connect(client.where, client.namespace) as ac:
            return await body(ac)

    return asyncio.run(main())


def test_lifecycle_matches_the_sync_client(client: TimerClient) -> None:
    async def body(ac: AsyncTimerClient) -> None:
        t = await ac.schedule("job:{1}", 30_000, watch=["job:{1}:done"], payload={"job": 1})
        assert (t.created, t.state, t.shard) == (True, "pending", client.shard_of("job:{1}"))
        again = await ac.schedule("job:{1}", 30_000, watch=["job:{1}:done"], payload={"job": 1})
        assert again.created is False and again.deadline_ms == t.deadline_ms
        with pytest.raises(DuplicateTimer, match="its payload and watch differ"):
            await ac.schedule("job:{1}", 30_000, payload={"job": 2})
        info = await ac.get("job:{1}")
        assert info is not None and info.payload == {"job": 1} and info.watch == ("job:{1}:done",)
        assert await ac.notify("job:{1}:done") == 1
        assert await ac.notify("job:{1}:done") == 0  # safe to repeat
        out = await ac.wait("job:{1}", timeout=5)
        assert (out.outcome, out.payload) == ("completed", {"job": 1})

        await ac.schedule("job:{2}", 60_000)
        moved = await ac.reschedule("job:{2}", 120_000)
        assert moved is not None and moved.deadline_ms > t.deadline_ms
        assert await ac.cancel("job:{2}") is True
        assert await ac.cancel("job:{2}") is False
        assert await ac.reschedule("job:{2}", 1_000) is None
        await ac.schedule("job:{3}", 60_000)
        assert await ac.complete("job:{3}") is True
        with pytest.raises(TimerNotFound):
            await ac.cancel("nobody")
        assert await ac.get("nobody") is None

    with_async(client, body)
    # what the async client wrote, read back through the sync one
    states = {tid: client.get(tid) for tid in ("job:{1}", "job:{2}", "job:{3}")}
    assert {tid: i.state for tid, i in states.items() if i} == {
        "job:{1}": "completed",
        "job:{2}": "cancelled",
        "job:{3}": "completed",
    }
    assert client.outcomes_total() == 3


def test_schedules_match_the_sync_client(client: TimerClient) -> None:
    """The asyncio client's recurring schedules: the same operations, awaited."""

    async def body(ac: AsyncTimerClient) -> None:
        made = await ac.schedules.create("nightly", cron="0 2 * * *", tz="Europe/Paris")
        assert made.state == "active" and made.armed is not None
        with pytest.raises(DuplicateTimer):
            await ac.schedules.create("nightly", every="1m")
        assert [s.name for s in await ac.schedules.list()] == ["nightly"]
        assert await ac.schedules.pause("nightly")
        paused = await ac.schedules.get("nightly")
        assert paused is not None and paused.state == "paused" and paused.armed is None
        resumed = await ac.schedules.resume("nightly")
        assert resumed is not None and resumed.armed == made.armed
        changed = await ac.schedules.update("nightly", every="1h")
        assert changed.spec.recurrence.every_ms == 3_600_000
        assert await ac.schedules.delete("nightly")
        assert await ac.schedules.get("nightly") is None

    with_async(client, body)
    assert client.schedules.list() == []


def test_schedule_many_puts_each_error_in_its_slot_and_writes_the_rest(
    client: TimerClient,
) -> None:
    items: list[Any] = [{"id": f"m:{i}", "delay_ms": 60_000} for i in range(2500)]
    items[7] = {"id": "bad", "delay_ms": -1}
    items[9] = "not a mapping"

    async def body(ac: AsyncTimerClient) -> list[Any]:
        return await ac.schedule_many(items, origin="job/0")

    results = with_async(client, body)
    assert len(results) == len(items)
    assert isinstance(results[7], InvalidInput) and isinstance(results[9], InvalidInput)
    made = [r for r in results if isinstance(r, Timer)]
    assert len(made) == 2498 and all(r.created and r.origin == "job/0" for r in made)
    assert client.get("bad") is None
    assert sum(s["pending"] for s in client.stats()["shards"]) == 2498


def test_a_pipeline_after_the_server_lost_its_scripts_loads_them_and_runs_once(
    client: TimerClient,
) -> None:
    """Pipelined script calls are plain EVALSHA (no SCRIPT EXISTS a pipeline): a server
    that lost its scripts (a restart) answers NOSCRIPT, and those calls run again once
    loaded, each timer made once."""
    items = [{"id": f"flush:{i}", "delay_ms": 60_000} for i in range(300)]

    async def body(ac: AsyncTimerClient) -> list[Any]:
        await ac.schedule("warm", 60_000)  # the scripts are loaded and known...
        client.redis.script_flush()  # ...then the server loses them
        return await ac.schedule_many(items)

    results = with_async(client, body)
    assert all(isinstance(r, Timer) and r.created for r in results)
    assert sum(s["pending"] for s in client.stats()["shards"]) == 301


def test_wait_lets_the_loop_run_while_another_task_completes_the_timer(
    client: TimerClient,
) -> None:
    async def body(ac: AsyncTimerClient) -> tuple[Any, int]:
        await ac.schedule("w:{1}", 60_000, watch=["w:{1}:done"])
        return await asyncio.gather(ac.wait("w:{1}", timeout=10), ac.notify("w:{1}:done"))

    outcome, completed = with_async(client, body)
    assert completed == 1 and outcome.outcome == "completed"

    async def times_out(ac: AsyncTimerClient) -> None:
        await ac.schedule("w:{2}", 60_000)
        with pytest.raises(WaitTimeout):
            await ac.wait("w:{2}", timeout=0.05)

    with_async(client, times_out)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda ac: ac.schedule("", 1_000), "must not be empty"),
        (lambda ac: ac.schedule("x", -5), "delay_ms must be between"),
        (lambda ac: ac.schedule("x", 1_000, deadline_ms=5), "exactly one of"),
        (lambda ac: ac.schedule("j:{1}", 1_000, watch=["j:{2}:k"]), "same hash tag"),
        (lambda ac: ac.schedule("x", 1_000, payload=object()), "msgpack"),
        (lambda ac: ac.reschedule("x", "soon"), "whole number"),
        (lambda ac: ac.notify(""), "must not be empty"),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(
    client: TimerClient,
    redis_client: redis.Redis,
    call: Callable[[AsyncTimerClient], Awaitable[Any]],
    message: str,
) -> None:
    before = namespace_keys(redis_client, client.namespace)

    async def body(ac: AsyncTimerClient) -> None:
        with pytest.raises(InvalidInput, match=message):
            await call(ac)

    with_async(client, body)
    assert namespace_keys(redis_client, client.namespace) == before


def test_connect_refuses_an_uninitialised_namespace(redis_server: RedisServer) -> None:
    with pytest.raises(ConfigError, match="`tickwheel --namespace never-initialised init` once"):
        asyncio.run(AsyncTimerClient.connect(redis_server.url, "never-initialised"))


def test_connect_to_nothing_names_the_host_not_the_password() -> None:
    port = free_port()
    url = f"redis://user:s3cret@127.0.0.1:{port}/0"
    with pytest.raises(StoreError) as err:
        asyncio.run(AsyncTimerClient.connect(url, "x", socket_timeout_s=1))
    assert f"127.0.0.1:{port}" in str(err.value) and "s3cret" not in str(err.value)


def test_outcomes_through_a_group_acked_once_and_reclaimed_when_left(
    client: TimerClient, redis_client: redis.Redis
) -> None:
    """Each outcome reaches the group once; what a consumer left unacked is reclaimed."""
    ids = [f"o:{i}" for i in range(30)]
    for tid in ids:
        client.schedule(tid, delay_ms=60_000)
        assert client.cancel(tid)

    async def first(ac: AsyncTimerClient) -> list[str]:
        seen = []
        async for o in ac.outcomes("handlers", "h1", stop_when_idle=True):
            seen.append(o.id)
            if len(seen) <= 20:
                await o.aack()  # the other 10 stay pending, as if h1 died
        return seen

    async def second(ac: AsyncTimerClient) -> list[str]:
        seen = []
        async for o in ac.outcomes("handlers", "h2", reclaim_idle_ms=0, stop_when_idle=True):
            seen.append(o.id)
            await o.aack()
        return seen

    first_seen = with_async(client, first)
    assert sorted(first_seen) == sorted(ids)
    assert sorted(with_async(client, second)) == sorted(first_seen[20:])
    assert with_async(client, second) == []  # all acked: nothing left for anyone
    streams = [client.keys.shard(s).outcomes for s in range(client.meta.shards)]
    assert sum(redis_client.xpending(s, "handlers")["pending"] for s in streams) == 0


def test_ack_from_the_wrong_client_kind_says_which_to_use(client: TimerClient) -> None:
    client.schedule("k:1", delay_ms=60_000)
    client.cancel("k:1")

    async def body(ac: AsyncTimerClient) -> None:
        async for o in ac.outcomes("g", "c", stop_when_idle=True):
            with pytest.raises(TypeError, match=r"await o\.aack"):
                o.ack()
            await o.aack()

    with_async(client, body)
    client.schedule("k:2", delay_ms=60_000)
    client.cancel("k:2")
    (o,) = list(client.outcomes("g2", "c", stop_when_idle=True))[-1:]
    with pytest.raises(TypeError, match=r"call o\.ack\(\)"):
        asyncio.run(o.aack())


def test_a_consumers_poll_hands_out_at_most_count_and_the_rest_next(client: TimerClient) -> None:
    """`poll(1)` handed out 8 (each of the shards asked for its share, rounded up), and so
    did `GET …/outcomes?count=1` (trial 23): at most `count` now, what was read past it
    first at the next poll, each outcome once."""
    ids = {f"c:{{{i}}}" for i in range(24)}  # over every shard
    for tid in ids:
        client.schedule(tid, delay_ms=60_000)
        client.cancel(tid)

    async def body(ac: AsyncTimerClient) -> list[list[str]]:
        consumer = ac.consumer("counted", "c1")
        batches: list[list[str]] = []
        while True:
            got = await consumer.poll(count=5, wait_ms=0)
            if not got:
                return batches
            batches.append([o.id for o in got])
            await consumer.ack([f"{o.shard}/{o.entry_id}" for o in got])

    batches = with_async(client, body)
    assert all(len(b) <= 5 for b in batches), batches
    assert sorted(i for b in batches for i in b) == sorted(ids)  # each once


def test_a_poll_reads_no_more_than_it_hands_out_so_the_group_shares_the_rest(
    client: TimerClient,
) -> None:
    """With `count=1` a poll read one new outcome from every shard and kept the rest for
    its own next poll: another consumer of the group got them only after
    `reclaim_idle_ms` (trial 24). New outcomes are read shard by shard, up to `count`."""
    ids = {f"s:{{{i}}}" for i in range(24)}  # over every shard
    for tid in ids:
        client.schedule(tid, delay_ms=60_000)
        client.cancel(tid)

    async def body(ac: AsyncTimerClient) -> tuple[list[str], list[str]]:
        one, two = ac.consumer("shared", "c1"), ac.consumer("shared", "c2")
        a = await one.poll(count=1, wait_ms=0)
        b = await two.poll(count=1, wait_ms=0)
        return [o.id for o in a], [o.id for o in b]

    a, b = with_async(client, body)
    assert len(a) == len(b) == 1 and a != b, (a, b)
    (info,) = [g for g in client.groups() if g.name == "shared"]
    assert (info.pending, info.lag) == (2, len(ids) - 2), info


def test_an_outcome_given_back_unsent_is_not_an_attempt(client: TimerClient) -> None:
    """give_back (an event stream whose client left) hands the outcome to the group at
    once with the same attempt number; retry counts one, as before."""
    client.schedule("gb:1", delay_ms=60_000)
    client.cancel("gb:1")

    async def body(ac: AsyncTimerClient) -> list[int]:
        consumer = ac.consumer("giving", "c1")
        attempts = []
        for settle in ("give_back", "give_back", "retry", "ack"):
            (o,) = await consumer.poll(count=1, wait_ms=2000)
            attempts.append(o.attempt)
            ref = f"{o.shard}/{o.entry_id}"
            if settle == "give_back":
                assert await consumer.give_back(ref)
            elif settle == "retry":
                assert await consumer.retry(ref, 0)
            else:
                await consumer.ack([ref])
        assert not await consumer.give_back(ref)  # acknowledged: no longer pending
        return attempts

    assert with_async(client, body) == [1, 1, 1, 2]


def test_a_consumers_long_poll_waits_its_time_when_nothing_comes(client: TimerClient) -> None:
    """`poll(wait_ms=…)` (and `GET …/outcomes?wait_ms=`) returned empty after about 0.3 s,
    the reader's next claim, whatever the wait asked (trial 23): it waits the time
    asked. (A lower bound: no machine makes a wait shorter.)"""

    async def body(ac: AsyncTimerClient) -> tuple[list[object], float]:
        consumer = ac.consumer("waiting", "c1")
        await consumer.poll(count=1, wait_ms=0)  # the group made
        began = asyncio.get_running_loop().time()
        got = await consumer.poll(count=1, wait_ms=1500)
        return list(got), asyncio.get_running_loop().time() - began

    got, waited = with_async(client, body)
    assert got == [] and waited >= 1.5, waited
