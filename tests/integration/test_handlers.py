"""The handler runner and the consumer-group scripts under it, on the real server.

Outcomes are made by cancelling timers (no worker needed); each test reads them through
its own group, in-process. Crashes of real handler processes are in tests/chaos.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import redis

from tests.conftest import wait_for
from timer import Backoff, Handlers, InvalidInput, Later, Outcome, Retry, TimerClient
from timer.client.consumer import ConsumerGroup
from timer.durable.groups import follow as groups_module
from timer.durable.groups.streams import Delivery
from timer.errors import NotDurable
from timer.handlers.loop import HandlerLoop

FAST = Backoff(initial_s=0.02, max_s=0.05, jitter=0.5)


def decide(client: TimerClient, n: int, prefix: str = "j", payload: object = None) -> list[str]:
    ids = [f"{prefix}{i}" for i in range(n)]
    for tid in ids:
        client.schedule(tid, 60_000, payload=payload)
        client.cancel(tid)
    return ids


@pytest.fixture
def running() -> Iterator[Callable[..., threading.Thread]]:
    """Run a Handlers in a thread; every one started is stopped at the end."""
    started: list[tuple[Handlers, threading.Thread]] = []

    def start(h: Handlers, **kwargs: object) -> threading.Thread:
        t = threading.Thread(target=h.run, kwargs=kwargs, daemon=True)
        t.start()
        started.append((h, t))
        return t

    yield start
    for h, t in started:
        h.stop()
        t.join(30)


def test_retry_then_success_with_the_attempt_seen(client: TimerClient) -> None:
    """A handler failing twice runs a third time with attempt 3, is acked, and nothing
    is left pending, retrying or dead."""
    decide(client, 3)
    seen: list[tuple[str, int]] = []
    h = Handlers(client, group="g", max_attempts=5, backoff=FAST)

    @h.on("cancelled")
    def handler(o: Outcome) -> None:
        seen.append((o.id, o.attempt))
        if o.id == "j1" and o.attempt < 3:
            raise RuntimeError("flaky downstream")

    assert h.run(concurrency=2, stop_when_idle=True)
    assert sorted(seen) == [("j0", 1), ("j1", 1), ("j1", 2), ("j1", 3), ("j2", 1)]
    assert (h.stats.handled, h.stats.failed, h.stats.retried) == (3, 2, 2)
    assert client.dead_letters() == []
    (g,) = client.groups()
    assert (g.name, g.pending, g.retrying, g.lag) == ("g", 0, 0, 0)


def test_retry_waits_for_its_backoff(client: TimerClient, redis_client: redis.Redis) -> None:
    """A failed attempt is not retried before its retry time (kept in Redis)."""
    decide(client, 1)
    starts: list[float] = []
    h = Handlers(client, group="g", max_attempts=2, backoff=Backoff(initial_s=0.4, jitter=0))

    @h.on("cancelled")
    def handler(o: Outcome) -> None:
        starts.append(time.monotonic())
        if o.attempt == 1:
            raise RuntimeError("first time fails")

    assert h.run(stop_when_idle=True)
    assert len(starts) == 2
    assert starts[1] - starts[0] >= 0.4  # never early (the guarantee, not a speed)


def test_poison_outcome_is_dead_lettered_after_exactly_max_attempts(client: TimerClient) -> None:
    """After max_attempts failures the outcome goes to the dead letters with its error
    text and attempt count; redeliver puts it back (attempt 1, same idempotency key) for
    its group only; drop deletes one."""
    decide(client, 2, payload={"job": 7})
    attempts: Counter[str] = Counter()
    keys: dict[str, set[str]] = {}
    h = Handlers(client, group="g", max_attempts=3, backoff=FAST)

    @h.on("cancelled")
    def handler(o: Outcome) -> None:
        attempts[o.id] += 1
        keys.setdefault(o.id, set()).add(o.idempotency_key)
        if o.id == "j0" and o.redelivery_of is None:
            raise ValueError(f"cannot handle {o.payload}")

    assert h.run(stop_when_idle=True)
    assert attempts == {"j0": 3, "j1": 1}
    (letter,) = client.dead_letters()
    assert letter.group == "g" and letter.attempts == 3
    assert letter.error.startswith("ValueError: cannot handle {'job': 7}")
    assert letter.outcome is not None and letter.outcome.id == "j0"
    assert letter.outcome.payload == {"job": 7}
    assert client.dead_letter(letter.ref) == letter
    assert h.stats.dead_lettered == 1 and client.groups()[0].pending == 0

    other = client.consumer("audit", "a1")
    other.ensure(start="$")  # a second group, from now on
    assert client.redeliver(letter.ref) is not None
    assert client.dead_letters() == [] and client.redeliver(letter.ref) is None
    assert h.run(stop_when_idle=True)
    assert attempts["j0"] == 4 and len(keys["j0"]) == 1  # the same key on every delivery
    assert other.read(10, None) == []  # the copy was for group g alone
    assert sorted(o.id for o in client.all_outcomes()) == ["j0", "j1"]  # one per timer

    decide(client, 1, prefix="p")
    h2 = Handlers(client, group="g2", max_attempts=1)
    h2.add("cancelled", lambda o: 1 / 0)
    assert h2.run(stop_when_idle=True)
    dead = client.dead_letters("g2")
    assert len(dead) == 3 and all("ZeroDivisionError" in d.error for d in dead)
    assert client.drop_dead_letter(dead[0].ref) and not client.drop_dead_letter(dead[0].ref)
    assert len(client.dead_letters()) == 2


def test_retry_raised_by_the_handler_sets_the_delay(client: TimerClient) -> None:
    """`raise Retry(delay_s)` retries after that delay (an attempt like any failure)."""
    decide(client, 1)
    starts: list[float] = []
    h = Handlers(client, group="g", max_attempts=3, backoff=Backoff(initial_s=60))

    @h.on("cancelled")
    def handler(o: Outcome) -> None:
        starts.append(time.monotonic())
        if o.attempt == 1:
            raise Retry(0.05)

    assert h.run(stop_when_idle=True)  # the 60 s backoff would not have finished here
    assert len(starts) == 2 and h.stats.retried == 1


def test_sync_handlers_run_concurrently(client: TimerClient) -> None:
    """With concurrency 4, four handlers are running at the same moment (a barrier of 4
    only opens if they are)."""
    decide(client, 8)
    barrier = threading.Barrier(4, timeout=20)
    h = Handlers(client, group="g", max_attempts=1)
    h.add("cancelled", lambda o: barrier.wait())
    assert h.run(concurrency=4, stop_when_idle=True)
    assert h.stats.handled == 8 and h.stats.failed == 0


def test_async_handlers_run_concurrently(client: TimerClient) -> None:
    """async def handlers overlap on the runner's loop, up to the concurrency."""
    decide(client, 6)
    state = {"now": 0, "most": 0}
    three: asyncio.Event | None = None

    async def handler(o: Outcome) -> None:
        nonlocal three
        if three is None:
            three = asyncio.Event()
        state["now"] += 1
        state["most"] = max(state["most"], state["now"])
        if state["now"] >= 3:
            three.set()
        await asyncio.wait_for(three.wait(), 20)
        state["now"] -= 1

    h = Handlers(client, group="g", max_attempts=1)
    h.add("cancelled", handler)
    assert h.run(concurrency=3, stop_when_idle=True)
    assert h.stats.handled == 6 and state["most"] == 3


def test_restart_under_the_same_name_takes_back_its_own_at_once(client: TimerClient) -> None:
    """Outcomes a consumer held when it died are handled by its successor of the same
    name at start, long before reclaim_idle_ms (60 s here)."""
    decide(client, 5)
    dead = client.consumer("g", "pod-0")
    dead.ensure()
    assert len(dead.read(10, None)) == 5  # ... and it dies holding them
    seen: list[int] = []
    h = Handlers(client, group="g", consumer="pod-0", reclaim_idle_ms=60_000)
    h.add("cancelled", lambda o: seen.append(o.attempt))
    assert h.run(stop_when_idle=True)
    assert seen == [2] * 5 and h.stats.claimed == 5
    assert client.groups()[0].pending == 0


def test_a_dead_consumers_outcomes_are_taken_over_after_reclaim_idle(
    client: TimerClient, running: Callable[..., threading.Thread]
) -> None:
    """Another consumer takes a silent consumer's outcomes once idle past reclaim_idle."""
    decide(client, 4)
    dead = client.consumer("g", "gone")
    dead.ensure()
    assert len(dead.read(10, None)) == 4
    taken = time.monotonic()
    seen: list[str] = []
    h = Handlers(client, group="g", consumer="alive", reclaim_idle_ms=300)
    h.add("cancelled", lambda o: seen.append(o.id))
    running(h)
    wait_for(lambda: len(seen) >= 4, 15, "the takeover")
    assert time.monotonic() - taken >= 0.3  # not before the idle time
    wait_for(lambda: any(g.pending == 0 for g in client.groups()), 10, "the acks")
    # each once: a CI run on a busy core saw each twice (the poll that claimed them
    # stalled past the idle time before its look for its own lost entries, which took
    # them again; tests/sim: test_a_runner_stalled_after_its_claims_runs_each_once)
    assert sorted(seen) == [f"j{i}" for i in range(4)]


def test_a_long_handler_is_not_taken_over(
    client: TimerClient, running: Callable[..., threading.Thread]
) -> None:
    """A handler running for 2.5x reclaim_idle keeps its outcome (the runner touches it):
    a second consumer polling all the while never takes it, and it runs once. (Idle 1 s:
    at 200 ms a busy machine held the touching thread back past it, and the second
    consumer rightly took an outcome whose holder had been silent that long.)"""
    decide(client, 1)
    runs: list[str] = []
    done = threading.Event()

    def slow(o: Outcome) -> None:
        runs.append(o.id)
        done.wait(2.5)  # the handler's own work takes 2.5 s (2.5x the idle time)

    a = Handlers(client, group="g", consumer="a", reclaim_idle_ms=1_000)
    a.add("cancelled", slow)
    running(a)
    wait_for(lambda: runs, 10, "the first handler to start")
    b = Handlers(client, group="g", consumer="b", reclaim_idle_ms=1_000)
    b.add("cancelled", lambda o: runs.append("b:" + o.id))
    running(b)
    wait_for(lambda: a.stats.handled == 1, 20, "the slow handler to finish")
    assert runs == ["j0"] and b.stats.claimed == 0 and a.stats.lost == 0


def test_an_outcome_that_keeps_killing_its_consumer_is_dead_lettered_unrun(
    client: TimerClient,
) -> None:
    """Delivered more than max_attempts times without an ack (each holder died), an
    outcome goes to the dead letters without its handler running again."""
    decide(client, 1)
    for name in ("c1", "c2", "c3"):  # three consumers each take it and die
        g = client.consumer("g", name)
        g.ensure()
        got = g.read(1, None) or g.claim({s: "-" for s in range(4)}, count=1, min_idle_ms=0)[0]
        assert len(got) == 1
    calls: list[str] = []
    h = Handlers(client, group="g", consumer="c3", max_attempts=3)
    h.add("cancelled", lambda o: calls.append(o.id))
    assert h.run(stop_when_idle=True)
    assert calls == []
    (letter,) = client.dead_letters()
    assert letter.attempts == 4 and "delivered 4 times" in letter.error


def test_stop_drains_running_handlers_and_leaves_unstarted_ones_pending(
    client: TimerClient, running: Callable[..., threading.Thread]
) -> None:
    """stop(): a running handler finishes and is acked; outcomes not started stay pending
    for the next consumer; run returns True (drained)."""
    decide(client, 3)
    release = threading.Event()
    started: list[str] = []

    def handler(o: Outcome) -> None:
        started.append(o.id)
        assert release.wait(20)

    h = Handlers(client, group="g", consumer="c")
    h.add("cancelled", handler)
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(h.run(concurrency=1)), daemon=True)
    t.start()
    wait_for(lambda: started, 10, "a handler to start")
    h.stop()
    release.set()
    t.join(20)
    assert result == [True] and len(started) == 1 and h.stats.handled == 1
    (g,) = client.groups()
    assert g.pending + (g.lag or 0) == 2  # the other two: not handled, not lost


def test_backoff_entries_are_kept_by_trim(
    client: TimerClient, running: Callable[..., threading.Thread]
) -> None:
    """An outcome waiting for its retry is still owed: trim keeps it."""
    decide(client, 1)
    hour = Backoff(initial_s=3600, max_s=3600)
    h = Handlers(client, group="g", max_attempts=3, backoff=hour)
    h.add("cancelled", lambda o: 1 / 0)
    running(h)
    wait_for(lambda: any(g.retrying == 1 for g in client.groups()), 10, "the retry to be scheduled")
    (shard,) = [t for t in client.trim_outcomes(0) if t.held_by_group]
    assert shard.removed == 0 and client.outcomes_total() == 1


def test_reads_of_one_take_the_shards_in_turn(client: TimerClient) -> None:
    """A read of `count` takes new outcomes shard by shard; the shard it starts at
    turns, so small reads reach every shard, not only the first one with outcomes."""
    ids = decide(client, 24)
    shards = {client.shard_of(i) for i in ids}
    g = client.consumer("turns", "t1")
    g.ensure()
    seen = [g.read(1, None) for _ in shards]
    assert all(len(got) == 1 for got in seen), seen
    assert {got[0].outcome.shard for got in seen} == shards


def test_a_read_takes_count_from_one_shard_that_holds_them_all(client: TimerClient) -> None:
    """A read of 8 over 4 shards asks each for 2 at once; when one shard holds every
    outcome it then takes the rest from it: 8, not 2, and never more than 8."""
    ids = [f"one:{{tag}}:{i}" for i in range(20)]
    for tid in ids:
        client.schedule(tid, 60_000)
        client.cancel(tid)
    assert len({client.shard_of(i) for i in ids}) == 1
    g = client.consumer("skewed", "s1")
    g.ensure()
    assert [len(g.read(8, None)) for _ in range(3)] == [8, 8, 4]


def test_groups_show_lag_pending_and_delete_removes_one(client: TimerClient) -> None:
    decide(client, 5)
    g = client.consumer("billing", "b1")
    g.ensure()
    got = g.read(2, None)  # exactly 2, from the shards in turn
    g.ack(got[0])
    n = len(got)
    assert n == 2
    (info,) = client.groups()
    assert (info.name, info.pending, info.lag, info.shards) == ("billing", n - 1, 5 - n, 4)
    assert [c.name for c in info.consumers] == ["b1"] and info.consumers[0].pending == n - 1
    assert info.oldest_pending_age_ms is not None and info.owes_since_ms is not None
    assert info.stale(info.owes_since_ms + 10, 5) and not info.stale(info.owes_since_ms, 10**6)
    assert client.delete_group("billing") == 4
    assert client.groups() == [] and client.delete_group("billing") == 0


def test_follow_reads_without_a_group(client: TimerClient, redis_client: redis.Redis) -> None:
    """follow() shows new outcomes (or the history) and leaves no consumer group."""
    decide(client, 2)
    assert sorted(o.id for o in client.follow(history=True, stop_when_idle=True)) == ["j0", "j1"]
    assert list(client.follow(stop_when_idle=True)) == []
    for s in range(4):
        stream = client.keys.shard(s).outcomes
        if redis_client.exists(stream):
            assert redis_client.xinfo_groups(stream) == []


@pytest.mark.parametrize("per_read", [1000, 3])
def test_follow_with_history_is_in_decision_order_across_shards(
    client: TimerClient, monkeypatch: pytest.MonkeyPatch, per_read: int
) -> None:
    """`tail --history` showed each shard's outcomes in turn; now they come in the order
    they were decided (by their entries' time), also when a read cannot take a whole
    stream at once (3 entries a read)."""
    monkeypatch.setattr(groups_module, "FOLLOW_COUNT", per_read)
    ids = [f"o{i}" for i in range(24)]
    client.schedule_many([{"id": i, "delay_ms": 3_600_000} for i in ids])
    assert len({client.shard_of(i) for i in ids}) > 1
    for i in reversed(ids):  # decided in an order the shards do not follow
        client.cancel(i)
    seen = list(client.follow(history=True, stop_when_idle=True))
    times = [groups_module._entry_time(o.entry_id or "") for o in seen]
    assert sorted(o.id for o in seen) == sorted(ids) and times == sorted(times), times


def test_bad_input_is_refused_before_anything_is_read(client: TimerClient) -> None:
    with pytest.raises(InvalidInput, match="max_attempts"):
        Handlers(client, max_attempts=0)
    with pytest.raises(InvalidInput, match="reclaim_idle_ms"):
        Handlers(client, reclaim_idle_ms=5)
    with pytest.raises(InvalidInput, match="consumer group"):
        Handlers(client, group="")
    h = Handlers(client)
    with pytest.raises(InvalidInput, match="outcome must be one of"):
        h.on("expried")(print)
    with pytest.raises(InvalidInput, match="no handler registered"):
        h.run()
    h.add("expired", print)
    with pytest.raises(InvalidInput, match="concurrency"):
        h.run(concurrency=0)
    with pytest.raises(InvalidInput, match="dead letter ref"):
        client.redeliver("nope")
    with pytest.raises(InvalidInput, match="jitter"):
        Backoff(jitter=2)
    assert client.groups() == []  # nothing was created


def test_backoff_grows_and_is_capped() -> None:
    b = Backoff(initial_s=1, multiplier=2, max_s=5, jitter=0.5)
    assert [b.delay_s(n, rand=lambda: 0.0) for n in (1, 2, 3, 4)] == [1, 2, 4, 5]
    assert b.delay_s(2, rand=lambda: 1.0) == 1.0  # jitter takes up to half off


def test_more_handlers_than_redis_pys_default_pool_settle(client: TimerClient) -> None:
    """150 handlers each holding a connection of the runner's client at the same moment
    (as handlers calling client.notify would) all get one, and all settle: redis-py's
    pool stops at 100 connections by default, and the runner makes room for its threads."""
    decide(client, 150)
    barrier = threading.Barrier(150, timeout=60)
    pool = client.redis.connection_pool

    def handler(o: Outcome) -> None:
        conn = pool.get_connection()
        try:
            barrier.wait()
        finally:
            pool.release(conn)

    h = Handlers(client, group="g", max_attempts=1)
    h.add("cancelled", handler)
    assert h.run(concurrency=150, stop_when_idle=True)
    assert (h.stats.handled, h.stats.ack_errors, h.stats.failed) == (150, 0, 0)
    assert client.groups()[0].pending == 0


def test_own_outcomes_whose_delivery_was_lost_are_taken_back(
    client: TimerClient, running: Callable[..., threading.Thread]
) -> None:
    """Outcomes delivered to our consumer name that the runner never got (Redis died
    after a read and before its reply; an ack that failed) are taken back once idle past
    reclaim_idle_ms, by the same running consumer, with no other consumer around."""
    decide(client, 1, prefix="first")
    release = threading.Event()
    seen: list[str] = []

    def handler(o: Outcome) -> None:
        seen.append(o.id)
        if o.id == "first0":
            assert release.wait(20)  # holds the only slot while the outcomes are "lost"

    h = Handlers(client, group="g", consumer="c", reclaim_idle_ms=300)
    h.add("cancelled", handler)
    running(h, concurrency=1, read_ahead=0)  # the runner reads nothing while its slot is taken
    wait_for(lambda: seen == ["first0"], 10, "the first handler to start")
    decide(client, 3, prefix="lost")
    lost = client.consumer("g", "c").read(10, None)  # delivered to "c"; the runner never sees
    assert sorted(d.outcome.id for d in lost) == ["lost0", "lost1", "lost2"]
    release.set()
    wait_for(lambda: sorted(seen[1:]) == ["lost0", "lost1", "lost2"], 20, "the lost ones")
    wait_for(lambda: any(g.pending == 0 for g in client.groups()), 10, "their acknowledgements")


def test_a_hung_sync_handler_is_released_for_a_retry(
    client: TimerClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A sync handler past its timeout: its outcome is retried (attempt 2) by a new
    thread while the stuck one still hangs, a warning names the stuck thread, and when
    the stuck call returns at last nothing more is settled (before, the runner touched
    the hung outcome forever)."""
    decide(client, 1, "hang")
    unstick = threading.Event()
    returned = threading.Event()
    seen: list[tuple[int, str]] = []
    h = Handlers(client, group="g", max_attempts=3, backoff=FAST, timeout_s=0.3)

    @h.on("cancelled")
    def handler(o: Outcome) -> None:
        seen.append((o.attempt, threading.current_thread().name))
        if o.attempt == 1:
            unstick.wait(30)  # hangs until the test lets it go
            returned.set()

    with caplog.at_level("WARNING", logger="tickwheel.handlers"):
        assert h.run(concurrency=1, stop_when_idle=True)
    assert not returned.is_set()  # the run ended while the first call still hung
    assert [a for a, _ in seen] == [1, 2]
    stuck_thread = seen[0][1]
    assert seen[1][1] != stuck_thread  # a new thread took the stuck one's place
    assert any(
        stuck_thread in r.getMessage() and "timeout" in r.getMessage() for r in caplog.records
    )
    assert (h.stats.handled, h.stats.failed, h.stats.timed_out) == (1, 1, 1)
    unstick.set()
    wait_for(returned.is_set, 10, "the stuck handler to return")
    (g,) = client.groups()
    assert (g.pending, g.retrying) == (0, 0)
    assert client.dead_letters() == []


def test_a_handler_that_returns_past_its_timeout_before_it_is_released_is_retried(
    client: TimerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reading thread releases a sync handler past its timeout on its next round; on
    a busy machine the handler may return first. It is then settled as a released one
    is (a failed attempt, retried), not acknowledged: whether a handler past its timeout
    is retried must not depend on how soon the reading thread got the core. Here the
    reading thread never releases anything (the slowest machine); before, the late
    attempt was acknowledged and the outcome never retried."""
    monkeypatch.setattr(HandlerLoop, "_release_stuck", lambda self: None)
    decide(client, 1, "late")
    attempts: list[int] = []
    h = Handlers(client, group="g", max_attempts=3, backoff=FAST, timeout_s=0.2)

    @h.on("cancelled")
    def handler(o: Outcome) -> None:
        attempts.append(o.attempt)
        if o.attempt == 1:
            time.sleep(0.4)  # the handler's own work, past its timeout

    assert h.run(concurrency=1, stop_when_idle=True)
    assert attempts == [1, 2]
    assert (h.stats.handled, h.stats.failed, h.stats.timed_out) == (1, 1, 1)
    (g,) = client.groups()
    assert (g.pending, g.retrying) == (0, 0)


def test_a_hung_async_handler_is_cancelled_and_dead_lettered_at_the_last_attempt(
    client: TimerClient,
) -> None:
    """An async handler past its (per-registration) timeout is cancelled; every attempt
    timing out ends in the dead letters with the timeout as its error."""
    decide(client, 1, "slow")
    cancelled: list[int] = []
    h = Handlers(client, group="g", max_attempts=2, backoff=FAST)

    async def handler(o: Outcome) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(o.attempt)
            raise

    h.add("cancelled", handler, timeout_s=0.2)
    assert h.run(concurrency=2, stop_when_idle=True)
    assert cancelled == [1, 2]
    (dead,) = client.dead_letters()
    assert "HandlerTimedOut" in dead.error and "0.2s timeout" in dead.error
    assert h.stats.timed_out == 2


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "5", True, 86_401])
def test_bad_handler_timeouts_are_refused(client: TimerClient, bad: object) -> None:
    """A timeout must be a number of seconds in (0, 86400]."""
    with pytest.raises(InvalidInput, match="timeout_s"):
        Handlers(client, timeout_s=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="timeout_s"):
        Handlers(client).add("expired", print, timeout_s=bad)  # type: ignore[arg-type]


def test_later_looks_again_without_a_failure_until_max_attempts(client: TimerClient) -> None:
    """A handler raising Later(delay) sees the outcome again after the delay, with its
    attempt counted, and no failure counted (Celery's sender waits for a start that
    way, #54); at max_attempts a Later is a failure like any other: a dead letter."""
    decide(client, 2, prefix="later")
    seen: list[tuple[str, int]] = []
    h = Handlers(client, group="later", max_attempts=4, backoff=FAST)

    @h.on("cancelled")
    def handler(o: Outcome) -> None:
        seen.append((o.id, o.attempt))
        if o.id == "later1" or o.attempt < 3:
            raise Later(0.02, "not yet")

    h.run(stop_when_idle=True)
    assert sorted(seen) == [("later0", 1), ("later0", 2), ("later0", 3),
                            ("later1", 1), ("later1", 2), ("later1", 3), ("later1", 4)]  # fmt: skip
    assert (h.stats.later, h.stats.failed, h.stats.handled, h.stats.dead_lettered) == (5, 1, 1, 1)
    (dead,) = client.dead_letters("later")
    assert dead.outcome is not None and dead.outcome.id == "later1" and "not yet" in dead.error
    with pytest.raises(InvalidInput, match="Later's delay"):
        Later(-1)


def test_an_acknowledgement_that_finds_nothing_pending_is_counted_and_said(
    client: TimerClient, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """An acknowledgement whose outcome is no longer pending where it was sent (another
    consumer took it over and acknowledged it; or, after a failover, it reached a master
    being replaced, so the outcome comes again) is counted and logged, not silent."""
    decide(client, 3)

    def handler(o: Outcome) -> None:
        if o.id == "j1":  # acknowledged meanwhile, as by the consumer that took it over
            assert o.entry_id is not None
            stream = client._ns().shard(o.shard).outcomes
            assert redis_client.xack(stream, "g", o.entry_id) == 1

    h = Handlers(client, group="g", max_attempts=1)
    h.add("cancelled", handler)
    with caplog.at_level("WARNING", logger="tickwheel.handlers"):
        assert h.run(concurrency=1, stop_when_idle=True)
    assert (h.stats.handled, h.stats.acks_unmatched, h.stats.ack_errors) == (3, 1, 0)
    assert "1 of " in caplog.text and "found no outcome pending" in caplog.text
    assert client.groups()[0].pending == 0


def test_a_dead_letter_whose_reply_was_lost_is_counted_once(
    client: TimerClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The last attempt's dead letter written, and its reply lost (the master killed
    before it answered, or its durability wait fell short): the try again finds nothing
    pending. It counts as dead-lettered, once, as an acknowledgement sent again counts as
    handled (a demo on a Sentinel set reported the poison job neither handled nor dead)."""
    decide(client, 2)
    real = ConsumerGroup.dead_letter
    lost: list[str] = []

    def reply_lost(self: ConsumerGroup, delivery: Delivery, error: str) -> str | None:
        ref = real(self, delivery, error)
        if not lost:  # written, then the reply (or its wait) went missing
            lost.append(str(ref))
            raise NotDurable("0 of 1 replicas acknowledged within 50 ms")
        return ref

    monkeypatch.setattr(ConsumerGroup, "dead_letter", reply_lost)
    h = Handlers(client, group="g", max_attempts=1)

    @h.on("cancelled")
    def poison(o: Outcome) -> None:
        raise RuntimeError(f"{o.id}: poison")

    with caplog.at_level("ERROR", logger="tickwheel.handlers"):
        assert h.run(concurrency=1, stop_when_idle=True)
    assert lost and lost[0] != "None"
    assert (h.stats.dead_lettered, h.stats.ack_errors, h.stats.handled) == (2, 0, 0)
    assert len(client.dead_letters("g")) == 2  # each written once: the lost one not again
    assert "written by a try whose reply was lost" in caplog.text
    assert client.groups()[0].pending == 0


def test_a_group_lost_by_the_server_is_created_again_and_its_outcomes_handled(
    client: TimerClient,
    redis_client: redis.Redis,
    running: Callable[..., threading.Thread],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A server restart that loses what came after its last fsync can lose a consumer
    group created then, while its streams stay (their entries older). A running runner
    creates the group again at its next read, says so once, and handles what was decided
    before and after (at least once): before, every read failed with NOGROUP and nothing
    was handled until the runner restarted."""
    seen: list[str] = []
    h = Handlers(client, group="g", consumer="c")
    h.add("cancelled", lambda o: seen.append(o.id))
    running(h)
    first = decide(client, 2, prefix="a")
    wait_for(lambda: sorted(seen) == first, 15, "the first outcomes handled")
    streams = [client.keys.shard(s).outcomes for s in range(client.meta.shards)]
    for stream in streams:  # what a restart from an older fsync leaves: no group
        redis_client.xgroup_destroy(stream, "g")
    later = decide(client, 2, prefix="b")
    wait_for(lambda: set(later) <= set(seen), 15, "the outcomes after the loss handled")
    # from the streams' start, as the group first began: the first ones again (at least once)
    wait_for(lambda: all(seen.count(i) == 2 for i in first), 15, "the first ones again")
    assert Counter(seen) == {**dict.fromkeys(first, 2), **dict.fromkeys(later, 1)}
    assert all(redis_client.xinfo_groups(s) for s in streams)  # the group is back
    gone = [r for r in caplog.records if "was gone from a shard's outcome stream" in r.message]
    assert gone, "the runner said nothing of the group it created again"


def test_a_first_poll_makes_its_group_and_says_nothing_of_one_gone(
    client: TimerClient, caplog: pytest.LogCaptureFixture
) -> None:
    """`client.consumer("pys", "p1").poll(…)` on a group never made warned that the group
    "was gone from a shard's outcome stream (a server restart lost it?)" and returned
    nothing (trial 23): the first poll makes it, silently, and reads."""
    decide(client, 2)
    consumer = client.consumer("pys", "p1")
    with caplog.at_level("WARNING"):
        got = consumer.poll(10, None)
    assert sorted(d.outcome.id for d in got) == ["j0", "j1"]
    assert "was gone" not in caplog.text, caplog.text


def test_an_outcome_looked_at_later_is_not_retrying(
    client: TimerClient, running: Callable[..., threading.Thread]
) -> None:
    """A handler that asks to see an outcome again later (Later: a Celery task sent, its
    start not confirmed yet) has not failed: the group shows it as ``later``, not as
    retrying; one whose handler failed, and waits for its retry, is retrying."""
    decide(client, 3)
    hour = Backoff(initial_s=3600, max_s=3600)
    h = Handlers(client, group="g", max_attempts=3, backoff=hour)

    def handle(o: Outcome) -> None:
        if o.id == "j0":
            raise RuntimeError("the broker is down")
        raise Later(3600, "sent; waiting for the task to start")

    h.add("cancelled", handle)
    running(h)
    wait_for(lambda: sum(g.retrying + g.later for g in client.groups()) == 3, 10, "all 3 parked")
    (g,) = client.groups()
    assert (g.pending, g.retrying, g.later) == (3, 1, 2)
