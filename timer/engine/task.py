"""Timer tasks and the entries that bind them to a bucket (Kafka's TimerTask/TimerTaskEntry)."""

from __future__ import annotations

from typing import Protocol

from ..errors import InvalidInput


class Bucket(Protocol):
    """What an entry needs of the bucket holding it (``TimerTaskList`` is one)."""

    def remove(self, entry: TimerTaskEntry) -> None: ...


def check_delay(delay_ms: object) -> int:
    """Return ``delay_ms`` if it is a whole number of milliseconds, else raise InvalidInput."""
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int):
        raise InvalidInput(
            f"delay_ms must be a whole number of milliseconds (int), got {delay_ms!r}"
        )
    return delay_ms


class TimerTask:
    """Work to run once its delay has passed. Subclass it and override :meth:`run`.

    A task lives in at most one bucket at a time: binding it to a new entry removes it from
    the old one, and :meth:`cancel` unlinks it in O(1). A negative delay means "already
    expired": the task runs as soon as it is added.

    Thread-safe: ``cancel`` may be called from any thread, at any time.
    """

    __slots__ = ("_cancelled", "_entry", "delay_ms")

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = check_delay(delay_ms)
        self._entry: TimerTaskEntry | None = None
        self._cancelled = False

    def run(self) -> None:
        """Called once, on the timer's executor thread, when the task expires."""
        raise NotImplementedError("subclass TimerTask and override run()")

    def cancel(self) -> None:
        """Remove the task from its bucket (if any); it will never run."""
        self._cancelled = True
        entry = self._entry
        self._entry = None
        if entry is not None:
            entry.remove()

    @property
    def is_cancelled(self) -> bool:
        return self._cancelled

    def _bind(self, entry: TimerTaskEntry) -> None:
        # A task re-added under a new entry leaves its old bucket first, so it can never
        # sit in two buckets (and never run twice for one add).
        old = self._entry
        if old is not None and old is not entry:
            old.remove()
        self._entry = entry
        self._cancelled = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} delay_ms={self.delay_ms}>"


class TimerTaskEntry:
    """The node that binds a task to its bucket, with the absolute ``expiration_ms``.

    Not thread-safe alone: its bucket's lock guards it (``remove`` takes that lock).
    """

    __slots__ = ("bucket", "expiration_ms", "timer_task")

    def __init__(self, timer_task: TimerTask, expiration_ms: int) -> None:
        self.timer_task = timer_task
        self.expiration_ms = expiration_ms
        self.bucket: Bucket | None = None
        timer_task._bind(self)

    @property
    def cancelled(self) -> bool:
        """True once the task was cancelled or re-bound to another entry."""
        return self.timer_task._entry is not self

    def remove(self) -> None:
        """Unlink from whatever bucket holds this entry (retrying if it moves meanwhile)."""
        current = self.bucket
        while current is not None:
            current.remove(self)
            current = self.bucket

    def __lt__(self, other: TimerTaskEntry) -> bool:
        return self.expiration_ms < other.expiration_ms

    def __repr__(self) -> str:
        return f"<TimerTaskEntry expiration_ms={self.expiration_ms} task={self.timer_task!r}>"
