"""The worker in-process, driven by run_once(): firing, horizon, fencing, catch-up, balance."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from tests.conftest import fresh_client, wait_for
from timer import Outcome, TimerClient
from timer.durable.groups.streams import Delivery
from timer.durable.model.keys import results_parts
from timer.testing import RedisServer
from timer.worker import Worker, WorkerSettings

from .conftest import server_now_ms

pytestmark = pytest.mark.redis


@pytest.fixture
def ns_client(redis_server: RedisServer, namespace: str) -> Iterator[TimerClient]:
    with fresh_client(redis_server, namespace, 4, bucket_ms=100) as c:
        yield c


class OwnedWorker(Worker):
    """A worker with its own client, closed with it."""

    def close(self) -> None:
        super().close()
        self.client.close()


def make_worker(c: TimerClient, name: str, **kw: Any) -> Worker:
    settings = WorkerSettings(worker_id=name, lease_ms=kw.pop("lease_ms", 2_000), **kw)
    return OwnedWorker(TimerClient.from_url(c.where, c.namespace), settings)


@contextlib.contextmanager
def running(w: Worker) -> Iterator[None]:
    """``w.run()`` on a thread for the block; then stop it, and it must end."""
    thread = threading.Thread(target=w.run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        w.stop()
        thread.join(10)
        w.client.close()
    assert not thread.is_alive()


def subscribed(c: TimerClient, shards: int) -> bool:
    """True once every shard's event channel has a subscriber."""
    channels = [c.keys.shard(s).events for s in range(shards)]
    return all(n == 1 for _, n in c.redis.pubsub_numsub(*channels))


def all_outcomes(c: TimerClient) -> list[Outcome]:
    """The outcomes not read before (acknowledged, so the next call does not repeat them):
    read in batches and acknowledged in one pipelined call a stream, not a round trip an
    outcome (8,000 of them took 80 s on a busy machine)."""
    group = c.consumer("test-reader", "r")
    group.ensure()
    got: list[Delivery] = []
    while batch := group.read(1_000, None):
        got.extend(batch)
    group.ack_many(got)
    return [d.outcome for d in got]


def test_worker_fires_each_due_timer_once_never_early(ns_client: TimerClient) -> None:
    """Timers due within the next second all fire once, none before its deadline."""
    now = server_now_ms(ns_client.redis)
    ids = [f"t{i}" for i in range(40)]
    for i, tid in enumerate(ids):
        ns_client.schedule(tid, deadline_ms=now + 50 + 20 * i)
    w = make_worker(ns_client, "w1")
    try:
        outs: list[Outcome] = []

        def done() -> bool:
            w.run_once()
            outs.extend(all_outcomes(ns_client))
            return len(outs) >= len(ids)

        wait_for(done, 20, "all timers fired")
        assert Counter(o.id for o in outs) == dict.fromkeys(ids, 1)
        assert all(o.outcome == "expired" and o.decided_ms >= o.deadline_ms for o in outs)
        assert w.stats.fired + w.stats.swept == len(ids)
    finally:
        w.close()


def test_wheel_holds_only_the_horizon(ns_client: TimerClient) -> None:
    """Timers beyond the horizon stay in Redis only; those inside it are in the wheel."""
    ns_client.schedule_many(
        [{"id": f"far{i}", "delay_ms": 3_600_000 + i} for i in range(500)]
        + [{"id": f"near{i}", "delay_ms": 5_000} for i in range(30)]
    )
    w = make_worker(ns_client, "w1", horizon_ms=10_000)
    try:
        w.run_once()
        assert len(w.shards) == 4
        assert w.timer.size == 30
        held = {tid for s in w.shards.values() for tid in s.tasks}
        assert held == {f"near{i}" for i in range(30)}
    finally:
        w.close()


def test_stale_leader_is_fenced_and_drops_the_shard(ns_client: TimerClient) -> None:
    """A leader whose lease was taken over cannot fire: FENCED, counted, shard dropped."""
    w1 = make_worker(ns_client, "w1")
    w2 = make_worker(ns_client, "w2")
    try:
        w1.run_once()
        shard = ns_client.shard_of("victim")
        ns_client.schedule("victim", delay_ms=0)
        w1.loader.load(w1.shards[shard])
        # w1 "pauses": its lease vanishes and w2 takes the shard at a higher epoch.
        ns_client.redis.delete(ns_client.keys.shard(shard).lease)
        assert w2.leases.acquire(shard)
        stale = list(w1.shards[shard].tasks.values())
        assert stale, "the due timer should be in w1's wheel"
        assert w1.firer.fire_batch(stale) == 0
        assert w1.stats.fence_rejections == 1 and shard not in w1.shards
        assert ns_client.get("victim").state == "pending"  # type: ignore[union-attr]
        wait_for(lambda: w2.run_once() or ns_client.get("victim").state == "expired", 10)  # type: ignore[union-attr]
        assert Counter(o.id for o in all_outcomes(ns_client))["victim"] == 1
    finally:
        w1.close()
        w2.close()


def test_takeover_catches_up_oldest_first(redis_server: RedisServer, namespace: str) -> None:
    """Overdue timers of a taken-over shard fire at once, in deadline order."""
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=1, bucket_ms=100)
    now = server_now_ms(c.redis)
    deadlines = [now - 5_000 + 37 * ((i * 7) % 100) for i in range(100)]
    c.schedule_many([{"id": f"o{i}", "deadline_ms": d} for i, d in enumerate(deadlines)])
    w = make_worker(c, "w1", sweep_interval_ms=60_000)  # the wheel, not sweep, must do it
    try:
        w.run_once()
        outs = all_outcomes(c)
        assert len(outs) == 100
        assert [o.deadline_ms for o in outs] == sorted(deadlines)
        assert all(o.lateness_ms > 0 for o in outs)
    finally:
        w.close()
        c.close()


def test_a_heartbeat_from_a_clock_far_ahead_does_not_shrink_the_shares(
    ns_client: TimerClient,
) -> None:
    """A dead worker whose clock ran a minute ahead left a heartbeat in the future: it is
    not counted as live, so the one live worker still takes every shard (before, it took
    half and the rest waited, led by no one, until real time caught up)."""
    c = TimerClient.from_url(ns_client.where, ns_client.namespace)
    c.redis.delete(c.keys.meta)
    c.init(shards=4)
    w = make_worker(c, "w1")
    try:
        now = c.server_time_ms()
        c.membership.heartbeat("ghost", now_ms=now + 60_000, live_window_ms=1_000)
        w.tick()
        w.leases.heartbeat()
        w.leases.rebalance()
        assert w.leases.live == 1
        assert sorted(w.shards) == [0, 1, 2, 3]
    finally:
        w.close()
        c.close()


def test_shares_balance_as_workers_join_and_leave(ns_client: TimerClient) -> None:
    """1, then 3, then 2 workers: every shard has exactly one leader, shares are fair."""
    c = TimerClient.from_url(ns_client.where, ns_client.namespace)
    c.redis.delete(c.keys.meta)
    c.init(shards=16)
    workers = [make_worker(c, "w1")]

    def settle() -> None:
        for _ in range(3):
            for w in workers:
                w.leases.heartbeat()
            for w in workers:
                w.leases.rebalance()

    def check() -> None:
        owners = [s for w in workers for s in w.shards]
        assert sorted(owners) == list(range(16)), "each shard exactly one leader"
        share = -(-16 // len(workers))
        assert all(len(w.shards) <= share for w in workers)
        for w in workers:
            for s, state in w.shards.items():
                assert c.redis.get(c.keys.shard(s).lease) == w.id.encode()
                assert state.epoch == int(c.redis.get(c.keys.shard(s).epoch))

    try:
        workers[0].tick()
        settle()
        check()
        workers += [make_worker(c, "w2"), make_worker(c, "w3")]
        for w in workers[1:]:
            w.tick()
        settle()
        check()
        gone = workers.pop()
        gone.close()
        settle()
        check()
        assert sorted(len(w.shards) for w in workers) == [8, 8]
    finally:
        for w in workers:
            w.close()
        c.close()


def test_running_worker_fires_new_timers_through_events(ns_client: TimerClient) -> None:
    """A running worker hears of a new timer over pub/sub and fires it from the event: not
    early, and long before its sweep (60 s; none ran). How late is a benchmark's figure."""
    w = make_worker(ns_client, "w1", sweep_interval_ms=60_000)
    with running(w):
        wait_for(
            lambda: len(w.shards) == 4 and w.events.reconnects == 0 and w.stats.loaded >= 0, 10
        )
        wait_for(
            lambda: ns_client.redis.pubsub_numsub(ns_client.keys.shard(0).events)[0][1] == 1, 10
        )
        ns_client.schedule("live", delay_ms=300)
        out = ns_client.wait("live", timeout=10)
        assert out.outcome == "expired" and out.lateness_ms >= 0
        assert w.stats.swept == 0
    assert all(ns_client.redis.get(ns_client.keys.shard(s).lease) is None for s in range(4))


def test_running_worker_hears_a_batched_schedule_event(ns_client: TimerClient) -> None:
    """schedule_many of one shard publishes one event for all its timers; the leader adds
    every one of them to its wheel from it and fires them, none early (the sweep is off)."""
    w = make_worker(ns_client, "w1", sweep_interval_ms=60_000)
    with running(w):
        wait_for(lambda: len(w.shards) == 4 and subscribed(ns_client, 4), 10)
        # Loaded since it subscribed: from now on a new timer near at hand reaches the
        # wheel only through its event (a load skips the buckets it already read).
        wait_for(lambda: not any(st.needs_reload for st in list(w.shards.values())), 10)
        ids = [f"batch {i}:{{b}}" for i in range(50)]  # one shard: one call, one event
        res = ns_client.schedule_many([{"id": t, "delay_ms": 400 + n} for n, t in enumerate(ids)])
        assert all(not isinstance(r, Exception) and r.created for r in res)
        outs = [ns_client.wait(i, timeout=10) for i in ids]
        assert all(o.outcome == "expired" and o.lateness_ms >= 0 for o in outs)
        assert w.stats.swept == 0


def test_timers_fire_after_pubsub_is_killed(
    ns_client: TimerClient, redis_client: redis.Redis
) -> None:
    """CLIENT KILL TYPE pubsub: timers still fire (reload and sweep), none early."""
    w = make_worker(ns_client, "w1", sweep_interval_ms=200)
    with running(w):
        wait_for(
            lambda: ns_client.redis.pubsub_numsub(ns_client.keys.shard(0).events)[0][1] == 1, 10
        )
        redis_client.client_kill_filter(_type="pubsub")
        ids = [f"k{i}" for i in range(20)]
        for tid in ids:
            ns_client.schedule(tid, delay_ms=200)
        outs = [ns_client.wait(tid, timeout=15) for tid in ids]
        assert all(o.outcome == "expired" and o.lateness_ms >= 0 for o in outs)


def test_backlog_is_loaded_in_slices_and_all_fires_once(
    redis_server: RedisServer, namespace: str
) -> None:
    """After a long outage a shard's overdue backlog is read in slices (bounded memory),
    oldest first, and every timer still fires exactly once."""
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=1, bucket_ms=100)
    now = server_now_ms(c.redis)
    c.schedule_many([{"id": f"b{i}", "deadline_ms": now - 30_000 + 10 * i} for i in range(1_000)])
    w = make_worker(c, "w1", max_load=100, sweep_interval_ms=60_000)
    try:
        peak = 0

        def step() -> bool:
            nonlocal peak
            w.run_once()
            peak = max(peak, max((len(s.tasks) for s in w.shards.values()), default=0))
            return sum(1 for _ in c.all_outcomes()) >= 1_000

        wait_for(step, 60, "the backlog fired")
        outs = list(c.all_outcomes())
        assert Counter(o.id for o in outs) == {f"b{i}": 1 for i in range(1_000)}
        assert peak <= 200, f"held {peak} timers at once with max_load=100"
        assert [o.deadline_ms for o in outs] == sorted(o.deadline_ms for o in outs)
    finally:
        w.close()
        c.close()


def test_worker_trims_acked_outcomes_past_the_retention_of_led_shards(
    ns_client: TimerClient,
) -> None:
    """A worker with a 1 ms retention drops every acked outcome below the oldest unacked."""
    ids = [f"trim{i}" for i in range(12)]
    for tid in ids:
        ns_client.schedule(tid, delay_ms=3_600_000)
        assert ns_client.cancel(tid)
    reader = ns_client.outcomes("handlers", "h1", stop_when_idle=True)
    unacked = None
    for o in reader:
        if o.id == "trim7":
            unacked = o  # read, never acked
        else:
            o.ack()
    assert unacked is not None
    w = make_worker(ns_client, "w1", outcome_retention_ms=1, trim_interval_ms=1)
    try:

        def trimmed() -> bool:
            w.run_once()
            return ns_client.outcomes_total() == len(kept)

        # the stream is cut below the oldest unacked entry: later ones of its shard stay
        shard = ns_client.shard_of("trim7")
        kept = [t for t in ids[7:] if ns_client.shard_of(t) == shard]
        wait_for(trimmed, 20, "the acked outcomes trimmed")
        assert [o.id for o in ns_client.all_outcomes()] == kept
        assert w.stats.outcomes_trimmed == len(ids) - len(kept)
    finally:
        w.close()


def test_worker_with_retention_zero_keeps_every_outcome(ns_client: TimerClient) -> None:
    for i in range(5):
        ns_client.schedule(f"keep{i}", delay_ms=3_600_000)
        assert ns_client.cancel(f"keep{i}")
    for o in ns_client.outcomes("handlers", "h1", stop_when_idle=True):
        o.ack()
    w = make_worker(ns_client, "w1", outcome_retention_ms=0, trim_interval_ms=1)
    try:

        def all_led() -> bool:
            w.run_once()
            return len(w.shards) == 4

        wait_for(all_led, 20, "all shards led")
        w.run_once()
        assert ns_client.outcomes_total() == 5 and w.stats.outcomes_trimmed == 0
    finally:
        w.close()


def test_a_long_sweep_never_holds_a_lease_renewal_back(ns_client: TimerClient) -> None:
    """A tick that sweeps 8,000 overdue timers one per call (seconds: far longer than the
    1 s lease) renews its leases between the calls: no lease is lost, nothing is fenced."""
    now = server_now_ms(ns_client.redis)
    items = [{"id": f"late:{i}", "deadline_ms": now - 5_000} for i in range(8_000)]
    assert all(not isinstance(r, Exception) for r in ns_client.schedule_many(items))
    w = make_worker(
        ns_client,
        "w1",
        lease_ms=1_000,
        sweep_limit=1,
        max_sweeps_per_tick=10_000,
        sweep_interval_ms=1,
    )
    try:
        # takes the shards (the first sweep waits a tick); on a busy machine a first tick
        # that loads 2,000 overdue timers a shard can outlast the 1 s lease, which the
        # worker then drops to take again: the sweep's promise is counted from there
        def after_a_tick(done: Callable[[], bool]) -> Callable[[], bool]:
            def ticked() -> bool:
                w.tick()
                return done()

            return ticked

        wait_for(after_a_tick(lambda: len(w.shards) == 4), 30, "all four shards led")
        lost, acquired = w.stats.leases_lost, w.stats.leases_acquired
        # sweeps them all, one timer per call, renewing as it goes
        wait_for(after_a_tick(lambda: w.stats.swept == 8_000), 120, "every timer swept")
        assert (w.stats.leases_lost, w.stats.fence_rejections) == (lost, 0)
        assert len(w.shards) == 4 and w.stats.leases_acquired == acquired
    finally:
        w.close()


def table_parts(c: TimerClient, shard: int) -> int:
    """How many hashes the shard's results table has."""
    return results_parts(*c.redis.hmget(c.keys.shard(shard).results_table, "L", "S"))


def wait_expired(c: TimerClient) -> None:
    """Until every outcome retained for 1 s up to now has expired by the server's clock."""
    until = server_now_ms(c.redis) + 2_000
    wait_for(lambda: server_now_ms(c.redis) >= until, 20, "the outcomes expired")


def test_a_worker_trim_goes_round_a_large_results_table_within_half_a_ttl(
    redis_server: RedisServer, ns_client: TimerClient
) -> None:
    """result_ttl 1 s and a trim every 0.5 s: every retained outcome must be looked at
    within half a second, so the worker's first trim visits every hash of a table of
    4,000 outcomes (well over the 64 hashes a trim visits otherwise) and drops them all."""
    ids = [f"big:{i}" for i in range(60_000) if ns_client.shard_of(f"big:{i}") == 0][:4_000]
    brief = TimerClient.from_url(redis_server.url, ns_client.namespace, result_ttl_s=1)
    brief.schedule_many([{"id": t, "delay_ms": 3_600_000} for t in ids])
    for tid in ids:
        assert brief.cancel(tid)
    brief.close()
    assert table_parts(ns_client, 0) > 64
    wait_expired(ns_client)
    w = make_worker(ns_client, "w1", result_ttl_ms=1_000, trim_interval_ms=500)
    assert w.settings.trim_pass_within == 1
    try:
        w.run_once()  # leads every shard, then trims each once
        assert 0 in w.shards
        assert w.stats.results_dropped == 4_000
        assert all(ns_client.get(t) is None for t in ids[:50])
    finally:
        w.close()


def test_a_worker_goes_on_with_a_trim_round_a_call_a_tick(
    redis_server: RedisServer, ns_client: TimerClient
) -> None:
    """A results table of more hashes than a trim call visits (1,024): the worker's trim
    visits 1,024 of them and leaves the rest of its round, which the next tick's call
    visits (not the next trim, ten minutes away): every expired outcome is gone then."""
    n = 40_000
    ids = [f"huge:{i}" for i in range(20 * n) if ns_client.shard_of(f"huge:{i}") == 0][:n]
    past = server_now_ms(ns_client.redis) - 1_000
    for i in range(0, n, 1_000):
        ns_client.schedule_many([{"id": t, "deadline_ms": past} for t in ids[i : i + 1_000]])
    setup = ns_client.shard_store(0)
    grant = setup.acquire("setup", 60_000)
    for i in range(0, n, 500):  # fired with a result_ttl of 1 s
        assert len(setup.fire("setup", grant.epoch, ids[i : i + 500], ttl_ms=1_000).fired) == 500
    assert setup.release("setup", grant.epoch)
    sk = ns_client.keys.shard(0)
    assert table_parts(ns_client, 0) > 1_024
    wait_expired(ns_client)
    w = make_worker(ns_client, "w1", result_ttl_ms=1_000, trim_interval_ms=600_000)
    try:
        w.run_once()  # leads, trims once: 1,024 hashes of the round
        first = w.stats.results_dropped
        assert 0 < first < n and w.shards[0].trim_left > 0
        wait_for(lambda: w.run_once() or w.shards[0].trim_left == 0, 20, "the round done")
        assert w.stats.results_dropped == n
        assert int(ns_client.redis.hget(sk.results_table, "N")) == 0
    finally:
        w.close()


def test_a_worker_drops_retained_outcomes_past_their_ttl_even_keeping_the_stream(
    redis_server: RedisServer, ns_client: TimerClient
) -> None:
    """Outcomes retained for 1 s are dropped by the worker's trim once that second has
    passed, with the stream kept for ever (retention 0); outcomes kept for a day stay."""
    brief = TimerClient.from_url(redis_server.url, ns_client.namespace, result_ttl_s=1)
    for i in range(20):
        brief.schedule(f"brief{i}", delay_ms=3_600_000)
        assert brief.cancel(f"brief{i}")
        ns_client.schedule(f"day{i}", delay_ms=3_600_000)
        assert ns_client.cancel(f"day{i}")
    brief.close()
    until = server_now_ms(ns_client.redis) + 2_000  # every brief outcome has expired then
    w = make_worker(ns_client, "w1", outcome_retention_ms=0, trim_interval_ms=1)
    try:

        def dropped() -> bool:
            if server_now_ms(ns_client.redis) < until:
                return False
            w.run_once()
            return w.stats.results_dropped == 20

        wait_for(dropped, 20, "the brief outcomes dropped")
        assert all(ns_client.get(f"brief{i}") is None for i in range(20))
        assert all(ns_client.get(f"day{i}") is not None for i in range(20))
        assert ns_client.outcomes_total() == 40  # the stream kept every outcome
    finally:
        w.close()
