"""TimerTaskList: Kafka's TimerTaskListTest, plus the dict bucket's contract (stale pointers)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from timer import InvalidInput, ManualClock, SystemTimer
from timer.engine.bucket import TimerTaskList
from timer.engine.delay_queue import DelayQueue

from .helpers import NoopTask, RecordingTask


def where(timer: SystemTimer, task: NoopTask) -> list[TimerTaskList]:
    """Every bucket of every level that holds ``task``."""
    return [b for w in timer.wheel.levels() for b in w.buckets if task in b]


def test_readding_moves_tasks_between_buckets_and_cancel_empties_them() -> None:
    """Kafka's TimerTaskListTest: adding a task again moves it; the count never doubles."""
    clock = ManualClock(0)
    timer = SystemTimer("moves", tick_ms=1, wheel_size=4, clock=clock, inline=True)
    tasks = [NoopTask(10) for _ in range(10)]
    for i, task in enumerate(tasks, 1):
        timer.add(task)
        assert timer.size == i
    for task in tasks[:4]:
        task.delay_ms = 20
        timer.add(task)  # moves it: the old bucket lets it go
    for task in tasks[4:]:
        task.delay_ms = 300
        timer.add(task)
    assert timer.size == 10
    for task in tasks:
        held = where(timer, task)
        assert len(held) == 1 and held[0] is task._bucket
    assert {held[task] for task in tasks[:4] for held in where(timer, task)} == {20}
    for task in tasks:
        task.cancel()
    assert timer.size == 0
    assert not any(b for w in timer.wheel.levels() for b in w.buckets)
    timer.close()


def test_set_expiration_reports_only_changes() -> None:
    """set_expiration returns True only when the value changes (the bucket must be queued)."""
    bucket = TimerTaskList()
    assert bucket.expiration == -1
    assert bucket.set_expiration(100) is True
    assert bucket.set_expiration(100) is False
    assert bucket.set_expiration(200) is True


def test_flush_empties_resets_and_applies_fn() -> None:
    """flush hands every (task, expiration) to fn in insertion order, empties and resets."""
    bucket = TimerTaskList()
    tasks = [NoopTask(0) for _ in range(3)]
    for i, task in enumerate(tasks):
        bucket.add(task, 5 + i)
    bucket.set_expiration(5)
    seen: list[tuple[object, int]] = []
    bucket.flush(lambda task, exp: seen.append((task, exp)))
    assert seen == [(tasks[0], 5), (tasks[1], 6), (tasks[2], 7)]
    assert len(bucket) == 0 and bucket.expiration == -1


def test_cancel_is_o1_removal_from_its_bucket() -> None:
    """cancel() takes the task out of its bucket and marks it cancelled."""
    bucket = TimerTaskList()
    task = NoopTask(0)
    bucket.add(task, 1)
    task.cancel()
    assert task.is_cancelled and len(bucket) == 0


def test_cancel_follows_a_task_a_cascade_moved() -> None:
    """A task a cascade moved is cancelled from its new bucket, not its old one."""
    coarse, fine = TimerTaskList(10), TimerTaskList(1)
    task = NoopTask(0)
    coarse.add(task, 17)
    for moved, expiration in coarse.take():  # what a cascade does
        fine.add(moved, expiration)
    assert task._bucket is fine
    task.cancel()
    assert len(fine) == 0 and len(coarse) == 0


def test_cancel_after_expiry_touches_only_its_own_slot() -> None:
    """An expired task still points at its old bucket; cancelling it removes nothing else."""
    bucket = TimerTaskList()
    expired, waiting = NoopTask(0), NoopTask(0)
    bucket.add(expired, 1)
    assert bucket.take_tasks() == [expired]
    bucket.add(waiting, 2)  # the bucket is reused
    expired.cancel()
    assert list(bucket) == [waiting]


def test_a_cancel_that_races_a_cascade_never_runs_the_task() -> None:
    """The pop missed (the cascade had the task in hand): the flag still stops it."""
    clock = ManualClock(0)
    out: list[object] = []
    timer = SystemTimer("race", tick_ms=1, wheel_size=4, clock=clock, inline=True)
    task = RecordingTask(10, "late", out)
    timer.add(task)
    coarse = task._bucket
    assert isinstance(coarse, TimerTaskList) and coarse.span_ms > 1
    held = coarse.take()  # a cascade has taken it out of its bucket...
    task.cancel()  # ...when the cancel comes: the pop finds nothing
    for moved, expiration in held:  # the cascade goes on and re-inserts it
        assert timer.wheel.add(moved, expiration) is False  # refused: it is cancelled
    clock.advance(20)
    timer.advance_clock(0)
    assert out == [] and timer.size == 0
    timer.close()


def test_bucket_delay_follows_the_clock() -> None:
    """A bucket is handed out by the delay queue only once its expiration has come."""
    clock = ManualClock(1_000)
    queue = DelayQueue(clock)
    bucket = TimerTaskList()
    bucket.set_expiration(clock.now_ms() + 10_000)
    queue.offer(bucket)
    clock.advance(5_000)
    assert queue.poll(0) is None
    clock.advance(5_000)
    assert queue.poll(0) is bucket


@pytest.mark.parametrize("bad", [1.5, "10", None, True])
def test_task_delay_must_be_int(bad: object) -> None:
    """A delay that is not a whole number of ms is rejected with a clear error."""
    with pytest.raises(InvalidInput, match="whole number of milliseconds"):
        NoopTask(bad)  # type: ignore[arg-type]


def test_take_survives_a_cancel_run_by_the_garbage_collector() -> None:
    """Listing a bucket's items makes a tuple each, and any allocation may run the
    garbage collector, whose callbacks are Python code (hypothesis installs one): a
    lock-free cancel run there, as another thread would, must not break take. Collecting
    at every allocation, with a callback cancelling a task each time, take still empties
    the bucket and hands out each task at most once."""
    bucket = TimerTaskList()
    tasks = [NoopTask(5) for _ in range(200)]
    for task in tasks:
        bucket.add(task, 5)
    victims = iter(tasks[::2])

    def cancel_one(phase: str, _info: dict[str, Any]) -> None:
        victim = next(victims, None) if phase == "start" else None
        if victim is not None:
            victim.cancel()

    threshold = gc.get_threshold()
    gc.set_threshold(1)
    gc.callbacks.append(cancel_one)
    try:
        taken = bucket.take()
    finally:
        gc.callbacks.remove(cancel_one)
        gc.set_threshold(*threshold)
    assert len(bucket) == 0 and bucket.expiration == -1
    assert len({id(t) for t, _ in taken}) == len(taken)
    assert {id(t) for t, _ in taken} <= {id(t) for t in tasks}
