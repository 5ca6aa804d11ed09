"""When a due timer leaves the worker's wheel (#32): at the first whole monotonic ms at or
after its deadline by the worker's estimate of Redis time (never before it: an early
release costs a round trip and a retry), and the reaper waits to that instant, not to
a whole ms after a clock reading part of the way through one (half a ms on average)."""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timer.engine.bucket import TimerTaskList
from timer.engine.clock import ShiftedClock
from timer.engine.delay_queue import DelayQueue
from timer.worker.redis_clock import RedisClock


def clock_at(offset_ms: float, *, aligned: bool) -> RedisClock:
    """A clock whose estimate is monotonic + ``offset_ms``; its wheel's whole ms put just
    after Redis time's (as a worker's are by a precise reading) or not moved."""
    clock = RedisClock()
    clock._offset_ms = offset_ms  # the fraction too (a precise reading has it)
    if aligned:
        margin = RedisClock.ALIGN_MARGIN_NS
        clock.wheel.align(round((offset_ms % 1) * 1_000_000) - margin, ahead_ok_ns=margin)
    return clock


@given(
    mono=st.floats(1.0, 1e9, allow_nan=False),
    offset=st.floats(-1e9, 2e12, allow_nan=False),
    ahead=st.integers(-5, 100_000),
    aligned=st.booleans(),
)
def test_wheel_delay_is_the_first_whole_ms_not_before_the_deadline(
    mono: float, offset: float, ahead: int, aligned: bool
) -> None:
    clock = clock_at(offset, aligned=aligned)
    deadline = int(mono + offset) + ahead
    with mock.patch.object(RedisClock, "mono_ms", staticmethod(lambda: mono)):
        delay = clock.wheel_delay_ms(deadline)
    shift = clock.wheel.shift_ns / 1e6
    expires = int(mono + shift) + delay  # the wheel's expiration: its whole-ms now + delay
    redis_at = expires - shift + offset  # Redis time (estimated) when the wheel reads it
    tolerance = 2e-3  # ms: the 1 µs slack, and float rounding at epoch-ms magnitudes
    assert redis_at >= deadline - tolerance  # never before it, by the estimate
    assert redis_at - 1 < deadline + tolerance  # and the first such whole ms
    if aligned and ahead > 0:  # aligned: at most the margin and the tolerance late
        most = (RedisClock.ALIGN_MARGIN_NS + ShiftedClock.TOLERANCE_NS) / 1e6
        assert redis_at - deadline <= most + tolerance


@pytest.mark.parametrize(
    ("mono", "offset", "aligned", "delay", "late"),
    [
        # the deadline 1005 is at monotonic 1005 - offset; the wheel reads monotonic +
        # shift (aligned: the offset's fraction); the delay counts from the wheel's
        # whole-ms reading to its first whole ms at or after the deadline, released
        # `late` ms after it by the estimate. Before, the delay was 1005 - int(mono +
        # offset) from int(mono): the same or one less, up to a ms early (fire answers
        # "early", the worker retries a ms later: a round trip, then a late fire).
        (500.3, 500.6, False, 5, 0.6),  # 504.4 -> 505 (old 5)
        (500.9, 499.5, False, 6, 0.5),  # 505.5 -> 506 (old 5: released at 1004.5, early)
        (500.0, 505.0, False, 0, 0.0),  # due now
        (500.3, 500.6, True, 5, 0.05),  # wheel 500.85, deadline at wheel 504.95 -> 505
        (500.9, 499.5, True, 5, 0.05),  # wheel 501.35 -> 501; deadline at 505.95 -> 506
    ],
)
def test_examples_written_by_hand(
    mono: float, offset: float, aligned: bool, delay: int, late: float
) -> None:
    clock = clock_at(offset, aligned=aligned)
    with mock.patch.object(RedisClock, "mono_ms", staticmethod(lambda: mono)):
        assert clock.wheel_delay_ms(1005) == delay
    shift = clock.wheel.shift_ns / 1e6
    assert abs(int(mono + shift) + delay - shift + offset - 1005 - late) < 1e-6


def test_precise_readings_align_the_wheel_forward_whole_ms_readings_do_not() -> None:
    """The wheel's whole ms go 0.05 ms after Redis time's (its phase: the offset's
    fraction less the margin), forward only, left alone up to the tolerance short of
    that or the margin past it."""
    clock = RedisClock()
    clock.observe(1_000_500, 300.0, 300.4)  # whole ms: Redis was 1,000,500.0 to .999
    assert clock.wheel.shift_ns == 0  # not precise enough to align with
    assert abs(clock.at_ms(300.2) - 1_000_500.5) < 1e-9  # taken as the ms's middle

    def precise(at: float, fraction: float) -> int:
        """A precise reading at monotonic ``at`` (0.1 ms round trip): offset 1,000,200 +
        ``fraction``; the wheel's shift after it."""
        clock.observe(at + 0.05 + 1_000_200 + fraction, at, at + 0.1, precise=True)
        return clock.wheel.shift_ns

    assert precise(400, 0.1) == 0  # phase 0.05 wanted, 0 is 0.05 short: left
    assert precise(500, 0.3) == 250_000  # 0.25 wanted: forward 0.25
    assert precise(600, 0.27) == 250_000  # 0.22 wanted: 0.03 past it, within the margin
    assert precise(700, 0.5) == 450_000  # 0.45 wanted: forward 0.2
    assert precise(800, 0.35) == 1_300_000  # 0.30 wanted, 0.15 past: forward 0.85, once
    clock.observe(1_000_901, 900.0, 900.01)  # whole-ms readings are ignored...
    assert abs(clock.at_ms(900.0) - 1_001_100.35) < 1e-6  # ...while a precise one is fresh
    assert not clock.needs_sync(900.0) and clock.needs_sync(800.1 + 15_000)


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
