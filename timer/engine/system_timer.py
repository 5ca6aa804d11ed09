"""SystemTimer: the hierarchical wheel, its delay queue and the executor (Kafka's SystemTimer).

Netty's HashedWheelTimer contributes ``max_pending`` (adding past it raises
:class:`~timer.errors.TimerFull`) and ``stop()``, which returns the tasks that never ran.
Delays that would push an expiration past ``MAX_EXPIRATION_MS`` saturate there.
"""

from __future__ import annotations

import threading

from ..errors import InvalidInput, TimerClosed, TimerFull
from .clock import MONOTONIC, Clock
from .delay_queue import DelayQueue
from .executor import TaskExecutor
from .task import TimerTask, TimerTaskEntry
from .task_list import TaskCounter
from .wheel import TimingWheel

MAX_EXPIRATION_MS = 2**63 - 1


def _positive_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInput(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


class SystemTimer:
    """A timer of tasks: ``add`` them, drive it with ``advance_clock`` (or a reaper).

    Thread-safe: ``add``, a task's ``cancel`` and ``close`` from any thread; one lock
    guards every bucket of every level. Drive ``advance_clock`` from one thread at a time
    (a :class:`SystemTimerReaper`). Expired tasks run on the executor's thread, never
    under the lock, so a task may add or cancel tasks of the same timer.
    """

    def __init__(
        self,
        name: str = "timer",
        tick_ms: int = 1,
        wheel_size: int = 20,
        start_ms: int | None = None,
        max_pending: int = 0,
        *,
        clock: Clock = MONOTONIC,
    ) -> None:
        _positive_int("tick_ms", tick_ms, 1)
        # A one-bucket wheel would give its overflow wheel the same tick, forever.
        _positive_int("wheel_size", wheel_size, 2)
        self.max_pending = _positive_int("max_pending", max_pending, 0)
        self.name = name
        self._clock = clock
        self._lock = threading.RLock()
        self._counter = TaskCounter()
        self._queue = DelayQueue(clock)
        self._wheel = TimingWheel(
            tick_ms,
            wheel_size,
            clock.now_ms() if start_ms is None else start_ms,
            self._counter,
            self._queue,
            lock=self._lock,
        )
        self._executor = TaskExecutor(name)
        self._closed = False

    @property
    def size(self) -> int:
        """Tasks in the wheel (not yet expired, not cancelled)."""
        return self._counter.value

    @property
    def wheel(self) -> TimingWheel:
        return self._wheel

    @property
    def task_errors(self) -> int:
        """How many ``run()`` calls raised (each was logged)."""
        return self._executor.errors

    def add(self, task: TimerTask) -> None:
        """Schedule ``task`` to run ``task.delay_ms`` from now (at once if already due)."""
        if not isinstance(task, TimerTask):
            raise InvalidInput(f"add() takes a TimerTask, got {type(task).__name__}")
        with self._lock:
            if self._closed:
                raise TimerClosed(f"timer {self.name!r} is closed; create a new one")
            if self.max_pending and self._counter.value >= self.max_pending:
                raise TimerFull(
                    f"timer {self.name!r} has {self._counter.value} pending tasks, the "
                    f"max_pending limit; let some expire or raise max_pending"
                )
            now = self._clock.now_ms()
            expiration = min(now + task.delay_ms, MAX_EXPIRATION_MS)
            entry = TimerTaskEntry(task, expiration)
            # Due already: run it now, even if the wheel's clock lags behind (it moves only
            # when a bucket expires), rather than park it in a bucket that is already due.
            if expiration <= now:
                entry.remove()
                run_now = not entry.cancelled
            else:
                run_now = not self._wheel.add(entry) and not entry.cancelled
        if run_now:
            self._executor.submit(task)

    def advance_clock(self, timeout_ms: float | None = 0) -> bool:
        """Wait up to ``timeout_ms`` for a due bucket, then expire every due bucket.

        Returns False if no bucket came due in time. Expired tasks are handed to the
        executor after the lock is released, so ``run()`` never runs under it.
        """
        bucket = self._queue.poll(timeout_ms)
        if bucket is None:
            return False
        expired: list[TimerTask] = []
        wheel = self._wheel

        def reinsert(entry: TimerTaskEntry) -> None:
            if not wheel.add(entry) and not entry.cancelled:
                expired.append(entry.timer_task)

        with self._lock:
            while bucket is not None:
                wheel.advance_clock(bucket.expiration)
                bucket.flush(reinsert)
                bucket = self._queue.poll(0)
        submit = self._executor.submit
        for task in expired:
            submit(task)
        return True

    def wake(self) -> None:
        """Make a blocked ``advance_clock`` return (False) at once."""
        self._queue.interrupt()

    def close(self) -> None:
        """Accept no more tasks; let already-expired tasks finish running; drop the rest."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._queue.close()
        self._executor.shutdown()

    def stop(self) -> list[TimerTask]:
        """Close at once and return every task that never ran (pending or queued to run)."""
        with self._lock:
            self._closed = True
            pending = [e.timer_task for e in self._wheel.drain()]
        self._queue.close()
        return pending + self._executor.shutdown_now()

    @property
    def is_terminated(self) -> bool:
        return self._closed and self._executor.is_terminated

    def __enter__(self) -> SystemTimer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
