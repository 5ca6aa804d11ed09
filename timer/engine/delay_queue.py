"""The delay queue of buckets (Kafka's ``DelayQueue<TimerTaskList>``).

A heap keyed by bucket expiration. It holds buckets, never individual tasks: a bucket is
offered once each time its expiration changes. ``poll`` returns the head once it is due,
or waits until it is, a new earlier bucket is offered, the timeout passes, or the queue
is interrupted.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable

from ..clock import SYSTEM_TIME, Time
from .bucket import TimerTaskList
from .clock import MONOTONIC, Clock


class DelayQueue:
    """Buckets by expiration; ``poll`` waits until the head is due.

    Not thread-safe alone: it is guarded by its owner's lock, the one ``cond`` was built
    on (the timer's lock, so an ``add`` that offers a bucket takes no second lock). Hold
    ``cond`` for ``offer``, ``poll`` and ``len``; ``poll`` releases it while it waits.
    ``interrupt`` and ``close`` take it themselves.
    """

    def __init__(self, clock: Clock = MONOTONIC, cond: threading.Condition | None = None) -> None:
        self._clock = clock
        # a clock that can say how long until a reading (the monotonic ones) is waited on
        # to that instant; a manual clock, in whole ms
        self._ns_until: Callable[[int], int] | None = getattr(clock, "ns_until", None)
        # where it waits: the time the clock reads (a manual clock's: the system's)
        self.time: Time = getattr(clock, "time", SYSTEM_TIME)
        self._heap: list[tuple[int, int, TimerTaskList]] = []
        self._seq = itertools.count()
        self.cond = cond if cond is not None else threading.Condition(threading.Lock())
        self._waiting = 0
        self._interrupted = False
        self._closed = False

    def offer(self, bucket: TimerTaskList) -> None:
        heapq.heappush(self._heap, (bucket.expiration, next(self._seq), bucket))
        # Only a new head changes how long a waiting poll must sleep.
        if self._waiting and self._heap[0][2] is bucket:
            self.cond.notify()

    def poll(self, timeout_ms: float | None = 0) -> TimerTaskList | None:
        """The next due bucket, waiting up to ``timeout_ms`` (None = until one is due)."""
        heap = self._heap
        end: float | None = None
        while True:
            if self._closed:
                return None
            if self._interrupted:
                self._interrupted = False
                return None
            # A bucket that was flushed (and maybe reused) since it was offered is
            # stale here: its live expiration no longer matches the key it was queued at.
            while heap and heap[0][2].expiration != heap[0][0]:
                heapq.heappop(heap)
            delay_s: float | None = None
            if heap:
                expiration = heap[0][0]
                delay_ms = expiration - self._clock.now_ms()
                if delay_ms <= 0:
                    return heapq.heappop(heap)[2]
                delay_s = delay_ms / 1000.0
                if self._ns_until is not None:
                    # to the expiration itself, not a whole ms from a clock read that is
                    # up to a ms past a whole one: half a ms earlier on average
                    delay_s = max(0.0, self._ns_until(expiration) / 1e9)
            if timeout_ms is not None:
                if timeout_ms <= 0:
                    return None
                if end is None:
                    end = self.time.monotonic() + timeout_ms / 1000.0
                remaining = end - self.time.monotonic()
                if remaining <= 0:
                    return None
                delay_s = remaining if delay_s is None else min(remaining, delay_s)
            self._waiting += 1
            try:
                self.time.wait_on(self.cond, delay_s)
            finally:
                self._waiting -= 1

    def interrupt(self) -> None:
        """Make one blocked (or the next) ``poll`` return None at once."""
        with self.cond:
            self._interrupted = True
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self._closed = True
            self.cond.notify_all()

    def __len__(self) -> int:
        return len(self._heap)
