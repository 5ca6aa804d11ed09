"""A bucket of timer tasks (Kafka's TimerTaskList).

A ``dict`` subclass mapping each task to its expiration in ms: insert, delete and
"empty it all" are O(1) (or one C loop) with no per-task node object, where Kafka uses a
doubly linked list of ``TimerTaskEntry`` nodes. Insertion order is kept, so a bucket
expires its tasks in the order they were added.
"""

from __future__ import annotations

from collections.abc import Callable

from .task import TimerTask


class TimerTaskList(dict[TimerTask, int]):
    """A bucket: task -> expiration ms, with the bucket's own expiration and width.

    Not thread-safe alone: the timer's lock must be held for every method. The one
    exception is a task's ``cancel``, which pops itself without the lock (see there).
    """

    __slots__ = ("expiration", "span_ms")

    def __init__(self, span_ms: int = 1) -> None:
        super().__init__()
        self.span_ms = span_ms  # the tick of the wheel level that owns the bucket
        self.expiration = -1  # -1 while unused

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the expiration; True only if it changed (the bucket must then be queued)."""
        if self.expiration == expiration_ms:
            return False
        self.expiration = expiration_ms
        return True

    def add(self, task: TimerTask, expiration_ms: int) -> None:
        """Hold ``task``; the caller has taken it out of any other bucket."""
        self[task] = expiration_ms
        task._bucket = self

    def take(self) -> list[tuple[TimerTask, int]]:
        """Empty the bucket and reset its expiration; return its (task, expiration) pairs."""
        # Listing the items makes a tuple each, and an allocation may run the garbage
        # collector, whose callbacks and finalizers are Python code: another thread may
        # run then, and a lock-free cancel pop a task ("dictionary changed size during
        # iteration"). Only pops can happen (adds hold the lock), so read again: the
        # popped task is gone. take_tasks lists only keys: it makes no objects.
        while True:
            try:
                items = list(self.items())
                break
            except RuntimeError:
                continue
        self.clear()
        self.expiration = -1
        return items

    def take_tasks(self) -> list[TimerTask]:
        """Empty the bucket and reset its expiration; return its tasks in insertion order."""
        tasks = list(self)
        self.clear()
        self.expiration = -1
        return tasks

    def flush(self, fn: Callable[[TimerTask, int], object]) -> None:
        """Kafka's flush: empty the bucket, then apply ``fn(task, expiration)`` to each."""
        for task, expiration in self.take():
            fn(task, expiration)

    def __repr__(self) -> str:
        return f"<TimerTaskList expiration={self.expiration} size={len(self)}>"
