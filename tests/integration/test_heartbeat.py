"""Heartbeats with a cap (#43, first slice): ``heartbeat(id, extend_ms)`` pushes a
pending timer to now + extend_ms (Redis time), never earlier, never past created +
max_total_ms; one past its cap is refused and the timer falls due at the cap."""

from __future__ import annotations

import json

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import wait_for
from timer import Capped, HeartbeatCapped, InvalidInput, TimerClient, TimerError, TimerNotFound
from timer.aio import AsyncTimerClient
from timer.testing import RedisServer

from .conftest import namespace_keys, server_now_ms
from .test_aio import with_async
from .test_fuzz_api import anything
from .test_worker import make_worker, ns_client, running, subscribed

__all__ = ["ns_client"]  # a fixture, used by name

pytestmark = pytest.mark.redis


def test_a_heartbeat_extends_later_only_and_never_past_the_cap(client: TimerClient) -> None:
    r = client.redis
    t = client.schedule("job:{1}", 1_000, max_total_ms=60_000, note="long job")
    info = client.get("job:{1}")
    assert info is not None and info.max_total_ms == 60_000 and info.created_ms is not None
    cap = info.created_ms + 60_000
    before = server_now_ms(r)
    beat = client.heartbeat("job:{1}", 30_000)
    after = server_now_ms(r)
    assert beat.state == "pending" and before + 30_000 <= beat.deadline_ms <= after + 30_000
    assert beat.moved  # the script says it moved the deadline: no read before needed
    assert client.get("job:{1}").deadline_ms == beat.deadline_ms  # type: ignore[union-attr]
    # a shorter heartbeat never brings it earlier, and says it did not move
    stayed = client.heartbeat("job:{1}", 10)
    assert stayed.deadline_ms == beat.deadline_ms and not stayed.moved
    # the same for a reschedule to where it is already, and with --earlier to sooner
    assert client.reschedule("job:{1}", deadline_ms=beat.deadline_ms).moved is False  # type: ignore[union-attr]
    assert client.heartbeat("job:{1}", 20_000, earlier=True).moved
    # past the cap: refused, and it now falls due at the cap, whatever comes next
    with pytest.raises(HeartbeatCapped, match="max_total_ms") as refused:
        client.heartbeat("job:{1}", 120_000)
    assert refused.value.deadline_ms == cap
    assert client.get("job:{1}").deadline_ms == cap  # type: ignore[union-attr]
    with pytest.raises(HeartbeatCapped):
        client.heartbeat("job:{1}", 90_000)
    assert client.get("job:{1}").deadline_ms == cap  # type: ignore[union-attr]
    assert t.deadline_ms < cap


def test_a_cap_bounds_the_first_deadline_and_idempotent_retries_agree(
    client: TimerClient,
) -> None:
    """Scheduled further than its own cap, a timer is due at the cap; scheduling it again
    as it was given is the same timer, not a conflict."""
    far = server_now_ms(client.redis) + 3_600_000
    made = client.schedule("job:{2}", deadline_ms=far, max_total_ms=5_000)
    info = client.get("job:{2}")
    assert info is not None and info.created_ms is not None
    assert made.deadline_ms == info.deadline_ms == info.created_ms + 5_000
    again = client.schedule("job:{2}", deadline_ms=far, max_total_ms=5_000)
    assert not again.created and again.deadline_ms == made.deadline_ms


def test_a_heartbeat_of_an_ended_or_unknown_timer(client: TimerClient) -> None:
    """One that ended says how (nothing written); one never scheduled is TimerNotFound;
    a bad extension is refused with nothing written."""
    client.schedule("job:{3}", 60_000)
    assert client.cancel("job:{3}")
    keys = namespace_keys(client.redis, client.namespace)
    ended = client.heartbeat("job:{3}", 1_000)
    assert ended.state == "cancelled"
    with pytest.raises(TimerNotFound):
        client.heartbeat("job:{4}", 1_000)
    for bad in (-1, "10", None, 2**80, True):
        with pytest.raises(InvalidInput):
            client.heartbeat("job:{3}", bad)  # type: ignore[arg-type]
    assert namespace_keys(client.redis, client.namespace) == keys


def test_a_started_job_trades_its_queue_wait_deadline_for_its_run_deadline(
    client: TimerClient,
) -> None:
    """The two-deadline form (Temporal's schedule-to-start, then start-to-close within
    schedule-to-close): ``earlier=True`` sets the deadline to now + extend_ms even if that
    is earlier, within the cap; later heartbeats are later-only again."""
    queued = client.schedule("job:{8}", 600_000, max_total_ms=900_000)  # may wait 10 min
    info = client.get("job:{8}")
    assert info is not None and info.created_ms is not None
    started = client.heartbeat("job:{8}", 60_000, earlier=True)  # runs at most a minute
    assert started.deadline_ms < queued.deadline_ms
    assert started.deadline_ms <= server_now_ms(client.redis) + 60_000
    assert client.heartbeat("job:{8}", 1, earlier=False).deadline_ms == started.deadline_ms
    with pytest.raises(HeartbeatCapped) as refused:
        client.heartbeat("job:{8}", 3_600_000, earlier=True)
    assert refused.value.deadline_ms == info.created_ms + 900_000
    with pytest.raises(InvalidInput, match="earlier must be True or False"):
        client.heartbeat("job:{8}", 1, earlier=1)  # type: ignore[arg-type]


def test_the_asyncio_client_heartbeats_alike(client: TimerClient) -> None:
    client.schedule("job:{5}", 1_000, max_total_ms=2_000)

    async def main(c: AsyncTimerClient) -> tuple[int, int]:
        beat = await c.heartbeat("job:{5}", 1_500)
        with pytest.raises(HeartbeatCapped) as refused:
            await c.heartbeat("job:{5}", 10_000)
        return beat.deadline_ms, refused.value.deadline_ms

    beat, cap = with_async(client, main)
    info = client.get("job:{5}")
    assert info is not None and info.created_ms is not None
    assert beat <= cap == info.deadline_ms == info.created_ms + 2_000


def test_a_running_worker_fires_at_the_heartbeats_deadline_or_the_cap(
    ns_client: TimerClient,
) -> None:
    """The leader holds the timer in its wheel at its first deadline; a heartbeat's event
    moves it: it fires at the new deadline, never before, and a capped one at its cap."""
    w = make_worker(ns_client, "hb", sweep_interval_ms=60_000)
    with running(w):
        wait_for(lambda: len(w.shards) == 4, 10, "the worker's leases")
        wait_for(lambda: subscribed(ns_client, 4), 10, "its event subscriptions")
        ns_client.schedule("beat", 300)
        ns_client.schedule("capped", 300, max_total_ms=900)
        moved = ns_client.heartbeat("beat", 1_200)
        with pytest.raises(HeartbeatCapped) as refused:
            ns_client.heartbeat("capped", 5_000)
        out = ns_client.wait("beat", timeout=10)
        assert out.outcome == "expired" and out.deadline_ms == moved.deadline_ms
        assert out.decided_ms >= moved.deadline_ms  # never at the first deadline
        capped = ns_client.wait("capped", timeout=10)
        assert capped.deadline_ms == refused.value.deadline_ms
        assert capped.decided_ms >= capped.deadline_ms


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    tid=st.one_of(st.just("job:{6}"), anything),
    extend=st.one_of(st.integers(-5, 10**6), anything),
    earlier=st.one_of(st.just(False), st.booleans(), anything),
)
def test_a_heartbeat_of_any_input_is_a_timer_error_or_a_later_deadline(
    client: TimerClient, tid: object, extend: object, earlier: object
) -> None:
    """Whatever the id, extension and ``earlier``, a heartbeat answers or raises a
    TimerError, and writes nothing unless it moved the one pending timer (later, unless
    ``earlier``)."""
    client.schedule("job:{6}", 60_000)
    before = client.get("job:{6}")
    keys = namespace_keys(client.redis, client.namespace)
    try:
        t = client.heartbeat(tid, extend, earlier=earlier)  # type: ignore[arg-type]
    except TimerError:
        assert namespace_keys(client.redis, client.namespace) == keys
        return
    assert before is not None and t.id == "job:{6}"
    assert t.deadline_ms >= before.deadline_ms or earlier is True


def test_the_cap_bounds_a_reschedule_through_every_door(
    client: TimerClient, redis_client: redis.Redis, redis_server: RedisServer
) -> None:
    """One meaning of the cap (#54 C): a timer never falls due after created +
    max_total_ms, whoever moves it. A reschedule past the cap, through the library (sync
    and asyncio, by delay and by deadline), the bulk selection and the CLI (one timer
    and `timers reschedule`), is refused with Capped carrying the cap and writes
    nothing; one to the cap or before it moves the timer. (Before, reschedule was exempt:
    a timer with a 3 s cap was moved 57 s past it.) The HTTP API and the dashboard are
    tested in their own suites, against the same error."""
    from click.testing import CliRunner  # noqa: PLC0415

    from timer.cli.main import main  # noqa: PLC0415

    client.schedule("cap:{1}", 1_000, max_total_ms=3_000)
    client.schedule("cap:{2}", 1_000, max_total_ms=3_000)
    info = client.get("cap:{1}")
    assert info is not None and info.created_ms is not None
    cap = info.created_ms + 3_000
    before = namespace_keys(redis_client, client.namespace)
    with pytest.raises(Capped, match="max_total_ms") as refused:
        client.reschedule("cap:{1}", 60_000)
    assert refused.value.deadline_ms == cap and not isinstance(refused.value, HeartbeatCapped)
    with pytest.raises(Capped):
        client.reschedule("cap:{1}", deadline_ms=cap + 1)

    async def main_(c: AsyncTimerClient) -> int:
        with pytest.raises(Capped) as refused:
            await c.reschedule("cap:{1}", 57_000)
        return refused.value.deadline_ms

    assert with_async(client, main_) == cap
    bulk = client.timers.reschedule("cap:*", shift_ms=60_000)
    assert (bulk.selected, bulk.done, len(bulk.errors)) == (2, 0, 2), bulk
    assert all("cap" in e for e in bulk.errors)
    base = ["--redis-url", redis_server.url, "--namespace", client.namespace]
    one = CliRunner().invoke(main, [*base, "reschedule", "cap:{1}", "--in", "1m"])
    assert one.exit_code == 13 and "its cap" in one.output, one.output
    many = CliRunner().invoke(main, [*base, "--json", "timers", "reschedule", "cap:*", "--by",
                                     "1m", "--yes"])  # fmt: skip
    assert len(json.loads(many.stdout)["errors"]) == 2, many.output
    assert namespace_keys(redis_client, client.namespace) == before  # nothing moved
    at_cap = client.reschedule("cap:{1}", deadline_ms=cap)
    assert at_cap is not None and at_cap.deadline_ms == cap
    earlier = client.reschedule("cap:{2}", 500)
    assert earlier is not None and earlier.deadline_ms < cap
