"""The run as hypothesis's stateful test: each step a rule, its arguments drawn from one
seed; a failure is shrunk to the shortest sequence of steps that still fails, and
printed as the calls that replay it."""

from __future__ import annotations

import functools
import io
import json
import logging
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Literal

import hypothesis
from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import engine
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from timer.testing.store import Cut

from . import crossings
from .crossings import Crossings
from .world import Config, Fsync, World

WORKERS = st.integers(0, Config.workers - 1)
RUNNERS = st.integers(0, Config.runners - 1)
LIMITED = st.integers(0, crossings.RUNNERS - 1)
# the script a cut hits first in its step ("any": the step's first script call)
SCRIPTS = [
    "any",
    "fire",
    "lease_acquire",
    "lease_renew",
    "schedule",
    "claim",
    "ack",
    "retry",
    "dead",
]


class Simulation(RuleBasedStateMachine):
    """One world, stepped by rules; every rule's step checks the promises as it goes
    (:mod:`sim.checks`); the end (teardown) checks liveness."""

    def __init__(self) -> None:
        super().__init__()
        self.world = World()
        self.crossings = Crossings(self.world)  # limited runners, schedules
        self.broken = False
        self.store_faults = False
        self.trace: list[str] = []  # the steps taken, as calls: what a failure prints

    def _step(self, fn: Callable[[], None], call: str = "") -> None:
        self.trace.append(call or "?")
        try:
            fn()
        except BaseException as exc:
            self.broken = True
            exc.add_note(_trace(self.trace))
            raise

    @initialize(
        rates=st.lists(
            st.sampled_from([1.0, 2.0, 0.25, 1.5, 0.5]),
            min_size=Config.workers,
            max_size=Config.workers,
        )
    )
    def clocks(self, rates: list[float]) -> None:
        """Each worker's clock runs at its own rate from the start."""
        for slot, rate in enumerate(rates):
            self._step(
                functools.partial(self.world.skew_worker, slot, 0, rate),
                f"skew_worker(slot={slot}, step_wall_ms=0, rate={rate!r})",
            )

    @initialize(
        at_most=st.sampled_from([1, 1, 2]),
        per_s=st.sampled_from([None, None, 0.5, 2.0]),
        burst=st.sampled_from([1, 2]),
    )
    def limit(self, at_most: int, per_s: float | None, burst: int) -> None:
        """The limited runners' limit: one or two at once of a key value, and maybe a
        rate (a start every 2 s or every 500 ms, one or two at once after a pause)."""
        self._step(
            lambda: self.crossings.set_limit(at_most, per_s, burst),
            f"limit(at_most={at_most!r}, per_s={per_s!r}, burst={burst!r})",
        )

    @initialize(fsync=st.sampled_from(["no faults", "always", "everysec"]))
    def disk(self, fsync: Fsync | Literal["no faults"]) -> None:
        """The store's appendfsync: what a restart of it keeps (everything, or what the
        last once-a-second fsync had); or a run with no fault of the store (a third of
        them: the other faults get the steps they had before)."""
        self.store_faults = fsync != "no faults"
        if fsync != "no faults":
            self._step(lambda: setattr(self.world, "fsync", fsync), f"disk(fsync={fsync!r})")

    @rule(
        who=st.sampled_from(["schedule", *(f"w{i}" for i in range(Config.workers)), "r0", "r1"]),
        script=st.sampled_from(SCRIPTS),
        kind=st.sampled_from(["before", "after"]),
        out=st.booleans(),
    )
    @precondition(lambda self: self.store_faults)
    def cut(self, who: str, script: str, kind: Cut, out: bool) -> None:
        """A step of a process (or a client's schedule) during which a script call's
        connection fails, before or after the call took effect, once (redis-py sends it
        again) or through every retry (the process sees the error)."""
        self._step(
            lambda: self.world.cut(who, script, kind, out),
            f"cut(who={who!r}, script={script!r}, kind={kind!r}, out={out!r})",
        )

    @precondition(lambda self: self.store_faults)
    @rule(down_ms=st.sampled_from([500, 3_000]))
    def restart_store(self, down_ms: int) -> None:
        """The store's host loses power and comes back: with appendfsync everysec what
        came after the last fsync is lost."""
        self._step(lambda: self.world.restart_store(down_ms), f"restart_store(down_ms={down_ms!r})")

    @rule(ms=st.sampled_from([100, 300, 700, 1_500]), runner=RUNNERS)
    def tick(self, ms: int, runner: int) -> None:
        """Time moves on, every worker takes a turn, then one runner."""
        self._step(lambda: self.world.tick(ms, runner), f"tick(ms={ms!r}, runner={runner!r})")

    @rule(
        delay_ms=st.integers(0, 8_000),
        fail=st.sampled_from([0, 0, 0, 1, 2, 5]),
        priority=st.sampled_from([0, 0, 5]),
    )
    def schedule(self, delay_ms: int, fail: int, priority: int) -> None:
        self._step(
            lambda: self.world.schedule(delay_ms, fail, priority),
            f"schedule(delay_ms={delay_ms!r}, fail={fail!r}, priority={priority!r})",
        )

    @rule(pick=st.integers(0, 1_000))
    def cancel(self, pick: int) -> None:
        self._step(lambda: self.world.cancel(pick), f"cancel(pick={pick!r})")

    @rule(pick=st.integers(0, 1_000))
    def complete(self, pick: int) -> None:
        self._step(lambda: self.world.complete(pick), f"complete(pick={pick!r})")

    @rule(limit=st.sampled_from([1, 3, 10]))
    def open_timers_view(self, limit: int) -> None:
        """An operator opens the Timers view (the shards' heads filled, then kept by every
        script that gives a timer a deadline: checked after every step)."""
        self._step(lambda: self.world.open_timers_view(limit), f"open_timers_view(limit={limit!r})")

    @rule(ms=st.sampled_from([1, 10, 100, 300, 700, 1_500, 3_000, 7_000]))
    def advance(self, ms: int) -> None:
        self._step(lambda: self.world.advance(ms), f"advance(ms={ms!r})")

    @rule(slot=WORKERS)
    def step_worker(self, slot: int) -> None:
        self._step(lambda: self.world.step_worker(slot), f"step_worker(slot={slot!r})")

    @rule(slot=WORKERS)
    def step_zombie(self, slot: int) -> None:
        self._step(lambda: self.world.step_zombie(slot), f"step_zombie(slot={slot!r})")

    @rule(slot=RUNNERS)
    def step_runner(self, slot: int) -> None:
        self._step(lambda: self.world.step_runner(slot), f"step_runner(slot={slot!r})")

    @rule(slot=WORKERS, ms=st.sampled_from([2_500, 5_000]))
    def stall_worker(self, slot: int, ms: int) -> None:
        self._step(
            lambda: self.world.stall_worker(slot, ms), f"stall_worker(slot={slot!r}, ms={ms!r})"
        )

    @rule(slot=WORKERS)
    def lose_events(self, slot: int) -> None:
        self._step(lambda: self.world.lose_events(slot), f"lose_events(slot={slot!r})")

    @rule(slot=WORKERS)
    def kill_worker(self, slot: int) -> None:
        self._step(lambda: self.world.kill_worker(slot), f"kill_worker(slot={slot!r})")

    @rule(slot=WORKERS)
    def partition_worker(self, slot: int) -> None:
        self._step(lambda: self.world.partition_worker(slot), f"partition_worker(slot={slot!r})")

    @rule(
        slot=WORKERS,
        step_wall_ms=st.sampled_from([0, -5_000, -500, 500, 5_000]),
        rate=st.sampled_from([1.0, 0.25, 0.5, 1.1, 2.0]),
    )
    def skew_worker(self, slot: int, step_wall_ms: int, rate: float) -> None:
        self._step(
            lambda: self.world.skew_worker(slot, step_wall_ms, rate),
            f"skew_worker(slot={slot!r}, step_wall_ms={step_wall_ms!r}, rate={rate!r})",
        )

    @rule(slot=RUNNERS)
    def kill_runner_in_handler(self, slot: int) -> None:
        self._step(
            lambda: self.world.kill_runner_in_handler(slot),
            f"kill_runner_in_handler(slot={slot!r})",
        )

    @rule(
        slot=RUNNERS,
        script=st.sampled_from(["any", "claim", "ack"]),
        ms=st.sampled_from([500, 2_500]),
    )
    def stall_runner(self, slot: int, script: str, ms: int) -> None:
        """A runner's turn in which it stalls (a GC pause, a busy core) after a round trip
        that called ``script``: past its reclaim idle time (2 s) or not."""
        self._step(
            lambda: self.world.stall_runner(slot, script, ms),
            f"stall_runner(slot={slot!r}, script={script!r}, ms={ms!r})",
        )

    # -- crossings: per-key limits with overlapping handlers, schedules ----------------------

    @rule(ms=st.sampled_from([100, 300, 700]), slot=LIMITED)
    def limited_turn(self, ms: int, slot: int) -> None:
        """Time moves on, then a limited runner's turn; its free threads start handlers,
        which run until a limited_return (past their timeout, beside their retry)."""
        self._step(
            lambda: self.crossings.limited_turn(ms, slot),
            f"limited_turn(ms={ms!r}, slot={slot!r})",
        )

    @rule(slot=LIMITED, pick=st.integers(0, 100))
    def limited_return(self, slot: int, pick: int) -> None:
        self._step(
            lambda: self.crossings.limited_return(slot, pick),
            f"limited_return(slot={slot!r}, pick={pick!r})",
        )

    @rule(slot=LIMITED)
    def limited_kill(self, slot: int) -> None:
        self._step(lambda: self.crossings.limited_kill(slot), f"limited_kill(slot={slot!r})")

    @rule(every_s=st.sampled_from([1, 2, 3]), missed=st.sampled_from(["all", "latest", "skip"]))
    def create_schedule(self, every_s: int, missed: str) -> None:
        if len(self.crossings.series) < 3:
            self._step(
                lambda: self.crossings.create_schedule(every_s, missed),
                f"create_schedule(every_s={every_s!r}, missed={missed!r})",
            )

    def teardown(self) -> None:
        try:
            if not self.broken:
                self._step(self.crossings.end, "end_handlers()")
            if not self.broken:
                self._step(self.world.settle, "settle()")
        finally:
            self.world.close()


def _trace(steps: list[str]) -> str:
    return "the steps (replay: python -m sim --seed SEED):\n" + "\n".join(
        f"  {n:3} {s}" for n, s in enumerate(steps, 1)
    )


def _where(exc: BaseException) -> str:
    """Where a failure was raised (``file:line``, the last frame): a shrunk run fails at
    the same place as the run it was shrunk from, a check of the same promise."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    return f"{last.filename.rsplit('/', 2)[-2]}/{last.filename.rsplit('/', 1)[-1]}:{last.lineno}"


@dataclass
class Result:
    seed: int
    ok: bool
    steps: int
    seconds: float
    failure: str = ""  # the error and the shrunk steps that replay it
    # the first failing run as the seed drew it, before any shrinking: its error (one
    # line), where it was raised, and how many steps it took
    found: str = ""
    found_at: str = ""
    found_steps: int = 0
    at: str = ""  # where the reported (shrunk) failure was raised


def run(
    seed: int, *, steps: int = 120, examples: int = 20, shrink: bool = True, shrink_s: int = 60
) -> Result:
    """Run ``examples`` simulations drawn from ``seed`` (hypothesis explores from it:
    the same seed gives the same runs), each of up to ``steps`` steps; a failure is
    shrunk (unless ``shrink`` is off; for at most ``shrink_s`` seconds) and reported
    with the steps that replay it."""
    counted: list[int] = []
    first: list[tuple[str, str, int]] = []

    class Counted(Simulation):
        def _step(self, fn: Callable[[], None], call: str = "") -> None:
            try:
                super()._step(fn, call)
            except BaseException as exc:
                if not first:
                    line = traceback.format_exception_only(exc)[0].strip()
                    first.append((line, _where(exc), len(self.trace)))
                raise

        def teardown(self) -> None:
            counted.append(self.world.steps)
            super().teardown()

    phases = [Phase.generate, Phase.shrink] if shrink else [Phase.generate]
    config = settings(
        max_examples=examples,
        stateful_step_count=steps,
        database=None,
        deadline=None,
        phases=phases,
        derandomize=False,
        print_blob=False,
        verbosity=Verbosity.normal,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    factory = hypothesis.seed(seed)(Counted)
    out = io.StringIO()
    began = time.perf_counter()
    # hypothesis shrinks for up to five minutes (its engine's constant, not a setting);
    # a simulated run costs far more than a unit test's example, so the budget is ours
    shrinking_s = engine.MAX_SHRINKING_SECONDS
    engine.MAX_SHRINKING_SECONDS = shrink_s
    try:
        with redirect_stdout(out), redirect_stderr(out), quiet():
            run_state_machine_as_test(factory, settings=config)
    except BaseException as exc:  # a Violation, or any error a step met
        if isinstance(exc, KeyboardInterrupt):
            raise
        text = "".join(traceback.format_exception_only(exc)).replace("SEED", str(seed))
        # hypothesis says "five minutes" whatever the budget: ours is shrink_s
        said = out.getvalue().split("WARNING: Hypothesis has spent more than five minutes")[0]
        if said != out.getvalue():
            said += f"(shrinking stopped after {shrink_s} s: --shrink-seconds for longer)\n"
        text += said
        found, found_at, found_steps = first[0] if first else ("", "", 0)
        return Result(
            seed,
            False,
            sum(counted),
            time.perf_counter() - began,
            text,
            found,
            found_at,
            found_steps,
            _where(exc),
        )
    finally:
        engine.MAX_SHRINKING_SECONDS = shrinking_s
    return Result(seed, True, sum(counted), time.perf_counter() - began)


@contextmanager
def quiet() -> Iterator[None]:
    """The processes' warnings (a lost lease, a fenced fire) are the simulation's weather,
    not news: their loggers are silenced while it runs."""
    names = ["worker", "tickwheel.handlers", "timer", "timer.celery"]
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def summary(results: list[Result]) -> str:
    steps = sum(r.steps for r in results)
    seconds = sum(r.seconds for r in results) or 1e-9
    return json.dumps(
        {
            "seeds": len(results),
            "failed": [r.seed for r in results if not r.ok],
            "steps": steps,
            "steps_per_s": round(steps / seconds, 1),
            "seeds_per_min": round(len(results) / seconds * 60, 1),
        }
    )
