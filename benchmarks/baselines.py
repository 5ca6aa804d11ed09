"""Baseline timers for the engine benchmark, written here only to be measured against.

* ``HeapTimer``: a ``heapq`` of (deadline, seq, task) with lazy deletion (a cancelled task
  stays in the heap until it reaches the top) — what most Python code does.
* ``HashedWheelTimer``: Netty's single-level hashed wheel: ``wheel_size`` buckets of
  ``tick_ms``; a timeout further out than one turn waits ``rounds`` turns in its bucket;
  every tick visits one bucket, empty or not.

Both are driven like ``SystemTimer`` in the benchmark: ``add``, ``cancel`` (via the
task), ``advance_to(now_ms)`` running what expired.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any


class HeapTimer:
    def __init__(self) -> None:
        self.heap: list[tuple[int, int, Any]] = []
        self.seq = itertools.count()

    def add(self, task: Any, now_ms: int) -> None:
        heapq.heappush(self.heap, (now_ms + task.delay_ms, next(self.seq), task))

    def cancel(self, task: Any) -> None:
        task.cancelled = True  # lazy: it leaves the heap when it reaches the top

    def advance_to(self, now_ms: int) -> None:
        heap = self.heap
        while heap and heap[0][0] <= now_ms:
            task = heapq.heappop(heap)[2]
            if not task.cancelled:
                task.run()

    @property
    def size(self) -> int:
        return len(self.heap)


class HashedWheelTimer:
    def __init__(self, tick_ms: int = 1, wheel_size: int = 512, start_ms: int = 0) -> None:
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.buckets: list[dict[Any, int]] = [{} for _ in range(wheel_size)]  # task -> rounds
        self.tick = start_ms // tick_ms

    def add(self, task: Any, now_ms: int) -> None:
        deadline_tick = max((now_ms + task.delay_ms) // self.tick_ms, self.tick)
        rounds, index = divmod(deadline_tick - self.tick, self.wheel_size)
        bucket = self.buckets[(self.tick + index) % self.wheel_size]
        bucket[task] = rounds
        task.bucket = bucket

    def cancel(self, task: Any) -> None:
        task.cancelled = True
        bucket = task.bucket
        if bucket is not None:
            bucket.pop(task, None)

    def advance_to(self, now_ms: int) -> None:
        target = now_ms // self.tick_ms
        size = self.wheel_size
        while self.tick <= target:  # Netty visits every tick, empty buckets included
            bucket = self.buckets[self.tick % size]
            if bucket:
                expired = [t for t, r in bucket.items() if r <= 0]
                for t in list(bucket):
                    if bucket[t] > 0:
                        bucket[t] -= 1
                for t in expired:
                    del bucket[t]
                    t.bucket = None
                    t.run()
            self.tick += 1

    @property
    def size(self) -> int:
        return sum(len(b) for b in self.buckets)
