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

import contextlib
import threading
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import greenlet  # type: ignore[import-untyped]  # no stubs: its few calls are plain

from timer.clock import Killed, SkewedTime
from timer.durable.groups.streams import Delivery
from timer.durable.model.models import Outcome
from timer.handlers import Handlers, Limit
from timer.handlers.loop import HandlerLoop

from .checks import Violation

if TYPE_CHECKING:
    from timer.client import TimerClient

    from .world import World

LIMITED = "lim"  # the limited runners' consumer group, beside the simulation's own
LIMIT_NAME = "half"
AT_MOST = 1  # handlers at once per value of the key, unless a run draws another
TIMEOUT_S = 1.0  # each handler's timeout: a parked one runs past it
SLOT_LEASE_MS = 10_000  # the limited runners' reclaim idle time, so their slots' lease
THREADS = 4  # handler threads of a limited runner
RUNNERS = 2


def half(o: Outcome) -> str:
    """The limit's key: one of two values, by the timer's id (a stable hash)."""
    return str(zlib.crc32(o.id.encode()) % 2)


@dataclass
class LimitedRun:
    """One attempt's handler on a limited runner, from its start until it returns or its
    process dies; ``lapsed`` once its slot's lease ran out by time."""

    value: str
    slot_key: str
    member: str
    consumer: str
    timer_id: str
    attempt: int
    start_ms: int
    ended: bool = False
    lapsed: bool = False
    last_lease_ms: int | None = None  # the slot's lease end, as last seen
    forgotten: bool = False  # running when a restart lost the store's unsynced writes


class _Unstarted(threading.Thread):
    """The thread a runner asks for in place of a stuck one: a limited runner's handler
    threads are the simulation's own (:class:`LimitedRunner`), so it never starts."""

    def start(self) -> None:
        pass


class ThreadedTime(SkewedTime):
    """A limited runner's clock: the world's, and a thread asked for is never started."""

    def thread(
        self,
        target: Callable[..., object],
        *,
        name: str,
        daemon: bool = True,
        args: tuple[Any, ...] = (),
    ) -> threading.Thread:
        return _Unstarted(target=target, name=name, daemon=daemon, args=args)


class ThreadedHandlers(Handlers):
    """A stepped runner (``run_once``) whose sync handlers go to its process's handler
    threads, as the threaded runner's go to its work queue, instead of running on the
    reading thread: the reading loop keeps its turns (touching, releasing what ran past
    its timeout) while they run."""

    def __init__(self, proc: LimitedRunner, **options: Any) -> None:
        super().__init__(**options)
        self.proc = proc

    def _new_loop(self, client: TimerClient, **options: Any) -> HandlerLoop:
        loop = super()._new_loop(client, **options)
        loop._start = self.proc.enqueue  # type: ignore[method-assign,assignment]
        if loop.waiting is not None:
            self.proc.count_starts(loop.waiting)
        return loop


@dataclass
class Thread:
    g: greenlet.greenlet
    run: LimitedRun


class LimitedRunner:
    """One limited runner process: its stepped reading loop and its handler threads.
    A handler parks when it starts (it runs) until :meth:`finish` lets it return."""

    def __init__(self, crossings: Crossings, slot: int, consumer: str) -> None:
        world = crossings.world
        self.crossings = crossings
        self.slot = slot
        self.consumer = consumer
        self.time = ThreadedTime(world.time, host=f"lim{slot}", pid=300 + slot)
        self.client = world.client(self.time)
        cfg = world.config
        self.handlers = ThreadedHandlers(
            self,
            group=LIMITED,
            consumer=consumer,
            max_attempts=cfg.max_attempts,
            backoff=cfg.backoff,
            reclaim_idle_ms=SLOT_LEASE_MS,
            timeout_s=TIMEOUT_S,
            limits=[crossings.limit],
        )
        self.handlers.on()(self._handle)
        self.queued: deque[Delivery] = deque()
        self.threads: list[Thread] = []
        self.named = 0

    def enqueue(self, _fn: object, d: Delivery, _coros: object) -> None:
        self.queued.append(d)

    def _handle(self, o: Outcome) -> None:
        run = self.crossings.started(o, self.consumer)
        here = greenlet.getcurrent()
        assert here.parent is not None
        here.parent.switch()  # running, until the simulation lets it return or kills it
        run.ended = True

    def turn(self) -> None:
        """The reading loop's turn, then free threads start what it queued."""
        self.handlers.run_once(self.client)
        self.start_queued()

    def count_starts(self, waiting: Any) -> None:
        """Each start the runner lets through under the limit's rate, as it does (the
        rate's time is the store's)."""
        admit = waiting.admit
        crossings = self.crossings

        def counted(d: Delivery) -> float | None:
            wait: float | None = admit(d)
            if wait is None and crossings.limit.per_s is not None:
                crossings.rate_started(half(d.outcome))
            return wait

        waiting.admit = counted

    def start_queued(self) -> None:
        loop = self.handlers._stepped
        while loop is not None and self.queued and len(self.threads) < THREADS:
            d = self.queued.popleft()
            self.named += 1
            g = greenlet.greenlet(partial(loop._run_sync, d, f"sim-{self.named}"))
            g.switch()
            if not g.dead:
                self.threads.append(Thread(g, self.crossings.runs[-1]))

    def finish(self, pick: int) -> None:
        """One running handler returns (its runner settles it, unless it was released at
        its timeout), and a free thread takes the next queued."""
        if not self.threads:
            return
        t = self.threads.pop(pick % len(self.threads))
        t.g.switch()
        self.start_queued()

    def kill(self) -> None:
        """kill -9: its handlers stop where they are; nothing is settled or given back."""
        for t in self.threads:
            with contextlib.suppress(Killed):  # it ends the handler's thread, not ours
                t.g.throw(Killed(f"limited runner {self.consumer} killed"))
            t.run.ended = True
        self.threads.clear()


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
