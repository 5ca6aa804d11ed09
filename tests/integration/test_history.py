"""The namespace's per-minute history (#57) on a real server: what the workers and the
handler runners add, read back by minute, kept a day, and refused bad input writing
nothing."""

from __future__ import annotations

import threading

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import wait_for
from timer import Handlers, InvalidInput, Outcome, TimerClient
from timer.durable.admin.history import KEEP_MS, MAX_MINUTES, MINUTE_MS, minute_of, parse_minute
from timer.testing import RedisServer

from .conftest import namespace_keys, server_now_ms
from .test_worker import make_worker, ns_client, running, subscribed

__all__ = ["ns_client"]  # a fixture, used by name
pytestmark = pytest.mark.redis


def test_counts_add_up_in_the_minute_and_gauges_are_the_last_reading(
    client: TimerClient, redis_client: redis.Redis
) -> None:
    # the three calls in one minute: not in its last 5 s (waited for on the server's clock)
    wait_for(lambda: server_now_ms(redis_client) % MINUTE_MS < 55_000, 10, "a minute's start")
    client.add_history({"expired": 3, "late:5": 2, "late:inf": 1, "handled:g": 4})
    client.add_history({"expired": 2, "late:5": 2, "failed:g": 1}, {"pending:0": 7})
    client.add_history({}, {"pending:0": 5, "pending:1": 1})
    now = minute_of(server_now_ms(redis_client))
    minutes = client.history(3)
    assert [m.at_ms for m in minutes] == [now - 2 * MINUTE_MS, now - MINUTE_MS, now]
    m = minutes[-1]
    assert (m.expired, m.handled, m.failed, m.pending) == (5, 4, 1, 6)
    assert m.late == ((5.0, 4), (float("inf"), 1))
    assert m.lateness_ms(0.5) == 5.0 and m.lateness_ms(0.99) == float("inf")
    assert m.groups == {"g": {"handled": 4, "failed": 1, "dead": 0}}
    assert minutes[0].expired == 0 and minutes[0].pending is None  # nobody wrote it
    ttl = redis_client.pttl(client.keys.history(now))
    assert KEEP_MS - 60_000 < ttl <= KEEP_MS  # a day and an hour: bounded


@given(minutes=st.one_of(st.integers(), st.floats(), st.text(max_size=5), st.none()))
@settings(max_examples=40, deadline=None)
def test_a_bad_period_is_refused_and_writes_nothing(
    redis_server: RedisServer, minutes: object
) -> None:
    if isinstance(minutes, int) and not isinstance(minutes, bool) and 1 <= minutes <= MAX_MINUTES:
        return
    r = redis.Redis.from_url(redis_server.url)
    with TimerClient.from_url(redis_server.url, "hist-fuzz") as c:
        c.init(shards=2)
        before = namespace_keys(r, "hist-fuzz")
        with pytest.raises(InvalidInput, match=r"minutes must be (between 1 and 1440|a whole)"):
            c.history(minutes)  # type: ignore[arg-type]
        assert namespace_keys(r, "hist-fuzz") == before
    r.close()


@given(
    counts=st.dictionaries(
        st.one_of(st.text(max_size=310), st.integers(), st.none()),
        st.one_of(st.integers(), st.booleans(), st.floats(), st.text(max_size=3), st.none()),
        max_size=4,
    )
)
@settings(max_examples=60, deadline=None)
def test_any_addition_is_taken_or_refused_writing_nothing(
    redis_server: RedisServer, counts: dict[object, object]
) -> None:
    """add_history with any fields and values: a valid one lands; any other is refused
    (InvalidInput) before anything is written."""
    r = redis.Redis.from_url(redis_server.url)
    with TimerClient.from_url(redis_server.url, "hist-add") as c:
        c.init(shards=2)
        before = namespace_keys(r, "hist-add")
        try:
            c.add_history(counts)  # type: ignore[arg-type]
        except InvalidInput:
            assert namespace_keys(r, "hist-add") == before
        else:
            assert all(isinstance(k, str) and type(v) is int for k, v in counts.items())
    r.close()


def test_fields_a_newer_release_writes_are_passed_over() -> None:
    m = parse_minute(0, {b"expired": b"2", b"shiny:new": b"9", b"late:x": b"1", "dead:g": "1"})
    assert (m.expired, m.dead, m.late, m.groups["g"]["dead"]) == (2, 1, (), 1)


def test_a_worker_and_a_runner_write_what_they_saw(ns_client: TimerClient) -> None:
    """A worker (history every 100 ms) sees 20 timers scheduled, 5 cancelled and 15
    expired; a runner handles the 15 and fails one attempt: the minute's sums say so,
    and the pending reading of every led shard is there."""
    c = ns_client
    w = make_worker(c, "hw", history_every_ms=100)
    with running(w):
        wait_for(lambda: subscribed(c, 4) and len(w.shards) == 4, 20, "the worker to lead")
        # the 5 to cancel are far off, so a busy core cannot fire one before its cancel
        c.schedule_many(
            [{"id": f"h{i}", "delay_ms": 200 if i >= 5 else 600_000} for i in range(20)]
        )
        for i in range(5):
            c.cancel(f"h{i}")
        failed_once: set[str] = set()

        def handle(o: Outcome) -> None:
            if o.id == "h7" and o.id not in failed_once:
                failed_once.add(o.id)
                raise RuntimeError("once")

        handlers = Handlers(group="hist", max_attempts=3)
        handlers.on("expired")(handle)
        runner = threading.Thread(
            target=handlers.run, args=(c,), kwargs={"handle_signals": False}, daemon=True
        )
        runner.start()
        wait_for(lambda: handlers.stats.handled >= 15, 30, "the runner to handle 15")
        handlers.stop()
        runner.join(15)
        assert not runner.is_alive()

        def total(name: str) -> int:
            return sum(getattr(m, name) for m in c.history(5))

        try:
            wait_for(lambda: total("expired") == 15 and total("cancelled") == 5, 20, "the worker")
        except AssertionError as exc:  # what it saw, to tell a short count from a double one
            seen = {n: total(n) for n in ("scheduled", "expired", "cancelled", "handled")}
            raise AssertionError(f"{exc}; the sums were {seen}: {c.history(5)}") from None
        assert total("scheduled") == 20
        assert (total("handled"), total("failed")) == (15, 1)  # the runner's last flush
        minutes = c.history(5)
        assert sum(n for m in minutes for _, n in m.late) == 15  # each expiry's lateness
        assert any(m.pending is not None for m in minutes)
        assert sum(m.groups.get("hist", {}).get("handled", 0) for m in minutes) == 15


def _expired(c: TimerClient) -> int:
    return sum(m.expired for m in c.history(5))


def test_a_lost_lease_writes_what_its_worker_counted(ns_client: TimerClient) -> None:
    """A worker that loses a lease writes its counts then, not a flush period later (it
    may be about to be killed): 6 overdue timers fired after its first flush are in the
    history as soon as a lease could not be renewed in time."""
    c = ns_client
    now = server_now_ms(c.redis)
    c.schedule_many([{"id": f"l{i}", "deadline_ms": now - 1_000 + i} for i in range(6)])
    w = make_worker(c, "hl", history_every_ms=60_000)  # no periodic flush in the test
    try:
        assert w.run_once() == 6  # its first tick flushed first: nothing counted then
        assert w.stats.fired == 6 and _expired(c) == 0
        shard = min(w.shards)
        w.shards[shard].renewed_mono_ms -= w.settings.lease_ms  # too old to renew: lost
        w.leases.renew()
        assert shard not in w.shards and w.stats.leases_lost == 1
        assert _expired(c) == 6
    finally:
        w.close()


def test_a_released_shard_writes_what_its_worker_counted(ns_client: TimerClient) -> None:
    """Another worker joins, this one releases half its shards: what it counted is in the
    history as it lets them go."""
    c = ns_client
    now = server_now_ms(c.redis)
    c.schedule_many([{"id": f"r{i}", "deadline_ms": now - 1_000 + i} for i in range(5)])
    w = make_worker(c, "hr", history_every_ms=60_000)
    try:
        assert w.run_once() == 5 and _expired(c) == 0
        c.membership.heartbeat(
            "joiner", now_ms=server_now_ms(c.redis), live_window_ms=w.settings.live_window_ms
        )
        assert w.leases.heartbeat() == 2  # it hears of the joiner: its share is 2
        w.leases.rebalance()
        assert len(w.shards) == 2 and w.stats.leases_released == 2
        assert _expired(c) == 5
    finally:
        w.close()


def test_a_stopped_worker_writes_what_it_counted(ns_client: TimerClient) -> None:
    """close() (as run() ends on SIGTERM) writes what was counted since the last flush."""
    c = ns_client
    now = server_now_ms(c.redis)
    c.schedule_many([{"id": f"s{i}", "deadline_ms": now - 1_000 + i} for i in range(4)])
    w = make_worker(c, "hs", history_every_ms=60_000)
    assert w.run_once() == 4 and _expired(c) == 0
    w.close()
    assert _expired(c) == 4


def test_a_schedules_own_occurrence_is_neither_scheduled_nor_cancelled(
    ns_client: TimerClient,
) -> None:
    """A schedule created, updated, paused, resumed and deleted arms and takes out its
    occurrence each time; none of that is a user's schedule or cancel. The history
    counts the one user timer scheduled and cancelled after it (on the schedule's shard:
    its events come after the occurrence's), once each."""
    c = ns_client
    w = make_worker(c, "ho", history_every_ms=100)
    with running(w):
        wait_for(lambda: subscribed(c, 4) and len(w.shards) == 4, 20, "the worker to lead")
        start = 2_051_222_400_000  # 2035: the schedule fires nothing here (within ten years)
        c.schedules.create("beat", every="1s", start=start)
        c.schedules.update("beat", every="2s", start=start)
        assert c.schedules.pause("beat")
        assert c.schedules.resume("beat") is not None
        assert c.schedules.delete("beat")
        c.schedule("user:{beat}", delay_ms=3_600_000)
        assert c.cancel("user:{beat}")

        def total(name: str) -> int:
            return sum(getattr(m, name) for m in c.history(5))

        wait_for(lambda: total("cancelled") >= 1, 20, "the worker to hear the cancel")
        assert (total("scheduled"), total("cancelled")) == (1, 1)
