"""The hierarchical timing wheel (Kafka's TimingWheel).

A simple timing wheel is a circular list of buckets of timer tasks. Let ``u`` be the time
unit (``tick_ms``). A wheel of size ``n`` has ``n`` buckets and holds tasks within an
``n * u`` interval; each bucket holds the tasks that fall in its ``u``-wide time range. At
every tick the wheel moves to the next bucket and expires everything in it. Insert and
delete are O(1), unlike the O(log N) of a priority queue (``heapq``, ``java.util.Timer``).

A single wheel only covers ``n * u``. A *hierarchical* wheel adds an overflow wheel above
it whose tick is the whole interval of the level below (``tick = lower.interval``), and so
on upwards, created on demand. A task too far out for level ``k`` goes to level ``k+1``;
when the upper wheel's clock reaches the task's bucket, the bucket is *flushed* and each
entry re-inserted, so it cascades into a finer wheel (Kafka's ``flush(reinsert)``). Memory
is proportional to the number of tasks, and no level ticks while nothing is due in it.

Worked example, ``u = 1 ms``, ``n = 20``, start at 0: level 1 covers [0, 20) ms in 1 ms
buckets, level 2 covers [0, 400) ms in 20 ms buckets, level 3 [0, 8000) ms in 400 ms
buckets. A task due at 350 ms lands in level 2's bucket [340, 360). At 340 ms that bucket
expires; its task is re-inserted and now fits level 1, in bucket [350, 351), which expires
at 350 ms. A task due at 5 ms lands directly in level 1.

Invariants kept here (each pinned by a test):

* ``current_time`` is always a multiple of ``tick_ms`` (rounded down).
* A task is *expired* (``add`` returns False) when ``expiration < current_time + tick_ms``.
* Bucket index ``(expiration // tick_ms) % wheel_size``; bucket expiration
  ``(expiration // tick_ms) * tick_ms``.
* A bucket is offered to the delay queue only when its expiration changes, so the queue
  holds at most one item per bucket in use, never one per task, and the timer never ticks
  through empty buckets: the reaper sleeps until the next non-empty bucket is due.

What differs from Kafka, for CPython (each measured by ``tickwheel bench engine``):

* A bucket is a ``dict`` of task -> expiration (no per-task entry node), and one lock
  guards every bucket of every level, taken once per public call.
* ``SystemTimer`` defaults to 256 buckets per level, not Kafka's 20: each cascade is a
  Python loop over the bucket, so fewer levels is what pays. With 1 ms ticks, level 1
  covers 256 ms and level 2 about 65 s, so a 30 s timeout cascades once, not three times.
* A due bucket of the finest level expires in one C-level copy, not entry by entry; a
  bucket of a coarser level whose whole span has already passed (the reaper fell behind)
  expires at once in deadline order instead of cascading through every level below.

Where it wins (``tickwheel bench engine``; the figures are on https://tickwheel.readthedocs.io/measured/):
expiring many timers, against a plain ``heapq``, in about half the memory: a heap pays
``log n`` per task in and out, the wheel a dict insert and a share of one C-level copy.
Kafka's purgatory workload (most timers cancelled within 200 ms) is almost all adds and
cancels, where a plain ``heapq`` does one ``heappush`` and one attribute store; in Python
the wheel's add cannot get under two ``heappush``es, and stays level with the heap. So
``add`` and ``cancel`` also exist in C (``_speedups.c``, used when built; the Python ones
remain), ahead of a plain heap and further ahead of a heap with the same guarantees (a
lock, an executor, a cancelled task freed at once). The asymptotic O(1) is real; in
CPython the constant is what has to be earned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .bucket import TimerTaskList
from .task import TimerTask

if TYPE_CHECKING:
    from .delay_queue import DelayQueue


class TimingWheel:
    """One level of the hierarchy; its overflow wheel is created on demand.

    Not thread-safe: the owning timer's lock must be held for ``add`` and
    ``advance_clock``, and there must be no ``add`` while ``advance_clock`` runs
    (Kafka says the same of its ``TimingWheel``).
    """

    __slots__ = (
        "_overflow",
        "_queue",
        "buckets",
        "current_time",
        "interval",
        "tick_ms",
        "wheel_size",
    )

    def __init__(
        self,
        tick_ms: int,
        wheel_size: int,
        start_ms: int,
        queue: DelayQueue,
    ) -> None:
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval = tick_ms * wheel_size
        # Rounded down to a multiple of tick_ms: buckets then line up with the ticks.
        self.current_time = start_ms - (start_ms % tick_ms)
        self._queue = queue
        self.buckets = [TimerTaskList(tick_ms) for _ in range(wheel_size)]
        self._overflow: TimingWheel | None = None

    @property
    def overflow_wheel(self) -> TimingWheel | None:
        return self._overflow

    def _add_overflow_wheel(self) -> TimingWheel:
        if self._overflow is None:
            self._overflow = TimingWheel(
                self.interval, self.wheel_size, self.current_time, self._queue
            )
        return self._overflow

    def add(self, task: TimerTask, expiration: int) -> bool:
        """Put the task (in no bucket now) in its bucket; False if expired or cancelled."""
        if task._cancelled:
            return False
        wheel = self
        # Iterative rather than Kafka's recursion: one frame however many levels there are.
        while True:
            current = wheel.current_time
            if expiration < current + wheel.tick_ms:
                return False
            if expiration < current + wheel.interval:
                virtual_id = expiration // wheel.tick_ms
                bucket = wheel.buckets[virtual_id % wheel.wheel_size]
                bucket[task] = expiration
                task._bucket = bucket
                # Offer the bucket only when its expiration changes (it was reused):
                # otherwise it is already in the queue with this very expiration.
                bucket_expiration = virtual_id * wheel.tick_ms
                if bucket.expiration != bucket_expiration:
                    bucket.expiration = bucket_expiration
                    wheel._queue.offer(bucket)
                return True
            wheel = wheel._overflow or wheel._add_overflow_wheel()

    def advance_clock(self, time_ms: int) -> None:
        """Move to ``time_ms`` rounded down to the tick; a move within a tick does nothing."""
        wheel: TimingWheel | None = self
        while wheel is not None and time_ms >= wheel.current_time + wheel.tick_ms:
            wheel.current_time = time_ms - (time_ms % wheel.tick_ms)
            time_ms = wheel.current_time
            wheel = wheel._overflow

    def levels(self) -> list[TimingWheel]:
        """This wheel and every overflow wheel above it, finest first."""
        out: list[TimingWheel] = []
        wheel: TimingWheel | None = self
        while wheel is not None:
            out.append(wheel)
            wheel = wheel._overflow
        return out

    def size(self) -> int:
        """Tasks held by every level: O(buckets), for metrics, not for hot paths."""
        return sum(len(bucket) for wheel in self.levels() for bucket in wheel.buckets)

    def drain(self) -> list[TimerTask]:
        """Remove and return every task of every level (for ``SystemTimer.stop``)."""
        drained: list[TimerTask] = []
        for wheel in self.levels():
            for bucket in wheel.buckets:
                if bucket:
                    drained += bucket.take_tasks()
        # A cancel that raced a cascade may have left its task behind: it never runs.
        return [task for task in drained if not task._cancelled]
