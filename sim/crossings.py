"""What the simulation crosses with its faults beside the core protocol, each with its
invariant checked after every step (:attr:`sim.checks.Ledger.extra`) and a plant
(:mod:`sim.plants`) that breaks it:

- **Per-key limits with handlers that overlap.** Runners of a second consumer group
  (``lim``) with a per-key limit and a handler timeout, whose sync handlers run on
  handler threads the simulation steps (greenlets: one runs at a time, switched only
  where the simulation says), so a handler runs across steps, past its timeout, beside
  its own retry. Never more than ``AT_MOST`` handlers of a key value run at once,
  counting every attempt still running, the timed-out ones included (docs/guides/
  handlers.md, "At most N at once per key"). A handler whose slot's lease ran out by
  time (its runner took no turn for a lease: a process stalled, handlers and all) is
  not counted from then on: the lease is what bounds that case, as the guide says.
- **Rates per key.** A run may give the limit a rate too (GCRA, ``per_s`` with a
  ``burst``): over any stretch of the store's time from one start to another of a key
  value, at most ``burst`` + that stretch's intervals start (counted as the runner lets
  each through, on the store's clock, as ``rate_take.lua`` reads it). A restart that
  lost the store's unsynced writes may forget a key's last starts: the count begins
  again after it.
- **Recurring schedules.** ``every=`` schedules with each catch-up policy: each
  occurrence decided once, never off its series, and none lost: every occurrence up to
  the last fired is fired or counted missed, and with ``missed="all"`` none is missed.

The priority order is checked by the ledger itself (:meth:`sim.checks.Ledger.observe`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from timer.durable.model.models import Outcome
from timer.handlers import Limit

from .checks import Violation
from .limited import (
    AT_MOST,
    LIMIT_NAME,
    LIMITED,
    RUNNERS,
    TIMEOUT_S,
    LimitedRun,
    LimitedRunner,
    half,
)

if TYPE_CHECKING:
    from .world import World

__all__ = ["RUNNERS", "TIMEOUT_S", "Crossings", "Series"]


@dataclass
class Series:
    """A schedule the run created: its interval, policy and first occurrence."""

    name: str
    every_ms: int
    missed: str
    first_ms: int
    fsyncs: int  # the store's fsyncs when it was created
    losses: int  # and the restarts that had lost data: a later one may lose it


@dataclass
class Crossings:
    """The limited runners and the schedules of one world, and their checks."""

    world: World
    runners: list[LimitedRunner] = field(default_factory=list)
    runs: list[LimitedRun] = field(default_factory=list)
    series: list[Series] = field(default_factory=list)
    made: int = 0  # schedules created (one lost in a restart keeps its number)
    losses_seen: int = 0  # the store's restarts that lost data, as the limit check saw
    limit: Limit = field(default_factory=lambda: Limit(half, AT_MOST, LIMIT_NAME))
    # each key value's starts under the rate: (store ms, restarts that had lost data)
    rate_starts: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    rate_checked: dict[str, int] = field(default_factory=dict)  # starts checked, a value
    late_acked: list[str] = field(default_factory=list)  # attempts past their timeout, acked

    def __post_init__(self) -> None:
        self.runners = [LimitedRunner(self, j, f"l{j}") for j in range(RUNNERS)]
        self.world.ledger.extra.append(self.check)

    def set_limit(self, at_most: int, per_s: float | None, burst: int) -> None:
        """The limited runners' limit, before any step: at most ``at_most`` at once of a
        key value, and with ``per_s`` a rate too."""
        self.limit = Limit(half, at_most, LIMIT_NAME, per_s=per_s, burst=burst)
        self.runners = [LimitedRunner(self, j, f"l{j}") for j in range(RUNNERS)]

    # -- steps ----------------------------------------------------------------------------

    def limited_turn(self, ms: int, slot: int) -> None:
        """Time moves on, then a limited runner takes its turn and starts what it can."""
        self.world.advance(ms)
        self.runners[slot].turn()
        self.world._observe(None)

    def limited_return(self, slot: int, pick: int) -> None:
        self.runners[slot].finish(pick)
        self.world._observe(None)

    def limited_kill(self, slot: int) -> None:
        """kill -9 mid-handler; a new process starts under its name."""
        old = self.runners[slot]
        old.kill()
        self.runners[slot] = LimitedRunner(self, slot, old.consumer)
        self.world._observe(None)

    def create_schedule(self, every_s: int, missed: str) -> None:
        name = f"s{self.made}"
        self.made += 1
        info = self.world.admin.schedules.create(
            name, every=every_s * 1000, missed=missed, payload={"fail": 0}
        )
        assert info.next_ms is not None
        self.series.append(
            Series(
                name,
                every_s * 1000,
                missed,
                info.next_ms,
                self.world.fsyncs,
                len(self.world.losses),
            )
        )
        self.world._observe(None)

    def end(self) -> None:
        """Every running handler returns (a run's end), so its process can go."""
        for runner in self.runners:
            while runner.threads:
                runner.finish(0)
        self.check_limit()
        if self.series:
            self.check_series()

    # -- what happened ----------------------------------------------------------------------

    def started(self, o: Outcome, consumer: str) -> LimitedRun:
        value = half(o)
        run = LimitedRun(
            value=value,
            slot_key=self.world.keys.limit(LIMITED, LIMIT_NAME, value),
            member=f"{consumer}/{o.idempotency_key}/{o.attempt}",
            consumer=consumer,
            timer_id=o.id,
            attempt=o.attempt,
            start_ms=self.world.time.wall_ms(),
        )
        self.runs.append(run)
        return run

    def rate_started(self, value: str) -> None:
        self.rate_starts.setdefault(value, []).append(
            (self.world.time.wall_ms(), len(self.world.losses))
        )

    def check(self) -> None:
        if self.late_acked:
            raise Violation(self.late_acked[0])
        self.check_limit()
        self.check_rate()
        # a schedule's counts move with an occurrence decided: checked when one may have
        # been (a schedule's record read a step made the settle loop's rounds slow)
        if self.series and self.world.ledger.fresh:
            self.check_series()

    def check_limit(self) -> None:
        """Never more than the limit's handlers of a key value running at once, the ones past
        their timeout included; one whose slot's lease ran out by time no longer counts,
        nor one running when a restart lost the store's unsynced writes (durability none,
        docs/concepts/promises.md): the store may have forgotten its slot, and its
        delivery's read or last touch, so its outcome may be handed out again (to its own
        runner too) and another of its key may run beside it until it returns."""
        world = self.world
        if len(world.losses) > self.losses_seen:  # checked right after the restart
            self.losses_seen = len(world.losses)
            for run in self.runs:
                run.forgotten = run.forgotten or not run.ended
        now = world.time.wall_ms()
        raw = world.raw
        counted: dict[str, list[LimitedRun]] = {}
        for run in self.runs:
            if run.ended or run.lapsed or run.forgotten:
                continue
            score = raw.zscore(run.slot_key, run.member)
            if score is not None:
                run.last_lease_ms = int(score)
                run.lapsed = run.last_lease_ms <= now
            elif run.last_lease_ms is not None and run.last_lease_ms <= now:
                run.lapsed = True  # ran out, and a take of the key dropped it since
            if not run.lapsed:
                counted.setdefault(run.value, []).append(run)
        for value, running in counted.items():
            if len(running) > (self.limit.at_most or 0):
                said = ", ".join(
                    f"{r.timer_id} attempt {r.attempt} on {r.consumer} since {r.start_ms}"
                    for r in running
                )
                raise Violation(
                    f"{len(running)} handlers of key {LIMIT_NAME}={value} running at once "
                    f"(at most {self.limit.at_most}): {said}"
                )

    def check_rate(self) -> None:
        """GCRA's promise: from any start of a key value to a later one, at most
        ``burst`` + (their distance / the interval) starts, both counted. Each new start
        is checked against the ones before it since the last restart that lost data."""
        per_s = self.limit.per_s
        if per_s is None:
            return
        interval, burst = 1000 / per_s, self.limit.burst
        for value, starts in self.rate_starts.items():
            for j in range(self.rate_checked.get(value, 0), len(starts)):
                t_j, lost_j = starts[j]
                for i in range(j - 1, -1, -1):
                    t_i, lost_i = starts[i]
                    if lost_i != lost_j:
                        break
                    if j - i + 1 > burst + (t_j - t_i) / interval + 1e-6:
                        raise Violation(
                            f"{j - i + 1} starts of key {LIMIT_NAME}={value} from {t_i} to "
                            f"{t_j} ms under a rate of {per_s}/s, burst {burst}: at most "
                            f"{burst + int((t_j - t_i) / interval)}"
                        )
            self.rate_checked[value] = len(starts)

    def check_series(self) -> None:
        """Each schedule's occurrences: once each, on its series, never early, and none
        lost: up to the last fired, each fired or counted missed (``all``: none missed)."""
        ledger = self.world.ledger
        for s in list(self.series):
            info = self.world.admin.schedules.get(s.name)
            # a restart went back to the fsync before its creation (durability none)
            lost = s.fsyncs in self.world.losses[s.losses :]
            if info is None and lost:
                # created after the fsync a restart went back to (durability none): gone
                self.series.remove(s)
                ledger.note(f"schedule {s.name} lost in a restart (created after its fsync)")
                continue
            if info is None:
                raise Violation(f"schedule {s.name} is gone")
            prefix = "{" + s.name + "}@"
            fired = sorted(
                int(tid[len(prefix) :])
                for tid, o in ledger.outcomes.items()
                if tid.startswith(prefix) and o.outcome == "expired"
            )
            for at in fired:
                o = ledger.outcomes[f"{prefix}{at}"]
                if at < s.first_ms or (at - s.first_ms) % s.every_ms or o.deadline_ms < at:
                    raise Violation(
                        f"{o.id} is off schedule {s.name}'s series (first {s.first_ms}, "
                        f"every {s.every_ms} ms) or due before its time ({o.deadline_ms})"
                    )
            if len(fired) != info.fired:
                raise Violation(
                    f"schedule {s.name}: {len(fired)} occurrences fired, its record counts "
                    f"{info.fired}: {fired[-5:]}"
                )
            if not fired:
                continue
            if info.last_ms != fired[-1]:
                raise Violation(
                    f"schedule {s.name}: last fired {fired[-1]}, its record says {info.last_ms}"
                )
            # the missed ones are counted as the one after them is armed: up to the armed
            # one (else up to the last fired), each fired or counted missed
            armed = int(info.armed[len(prefix) :]) if info.armed else None
            upto = armed - s.every_ms if armed is not None else fired[-1]
            due = (upto - s.first_ms) // s.every_ms + 1
            if info.fired + info.missed != due:
                raise Violation(
                    f"schedule {s.name} (missed={s.missed!r}): {due} occurrences before its "
                    f"armed one ({armed}; the last fired {fired[-1]}), {info.fired} fired and "
                    f"{info.missed} counted missed: {due - info.fired - info.missed} lost"
                )
            if s.missed == "all" and info.missed:
                raise Violation(
                    f"schedule {s.name} (missed='all'): {info.missed} occurrences missed "
                    "within its catch-up window"
                )
