"""Debounce (#43): ``schedule(id, quiet_ms, debounce=True, max_total_ms=max_wait)``.

The first call opens a window (a pending timer); each later call while it is pending
moves its deadline to now + quiet_ms (later only, never past created + max_total_ms),
replaces its payload and is counted; the window ends with one outcome carrying the
count, and a call after it opens a new window."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import wait_for
from timer import DuplicateTimer, InvalidInput, TimerClient, TimerError
from timer.aio import AsyncTimerClient
from timer.shapes import outcome_json, timer_info_json

from .conftest import namespace_keys, server_now_ms
from .test_aio import with_async
from .test_fuzz_api import anything
from .test_worker import all_outcomes, make_worker, ns_client, running, subscribed

__all__ = ["ns_client"]  # a fixture, used by name

pytestmark = pytest.mark.redis


def test_later_calls_move_the_deadline_replace_the_payload_and_are_counted(
    client: TimerClient,
) -> None:
    first = client.schedule("k:{1}", 10_000, debounce=True, max_total_ms=60_000, payload=1)
    assert first.created and first.absorbed == 0
    info = client.get("k:{1}")
    assert info is not None and info.created_ms is not None
    cap = info.created_ms + 60_000
    before = server_now_ms(client.redis)
    second = client.schedule("k:{1}", 20_000, debounce=True, max_total_ms=60_000, payload=2)
    after = server_now_ms(client.redis)
    assert not second.created and second.absorbed == 1
    assert before + 20_000 <= second.deadline_ms <= after + 20_000
    # a shorter quiet time never brings the deadline forward; the payload is the latest
    third = client.schedule("k:{1}", 5, debounce=True, payload={"n": 3})
    assert third.absorbed == 2 and third.deadline_ms == second.deadline_ms
    # never past the window's cap, however far the call asks
    fourth = client.schedule("k:{1}", 3_600_000, debounce=True, payload={"n": 4})
    assert fourth.deadline_ms == cap and fourth.absorbed == 3
    info = client.get("k:{1}")
    assert info is not None and info.payload == {"n": 4} and info.absorbed == 3
    assert timer_info_json(info)["absorbed"] == 3
    # a plain schedule of the same id is still an idempotent retry or a conflict
    with pytest.raises(DuplicateTimer):
        client.schedule("k:{1}", 10_000, payload="other")


def test_a_call_with_other_watch_keys_conflicts_and_writes_nothing(client: TimerClient) -> None:
    client.schedule("k:{2}", 10_000, debounce=True, watch=["k:{2}:done"])
    keys = namespace_keys(client.redis, client.namespace)
    with pytest.raises(DuplicateTimer):
        client.schedule("k:{2}", 10_000, debounce=True)
    with pytest.raises(InvalidInput, match="debounce must be True or False"):
        client.schedule("k:{2}", 10_000, debounce=1)  # type: ignore[arg-type]
    assert namespace_keys(client.redis, client.namespace) == keys
    assert client.schedule("k:{2}", 1, debounce=True, watch=["k:{2}:done"]).absorbed == 1


def test_one_batch_may_open_a_window_and_absorb_into_it(client: TimerClient) -> None:
    """A schedule_many holding one key three times behaves as three calls in a row."""
    got = client.schedule_many(
        [
            {"id": "k:{3}", "delay_ms": 1_000 * (i + 1), "debounce": True, "payload": i}
            for i in range(3)
        ]
    )
    assert [t.created for t in got] == [True, False, False]  # type: ignore[union-attr]
    assert [t.absorbed for t in got] == [0, 1, 2]  # type: ignore[union-attr]
    info = client.get("k:{3}")
    assert info is not None and info.payload == 2 and info.absorbed == 2
    assert info.deadline_ms == got[2].deadline_ms  # type: ignore[union-attr]


def test_a_window_ends_with_one_outcome_and_the_next_call_opens_another(
    client: TimerClient,
) -> None:
    client.schedule("k:{4}", 60_000, debounce=True, payload="a")
    client.schedule("k:{4}", 60_000, debounce=True, payload="b")
    assert client.cancel("k:{4}")
    ended = client.wait("k:{4}", timeout=1)
    assert ended.outcome == "cancelled" and ended.absorbed == 1 and ended.payload == "b"
    assert outcome_json(ended)["absorbed"] == 1
    # not the old outcome (as a plain schedule answers): a new window
    again = client.schedule("k:{4}", 60_000, debounce=True, payload="c")
    assert again.created and again.state == "pending" and again.absorbed == 0
    info = client.get("k:{4}")
    assert info is not None and info.absorbed == 0 and info.payload == "c"


def test_the_asyncio_client_debounces_alike(client: TimerClient) -> None:
    async def main(c: AsyncTimerClient) -> list[int]:
        made = [await c.schedule("k:{5}", 1_000, debounce=True) for _ in range(4)]
        return [t.absorbed for t in made]

    assert with_async(client, main) == [0, 1, 2, 3]


def test_a_running_worker_fires_each_window_once_after_its_quiet_time(
    ns_client: TimerClient,
) -> None:
    """The leader moves the window in its wheel on each call's event: it fires once, at
    the last call's quiet time (never at an earlier one), or at the cap for a key that
    never goes quiet, with the count of the calls it absorbed."""
    w = make_worker(ns_client, "db", sweep_interval_ms=60_000)
    with running(w):
        wait_for(lambda: len(w.shards) == 4, 10, "the worker's leases")
        wait_for(lambda: subscribed(ns_client, 4), 10, "its event subscriptions")
        quiet = [ns_client.schedule("quiet", 400, debounce=True) for _ in range(5)]
        # a key that never goes quiet: called every 50 ms until its window reaches its cap
        busy = [ns_client.schedule("busy", 300, debounce=True, max_total_ms=900)]
        info = ns_client.get("busy")
        assert info is not None and info.created_ms is not None
        cap_ms = info.created_ms + 900
        while busy[-1].deadline_ms < cap_ms:
            time.sleep(0.05)  # the traffic's pace, not a wait for anything
            busy.append(ns_client.schedule("busy", 300, debounce=True))
        out = ns_client.wait("quiet", timeout=10)
        assert out.outcome == "expired" and out.absorbed == 4
        assert out.deadline_ms == quiet[-1].deadline_ms <= out.decided_ms
        capped = ns_client.wait("busy", timeout=10)
        assert capped.outcome == "expired" and capped.deadline_ms == cap_ms
        assert capped.absorbed == len(busy) - 1 and capped.decided_ms >= cap_ms
    fired = [o for o in all_outcomes(ns_client) if o.id in ("quiet", "busy")]
    assert sorted(o.id for o in fired) == ["busy", "quiet"]  # one outcome each window


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    flag=st.one_of(st.booleans(), anything),
    delay=st.one_of(st.integers(-5, 10**6), anything),
    cap=st.one_of(st.none(), st.integers(-5, 10**6), anything),
)
def test_a_debounce_call_of_any_input_is_a_timer_error_or_a_window_within_its_cap(
    client: TimerClient, flag: object, delay: object, cap: object
) -> None:
    """Whatever the flag, quiet time and cap, a debounce call on a pending window answers
    or raises a TimerError with nothing written; an answer is never earlier than the
    window was, nor past its cap."""
    client.schedule("k:{6}", 60_000, debounce=True, max_total_ms=120_000)
    before = client.get("k:{6}")
    assert before is not None and before.created_ms is not None
    keys = namespace_keys(client.redis, client.namespace)
    try:
        t = client.schedule("k:{6}", delay, debounce=flag, max_total_ms=cap)  # type: ignore[arg-type]
    except TimerError:
        assert namespace_keys(client.redis, client.namespace) == keys
        return
    assert before.deadline_ms <= t.deadline_ms <= before.created_ms + 120_000
