"""Planning recurring schedules: what follows each occurrence the leader decides.

The leader fires an occurrence and arms the next in one script call; it computes that
next one here, from the schedule's spec and its clock (Redis time), and the script
refuses a plan of another version or one that does not follow. A schedule whose
occurrence was decided without a plan (by the sweep, or a stale plan) waits in its
shard's queue, and ``replan`` arms its next.

Threads: ``for_fire`` runs on the firer thread (or the caller of ``run_once``),
``replan`` on the tick's thread. A schedule's version and spec are read from Redis (one
HMGET per batch) the first time and kept (``specs``: a plan of a stale version is
refused by the script, and the schedule read again); the context's lock is taken only
to add armed occurrences to the wheel.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from timer.durable.schedules.records import (
    Plan,
    ScheduleInfo,
    ScheduleSpec,
    occurrence_name,
    plan_next,
)
from timer.errors import CorruptRecord

from .context import WorkerContext
from .loading import Loader
from .shard import ShardState

log = logging.getLogger("worker")
REPLAN_BATCH = 100  # schedules planned by one arm call
MAX_KNOWN = 200_000  # schedules whose spec a leader keeps (a few hundred bytes each)


class Planner:
    """Plans the next occurrence of the schedules of led shards."""

    def __init__(self, ctx: WorkerContext, loader: Loader) -> None:
        self.ctx = ctx
        self.loader = loader
        # schedule name -> (version, spec) as last read: a fire plans from it with no
        # read of its own (the script ignores a plan for an id that is not the armed
        # occurrence, and refuses one of another version, which then waits for replan)
        self.specs: dict[str, tuple[int, ScheduleSpec]] = {}

    def for_fire(self, state: ShardState, ids: Iterable[str]) -> dict[str, tuple[int, Plan]]:
        """For the ids about to be fired that are occurrences of a known schedule: (its
        version, the plan of its next occurrence). Schedules not known yet are read (one
        HMGET); the script uses a plan only for the armed occurrence, of that version."""
        occurrences = {tid: on for tid in ids if (on := occurrence_name(tid)) is not None}
        if not occurrences:
            return {}
        specs = self.specs
        unknown = {name for name, _ in occurrences.values() if name not in specs}
        if unknown:
            self._learn(self._records(state, unknown).values())
        now = self.ctx.clock.now_ms()
        plans: dict[str, tuple[int, Plan]] = {}
        for tid, (name, at) in occurrences.items():
            known = specs.get(name)
            if known is not None:
                plans[tid] = (known[0], plan_next(name, known[1], at, now))
        return plans

    def forget(self, ids: Iterable[str]) -> None:
        """A fire of these ids had a plan refused (another version): read their schedules
        again before planning them."""
        for tid in ids:
            on = occurrence_name(tid)
            if on is not None:
                self.specs.pop(on[0], None)

    def _learn(self, infos: Iterable[ScheduleInfo]) -> None:
        if len(self.specs) > MAX_KNOWN:  # many schedules moved through: start afresh
            self.specs.clear()
        for info in infos:
            self.specs[info.name] = (info.version, info.spec)

    def replan(self, state: ShardState) -> int:
        """Arm the next occurrence of schedules waiting in the shard's queue; how many
        were armed. Leaves ``state.replan`` set while more wait."""
        ctx = self.ctx
        names = state.store.replan_queue(REPLAN_BATCH)
        state.replan = len(names) >= REPLAN_BATCH
        if not names:
            return 0
        records = self._records(state, set(names))
        self._learn(records.values())
        now = ctx.clock.now_ms()
        plans: list[tuple[str, int, Plan]] = []
        for name in names:
            info = records.get(name)
            if info is None:
                plans.append((name, 0, Plan("", 0)))  # gone: the script drops it
            else:
                plans.append(
                    (name, info.version, plan_next(name, info.spec, info.last_ms or now, now))
                )
        armed = state.store.arm(ctx.id, state.epoch, plans)
        self.offer(state, armed)
        return len(armed)

    def offer(self, state: ShardState, armed: dict[str, int]) -> None:
        """Occurrences a script armed: into the wheel if they are due within the horizon
        (the others are in their buckets, loaded when their time comes)."""
        if not armed:
            return
        with self.ctx.lock:
            if self.ctx.shards.get(state.shard) is not state:
                return
            for tid, deadline in armed.items():
                self.loader.offer(state, tid, deadline)

    def _records(self, state: ShardState, names: set[str]) -> dict[str, ScheduleInfo]:
        try:
            return state.store.schedules(names)
        except CorruptRecord as exc:  # never stop firing: plan none, the queue takes it
            self.ctx.warn.warning(
                "shard %d: %s", state.shard, exc, extra=self.ctx.fields(state.shard)
            )
            return {}
