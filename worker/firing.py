"""Firing: expired wheel entries go through the fenced ``fire`` script in batches.

Threads: the wheel's reaper expires tasks onto ``fire_queue`` (inline: no executor
hop); the firer thread (``worker-firer``, ``loop``) takes them off in batches and sends
them; ``Worker.run_once`` calls ``fire_batch`` on the caller's thread instead. The
context's lock is never held across the call to Redis.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Iterable

from timer import tracing
from timer.durable.models import Traced
from timer.errors import Fenced, StoreError, TimerError

from .context import WorkerContext
from .leases import Leases
from .loading import Loader
from .planning import Planner
from .shard import FireTask, ShardState

log = logging.getLogger("worker")


class Firer:
    """Fires expired entries, grouped by shard and epoch (a dropped shard's are left to
    its next leader); puts back what Redis says is early or could not be decided."""

    def __init__(
        self, ctx: WorkerContext, loader: Loader, leases: Leases, planner: Planner
    ) -> None:
        self.ctx = ctx
        self.loader = loader
        self.leases = leases
        self.planner = planner

    def fire_batch(self, tasks: Iterable[FireTask]) -> int:
        """Fire expired wheel entries, grouped by shard and epoch; returns how many fired."""
        ctx = self.ctx
        groups: dict[tuple[int, int], list[FireTask]] = {}
        for task in tasks:
            groups.setdefault((task.shard, task.epoch), []).append(task)
        fired_total = 0
        size = ctx.settings.fire_batch
        for (shard, epoch), candidates in groups.items():
            with ctx.lock:
                state = ctx.shards.get(shard)
                if state is None or state.epoch != epoch:
                    continue  # dropped since: its next leader fires these
                live = [t for t in candidates if state.tasks.get(t.timer_id) is t]
            live.sort(key=lambda t: t.deadline_ms)
            for start in range(0, len(live), size):
                part = live[start : start + size]
                try:
                    fired_total += self._fire(state, part)
                except StoreError as exc:
                    ctx.shard_failed(shard, "firing", exc)
                    self._retry_later(state, part)
        return fired_total

    def _retry_later(self, state: ShardState, tasks: list[FireTask]) -> None:
        """Put tasks a failed fire could not decide back in the wheel, a little later (so a
        dead node is not hammered), leaving every other shard's firing alone."""
        with self.ctx.lock:
            for task in tasks:
                if state.tasks.get(task.timer_id) is task:
                    self.loader.add_task(state, task.timer_id, task.deadline_ms, min_delay_ms=100)

    def _fire(self, state: ShardState, group: list[FireTask]) -> int:
        ctx = self.ctx
        ids = [t.timer_id for t in group]
        plans = self.planner.for_fire(state, ids)  # the next occurrence of each schedule's
        try:
            # ahead: the shard's timers in the wheel will be decided soon (fired, or
            # cancelled: each leaves an outcome), so the results table grows for them
            # before they land, when that moves least (rx_grow in lua/include/results.lua)
            result = state.store.fire(
                ctx.id, state.epoch, ids, ttl_ms=ctx.settings.result_ttl_ms,
                ahead=len(state.tasks), plans=plans,
            )  # fmt: skip
        except Fenced:
            ctx.stats.fence_rejections += 1
            log.warning("shard %d: fenced at epoch %d; dropping it", state.shard, state.epoch,
                        extra=ctx.fields(state.shard))  # fmt: skip
            self.leases.drop(state.shard, release=False)
            return 0
        now = ctx.clock.now_ms()
        fired_ids, early_at = set(result.fired), result.early
        with ctx.lock:
            alive = ctx.shards.get(state.shard) is state
            for task in group:
                tid = task.timer_id
                if tid in fired_ids:
                    ctx.lateness.observe(now - task.deadline_ms)
                if state.tasks.get(tid) is not task:
                    continue
                if tid in early_at and alive:  # Redis time says not yet: try again later
                    ctx.stats.early_reinserted += 1
                    self.loader.add_task(state, tid, early_at[tid], min_delay_ms=1)
                else:  # fired here, or decided by someone else meanwhile
                    del state.tasks[tid]
        ctx.stats.fired += len(result.fired)
        if result.traced:
            deadlines = {t.timer_id: t.deadline_ms for t in group}
            trace_fires(ctx, state.shard, result.traced, deadlines)
        self.planner.offer(state, result.armed)
        if result.queued:
            state.replan = True  # a stale plan: the tick plans those schedules again
        return len(result.fired)

    def due_now(self) -> list[FireTask]:
        """What the wheel has expired so far and no one has taken (``run_once``)."""
        batch: list[FireTask] = []
        while True:
            try:
                batch.append(self.ctx.fire_queue.get_nowait())
            except queue.Empty:
                return batch

    def loop(self) -> None:
        """The firer thread: fire what the wheel expires until the worker stops."""
        ctx = self.ctx
        while not ctx.stopping.is_set():
            try:
                first = ctx.fire_queue.get(timeout=0.2)
            except queue.Empty:
                continue
            batch = [first]
            while len(batch) < ctx.settings.fire_batch * 4:
                try:
                    batch.append(ctx.fire_queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self.fire_batch(batch)
            except TimerError as exc:
                ctx.stats.redis_errors += 1
                ctx.warn.warning("firing failed (%s); entries go back to the wheel", exc,
                                 extra=ctx.fields())  # fmt: skip
                with ctx.lock:
                    for task in batch:
                        state = ctx.shards.get(task.shard)
                        if state is not None and state.tasks.get(task.timer_id) is task:
                            self.loader.add_task(state, task.timer_id, task.deadline_ms)
                ctx.stopping.wait(0.1)


def trace_fires(
    ctx: WorkerContext, shard: int, traced: list[Traced], deadlines: dict[str, int]
) -> None:
    """A ``tickwheel.fire`` span in the trace each of these timers was scheduled in: from
    its deadline to its decision (Redis time), by this worker (timer/tracing.py)."""
    for t in traced:
        deadline = deadlines.get(t.id, t.decided_ms)
        tracing.record_span("tickwheel.fire", t.traceparent, deadline, t.decided_ms, {
            "tickwheel.timer_id": t.id, "tickwheel.shard": shard, "tickwheel.worker": ctx.id,
            "tickwheel.lateness_ms": t.decided_ms - deadline,
        })  # fmt: skip
