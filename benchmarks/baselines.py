"""Baseline timers for the engine benchmark, written here only to be measured against.

* ``HeapTimer``: a ``heapq`` of (deadline, seq, task) with lazy deletion (a cancelled task
  stays in the heap until it reaches the top) — what most Python code does. No lock, and
  tasks run inline on the caller.
* ``SafeHeapTimer``: a ``heapq`` timer with ``SystemTimer``'s guarantees: a lock around
  every call (add and cancel from any thread), expired tasks handed to an executor thread
  in one batch per advance (``run`` never under the lock), and a cancelled task's memory
  freed at once (asyncio's way: the entry drops its task, and the heap is rebuilt when more
  than half of it is cancelled).
* ``HashedWheelTimer``: Netty's single-level hashed wheel: ``wheel_size`` buckets of
  ``tick_ms``; a timeout further out than one turn waits ``rounds`` turns in its bucket;
  every tick visits one bucket, empty or not.

All are driven like ``SystemTimer`` in the benchmark, and read the same clock it does (a
``ManualClock``): ``add(task)``, ``cancel(task)``, ``advance()`` expiring what is due.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from typing import Any

from timer import Clock


class HeapTimer:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.heap: list[tuple[int, int, Any]] = []
        self.seq = itertools.count()

    def add(self, task: Any) -> None:
        heapq.heappush(self.heap, (self.clock.now_ms() + task.delay_ms, next(self.seq), task))

    def cancel(self, task: Any) -> None:
        task.cancelled = True  # lazy: it leaves the heap when it reaches the top

    def advance(self) -> None:
        now_ms = self.clock.now_ms()
        heap = self.heap
        while heap and heap[0][0] <= now_ms:
            task = heapq.heappop(heap)[2]
            if not task.cancelled:
                task.run()

    @property
    def size(self) -> int:
        return len(self.heap)


class SafeHeapTimer:
    def __init__(self, clock: Clock, executor: Any) -> None:
        self.clock = clock
        self.heap: list[list[Any]] = []  # [deadline, seq, task or None once cancelled]
        self.seq = itertools.count()
        self.lock = threading.Lock()
        self.cancelled = 0
        self.executor = executor

    def add(self, task: Any) -> None:
        entry = [self.clock.now_ms() + task.delay_ms, next(self.seq), task]
        with self.lock:
            heapq.heappush(self.heap, entry)
            task.bucket = entry

    def cancel(self, task: Any) -> None:
        with self.lock:
            entry = task.bucket
            if entry is None or entry[2] is None:
                return
            entry[2] = None  # the task is free now; its slot goes at the top or a rebuild
            task.bucket = None
            self.cancelled += 1
            if self.cancelled > 100 and 2 * self.cancelled > len(self.heap):
                self.heap = [e for e in self.heap if e[2] is not None]
                heapq.heapify(self.heap)
                self.cancelled = 0

    def advance(self) -> None:
        now_ms = self.clock.now_ms()
        expired = []
        with self.lock:
            heap = self.heap
            while heap and heap[0][0] <= now_ms:
                task = heapq.heappop(heap)[2]
                if task is None:
                    self.cancelled -= 1
                else:
                    task.bucket = None
                    expired.append(task)
        if expired:
            self.executor.submit(expired)

    @property
    def size(self) -> int:
        return len(self.heap) - self.cancelled


class HashedWheelTimer:
    def __init__(
        self, clock: Clock, tick_ms: int = 1, wheel_size: int = 512, start_ms: int = 0
    ) -> None:
        self.clock = clock
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.buckets: list[dict[Any, int]] = [{} for _ in range(wheel_size)]  # task -> rounds
        self.tick = start_ms // tick_ms

    def add(self, task: Any) -> None:
        deadline_tick = max((self.clock.now_ms() + task.delay_ms) // self.tick_ms, self.tick)
        rounds, index = divmod(deadline_tick - self.tick, self.wheel_size)
        bucket = self.buckets[(self.tick + index) % self.wheel_size]
        bucket[task] = rounds
        task.bucket = bucket

    def cancel(self, task: Any) -> None:
        task.cancelled = True
        bucket = task.bucket
        if bucket is not None:
            bucket.pop(task, None)

    def advance(self) -> None:
        target = self.clock.now_ms() // self.tick_ms
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
