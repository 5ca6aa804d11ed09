"""Clocks for the engine.

The engine runs on a monotonic clock (Kafka moved its timers off wall-clock time after a
clock step broke brokers, KAFKA-4051). Wall time, or rather Redis server time, is used
only at the persistence boundary, where a worker keeps a measured offset to it.
"""

from __future__ import annotations

import threading
from typing import Protocol

from ..clock import SYSTEM_TIME, Time


class Clock(Protocol):
    """Anything that tells the time in whole milliseconds."""

    def now_ms(self) -> int: ...


class MonotonicClock:
    """The process's monotonic clock in milliseconds (never steps backwards), read from
    the :class:`~timer.clock.Time` it is given."""

    __slots__ = ("time",)

    def __init__(self, time: Time = SYSTEM_TIME) -> None:
        self.time = time

    def now_ms(self) -> int:
        return self.time.monotonic_ns() // 1_000_000

    def ns_until(self, ms: int) -> int:
        """Nanoseconds from now to the instant this clock reads ``ms`` (the delay queue
        waits to it, not to a whole ms from a reading part way through one)."""
        return ms * 1_000_000 - self.time.monotonic_ns()


class ShiftedClock:
    """The monotonic clock moved forward by a shift, to put its whole milliseconds on
    another clock's: a worker aligns its wheel's with Redis time's, so a timer due at a
    whole Redis ms is released at it, not up to a ms after. Never moves back;
    thread-safe to read."""

    __slots__ = ("shift_ns", "time")

    # a phase this much short of the wanted one is left alone (readings jitter by this)
    TOLERANCE_NS = 150_000

    def __init__(self, time: Time = SYSTEM_TIME) -> None:
        self.shift_ns = 0
        self.time = time

    def align(self, phase_ns: int, ahead_ok_ns: int = 0) -> int:
        """Move forward so that ``(monotonic + shift) mod 1 ms`` is ``phase_ns``, unless
        it is already up to ``TOLERANCE_NS`` short of it or ``ahead_ok_ns`` past it;
        returns the move (ns). A phase further past it takes a move of nearly a ms, which
        releases that ms's tasks early once."""
        move = (phase_ns - self.shift_ns) % 1_000_000  # (any phase_ns: taken mod 1 ms)
        if move <= self.TOLERANCE_NS or move >= 1_000_000 - ahead_ok_ns:
            return 0
        self.shift_ns += move
        return move

    def now_ms(self) -> int:
        return (self.time.monotonic_ns() + self.shift_ns) // 1_000_000

    def ns_until(self, ms: int) -> int:
        return ms * 1_000_000 - (self.time.monotonic_ns() + self.shift_ns)


class ManualClock:
    """A clock that moves only when told to: for deterministic tests.

    Thread-safe: ``advance`` and ``now_ms`` may be called from any thread.
    """

    def __init__(self, start_ms: int = 0) -> None:
        self._now = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> int:
        """Move the clock forward by ``ms`` and return the new time."""
        if ms < 0:
            raise ValueError("a clock never goes backwards; advance by ms >= 0")
        lock = self._lock
        lock.acquire()  # not ``with``: half the cost in CPython 3.11, and benchmarks use this
        try:
            self._now += ms
            return self._now
        finally:
            lock.release()


MONOTONIC = MonotonicClock()
