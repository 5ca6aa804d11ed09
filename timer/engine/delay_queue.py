"""The delay queue of buckets (Kafka's ``DelayQueue<TimerTaskList>``).

A heap keyed by bucket expiration. It holds buckets, never individual tasks: a bucket is
offered once each time its expiration changes. ``poll`` blocks until the head bucket is
due, a new earlier bucket is offered, the timeout passes, or the queue is interrupted.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time

from .clock import MONOTONIC, Clock
from .task_list import TimerTaskList


class DelayQueue:
    """Buckets by expiration; ``poll`` blocks until the head is due.

    Thread-safe: one condition variable guards the heap, so the timer offers buckets
    under its own lock while the reaper thread blocks in ``poll`` without it.
    """

    def __init__(self, clock: Clock = MONOTONIC) -> None:
        self._clock = clock
        self._heap: list[tuple[int, int, TimerTaskList]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition(threading.Lock())
        self._interrupted = False
        self._closed = False

    def offer(self, bucket: TimerTaskList) -> None:
        expiration = bucket.expiration
        with self._cond:
            heapq.heappush(self._heap, (expiration, next(self._seq), bucket))
            # Only a new head changes how long a waiting poll must sleep.
            if self._heap[0][2] is bucket:
                self._cond.notify()

    def poll(self, timeout_ms: float | None = 0) -> TimerTaskList | None:
        """The next due bucket, waiting up to ``timeout_ms`` (None = until one is due)."""
        end = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000.0
        heap = self._heap
        with self._cond:
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
                    delay_ms = heap[0][0] - self._clock.now_ms()
                    if delay_ms <= 0:
                        return heapq.heappop(heap)[2]
                    delay_s = delay_ms / 1000.0
                if end is None:
                    wait = delay_s
                else:
                    remaining = end - time.monotonic()
                    if remaining <= 0:
                        return None
                    wait = remaining if delay_s is None else min(remaining, delay_s)
                self._cond.wait(wait)

    def interrupt(self) -> None:
        """Make one blocked (or the next) ``poll`` return None at once."""
        with self._cond:
            self._interrupted = True
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def __len__(self) -> int:
        return len(self._heap)
