"""The worker's periodic duties, as tables: what a tick does, in order, each with when it
is due, what it does and what a store error of it means; and what it does for each led
shard. ``Worker.tick`` runs them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from timer.errors import Fenced, StoreError

from .card import CardWriter
from .context import WorkerContext
from .history import HistoryWriter
from .leases import Leases
from .loading import Loader
from .planning import Planner
from .shard import ShardState
from .upkeep import Upkeep

BACKLOG_EVERY_MS = 5_000  # how often a led shard's pending count and oldest bucket are read


def always(mono: float) -> bool:
    return True


def reraise(exc: StoreError) -> None:
    raise exc


@dataclass(frozen=True)
class Duty:
    """A periodic duty of the worker's tick: whether it is ``due`` at a monotonic
    instant, what it does then (``run``), and what a store error of it means
    (``failed``: a shard or the namespace marked failing, a warning, or raised)."""

    label: str
    due: Callable[[float], bool]
    run: Callable[[float], object]
    failed: Callable[[StoreError], None]


@dataclass(frozen=True)
class ShardDuty:
    """A duty a tick does for each led shard, when ``due`` for it."""

    label: str
    due: Callable[[ShardState, float], bool]
    run: Callable[[ShardState, float], object]


class Duties:
    """The tables of a worker's tick, over its parts."""

    def __init__(
        self,
        ctx: WorkerContext,
        *,
        leases: Leases,
        loader: Loader,
        upkeep: Upkeep,
        planner: Planner,
        card: CardWriter,
        history: HistoryWriter,
    ) -> None:
        self.ctx, self.leases, self.loader, self.upkeep = ctx, leases, loader, upkeep
        self.planner, self.card, self.history = planner, card, history
        self.table, self.per_shard = self._worker_table(), self._shard_table()

    def tick(self, mono: float) -> None:
        """Each duty due at ``mono``, in the table's order."""
        for duty in self.table:
            if duty.due(mono):
                try:
                    duty.run(mono)
                except StoreError as exc:
                    duty.failed(exc)

    def _worker_table(self) -> tuple[Duty, ...]:
        """The periodic duties of a tick, in order: the renewals first (nothing else in a
        tick may delay them), then each led shard's own table, then what only reports."""
        ctx, s, leases = self.ctx, self.ctx.settings, self.leases

        def up() -> bool:  # the namespace's keys answer (on a Cluster, their node)
            return not ctx.failing(None)

        def namespace_failed(doing: str) -> Callable[[StoreError], None]:
            return lambda exc: ctx.shard_failed(None, doing, exc)

        def warned(message: str) -> Callable[[StoreError], None]:
            def warn(exc: StoreError) -> None:  # its page's figures, never the worker's work
                ctx.warn.warning(message, exc, extra=ctx.fields())

            return warn

        return (
            Duty(
                "reading the server's clock",
                lambda m: self.ctx.clock.needs_sync(m) and up(),
                lambda m: leases.sync_clock(),
                self._clock_failed,
            ),
            Duty("leases", always, lambda m: leases.rebalance(), reraise),
            Duty(
                "heartbeat",
                lambda m: m - leases.last_heartbeat_mono_ms >= s.heartbeat_every_ms and up(),
                lambda m: leases.heartbeat(),  # failed: the fair share stays as last measured
                namespace_failed("heartbeat"),
            ),
            Duty("the led shards", always, self._shards, reraise),  # each shard's own failure
            # trimmed even when the stream is kept for ever: the results table
            Duty("trimming outcomes", always, self._trim, namespace_failed("trimming outcomes")),
            Duty(
                "putting up its card",
                lambda m: self.card.due(m) and up(),
                self.card.put,
                warned("putting up its card failed (%s)"),
            ),
            Duty(
                "adding to the history",  # failed: sent with the next flush
                lambda m: self.history.due(m) and up(),
                self.history.flush,
                warned("adding to the history failed (%s); sent with the next"),
            ),
        )

    def _shard_table(self) -> tuple[ShardDuty, ...]:
        """What a tick does for each led shard, in order."""
        s, loader, upkeep = self.ctx.settings, self.loader, self.upkeep
        return (
            ShardDuty(
                "loading",
                lambda st, m: (
                    st.needs_reload
                    or st.more_to_load
                    or m - st.last_load_mono_ms >= s.horizon_ms / 4
                ),
                lambda st, m: loader.load(st),
            ),
            ShardDuty(
                "sweeping",
                lambda st, m: m - st.last_sweep_mono_ms >= s.sweep_interval_ms,
                lambda st, m: upkeep.sweep(st),
            ),
            ShardDuty(
                "trimming", lambda st, m: st.trim_left > 0, lambda st, m: upkeep.trim_more(st)
            ),
            ShardDuty(
                "reading its backlog",
                lambda st, m: (
                    st.last_backlog_mono_ms is None
                    or m - st.last_backlog_mono_ms >= BACKLOG_EVERY_MS
                ),
                self._read_backlog,
            ),
            ShardDuty(
                "planning schedules",
                lambda st, m: st.replan or m - st.last_replan_mono_ms >= BACKLOG_EVERY_MS,
                self._replan,
            ),
        )

    def _shards(self, mono: float) -> None:
        """Each led shard's duties; a store error skips the rest of that shard's, this
        tick, and is the shard's alone (on a Cluster the others go on)."""
        ctx = self.ctx
        for state in list(self.ctx.shards.values()):
            self.leases.renew()  # after the previous shard's loading and sweeping
            if ctx.failing(state.shard) or self.ctx.shards.get(state.shard) is not state:
                continue
            doing = ""
            try:
                for duty in self.per_shard:
                    if duty.due(state, mono):
                        doing = duty.label
                        duty.run(state, mono)
            except StoreError as exc:
                ctx.shard_failed(state.shard, doing, exc)

    def _clock_failed(self, exc: StoreError) -> None:
        if not self.ctx.clock.ready:  # no reading yet: nothing can be timed
            raise exc
        # the lease calls' readings serve meanwhile
        self.ctx.shard_failed(None, "reading the server's clock", exc)

    def _trim(self, mono: float) -> None:
        ctx, every = self.ctx, self.ctx.settings.trim_interval_ms
        due = [
            st
            for st in self.ctx.shards.values()
            if not ctx.failing(st.shard)
            and (st.last_trim_mono_ms is None or mono - st.last_trim_mono_ms >= every)
        ]
        if due:
            self.upkeep.trim(due)

    def _read_backlog(self, state: ShardState, mono: float) -> None:
        state.pending, state.oldest_bucket_ms = state.store.backlog()
        state.last_backlog_mono_ms = mono

    def _replan(self, state: ShardState, mono: float) -> None:
        """Arm the next occurrence of the shard's schedules that wait for a plan."""
        state.last_replan_mono_ms = mono
        try:
            self.planner.replan(state)
        except Fenced:
            self.ctx.stats.fence_rejections += 1
            self.leases.drop(state.shard, release=False)
