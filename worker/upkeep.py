"""Sweeping and trimming: what a led shard's wheel did not fire, and old outcomes.

Threads: both run on the tick's thread (the caller of ``Worker.run``), between lease
renewals.
"""

from __future__ import annotations

from timer.errors import Fenced

from .context import WorkerContext
from .firing import trace_fires
from .leases import Leases
from .planning import Planner
from .shard import ShardState


class Upkeep:
    """Sweeps each led shard's ended buckets (pub/sub is never trusted, so whatever the
    wheel missed is fired here) and trims outcomes every group has read."""

    def __init__(self, ctx: WorkerContext, leases: Leases, planner: Planner) -> None:
        self.ctx = ctx
        self.leases = leases
        self.planner = planner

    def sweep(self, state: ShardState) -> int:
        """Expire what is left in the shard's ended buckets (pub/sub is never trusted)."""
        ctx, s = self.ctx, self.ctx.settings
        total = 0
        for _ in range(s.max_sweeps_per_tick):  # the rest waits for the next tick
            self.leases.renew()  # a long sweep never holds a renewal back
            if ctx.shards.get(state.shard) is not state:
                return total  # its lease was lost meanwhile
            try:
                swept = state.store.sweep(
                    ctx.id,
                    state.epoch,
                    ttl_ms=s.result_ttl_ms,
                    limit=s.sweep_limit,
                    ahead=len(state.tasks),
                )
            except Fenced:
                ctx.stats.fence_rejections += 1
                self.leases.drop(state.shard, release=False)
                return total
            now = ctx.clock.now_ms()
            with ctx.lock:
                for tid, deadline in swept.fired:
                    ctx.lateness.observe(now - deadline)
                    task = state.tasks.pop(tid, None)
                    if task is not None:
                        task.cancel()
            total += len(swept.fired)
            if swept.traced:
                trace_fires(ctx, state.shard, swept.traced, dict(swept.fired))
            if swept.queued:  # occurrences swept have no plan: the tick plans their next
                state.replan = True
            self.planner.offer(state, swept.held)  # waiting for their previous one
            ctx.stats.cascaded += swept.moved
            if not swept.more:
                state.last_sweep_mono_ms = ctx.clock.mono_ms()
                break
        # else: ended buckets still hold timers; the next tick sweeps again, interval or not
        ctx.stats.swept += total
        return total

    def trim(self, states: list[ShardState]) -> int:
        """Drop the shards' outcomes past the retention that every consumer group has acked
        (one pipelined round trip for all of them; what a round of the results table has
        left past its first call follows a call a tick, `trim_more`).

        Not fenced: trimming is idempotent and keeps what any group still owes, so a
        stale leader doing it is harmless.
        """
        ctx = self.ctx
        retention = ctx.settings.outcome_retention_ms or None  # 0: keep the stream
        done = ctx.client.trim_outcomes(
            retention,
            shards=[st.shard for st in states],
            pass_within=ctx.settings.trim_pass_within,
            until_done=False,
        )
        now = ctx.clock.mono_ms()
        left = {t.shard: t.results_left for t in done}
        for state in states:
            state.last_trim_mono_ms = now
            state.trim_left = left.get(state.shard, 0)
        removed = sum(t.removed for t in done)
        ctx.stats.outcomes_trimmed += removed
        ctx.stats.results_dropped += sum(t.results_dropped for t in done)
        return removed

    def trim_more(self, state: ShardState) -> None:
        """One more call of the shard's results-table round, when its trim left some: a
        round can be far more than a call's 1,024 hashes, and a call a tick keeps each
        one short between lease renewals."""
        got = state.store.trim_results(state.trim_left)
        state.trim_left = got.results_left
        self.ctx.stats.results_dropped += got.results_dropped
