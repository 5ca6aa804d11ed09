"""The wheel against a heap oracle (Kafka's MockTimer idea): random add/cancel/advance.

On tiny wheels (1 ms ticks, 2 to 5 buckets, so many levels and cascades), after every
advance the set of tasks that ran must be exactly the oracle's: every task whose
expiration has passed and that was not cancelled, each run once, none early.
"""

from __future__ import annotations

import heapq
from typing import cast

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from timer import ManualClock, SystemTimer

from .helpers import Marker, RecordingTask


class WheelVersusHeap(RuleBasedStateMachine):
    @initialize(start=st.integers(min_value=0, max_value=10**9), wheel_size=st.integers(2, 5))
    def setup(self, start: int, wheel_size: int) -> None:
        self.clock = ManualClock(start)
        self.timer = SystemTimer("oracle", tick_ms=1, wheel_size=wheel_size, clock=self.clock)
        self.ran: list[object] = []
        self.tasks: dict[int, RecordingTask] = {}
        self.heap: list[tuple[int, int]] = []  # (expiration, id)
        self.cancelled: set[int] = set()
        self.expirations: dict[int, int] = {}
        self.expected: set[int] = set()
        self.next_id = 0
        self.last_advance = start

    def teardown(self) -> None:
        if hasattr(self, "timer"):
            self.timer.close()

    @rule(delay=st.one_of(st.integers(-5, 40), st.integers(41, 5_000)))
    def add(self, delay: int) -> None:
        ident = self.next_id
        self.next_id += 1
        task = RecordingTask(delay, ident, self.ran, now=self.clock.now_ms)
        self.tasks[ident] = task
        self.expirations[ident] = self.clock.now_ms() + delay
        if delay <= 0:
            self.expected.add(ident)  # due already: runs at once
        else:
            heapq.heappush(self.heap, (self.clock.now_ms() + delay, ident))
        self.timer.add(task)

    @precondition(lambda self: bool(self.tasks))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        ident = data.draw(st.sampled_from(sorted(self.tasks)))
        self.tasks[ident].cancel()
        if ident not in self.expected:
            self.cancelled.add(ident)

    @rule(ms=st.one_of(st.integers(0, 3), st.integers(4, 2_000)))
    def advance(self, ms: int) -> None:
        now = self.clock.advance(ms)
        while self.heap and self.heap[0][0] <= now:
            _, ident = heapq.heappop(self.heap)
            if ident not in self.cancelled:
                self.expected.add(ident)
        while self.timer.advance_clock(0):
            pass
        self.last_advance = now

    @invariant()
    def same_firing_set_never_early(self) -> None:
        if not hasattr(self, "timer"):
            return
        marker = Marker()  # due already: it runs after everything submitted before it
        self.timer.add(marker)
        assert marker.done.wait(10)
        ran = cast("list[tuple[int, int]]", self.ran)  # RecordingTask with a clock
        ran_ids = [ident for ident, _ in ran]
        assert len(ran_ids) == len(set(ran_ids)), "a task ran twice"
        assert set(ran_ids) == self.expected
        for ident, at in ran:
            task = self.tasks[ident]
            assert at >= self.expirations[ident], f"task {ident} ran early"
            assert task.runs == 1


WheelVersusHeap.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestWheelVersusHeap = WheelVersusHeap.TestCase
