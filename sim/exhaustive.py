"""An exhaustive check of the lease, fence and fire protocol on a small world.

The random runs (:mod:`sim.machine`) sample long histories; this explores *every*
interleaving of a short one: from a world of two workers, two shards and three timers
scheduled up front, each state is expanded by every step that can come next (a worker's
turn, time moving an eighth of a lease or a lease and an eighth, a worker killed, one cut off
with a new process under its id and the cut-off one stepped as a zombie), breadth first
to a depth bound. The steps are :class:`sim.world.World`'s own, so every promise of
:mod:`sim.checks` is checked in every state reached, as the step that reaches it runs: a
:class:`~sim.checks.Violation` is a counterexample, and breadth first it is a shortest one.

States are told apart by a fingerprint (:mod:`sim.fingerprint`): the keyspace as the
protocol reads it and what each process believes; two paths that reach one are explored
once.

A World cannot be copied (its store runs Lua in a runtime of its own), so a state is
expanded by replaying its path from a fresh World (the runs are deterministic: virtual
time, no threads) and then taking each next step in a child process made by
``os.fork()``: the kernel's copy of this process, so of the world exactly, however much
its processes keep; the child sends back its fingerprint or the violation and exits.
``fork=False`` replays each step's whole path instead (the same states, slower).

    python -m sim.exhaustive                    # depth 5: one JSON line of figures
    python -m sim.exhaustive --depth 6 --progress
    python -m sim.exhaustive --plant fence --first   # a shortest counterexample
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field

from . import plants
from .checks import Violation
from .fingerprint import fingerprint
from .machine import quiet
from .world import Config, World

# The timers, scheduled at the start: the first falls due before a worker's first
# sweep (every 500 ms), so a process cut off after its first turn can try to fire it
# on its lease alone; the last as a lease runs out.
DEADLINES_MS = (250, 1_000, 2_000)


@dataclass(frozen=True)
class Bounds:
    """What is explored: the world's shape, the timers, the depth, the faults allowed."""

    workers: int = 2
    shards: int = 2
    runners: int = 0
    lease_ms: int = 2_000
    deadlines_ms: tuple[int, ...] = DEADLINES_MS
    depth: int = 5  # 3,189 states, 2 to 3 minutes here; each more about 4x
    kills: int = 1  # at most this many kill -9s on a path
    partitions: int = 1  # at most this many cut-off processes (zombies) on a path

    def config(self) -> Config:
        return Config(
            workers=self.workers, runners=self.runners, shards=self.shards, lease_ms=self.lease_ms
        )

    def quanta_ms(self) -> tuple[int, ...]:
        """How far time may move in one step: an eighth of a lease (under the sweep's
        and the renewal's intervals, so a process can act between them) and a lease
        and an eighth (a lease left alone runs out, another can take the shard). Nine
        short steps make the long one, so paths that reach a time either way can meet."""
        return (self.lease_ms // 8, self.lease_ms * 9 // 8)


@dataclass(frozen=True)
class Action:
    """One step: ``kind`` one of step, advance, kill, partition, zombie; ``arg`` the
    worker's slot, or the milliseconds time moves."""

    kind: str
    arg: int

    def __str__(self) -> str:
        if self.kind == "advance":
            return f"advance({self.arg})"
        return (
            f"{self.kind}_worker({self.arg})"
            if self.kind != "zombie"
            else f"step_zombie({self.arg})"
        )

    def apply(self, world: World) -> None:
        if self.kind == "step":
            world.step_worker(self.arg)
        elif self.kind == "advance":
            world.advance(self.arg)
        elif self.kind == "kill":
            world.kill_worker(self.arg)
        elif self.kind == "partition":
            world.partition_worker(self.arg)
        elif self.kind == "zombie":
            world.step_zombie(self.arg)
        else:
            raise ValueError(f"no such step: {self.kind!r}")


def actions(bounds: Bounds) -> list[Action]:
    slots = range(bounds.workers)
    return [
        *(Action("step", s) for s in slots),
        *(Action("advance", ms) for ms in bounds.quanta_ms()),
        *(Action("kill", s) for s in slots),
        *(Action("partition", s) for s in slots),
        *(Action("zombie", s) for s in slots),
    ]


def enabled(world: World, path: Sequence[Action], bounds: Bounds) -> Iterator[Action]:
    """The steps that can come next and change something: a kill or a cut-off only of a
    live process and within the path's budget; a zombie's turn only while there is one."""
    kills = sum(a.kind == "kill" for a in path)
    partitions = sum(a.kind == "partition" for a in path)
    for a in actions(bounds):
        if a.kind in ("kill", "partition"):
            budget = bounds.kills - kills if a.kind == "kill" else bounds.partitions - partitions
            if budget <= 0 or world.workers[a.arg] is None or a.arg in world.zombies:
                continue
        if a.kind == "zombie" and a.arg not in world.zombies:
            continue
        yield a


@dataclass
class Counterexample:
    path: tuple[Action, ...]
    error: str

    def steps(self) -> list[str]:
        return [str(a) for a in self.path]


@dataclass
class Result:
    bounds: Bounds
    states: int = 0  # distinct states reached (the start included)
    transitions: int = 0  # steps taken from a state (each a replay)
    depth: int = 0  # the deepest level with a state
    seconds: float = 0.0
    by_depth: list[int] = field(default_factory=list)  # new states at each depth
    violations: list[Counterexample] = field(default_factory=list)

    def summary(self) -> str:
        return json.dumps(
            {
                "states": self.states,
                "transitions": self.transitions,
                "depth": self.depth,
                "seconds": round(self.seconds, 1),
                "violations": len(self.violations),
                "by_depth": self.by_depth,
                "bounds": {
                    "workers": self.bounds.workers,
                    "shards": self.bounds.shards,
                    "runners": self.bounds.runners,
                    "lease_ms": self.bounds.lease_ms,
                    "deadlines_ms": list(self.bounds.deadlines_ms),
                    "depth": self.bounds.depth,
                    "kills": self.bounds.kills,
                    "partitions": self.bounds.partitions,
                },
            }
        )


class Replayer:
    """Builds the world a path leads to: a fresh World, the timers, then the path."""

    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds

    def start(self) -> tuple[World, int]:
        world = World(self.bounds.config())
        start_ms = world.time.wall_ms()
        for delay in self.bounds.deadlines_ms:
            world.schedule(delay, 0, 0)
        return world, start_ms

    def replay(self, path: Sequence[Action]) -> tuple[World, int]:
        world, start_ms = self.start()
        try:
            for a in path:
                a.apply(world)
        except BaseException:
            world.close()
            raise
        return world, start_ms


Outcome = tuple[Action, str, str]  # the step, "ok" or "violation", the fingerprint or error


class Expander:
    """Takes every enabled step from the state a path leads to. With ``fork`` (where the
    system has it), the path is replayed once and each step taken in a child process:
    a copy of this one made by the kernel, so of the world exactly, however much state
    its processes keep; the child sends back its fingerprint or the violation and
    exits. Without, each step's path is replayed from a fresh World."""

    def __init__(self, bounds: Bounds, *, fork: bool, exact: bool) -> None:
        self.bounds = bounds
        self.replayer = Replayer(bounds)
        self.fork = fork and hasattr(os, "fork")
        self.exact = exact

    def start(self) -> str:
        world, start_ms = self.replayer.start()
        try:
            return fingerprint(world, start_ms, exact=self.exact)
        finally:
            world.close()

    def expand(self, path: tuple[Action, ...]) -> list[Outcome]:
        world, start_ms = self.replayer.replay(path)
        try:
            steps = list(enabled(world, path, self.bounds))
            if self.fork:
                return [self._forked(world, start_ms, a) for a in steps]
        finally:
            world.close()
        return [self._replayed(path, a) for a in steps]

    def _take(self, world: World, start_ms: int, a: Action) -> tuple[str, str]:
        try:
            a.apply(world)
            return "ok", fingerprint(world, start_ms, exact=self.exact)
        except Violation as v:
            return "violation", str(v)

    def _replayed(self, path: tuple[Action, ...], a: Action) -> Outcome:
        world, start_ms = self.replayer.replay(path)
        try:
            return (a, *self._take(world, start_ms, a))
        finally:
            world.close()

    def _forked(self, world: World, start_ms: int, a: Action) -> Outcome:
        read, write = os.pipe()
        # The child has only this thread: a stepped world runs no other (a test
        # runner's watchdog thread may run; the child never touches it). Python 3.12
        # warns of any fork with threads running.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: take the step, answer, and leave without cleaning up
            os.close(read)
            try:
                gc.disable()  # a collection would copy every page it touches
                try:
                    answer = self._take(world, start_ms, a)
                except BaseException as exc:  # any other error is the parent's to raise
                    answer = ("error", f"{type(exc).__name__}: {exc}")
                os.write(write, json.dumps(answer).encode())
            finally:
                os._exit(0)
        os.close(write)
        chunks = []
        while chunk := os.read(read, 65536):
            chunks.append(chunk)
        os.close(read)
        os.waitpid(pid, 0)
        if not chunks:
            raise RuntimeError(f"the child taking {a} after {start_ms} answered nothing")
        status, text = json.loads(b"".join(chunks))
        if status == "error":
            raise RuntimeError(f"{a}: {text}")
        return a, status, text


def explore(
    bounds: Bounds | None = None,
    *,
    stop_at_first: bool = False,
    fork: bool = True,
    exact: bool = False,
    progress: Callable[[int, int, int], None] | None = None,
) -> Result:
    """Every state within ``bounds.depth`` steps of the start, breadth first; every
    Violation met on the way recorded with its path (the first is a shortest). A step
    that broke a promise is not expanded further. ``stop_at_first``: end at the first
    violation (the plants' tests); ``fork``: take steps in forked children (else by
    replay); ``exact``: fingerprints of everything (see :func:`fingerprint`)."""
    bounds = bounds or Bounds()
    result = Result(bounds)
    began = time.perf_counter()
    expander = Expander(bounds, fork=fork, exact=exact)
    with quiet():
        seen = {expander.start()}
        result.states, result.by_depth = 1, [1]
        frontier: list[tuple[Action, ...]] = [()]
        for depth in range(1, bounds.depth + 1):
            nxt: list[tuple[Action, ...]] = []
            for path in frontier:
                for a, status, text in expander.expand(path):
                    result.transitions += 1
                    child = (*path, a)
                    if status == "violation":
                        result.violations.append(Counterexample(child, f"Violation: {text}"))
                        if stop_at_first:
                            result.seconds = time.perf_counter() - began
                            return result
                    elif text not in seen:
                        seen.add(text)
                        nxt.append(child)
            if not nxt:
                break
            result.depth = depth
            result.states += len(nxt)
            result.by_depth.append(len(nxt))
            frontier = nxt
            if progress is not None:
                progress(depth, len(nxt), result.states)
    result.seconds = time.perf_counter() - began
    return result


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sim.exhaustive",
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    p.add_argument("--depth", type=int, default=Bounds.depth, help="steps from the start")
    p.add_argument("--kills", type=int, default=Bounds.kills, help="kill -9s on a path")
    p.add_argument("--partitions", type=int, default=Bounds.partitions, help="zombies on a path")
    p.add_argument(
        "--plant", choices=sorted(plants.PLANTS), help="plant this bug first: it must be found"
    )
    p.add_argument("--first", action="store_true", help="stop at the first violation")
    p.add_argument("--exact", action="store_true", help="fingerprint everything (fewer merge)")
    p.add_argument("--replay", action="store_true", help="replay each step's path, no fork")
    p.add_argument("--progress", action="store_true", help="a line on stderr each depth")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.depth < 1 or args.kills < 0 or args.partitions < 0:
        print("--depth is at least 1, --kills and --partitions at least 0", file=sys.stderr)
        return 2
    bounds = Bounds(depth=args.depth, kills=args.kills, partitions=args.partitions)

    def progress(depth: int, new: int, total: int) -> None:
        print(f"depth {depth}: {new} new states, {total} in all", file=sys.stderr)

    with plants.planted(args.plant) if args.plant else nullcontext():
        result = explore(
            bounds,
            stop_at_first=args.first,
            fork=not args.replay,
            exact=args.exact,
            progress=progress if args.progress else None,
        )
    for cx in result.violations[:1]:
        print(f"counterexample in {len(cx.path)} steps: {cx.error}", file=sys.stderr)
        for n, step in enumerate(cx.steps(), 1):
            print(f"  {n}. {step}", file=sys.stderr)
    print(result.summary())
    found = bool(result.violations)
    if args.plant:
        return 0 if found else 1
    return 1 if found else 0


if __name__ == "__main__":
    if os.environ.get("PYTHONHASHSEED") != "0":  # set order decides some call orders
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "sim.exhaustive", *sys.argv[1:]])
    raise SystemExit(main())
