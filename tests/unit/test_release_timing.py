"""When a due timer leaves the worker's wheel (#32): at the first whole monotonic ms at or
after its deadline by the worker's estimate of Redis time (never before it: an early
release costs a round trip and a retry), and the reaper waits to that instant, not to
a whole ms after a clock reading part of the way through one (half a ms on average)."""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timer.engine.delay_queue import DelayQueue
from timer.engine.task_list import TimerTaskList
from worker.redis_clock import RedisClock


def clock_at(mono_ms: float, offset_ms: float) -> RedisClock:
    clock = RedisClock()
    clock.observe(round(mono_ms + offset_ms), mono_ms, mono_ms)  # a zero round trip
    clock._offset_ms = offset_ms  # the fraction too (the server gives whole ms)
    return clock


@given(
    mono=st.floats(1.0, 1e9, allow_nan=False),
    offset=st.floats(-1e9, 2e12, allow_nan=False),
    ahead=st.integers(-5, 100_000),
)
def test_wheel_delay_is_the_first_whole_ms_not_before_the_deadline(
    mono: float, offset: float, ahead: int
) -> None:
    clock = clock_at(mono, offset)
    deadline = int(mono + offset) + ahead
    with mock.patch.object(RedisClock, "mono_ms", staticmethod(lambda: mono)):
        delay = clock.wheel_delay_ms(deadline)
    expires = int(mono) + delay  # the wheel's expiration: its whole-ms now plus the delay
    tolerance = 1e-3  # ms: float rounding at epoch-ms magnitudes (an ulp is ~2e-4 there)
    assert expires + offset >= deadline - tolerance  # never before it, by the estimate
    assert expires - 1 + offset < deadline + tolerance  # and the first such whole ms


@pytest.mark.parametrize(
    ("mono", "offset", "delay"),
    [
        # the deadline's instant on the monotonic clock, 1005 - offset -> its first whole
        # ms -> the delay from int(mono). The old delay, 1005 - int(mono + offset), was
        # the same or one less: a release up to a ms early, which fire answers with
        # "early" and the worker retries a ms later (a round trip, then a late fire).
        (500.3, 500.6, 5),  # 504.4 -> 505 -> 5 (old 5)
        (500.2, 500.7, 5),  # 504.3 -> 505 -> 5 (old 5)
        (500.9, 499.5, 6),  # 505.5 -> 506 -> 6 (old 5: released at Redis 1004.5, early)
        (500.0, 505.0, 0),  # 500.0 -> 500 -> 0: due now (old 0)
    ],
)
def test_examples_written_by_hand(mono: float, offset: float, delay: int) -> None:
    clock = clock_at(mono, offset)
    with mock.patch.object(RedisClock, "mono_ms", staticmethod(lambda: mono)):
        assert clock.wheel_delay_ms(1005) == delay


class RecordingCondition:
    """A condition whose wait records its timeout and moves the fake clock past it."""

    def __init__(self, now_ns: list[int]) -> None:
        self.now_ns = now_ns
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        self.now_ns[0] += int((timeout or 0) * 1e9) + 1
        return False

    def notify(self) -> None:
        pass


def test_the_reaper_waits_to_the_expiration_not_to_a_whole_ms_after_reading() -> None:
    now_ns = [1_000_300_000]  # monotonic 1000.3 ms: the clock reads 1000
    cond = RecordingCondition(now_ns)
    q = DelayQueue(cond=cond)  # type: ignore[arg-type]
    bucket = TimerTaskList()
    bucket.expiration = 1_002  # due at monotonic 1002.000 ms
    q.offer(bucket)
    with mock.patch("time.monotonic_ns", lambda: now_ns[0]):
        assert q.poll(None) is bucket
    assert len(cond.waits) == 1 and abs((cond.waits[0] or 0) - 0.0017) < 1e-9  # not 2 ms
