"""TimingWheel: Kafka's TimingWheelTest on a 10 ms x 5 wheel starting at 1000 ms."""

from __future__ import annotations

import pytest

from timer import ManualClock
from timer.engine.delay_queue import DelayQueue
from timer.engine.wheel import TimingWheel

from .helpers import NoopTask

START, TICK, SIZE = 1000, 10, 5


@pytest.fixture
def parts() -> tuple[TimingWheel, DelayQueue]:
    queue = DelayQueue(ManualClock(START))
    return TimingWheel(TICK, SIZE, START, queue), queue


def test_add_valid_task(parts: tuple[TimingWheel, DelayQueue]) -> None:
    """A task inside the wheel's interval is stored and its bucket queued."""
    wheel, queue = parts
    assert wheel.add(NoopTask(TICK * 2), START + TICK * 2) is True
    assert len(queue) == 1 and wheel.size() == 1


def test_add_expired_task(parts: tuple[TimingWheel, DelayQueue]) -> None:
    """An expiration before the current time is refused (already expired)."""
    wheel, _ = parts
    assert wheel.add(NoopTask(-1), START - 1) is False
    assert wheel.size() == 0


def test_add_cancelled_task(parts: tuple[TimingWheel, DelayQueue]) -> None:
    """A task cancelled before it is added is refused."""
    wheel, _ = parts
    task = NoopTask(TICK * 2)
    task.cancel()
    assert wheel.add(task, START + TICK * 2) is False
    assert task.is_cancelled and wheel.size() == 0


def test_add_task_in_current_tick(parts: tuple[TimingWheel, DelayQueue]) -> None:
    """An expiration within the current tick counts as expired."""
    wheel, _ = parts
    assert wheel.add(NoopTask(5), START + 5) is False


def test_advance_within_tick_is_noop(parts: tuple[TimingWheel, DelayQueue]) -> None:
    """Advancing by less than a tick leaves current_time where it was."""
    wheel, _ = parts
    wheel.advance_clock(START + 5)
    assert wheel.current_time == START


def test_advance_to_next_tick(parts: tuple[TimingWheel, DelayQueue]) -> None:
    """Advancing a whole tick moves current_time by exactly that tick."""
    wheel, _ = parts
    wheel.advance_clock(START + TICK)
    assert wheel.current_time == START + TICK


def test_current_time_is_a_multiple_of_tick() -> None:
    """Start and advanced times are rounded down to a multiple of tick_ms."""
    wheel = TimingWheel(TICK, SIZE, 1007, DelayQueue())
    assert wheel.current_time == 1000
    wheel.advance_clock(1033)
    assert wheel.current_time == 1030


def test_overflow_wheel_created_once(parts: tuple[TimingWheel, DelayQueue]) -> None:
    """The first far task creates the overflow wheel (tick = interval); later ones reuse it."""
    wheel, _ = parts
    assert wheel.overflow_wheel is None
    interval = TICK * SIZE
    assert wheel.add(NoopTask(interval + TICK), START + interval + TICK)
    overflow = wheel.overflow_wheel
    assert overflow is not None and overflow.tick_ms == interval
    assert wheel.add(NoopTask(interval + TICK + 1), START + interval + TICK + 1)
    assert wheel.overflow_wheel is overflow


def test_advance_moves_overflow_wheel(parts: tuple[TimingWheel, DelayQueue]) -> None:
    """Advancing the wheel advances its overflow wheel to its own tick boundary."""
    wheel, _ = parts
    interval = TICK * SIZE
    wheel.add(NoopTask(interval + TICK), START + interval + TICK)
    target = START + interval + 10
    wheel.advance_clock(target)
    assert wheel.current_time == target
    assert wheel.overflow_wheel is not None
    assert wheel.overflow_wheel.current_time == START + interval


def test_bucket_index_and_expiration() -> None:
    """Tasks land in bucket (exp // tick) % size whose expiration is (exp // tick) * tick."""
    wheel = TimingWheel(TICK, SIZE, 0, DelayQueue())
    task = NoopTask(37)
    assert wheel.add(task, 37)
    bucket = wheel.buckets[(37 // TICK) % SIZE]
    assert task._bucket is bucket and bucket[task] == 37
    assert bucket.expiration == (37 // TICK) * TICK and wheel.size() == 1
