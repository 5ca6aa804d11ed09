"""The firer's backlog: what the wheels expired, taken off their queues and not yet
sent, in the order it goes (the highest priority first, each priority in the order its
wheel expired it), and what shards still catching up have overdue, held until their
round is loaded. :class:`~timer.worker.firing.Firer` sends it.

Only the firer's thread (or ``Worker.run_once``'s caller) uses it; the context's lock
is taken only to read the shards' state.
"""

from __future__ import annotations

import heapq
import queue
from collections import deque

from .context import WorkerContext
from .shard import FireTask

# The most expired entries moved into the firer's backlog between two batches: bounds a
# round's work while still ordering a flood by priority (a batch is fire_batch * 4).
BACKLOG_STEP = 50_000
# The longest the firer holds back what shards being taken have overdue, waiting for the
# round's other shards to load: a slow load must not stall firing for long.
CATCH_UP_HOLD_S = 2.0


class Backlog:
    """Expired entries taken and not yet sent, by priority (the firer's half that
    decides what goes next; the other half, :class:`~timer.worker.firing.Firer`, sends)."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        # Expired entries taken off fire_queue, not yet sent: priority -> in expiry order
        self.backlog: dict[int, deque[FireTask]] = {}
        # Expired entries of shards still catching up (ctx.catching_up), since when held
        self.held: list[FireTask] = []
        self.held_since = 0.0

    def due_now(self) -> list[FireTask]:
        """What the wheel has expired so far and no one has taken (``run_once``), the
        highest priorities first."""
        while self._take_expired():
            pass
        if self.held:
            self._let_go()
        return self._next_batch(sum(map(len, self.backlog.values())))

    def _keep(self, task: FireTask | None) -> None:
        """Into the backlog, after those of its priority (held while its shard is one of
        a rebalance's still loading). None is a wake-up only (RaisedSink)."""
        if task is None or task.kept:  # a wake-up, or taken by its deadline already
            return
        task.kept = True
        if task.shard in self.ctx.catching_up:
            if not self.held:
                self.held_since = self.ctx.time.monotonic()
            self.held.append(task)
            return
        line = self.backlog.get(task.priority)
        if line is None:
            line = self.backlog[task.priority] = deque()
        line.append(task)

    def _let_go(self) -> None:
        """The held entries into the backlog, by priority, once every shard of the round
        is loaded (or they were held CATCH_UP_HOLD_S)."""
        ctx = self.ctx
        with ctx.lock:
            waiting = bool(ctx.catching_up)
        if waiting and ctx.time.monotonic() - self.held_since < CATCH_UP_HOLD_S:
            return
        held, self.held = self.held, []
        for task in held:
            line = self.backlog.get(task.priority)
            if line is None:
                line = self.backlog[task.priority] = deque()
            line.append(task)

    def _take_expired(self) -> bool:
        """Move what the wheel expired into the backlog (by priority), at most one
        BACKLOG_STEP a round, so a flood is ordered as it is taken, not all first; True
        if that step was full (more may wait). The raised wheel's first, all of them:
        they are few, and must not wait behind a flood on fire_queue."""
        self._take_raised_queue()
        get, keep = self.ctx.fire_queue.get_nowait, self._keep
        for _ in range(BACKLOG_STEP):
            try:
                keep(get())
            except queue.Empty:
                return False
        return True

    def _take_raised_queue(self) -> None:
        """Move what the raised wheel's reaper let go into the backlog."""
        raised, keep = self.ctx.raised_queue.get_nowait, self._keep
        while True:
            try:
                keep(raised())
            except queue.Empty:
                return

    def _take_raised(self, deadline_ms: int) -> None:
        """Into the backlog: the raised wheel's live entries due no later than
        ``deadline_ms`` (they stay in that wheel, and are dropped when it lets them go);
        entries no longer live (fired, replaced, their shard dropped) leave the heap."""
        ctx = self.ctx
        heap, taken = ctx.raised_due, []
        with ctx.lock:
            while heap:
                due, _, task = heap[0]
                state = ctx.shards.get(task.shard)
                live = (
                    not task.kept and state is not None and state.tasks.get(task.timer_id) is task
                )
                if live and due > deadline_ms:
                    break
                heapq.heappop(heap)
                if live:
                    taken.append(task)
        for task in taken:
            self._keep(task)

    def _next_batch(self, most: int) -> list[FireTask]:
        """The next ``most`` entries of the backlog, highest priority first, each
        priority in the order the wheel expired them."""
        batch: list[FireTask] = []
        for priority in sorted(self.backlog, reverse=True):
            line = self.backlog[priority]
            while line and len(batch) < most:
                batch.append(line.popleft())
            if not line:
                del self.backlog[priority]
            if len(batch) >= most:
                break
        return batch

    def _put_back(self, tasks: list[FireTask]) -> None:
        """Entries taken but not sent: back to the front of their priorities' lines."""
        by_priority: dict[int, list[FireTask]] = {}
        for task in tasks:
            by_priority.setdefault(task.priority, []).append(task)
        for priority, line in by_priority.items():
            self.backlog.setdefault(priority, deque()).extendleft(reversed(line))
