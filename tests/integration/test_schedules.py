"""Recurring schedules in Redis (#29): each occurrence fires once, never early, and arms
the next in the same script call; changes, pauses and outages keep that true."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from tests.conftest import fresh_client, wait_for
from timer import (
    DuplicateTimer,
    InvalidInput,
    Outcome,
    ScheduleNotFound,
    TimerClient,
)
from timer.durable.schedules.records import Plan, occurrence_name
from timer.testing import RedisServer
from timer.worker import Worker

from .conftest import namespace_keys, server_now_ms
from .test_worker import all_outcomes, make_worker

pytestmark = pytest.mark.redis


@pytest.fixture
def c(redis_server: RedisServer, namespace: str) -> Iterator[TimerClient]:
    with fresh_client(redis_server, namespace, 4, bucket_ms=100) as client:
        yield client


def nominal(o: Outcome) -> int:
    found = occurrence_name(o.id)
    assert found is not None, o.id
    return found[1]


def run_until(
    w: Worker, c: TimerClient, outs: list[Outcome], done: Callable[[], bool], what: str,
    *, timeout: float = 30,
) -> None:  # fmt: skip
    """Worker rounds, collecting the outcomes into ``outs``, until ``done()``."""

    def round_done() -> bool:
        w.run_once()
        outs.extend(all_outcomes(c))
        return done()

    wait_for(round_done, timeout, what)


def fire_until(w: Worker, c: TimerClient, outs: list[Outcome], n: int, what: str) -> None:
    run_until(w, c, outs, lambda: len(outs) >= n, what)


def test_each_occurrence_fires_once_on_time_and_arms_the_next(c: TimerClient) -> None:
    before = server_now_ms(c.redis)
    info = c.schedules.create("tick", every="1s", payload={"job": "ping"})
    first = (before // 1000 + 1) * 1000
    assert info.armed in (f"{{tick}}@{first}", f"{{tick}}@{first + 1000}")
    assert info.state == "active" and info.next_ms is not None and info.fired == 0
    w = make_worker(c, "w1")
    outs: list[Outcome] = []
    try:
        fire_until(w, c, outs, 4, "four occurrences")
    finally:
        w.close()
    times = [nominal(o) for o in outs]
    assert Counter(times).most_common(1)[0][1] == 1  # each once
    assert times == list(range(times[0], times[0] + 1000 * len(times), 1000))  # none missed
    assert all(o.decided_ms >= nominal(o) and o.deadline_ms == nominal(o) for o in outs)
    assert all(o.payload == {"job": "ping"} and o.outcome == "expired" for o in outs)
    after = c.schedules.get("tick")
    assert after is not None and after.fired >= len(outs) and after.last_ms is not None
    assert after.armed == f"{{tick}}@{after.last_ms + 1000}"  # the next one is armed


def test_a_swept_occurrence_is_planned_by_its_leader(c: TimerClient) -> None:
    """The sweep decides an occurrence without a plan: the schedule waits in the shard's
    queue and its leader arms the next; never two armed."""
    info = c.schedules.create("swept", every="1s")
    assert info.armed is not None and info.next_ms is not None
    store = c.shard_store(info.shard)
    grant = store.acquire("w0", 60_000)
    wait_for(lambda: server_now_ms(c.redis) > info.next_ms + 200, 5, "the occurrence to end")  # type: ignore[operator]
    swept = store.sweep("w0", grant.epoch, ttl_ms=60_000, limit=100)
    assert [tid for tid, _ in swept.fired] == [info.armed] and swept.queued == 1
    waiting = c.schedules.get("swept")
    assert waiting is not None and waiting.armed is None and waiting.fired == 1
    assert store.replan_queue(10) == ["swept"]
    store.release("w0", grant.epoch)
    w = make_worker(c, "w1")
    try:
        w.run_once()  # acquires the shard, plans the queued schedule
        planned = c.schedules.get("swept")
        assert planned is not None and planned.armed is not None
        assert store.replan_queue(10) == []
        assert nominal_of(planned.armed) > nominal_of(info.armed)
    finally:
        w.close()


def nominal_of(tid: str) -> int:
    found = occurrence_name(tid)
    assert found is not None
    return found[1]


@pytest.mark.parametrize("wrong", ["version", "not after", "early", "another schedule"])
def test_a_plan_that_does_not_hold_fires_the_occurrence_but_arms_nothing(
    c: TimerClient, wrong: str
) -> None:
    """A plan of another version (the schedule changed since it was read), or one that
    is not a later occurrence of the same schedule, due no earlier than its time: the
    occurrence still fires, nothing is armed, and the schedule waits for a new plan."""
    info = c.schedules.create("stale", every="1s")
    assert info.armed is not None and info.next_ms is not None
    store = c.shard_store(info.shard)
    grant = store.acquire("w0", 60_000)
    wait_for(lambda: server_now_ms(c.redis) >= info.next_ms, 5, "the occurrence's time")  # type: ignore[operator]
    at, version = nominal_of(info.armed), info.version
    plan = {
        "version": (version + 1, Plan(f"{{stale}}@{at + 1000}", at + 1000)),
        "not after": (version, Plan(f"{{stale}}@{at}", at)),
        "early": (version, Plan(f"{{stale}}@{at + 1000}", at + 999)),
        "another schedule": (version, Plan(f"{{other}}@{at + 1000}", at + 1000)),
    }[wrong]
    result = store.fire("w0", grant.epoch, [info.armed], ttl_ms=60_000, plans={info.armed: plan})
    assert result.fired == [info.armed] and result.armed == {} and result.queued == 1
    assert c.schedules.get("stale").armed is None  # type: ignore[union-attr]
    assert store.replan_queue(5) == ["stale"]
    armed = c.get(plan[1].next_id)
    assert armed is None or armed.state != "pending"  # nothing armed
    store.release("w0", grant.epoch)


def test_pause_resume_update_and_delete(c: TimerClient) -> None:
    info = c.schedules.create("job", every="1h")
    armed = info.armed
    assert armed is not None and c.get(armed) is not None
    with pytest.raises(DuplicateTimer, match="exists"):
        c.schedules.create("job", every="1m")
    assert c.schedules.pause("job")
    paused = c.schedules.get("job")
    assert paused is not None and paused.state == "paused" and paused.armed is None
    assert c.get(armed) is None  # taken out, with no outcome
    resumed = c.schedules.resume("job")
    assert resumed is not None and resumed.state == "active" and resumed.armed == armed
    # half past: never the hour the first spec armed (every 1s could be, in the second
    # before an hour: the same occurrence, so the same id)
    updated = c.schedules.update("job", cron="30 * * * *")
    assert updated.armed is not None and updated.armed != armed and c.get(armed) is None
    assert updated.version > resumed.version and updated.spec.recurrence.cron == "30 * * * *"
    assert [s.name for s in c.schedules.list()] == ["job"]
    assert c.schedules.delete("job", keep_armed=True)
    assert c.get(updated.armed) is not None  # still fires once, as a timer of its own
    assert c.schedules.get("job") is None and not c.schedules.delete("job")
    assert c.schedules.resume("job") is None and not c.schedules.pause("job")
    with pytest.raises(ScheduleNotFound, match="no schedule"):
        c.schedules.update("job", every="1s")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"every": "1s", "cron": "* * * * *"},
        {"every": "1s", "missed": "sometimes"},
        {"every": "1s", "payload": {(1, 2): 3}},
        {"every": "1s", "watch": ["elsewhere"]},
        {"cron": "99 * * * *"},
        {"every": "1s", "tz": "Nowhere/City"},
        # its first occurrence is a timer past the ten-year limit a deadline has (trial 20:
        # schedule --at refused it, schedules create --start armed it)
        {"every": "1s", "start": 4_102_444_800_000},  # 2100
        {"every": "1s", "start": 253_370_764_800_000},  # 9999
    ],
)
def test_a_bad_schedule_writes_nothing(
    c: TimerClient, namespace: str, kwargs: dict[str, object]
) -> None:
    before = namespace_keys(c.redis, namespace)
    with pytest.raises(InvalidInput):
        c.schedules.create("bad", **kwargs)  # type: ignore[arg-type]
    for name in ("has{brace", "at@sign", "", "x" * 201):
        with pytest.raises(InvalidInput):
            c.schedules.create(name, every="1s")
    assert namespace_keys(c.redis, namespace) == before


@pytest.mark.parametrize("missed", ["latest", "all", "skip"])
def test_occurrences_missed_while_no_worker_ran_follow_the_policy(
    c: TimerClient, missed: str
) -> None:
    """No worker for 5 s: the armed occurrence fires late; then ``all`` fires every
    missed one oldest first, ``latest`` the newest, ``skip`` none; the rest are counted."""
    info = c.schedules.create("late", every="1s", missed=missed)
    assert info.next_ms is not None
    stopped = info.next_ms + 5_200
    wait_for(lambda: server_now_ms(c.redis) > stopped, 15, "five seconds with no worker")
    w = make_worker(c, "w1")
    outs: list[Outcome] = []
    try:
        fire_until(w, c, outs, 1, "the late occurrence")
        back = outs[0].decided_ms  # when the worker came back

        def caught_up() -> bool:  # each catch-up occurrence arms the next as it fires
            now = c.schedules.get("late")
            return now is not None and (now.next_ms or 0) > server_now_ms(c.redis)

        run_until(w, c, outs, caught_up, "the catch-up to end", timeout=20)
    finally:
        w.close()
    times = sorted(nominal(o) for o in outs)
    assert times[0] == info.next_ms  # the armed one fired, late
    late = [t for t in times[1:] if t <= back]
    gap = (back - times[0]) // 1000  # occurrences after the armed one, due by then
    after = c.schedules.get("late")
    assert after is not None
    if missed == "all":
        assert late == [times[0] + 1000 * k for k in range(1, len(late) + 1)]
        assert len(late) >= gap - 1 and after.missed == 0
    elif missed == "latest":
        assert len(late) == 1 and late[0] >= back - 1000
        assert after.missed == (late[0] - times[0]) // 1000 - 1
    else:
        assert late == [] and after.missed >= gap - 1
    assert len(set(times)) == len(times)


def test_trigger_and_backfill_fire_once_beside_the_series(c: TimerClient) -> None:
    info = c.schedules.create("daily", cron="0 6 * * *", tz="Europe/Paris", payload={"d": 1})
    shot = c.schedules.trigger("daily")
    assert shot.id.startswith("{daily}@") and shot.id.endswith("-manual") and shot.created
    day = 86_400_000
    now = server_now_ms(c.redis)
    done = c.schedules.backfill("daily", now - 3 * day, now)
    assert len(done) == 3 and all(not isinstance(t, Exception) and t.created for t in done)
    again = c.schedules.backfill("daily", now - 3 * day, now)
    assert all(not isinstance(t, Exception) and not t.created for t in again)
    w = make_worker(c, "w1")
    outs: list[Outcome] = []
    try:
        fire_until(w, c, outs, 4, "the triggered and backfilled ones")
    finally:
        w.close()
    assert sorted(o.id for o in outs) == sorted([shot.id, *(t.id for t in done)])  # type: ignore[union-attr]
    assert all(o.payload == {"d": 1} for o in outs)
    after = c.schedules.get("daily")
    assert after is not None and after.armed == info.armed and after.fired == 0  # series alone
    with pytest.raises(ScheduleNotFound):
        c.schedules.trigger("none")
    with pytest.raises(InvalidInput, match="more than 2"):
        c.schedules.backfill("daily", now - 10 * day, now, limit=2)


@pytest.mark.parametrize("overlap", ["skip", "buffer-one"])
def test_an_occurrence_waits_while_its_group_has_not_handled_the_previous_one(
    c: TimerClient, overlap: str
) -> None:
    """overlap='skip': occurrences due while group ``reports`` still owes the previous
    outcome are passed over (counted); 'buffer-one': the next one is held (later, never
    early) until that outcome is handled, then fires."""
    group = c.consumer("reports", "r1")
    group.ensure()
    c.schedules.create("rep", every="1s", overlap=overlap, group="reports")
    w = make_worker(c, "w1")
    outs: list[Outcome] = []
    try:
        fire_until(w, c, outs, 1, "the first occurrence")
        first = nominal(outs[0])
        later = first + 2_500

        run_until(
            w,
            c,
            outs,
            lambda: server_now_ms(c.redis) >= later,
            "two more seconds unhandled",
            timeout=10,
        )
        assert [nominal(o) for o in outs] == [first]  # nothing more fired meanwhile
        waiting = c.schedules.get("rep")
        assert waiting is not None and waiting.armed is not None
        if overlap == "skip":
            assert waiting.skipped >= 2 and nominal_of(waiting.armed) > first + 2_000
        else:
            assert waiting.skipped == 0 and waiting.armed == f"{{rep}}@{first + 1_000}"
            held = c.get(waiting.armed)
            assert held is not None and held.state == "pending"
            assert held.deadline_ms > first + 1_000  # held back: later, never earlier
        for d in group.read(10, None):  # the group handles the first outcome
            group.ack(d)
        fire_until(w, c, outs, 2, "the next occurrence, once it was handled")
    finally:
        w.close()
    nxt = outs[1]
    assert nxt.decided_ms >= nominal(nxt)
    if overlap == "skip":
        assert nominal(nxt) > first + 2_000
    else:
        assert nominal(nxt) == first + 1_000 and nxt.decided_ms >= later


@pytest.mark.parametrize("ending", ["notify", "complete", "cancel"])
def test_ending_an_occurrence_leaves_the_series_going(c: TimerClient, ending: str) -> None:
    """An armed occurrence completed by notify (a schedule created with watch keys),
    completed or cancelled (#40: each ended the series for good, `get` still saying
    active with the ended one armed): the schedule waits for its leader, which arms the
    next after it; that one fires, and the ended one is never armed again."""
    info = c.schedules.create("kept", every="1s", watch=["{kept}:done"])
    first = info.armed
    assert first is not None
    if ending == "notify":
        assert c.notify("{kept}:done") == 1
    elif ending == "complete":
        assert c.complete(first) is True
    else:
        assert c.cancel(first) is True
    waiting = c.schedules.get("kept")
    assert waiting is not None and waiting.armed is None and waiting.state == "active"
    assert waiting.fired == 0  # ended, not fired
    w = make_worker(c, "w1")
    outs: list[Outcome] = []
    try:
        run_until(w, c, outs, lambda: any(o.outcome == "expired" for o in outs),
                  "the next occurrence to fire")  # fmt: skip
    finally:
        w.close()
    fired = [o for o in outs if o.outcome == "expired"]
    assert fired and all(nominal(o) > nominal_of(first) for o in fired)
    ended = [o for o in outs if o.id == first]
    assert len({(o.id, o.outcome) for o in ended}) == 1  # decided once, by the ending
    after = c.schedules.get("kept")
    assert after is not None and after.armed is not None and after.fired >= 1


@pytest.mark.parametrize("change", ["pause", "delete", "update"])
def test_a_due_occurrence_fires_once_whatever_changes_the_schedule(
    c: TimerClient, change: str
) -> None:
    """One contract for update, pause and delete (README, "Changes"): an armed
    occurrence whose time has come stays and fires once; then a paused schedule arms
    nothing, a deleted one is gone, an updated one goes on from its new spec. (pause and
    delete used to take a due occurrence out, with no outcome.)"""
    info = c.schedules.create("due", every="1h")
    assert info.armed is not None and info.next_ms is not None
    c.schedules.update("due", every="2s")  # armed 2 s out: soon due
    armed = c.schedules.get("due").armed  # type: ignore[union-attr]
    due_at = nominal_of(armed)  # type: ignore[arg-type]
    wait_for(lambda: server_now_ms(c.redis) >= due_at, 5, "the occurrence's time")
    if change == "pause":
        assert c.schedules.pause("due")
    elif change == "delete":
        assert c.schedules.delete("due")
    else:
        c.schedules.update("due", every="1h")
    kept = c.get(armed)  # type: ignore[arg-type]
    assert kept is not None and kept.state == "pending", kept
    w = make_worker(c, "w1")
    outs: list[Outcome] = []
    try:
        fire_until(w, c, outs, 1, "the due occurrence to fire")
        store = c.shard_store(info.shard)
        run_until(w, c, outs, lambda: store.replan_queue(10) == [], "the schedule planned")
    finally:
        w.close()
    assert [(o.id, o.outcome) for o in outs] == [(armed, "expired")]
    after = c.schedules.get("due")
    if change == "delete":
        assert after is None
    else:
        assert after is not None and after.fired == 1
        assert after.state == ("paused" if change == "pause" else "active")
        assert (after.armed is None) == (change == "pause"), after
        if after.armed is not None:
            at = nominal_of(after.armed)
            assert at > due_at and at % 3_600_000 == 0, at  # the new spec: on the hour
