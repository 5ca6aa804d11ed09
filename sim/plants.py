"""Bugs planted one at a time, each a line or two of a script or of the runner: the
simulation must find every one within its CI budget of seeds (tests/sim). They are the
mutation tests of the simulation itself: a simulation that finds none proves nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from timer.client import driver as driver_module
from timer.durable.groups import reader
from timer.durable.model import scripts
from timer.durable.model.scripts import ScriptName
from timer.handlers import settle, threads
from timer.worker import firing, planning


@dataclass(frozen=True)
class Plant:
    what: str  # the bug, as a reviewer would say it
    script: ScriptName | None = None  # a script's text changed: (old, new) in it
    old: str = ""
    new: str = ""
    patch: Callable[[], Callable[[], None]] | None = None  # a Python change; returns undo
    # found by its own scenario (tests/sim), not within the CI budget of seeds: the fault
    # it needs (one script's reply lost at one moment) is too rare a draw for it
    scenario_only: bool = False
    # the first seed that finds it (a search of seeds 0 to this one does; the CI budget
    # runs this seed); a bug the crossed rules make rarer is found by a later one
    seed: int = 0


def _ack_before_the_handler() -> Callable[[], None]:
    """The runner acknowledges an outcome as it starts its handler, not after it."""
    original = threads.ThreadRunner._run_sync

    def run_sync(self: threads.ThreadRunner, d: Any, me: str) -> None:
        self.settler.settle(d, None, self.time.monotonic())
        original(self, d, me)

    threads.ThreadRunner._run_sync = run_sync  # type: ignore[method-assign]

    def undo() -> None:
        threads.ThreadRunner._run_sync = original  # type: ignore[method-assign]

    return undo


def _dead_one_attempt_early() -> Callable[[], None]:
    """The runner dead-letters an outcome at its next-to-last attempt."""
    original = settle.Settler.settle

    def settle_early(
        self: settle.Settler, d: Any, exc: BaseException | None, started: float
    ) -> None:
        if exc is not None and d.outcome.attempt == self.h.max_attempts - 1:
            self.settle_dead(d, "planted: dead one attempt early")
            return
        original(self, d, exc, started)

    settle.Settler.settle = settle_early  # type: ignore[method-assign]

    def undo() -> None:
        settle.Settler.settle = original  # type: ignore[method-assign]

    return undo


def _slot_back_at_timeout() -> Callable[[], None]:
    """The runner gives a limit's slot back when it releases a handler past its timeout,
    though the handler still runs."""
    original = threads.ThreadRunner._release_stuck

    def release_stuck(self: threads.ThreadRunner) -> None:
        now = self.time.monotonic()
        stuck = [d for deadline, d, _, _ in self.running.values() if deadline <= now]
        original(self)
        for d in stuck:
            self._give_back(d)

    threads.ThreadRunner._release_stuck = release_stuck  # type: ignore[method-assign]

    def undo() -> None:
        threads.ThreadRunner._release_stuck = original  # type: ignore[method-assign]

    return undo


def _late_return_taken() -> Callable[[], None]:
    """A handler that returns past its timeout before the reading thread released it is
    acknowledged, as if on time (the timeout holds only when the reader keeps up)."""
    original = threads.ThreadRunner._past_timeout

    def past_timeout(self: threads.ThreadRunner, took: float, timeout: float | None) -> bool:
        return False

    threads.ThreadRunner._past_timeout = past_timeout  # type: ignore[method-assign]

    def undo() -> None:
        threads.ThreadRunner._past_timeout = original  # type: ignore[method-assign]

    return undo


def _lower_priorities_first() -> Callable[[], None]:
    """The firer sends its round trips lowest priority first."""
    original = firing.Firer._trips

    def trips(self: firing.Firer, tasks: Any) -> Any:
        return original(self, tasks)[::-1]

    firing.Firer._trips = trips  # type: ignore[method-assign]

    def undo() -> None:
        firing.Firer._trips = original  # type: ignore[method-assign]

    return undo


def _occurrence_skipped() -> Callable[[], None]:
    """The worker plans a schedule's next occurrence from the one after the one that
    fired: an occurrence is lost, neither fired nor counted missed."""
    planner: Any = planning  # the planner calls the name it imported
    original = planner.plan_next

    def plan_next(name: str, spec: Any, fired_ms: int, now_ms: int) -> Any:
        return original(name, spec, spec.recurrence.next_after(fired_ms) or fired_ms, now_ms)

    planner.plan_next = plan_next

    def undo() -> None:
        planner.plan_next = original

    return undo


def _claims_taken_again() -> Callable[[], None]:
    """A poll's look for its own entries gone idle does not count those the same poll
    claimed a moment before (not yet in the caller's hand)."""
    original = reader.GroupReader._lost_own

    def lost_own(self: reader.GroupReader, count: int, also_held: Any) -> Any:
        return original(self, count, [])

    reader.GroupReader._lost_own = lost_own  # type: ignore[method-assign]

    def undo() -> None:
        reader.GroupReader._lost_own = original  # type: ignore[method-assign]

    return undo


PLANTS: dict[str, Plant] = {
    "fence": Plant(
        "fire.lua does not refuse a caller without the lease at its epoch",
        ScriptName.FIRE,
        "if fenced then return fenced end",
        "",
    ),
    "early": Plant(
        "fire.lua fires a timer without checking its deadline on the server's clock",
        ScriptName.FIRE,
        "if d <= now then",
        "if true then",
        seed=2,  # the faults and crossings draw fewer early fires
    ),
    "backoff": Plant(
        "retry.lua hands a failed outcome back at once, skipping its backoff",
        ScriptName.RETRY,
        "local due = now + delay_ms",
        "local due = now",
    ),
    "epoch": Plant(
        "lease_acquire.lua takes a lease without a new epoch",
        ScriptName.LEASE_ACQUIRE,
        "local epoch = redis.call('INCR', EPOCH)",
        "local epoch = tonumber(redis.call('GET', EPOCH) or '1')",
    ),
    "dead_twice": Plant(
        "dead.lua dead-letters an entry without checking it is still pending: run again "
        "after a lost reply (redis-py sends it again), it dead-letters it twice",
        ScriptName.DEAD,
        "if not redis.call('XPENDING', OUT, group, id, id, 1)[1] then return '' end",
        "",
        scenario_only=True,
    ),
    "rate": Plant(
        "rate_take.lua lets one start more through than a key's burst",
        ScriptName.RATE_TAKE,
        "local ahead = tat - now - interval * (burst - 1)",
        "local ahead = tat - now - interval * burst",
    ),
    "head": Plant(
        "schedule.lua leaves a timer due before its shard's head bound out of the head: "
        "the Timers view would not show it",
        ScriptName.SCHEDULE,
        "  head_note(P, notes)\n",
        "",
    ),
    "ack": Plant(
        "the runner acknowledges an outcome before its handler returns",
        patch=_ack_before_the_handler,
    ),
    "dead": Plant(
        "the runner dead-letters an outcome one attempt before its last",
        patch=_dead_one_attempt_early,
        seed=2,  # 0 and 1 find it first where a limited handler past its timeout is
        # dead-lettered (acknowledged): the crossings' check, not the attempts' one
    ),
    "slot": Plant(
        "a limit's slot goes back at a handler's timeout while the handler still runs",
        patch=_slot_back_at_timeout,
        seed=1,  # two at once of a key needs a handler parked past its timeout
    ),
    "late": Plant(
        "a handler returning past its timeout before its release is acknowledged",
        patch=_late_return_taken,
    ),
    "priority": Plant(
        "the firer sends its round trips lowest priority first",
        patch=_lower_priorities_first,
    ),
    "own": Plant(
        "a runner stalled between a poll's claims and its look for its own lost entries "
        "takes what it just claimed again: it runs them twice",
        patch=_claims_taken_again,
        seed=8,  # a stall past the idle time right after a claim that took something
    ),
    "occurrence": Plant(
        "the worker arms a schedule's occurrence after the next: one is lost",
        patch=_occurrence_skipped,
    ),
}


@contextmanager
def planted(name: str) -> Iterator[Plant]:
    """Plant bug ``name`` while the block runs (clients made inside it send the changed
    script); the code is whole again after."""
    plant = PLANTS[name]
    undo: Callable[[], None] | None = None
    driver: Any = driver_module  # the drivers register the scripts source() gives them
    original_source = driver.source
    if plant.script is not None:
        text = scripts.source(plant.script)
        if plant.old not in text:
            raise ValueError(f"plant {name}: {plant.old!r} is not in {plant.script.value}.lua")
        changed = text.replace(plant.old, plant.new, 1)

        def source(script: ScriptName) -> str:
            return changed if script is plant.script else original_source(script)

        driver.source = source
    if plant.patch is not None:
        undo = plant.patch()
    try:
        yield plant
    finally:
        driver.source = original_source
        if undo is not None:
            undo()
