"""A bucket of timer task entries (Kafka's TimerTaskList).

Built on an insertion-ordered ``dict`` rather than a hand-made linked list: insert and
delete are O(1) at C speed, which is the contract that matters.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .task import TimerTask, TimerTaskEntry


class TaskCounter:
    """The number of entries in all buckets of one timer. Guarded by the buckets' lock."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class TimerTaskList:
    """A bucket: O(1) add and remove, an expiration that changes when the bucket is reused.

    All buckets of one timer share one re-entrant lock, handed in by the timer, so a flush
    can re-insert into other buckets while holding it, and ``cancel()`` from any other
    thread is safe. Not thread-safe without that lock: every method expects it held,
    except ``add``/``remove``/``flush``, which take it.
    """

    __slots__ = ("_counter", "_entries", "_expiration", "_lock")

    def __init__(self, task_counter: TaskCounter, lock: threading.RLock | None = None) -> None:
        self._counter = task_counter
        self._lock = lock if lock is not None else threading.RLock()
        self._entries: dict[TimerTaskEntry, None] = {}
        self._expiration = -1

    @property
    def expiration(self) -> int:
        """The bucket's expiration in ms, or -1 while it is unused."""
        return self._expiration

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the expiration; True only if it changed (the bucket must then be queued)."""
        changed = self._expiration != expiration_ms
        self._expiration = expiration_ms
        return changed

    def add(self, entry: TimerTaskEntry) -> None:
        # An entry may still sit in another bucket (a cascade moves it): unlink it first.
        while True:
            if entry.bucket is not None:
                entry.remove()
            with self._lock:
                if entry.bucket is None:
                    self._entries[entry] = None
                    entry.bucket = self
                    self._counter.value += 1
                    return

    def remove(self, entry: TimerTaskEntry) -> None:
        with self._lock:
            if entry.bucket is self:
                del self._entries[entry]
                entry.bucket = None
                self._counter.value -= 1

    def flush(self, fn: Callable[[TimerTaskEntry], object]) -> None:
        """Empty the bucket, reset its expiration, then apply ``fn`` to each entry."""
        with self._lock:
            entries = self._entries
            self._entries = {}
            for entry in entries:
                entry.bucket = None
            self._counter.value -= len(entries)
            self._expiration = -1
            for entry in entries:
                fn(entry)

    def for_each(self, fn: Callable[[TimerTask], object]) -> None:
        """Apply ``fn`` to the task of each live (not cancelled) entry."""
        with self._lock:
            snapshot = list(self._entries)
        for entry in snapshot:
            if not entry.cancelled:
                fn(entry.timer_task)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<TimerTaskList expiration={self._expiration} size={len(self._entries)}>"
