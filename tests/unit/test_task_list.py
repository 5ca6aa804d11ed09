"""TimerTaskList: Kafka's TimerTaskListTest, plus the dict-backed bucket's contract."""

from __future__ import annotations

import pytest

from timer import InvalidInput, ManualClock
from timer.engine.delay_queue import DelayQueue
from timer.engine.task import TimerTaskEntry
from timer.engine.task_list import TaskCounter, TimerTaskList

from .helpers import NoopTask


def live(bucket: TimerTaskList) -> int:
    count = 0

    def inc(_: object) -> None:
        nonlocal count
        count += 1

    bucket.for_each(inc)
    return count


def test_reinsert_moves_tasks_between_lists_and_cancel_empties_them() -> None:
    """Re-adding a task under a new entry moves it; the shared count never double-counts."""
    counter = TaskCounter()
    list1, list2, list3 = (TimerTaskList(counter) for _ in range(3))
    tasks = []
    for i in range(1, 11):
        task = NoopTask(0)
        list1.add(TimerTaskEntry(task, 10))
        assert counter.value == i
        tasks.append(task)

    for task in tasks[:4]:
        before = counter.value
        list2.add(TimerTaskEntry(task, 10))  # the new entry removes the old one
        assert counter.value == before
    assert (live(list1), live(list2)) == (6, 4)
    assert counter.value == 10

    for task in tasks[4:]:
        before = counter.value
        list3.add(TimerTaskEntry(task, 10))
        assert counter.value == before
    assert (live(list1), live(list2), live(list3)) == (0, 4, 6)
    assert counter.value == 10

    list1.for_each(lambda t: t.cancel())
    assert (live(list1), live(list2), live(list3)) == (0, 4, 6)
    list2.for_each(lambda t: t.cancel())
    assert (live(list1), live(list2), live(list3)) == (0, 0, 6)
    list3.for_each(lambda t: t.cancel())
    assert (live(list1), live(list2), live(list3)) == (0, 0, 0)
    assert counter.value == 0


def test_set_expiration_reports_only_changes() -> None:
    """set_expiration returns True only when the value changes (the bucket must be queued)."""
    bucket = TimerTaskList(TaskCounter())
    assert bucket.expiration == -1
    assert bucket.set_expiration(100) is True
    assert bucket.set_expiration(100) is False
    assert bucket.set_expiration(200) is True


def test_flush_empties_resets_and_applies_fn() -> None:
    """flush hands every entry to fn, empties the bucket and resets its expiration."""
    counter = TaskCounter()
    bucket = TimerTaskList(counter)
    entries = [TimerTaskEntry(NoopTask(0), 5) for _ in range(3)]
    for e in entries:
        bucket.add(e)
    bucket.set_expiration(5)
    seen: list[TimerTaskEntry] = []
    bucket.flush(seen.append)
    assert seen == entries
    assert len(bucket) == 0 and counter.value == 0 and bucket.expiration == -1
    assert all(e.bucket is None for e in entries)


def test_cancel_is_o1_removal_from_its_bucket() -> None:
    """cancel() unlinks the entry from its bucket and marks the task cancelled."""
    counter = TaskCounter()
    bucket = TimerTaskList(counter)
    task = NoopTask(0)
    entry = TimerTaskEntry(task, 1)
    bucket.add(entry)
    task.cancel()
    assert task.is_cancelled and entry.cancelled
    assert len(bucket) == 0 and counter.value == 0 and entry.bucket is None


def test_bucket_delay_follows_the_clock() -> None:
    """A bucket is handed out by the delay queue only once its expiration has come."""
    clock = ManualClock(1_000)
    queue = DelayQueue(clock)
    bucket = TimerTaskList(TaskCounter())
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
