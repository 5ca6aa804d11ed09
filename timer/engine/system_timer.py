"""SystemTimer: the hierarchical wheel, its delay queue and the executor (Kafka's SystemTimer).

Netty's HashedWheelTimer contributes ``max_pending`` (adding past it raises
:class:`~timer.errors.TimerFull`) and ``stop()``, which returns the tasks that never ran.
Delays that would push an expiration past ``MAX_EXPIRATION_MS`` saturate there.
"""

from __future__ import annotations

import threading
from operator import itemgetter

from ..errors import InvalidInput, TimerClosed, TimerFull
from . import core
from .bucket import TimerTaskList
from .clock import MONOTONIC, Clock
from .delay_queue import DelayQueue
from .executor import InlineExecutor, TaskExecutor
from .task import TimerTask
from .wheel import TimingWheel

MAX_EXPIRATION_MS = 2**63 - 1
DEFAULT_WHEEL_SIZE = 256

_EXPIRATION = itemgetter(1)
_TASK = itemgetter(0)


def _positive_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInput(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


class SystemTimer:
    """A timer of tasks: ``add`` them, drive it with ``advance_clock`` (or a reaper).

    Thread-safe: ``add``, a task's ``cancel`` and ``close`` from any thread; one lock
    guards every bucket of every level and the delay queue, taken once per call. Drive
    ``advance_clock`` from one thread at a time (a :class:`SystemTimerReaper`).

    Expired tasks run in batches, never under the lock, so a task may add or cancel tasks
    of the same timer. By default they run on the timer's executor thread (Kafka's). With
    ``inline=True`` they run on the thread that expired them (the one calling
    ``advance_clock``, or ``add`` for a task already due): no thread hop, for tasks whose
    ``run`` only hands work on, such as a ``queue.put``.
    """

    # Slots: the compiled core (``_speedups``) reads them at fixed offsets. ``__dict__``
    # keeps instances open to other attributes (a test wraps ``close``, say).
    __slots__ = (
        "__dict__",
        "_bound",
        "_checks",
        "_clock",
        "_closed",
        "_executor",
        "_lock",
        "_max_pending",
        "_queue",
        "_wheel",
        "inline",
        "name",
        "tick_ms",
    )

    def __init__(
        self,
        name: str = "timer",
        tick_ms: int = 1,
        wheel_size: int = DEFAULT_WHEEL_SIZE,
        start_ms: int | None = None,
        max_pending: int = 0,
        *,
        clock: Clock = MONOTONIC,
        inline: bool = False,
    ) -> None:
        self.tick_ms = _positive_int("tick_ms", tick_ms, 1)
        # A one-bucket wheel would give its overflow wheel the same tick, forever.
        _positive_int("wheel_size", wheel_size, 2)
        self._max_pending = _positive_int("max_pending", max_pending, 0)
        self.name = name
        self._clock = clock
        self._lock = threading.Lock()
        self._queue = DelayQueue(clock, threading.Condition(self._lock))
        self._wheel = TimingWheel(
            tick_ms, wheel_size, clock.now_ms() if start_ms is None else start_ms, self._queue
        )
        # An upper bound of the tasks held, kept without the cost of an exact count (a
        # cancel takes no lock, so it cannot decrement it): adds raise it, expiries lower
        # it, and only when it reaches max_pending is the exact count taken.
        self._bound = 0
        self._executor = InlineExecutor() if inline else TaskExecutor(name)
        self.inline = inline
        self._closed = False
        self._checks = self._max_pending > 0  # closed, or a limit to check: off the fast path
        # Releases taken out of the wheel and not yet handed over (run inline, or given to
        # the executor), by number: ``expire_due`` waits for those under way when called.
        self._handing: set[int] = set()
        self._releases = 0
        self._awaiting = 0  # threads waiting in expire_due (a release's end wakes them)

    @property
    def max_pending(self) -> int:
        """Netty's bound on pending tasks (0: none); ``add`` past it raises TimerFull."""
        return self._max_pending

    @property
    def size(self) -> int:
        """Tasks in the wheel (not yet expired, not cancelled); O(buckets), for metrics."""
        with self._lock:
            return self._wheel.size()

    @property
    def wheel(self) -> TimingWheel:
        return self._wheel

    @property
    def task_errors(self) -> int:
        """How many ``run()`` calls raised (each was logged)."""
        return self._executor.errors

    def _python_add(self, task: TimerTask) -> None:
        """Schedule ``task`` to run ``task.delay_ms`` from now (at once if already due)."""
        if not isinstance(task, TimerTask):
            raise InvalidInput(f"add() takes a TimerTask, got {type(task).__name__}")
        # Explicit acquire/release on the hot paths: ``with lock`` costs twice as much in
        # CPython 3.11 (measured; docs/design-notes.md, "A lean wheel for CPython").
        lock = self._lock
        lock.acquire()
        try:
            if self._checks:
                self._check_room()
            old = task._bucket
            if old is not None:  # added again: a task sits in one bucket at a time
                old.pop(task, None)
            task._cancelled = False
            now = self._clock.now_ms()
            expiration = now + task.delay_ms
            # The finest level, inline: Kafka's TimingWheel.add without the call, for the
            # short timeouts that are most of a purgatory's adds. The rest take the call.
            wheel = self._wheel
            current = wheel.current_time
            if now < expiration < current + wheel.interval and (
                expiration >= current + wheel.tick_ms
            ):
                virtual_id = expiration // wheel.tick_ms
                bucket = wheel.buckets[virtual_id % wheel.wheel_size]
                bucket[task] = expiration
                task._bucket = bucket
                self._bound += 1
                if bucket.expiration != virtual_id * wheel.tick_ms:
                    bucket.expiration = virtual_id * wheel.tick_ms
                    self._queue.offer(bucket)
                return
            if not self._add_rest(task, now, expiration):
                return
        finally:
            lock.release()
        self._executor.submit((task,))

    # The C one when built (timer/engine/core.py says when and why), else the above.
    add = core.pick("add", _python_add)

    def _add_rest(self, task: TimerTask, now: int, expiration: int) -> bool:
        """``add`` past the finest level, under the lock: True if the task is due now
        (the caller runs it once the lock is released). The compiled ``add`` calls it too."""
        if expiration > MAX_EXPIRATION_MS:  # noqa: PLR1730 - min() is a call
            expiration = MAX_EXPIRATION_MS
        # Due already: run it now, even if the wheel's clock lags behind (it moves only
        # when a bucket expires), rather than park it in a bucket that is already due.
        if expiration > now and self._wheel.add(task, expiration):
            self._bound += 1
            return False
        return True

    def _check_room(self) -> None:
        if self._closed:
            raise TimerClosed(f"timer {self.name!r} is closed; create a new one")
        if self._max_pending and self._bound >= self._max_pending:
            self._bound = held = self._wheel.size()
            if held >= self._max_pending:
                raise TimerFull(
                    f"timer {self.name!r} has {held} pending tasks, the max_pending "
                    f"limit; let some expire or raise max_pending"
                )

    def advance_clock(self, timeout_ms: float | None = 0) -> bool:
        """Wait up to ``timeout_ms`` for a due bucket, then expire every due bucket.

        Returns False if no bucket came due in time. Expired tasks are handed over (to
        the executor, or run inline) in one batch after the lock is released.
        """
        expired: list[TimerTask] = []
        queue = self._queue
        lock = self._lock
        lock.acquire()
        try:
            bucket = queue.poll(timeout_ms)
            if bucket is None:
                return False
            wheel = self._wheel
            add = wheel.add
            finest = self.tick_ms
            now = self._clock.now_ms()
            due_before = now - now % finest + finest  # what expires if the clock reached now
            while bucket is not None:
                wheel.advance_clock(bucket.expiration)
                if bucket.span_ms == finest:
                    # The finest level: everything in a due bucket has expired.
                    expired += bucket.take_tasks()
                elif bucket.expiration + bucket.span_ms <= due_before:
                    # The reaper fell behind a whole coarse bucket: every task in it is due
                    # now, so expire them in deadline order rather than cascade each one.
                    expired += map(_TASK, sorted(bucket.take(), key=_EXPIRATION))
                else:
                    # Kafka's flush(reinsert): each task cascades into a finer level.
                    for task, expiration in bucket.take():
                        if not add(task, expiration):
                            expired.append(task)
                bucket = queue.poll(0)
            self._bound -= len(expired)
            if expired:
                self._releases += 1
                release = self._releases
                self._handing.add(release)
        finally:
            lock.release()
        if expired:
            try:
                self._executor.submit(expired)
            finally:
                with queue.cond:
                    self._handing.discard(release)
                    if self._awaiting:
                        queue.cond.notify_all()
        return True

    def expire_due(self) -> None:
        """Expire every bucket due now, on this thread, and wait until the releases other
        threads (the reaper) had under way are handed over too: when it returns, every
        task whose time had come has run (inline) or been given to the executor.

        For a consumer that must not act on part of what is due: the reaper takes a
        release out of the wheel under the lock and hands its tasks over after, so
        between the two another thread saw only some of them, or none (the worker's
        firer, which must not fire a lower priority while a higher one due with it is
        still on its way out of another wheel). It waits only for the reaper's own work
        in hand (never for a bucket not yet due)."""
        self.advance_clock(0)
        cond = self._queue.cond
        with cond:
            under_way = set(self._handing)
            if not under_way:
                return
            self._awaiting += 1
            try:
                while under_way & self._handing:
                    cond.wait()
            finally:
                self._awaiting -= 1

    def wake(self) -> None:
        """Make a blocked ``advance_clock`` return (False) at once."""
        self._queue.interrupt()

    def close(self) -> None:
        """Accept no more tasks; let already-expired tasks finish running; drop the rest."""
        with self._lock:
            if self._closed:
                return
            self._closed = self._checks = True
        self._queue.close()
        self._executor.shutdown()

    def stop(self) -> list[TimerTask]:
        """Close at once and return every task that never ran (pending or queued to run)."""
        with self._lock:
            self._closed = self._checks = True
            pending = self._wheel.drain()
            self._bound = 0
        self._queue.close()
        return pending + self._executor.shutdown_now()

    @property
    def is_terminated(self) -> bool:
        return self._closed and self._executor.is_terminated

    def __enter__(self) -> SystemTimer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# The compiled add and cancel (if built) read the slots of these classes at fixed offsets.
core.bind(TimerTask, TimerTaskList, TimingWheel, SystemTimer, InvalidInput)
