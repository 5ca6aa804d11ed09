"""Finding timers by id pattern, state and deadline, page by page with bounded work, and
acting on a selection in bulk (``client.timers``), against the real test server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from tests.integration.conftest import namespace_keys
from timer import InvalidInput, TimerClient
from timer.aio import AsyncTimerClient
from timer.durable.timers.finding import Page

HOUR = 3_600_000


def pages(c: TimerClient, match: str, count: int, **sel: Any) -> list[Page]:
    out, cursor = [], None
    while True:
        page = c.timers.find(match, cursor=cursor, count=count, **sel)
        out.append(page)
        if page.cursor is None:
            return out
        cursor = page.cursor


def fire_now(c: TimerClient, ids: list[str]) -> None:
    """Expire these (due) timers as a leader would: the fire script, fenced."""
    by_shard: dict[int, list[str]] = {}
    for tid in ids:
        by_shard.setdefault(c.shard_of(tid), []).append(tid)
    for shard, mine in by_shard.items():
        store = c.shard_store(shard)
        grant = store.acquire("finder-test", 10_000)
        assert len(store.fire("finder-test", grant.epoch, mine, ttl_ms=HOUR).fired) == len(mine)
        store.release("finder-test", grant.epoch)


def test_pages_cover_every_match_once_with_bounded_work(client: TimerClient) -> None:
    """2,400 pending timers over 4 shards (hashes past the listpack size, so HSCAN pages
    for real): the pages of 'job:*' hold each job once and nothing else, and no page
    scans much more than its count."""
    now = client.server_time_ms()
    jobs = [f"job:{i}" for i in range(2_000)]
    client.schedule_many([{"id": t, "deadline_ms": now + HOUR + i} for i, t in enumerate(jobs)])
    client.schedule_many([{"id": f"other:{i}", "delay_ms": HOUR} for i in range(400)])
    found = pages(client, "job:*", 100)
    ids = [t.id for p in found for t in p.timers]
    assert sorted(ids) == sorted(jobs)  # each once, only these
    assert len(found) > 10 and all(p.examined <= 400 for p in found), [p.examined for p in found]
    assert all(
        t.state == "pending" and t.deadline_ms >= now + HOUR for p in found for t in p.timers
    )


def test_state_and_deadline_select(client: TimerClient) -> None:
    """Pending, expired, cancelled and completed are told apart (the decided ones from the
    results table), and a deadline range keeps only what lies in it, bounds included."""
    now = client.server_time_ms()
    client.schedule_many(
        [
            {"id": f"s:{{{i}}}", "deadline_ms": now - 1_000 + i, "watch": [f"s:{{{i}}}:k"]}
            for i in range(40)
        ]
    )
    fire_now(client, [f"s:{{{i}}}" for i in range(10)])
    for i in range(10, 20):
        assert client.cancel(f"s:{{{i}}}")
    for i in range(20, 30):
        assert client.notify(f"s:{{{i}}}:k") == 1
    states = {t.id: t.state for t in client.timers.scan("s:*", state="any", count=50)}
    assert states == {
        f"s:{{{i}}}": ("expired", "cancelled", "completed", "pending")[i // 10] for i in range(40)
    }
    assert client.timers.count("s:*", state="decided") == 30
    assert client.timers.count("s:*", state=["cancelled", "completed"]) == 20
    assert client.timers.count("s:{3?}") == 10  # s:{30} .. s:{39}, pending
    window = {
        t.id
        for t in client.timers.scan(
            "s:*", state="any", deadline_from_ms=now - 995, deadline_to_ms=now - 990
        )
    }
    assert window == {f"s:{{{i}}}" for i in range(5, 11)}
    assert client.timers.count("nothing-like-this:*", state="any") == 0


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"match": ""}, "non-empty glob"),
        ({"match": 7}, "non-empty glob"),
        ({"match": "\udc80"}, "surrogate"),
        ({"match": "x" * 1025}, "at most 1024"),
        ({"state": "late"}, "unknown state"),
        ({"state": [["pending"]]}, "unknown state"),
        ({"state": []}, "at least one"),
        ({"deadline_from_ms": -1}, "or later"),
        ({"deadline_from_ms": 5, "deadline_to_ms": 4}, "after"),
        ({"cursor": "p:99:0:0"}, "cursor"),
        ({"cursor": "anything"}, "cursor"),
        ({"count": 0}, "count"),
    ],
)
def test_bad_selections_are_refused_before_any_io(
    client: TimerClient, redis_client: redis.Redis, kw: dict[str, Any], message: str
) -> None:
    args = {"match": "*", **kw}
    before = namespace_keys(redis_client, client.namespace)
    with pytest.raises(InvalidInput, match=message):
        client.timers.find(args.pop("match"), **args)
    if set(kw) <= {"match", "deadline_from_ms", "deadline_to_ms", "count"}:  # what cancel takes
        with pytest.raises(InvalidInput):
            client.timers.cancel(
                kw.get("match", "*"),
                count=kw.get("count", 1000),
                deadline_from_ms=kw.get("deadline_from_ms"),
                deadline_to_ms=kw.get("deadline_to_ms"),
            )
    assert namespace_keys(redis_client, client.namespace) == before


def test_bulk_cancel_dry_run_then_once_each(client: TimerClient) -> None:
    """A dry run counts and writes nothing; the cancel decides each selected timer once
    (one outcome each), leaves the others, and reports progress page by page."""
    now = client.server_time_ms()
    client.schedule_many(
        [{"id": f"tenant-7:{i}", "deadline_ms": now + HOUR + i} for i in range(1_500)]
    )
    client.schedule_many([{"id": f"tenant-8:{i}", "delay_ms": HOUR} for i in range(50)])
    outcomes_before = client.stats()["outcomes"]
    dry = client.timers.cancel("tenant-7:*", dry_run=True, count=200)
    assert (dry.selected, dry.done) == (1_500, 0)
    assert client.stats()["outcomes"] == outcomes_before
    seen: list[int] = []
    done = client.timers.cancel("tenant-7:*", count=200, progress=lambda b: seen.append(b.done))
    assert (done.selected, done.done, done.skipped, done.errors) == (1_500, 1_500, 0, [])
    assert len(seen) > 3 and seen == sorted(seen) and seen[-1] == 1_500
    assert client.timers.count("tenant-7:*") == 0 and client.timers.count("tenant-8:*") == 50
    assert client.timers.count("tenant-7:*", state="cancelled") == 1_500
    assert client.stats()["outcomes"] == outcomes_before + 1_500
    again = client.timers.cancel("tenant-7:*")
    assert (again.selected, again.done) == (0, 0)


def test_bulk_reschedule_moves_each_timer_once(client: TimerClient) -> None:
    """--by: every selected timer's deadline moves by exactly the shift, once, over many
    pages; --at: all to one deadline; a deadline range limits it."""
    now = client.server_time_ms()
    client.schedule_many([{"id": f"r:{i}", "deadline_ms": now + HOUR + i} for i in range(600)])
    moved = client.timers.reschedule("r:*", shift_ms=60_000, count=50)
    assert (moved.selected, moved.done) == (600, 600)
    after = {t.id: t.deadline_ms for t in client.timers.scan("r:*")}
    assert after == {f"r:{i}": now + HOUR + i + 60_000 for i in range(600)}
    cut = now + HOUR + 60_000 + 99
    early = client.timers.reschedule("r:*", deadline_ms=now + 2 * HOUR, deadline_to_ms=cut)
    assert early.done == 100
    assert (
        client.timers.count("r:*", deadline_from_ms=now + 2 * HOUR, deadline_to_ms=now + 2 * HOUR)
        == 100
    )
    with pytest.raises(InvalidInput, match="exactly one"):
        client.timers.reschedule("r:*", shift_ms=1, delay_ms=1)


def test_bulk_complete_and_notify(client: TimerClient) -> None:
    """complete decides the selection as completed; notify notifies each selected
    timer's watch keys (a timer needing two keys completes once both are)."""
    client.schedule_many([{"id": f"c:{{{i}}}", "delay_ms": HOUR} for i in range(30)])
    assert client.timers.complete("c:*").done == 30
    assert client.timers.count("c:*", state="completed") == 30
    client.schedule_many([
        {"id": f"n:{{{i}}}", "delay_ms": HOUR, "watch": [f"n:{{{i}}}:a", f"n:{{{i}}}:b"],
         "need": 2} for i in range(20)
    ])  # fmt: skip
    report = client.timers.notify("n:*")
    assert (report.selected, report.keys, report.done) == (20, 40, 20)
    assert client.timers.count("n:*", state="completed") == 20


def test_async_client_finds_and_acts(client: TimerClient) -> None:
    """AsyncTimerClient.timers: the same pages and the same bulk actions, awaited."""
    client.schedule_many([{"id": f"a:{i}", "delay_ms": HOUR} for i in range(120)])

    async def main() -> tuple[int, int]:
        ac = await AsyncTimerClient.connect(client.where, client.namespace)
        try:
            seen, cursor = 0, None
            while True:
                page = await ac.timers.find("a:*", cursor=cursor, count=30)
                seen += len(page.timers)
                if page.cursor is None:
                    break
                cursor = page.cursor
            done = await ac.timers.act("cancel", "a:*")
            return seen, done.done
        finally:
            await ac.aclose()

    assert asyncio.run(main()) == (120, 120)
