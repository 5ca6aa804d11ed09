"""Engine benchmark (no Redis): SystemTimer against heapq timers and a Netty-style wheel.

Three workloads, on virtual time (a manual clock moved from event to event), so the
figures are each timer's own cost, not time spent waiting:

* ``expiry``: N timers (delays uniform in 1 ms .. 60 s) added, then the clock jumps past
  them all at once (a reaper that fell behind).
* ``expiry_step``: the same timers, with the clock stepping 1 ms at a time as a reaper on
  a live clock sees it.
* ``purgatory``: Kafka's TestPurgatoryPerformance shape: requests arrive as a Poisson
  process, each with a 200 ms timeout; completion latency is log-normal with p50 20 ms and
  p75 60 ms, so most complete (cancel their timer) before they expire.

The timers:

* ``system_timer``: ``SystemTimer`` as shipped: tasks run on its executor thread.
* ``system_timer_inline``: ``SystemTimer(inline=True)``, as the worker runs it.
* ``system_timer_py``, ``system_timer_inline_py``: the same on the pure-Python core (what
  runs where the C extension could not be built); the others use the compiled core.
* ``heapq``: a plain heapq timer: lazy cancel, no lock, tasks run inline.
* ``heapq_safe``: a heapq timer with SystemTimer's guarantees (a lock, the same batched
  executor hand-off, memory freed at cancel): the fair comparison for ``system_timer``.
* ``hashed_wheel``: Netty's single-level wheel (4096 buckets of 1 ms), inline, no lock.

Each (timer, workload) runs in its own process so peak memory is its own, ``--repeat``
times, interleaved across timers (this machine is noisy; the fastest run counts, and all
are listed). The parent prints one JSON document with ops/s, CPU seconds, peak RSS growth,
and the ratios of each to ``heapq`` and to ``heapq_safe``.

    python -m benchmarks.engine                 # 1M expiry, 500k purgatory requests
    python -m benchmarks.engine --quick
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import random
import resource
import subprocess
import sys
import threading
import time
from typing import Any

from timer import ManualClock, SystemTimer, TimerTask
from timer.engine import core
from timer.engine.executor import TaskExecutor

from .baselines import HashedWheelTimer, HeapTimer, SafeHeapTimer
from .options import count

TIMERS = (
    "system_timer", "system_timer_inline", "system_timer_py", "system_timer_inline_py",
    "heapq", "heapq_safe", "hashed_wheel",
)  # fmt: skip
WORKLOADS = ("expiry", "expiry_step", "purgatory")
THREADED = ("system_timer", "system_timer_py", "heapq_safe")  # tasks run on an executor thread


class BenchTask(TimerTask):
    __slots__ = ("bucket", "cancelled")
    ran = 0

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.bucket: Any = None
        self.cancelled = False

    def run(self) -> None:
        BenchTask.ran += 1


class Marker(TimerTask):
    """Handed to an executor last: once it ran, everything handed before it has run."""

    def __init__(self) -> None:
        super().__init__(-1)
        self.done = threading.Event()

    def run(self) -> None:
        self.done.set()


class SystemTimerDriver:
    """SystemTimer driven like the baselines: no wrapper frame around its own calls."""

    def __init__(self, clock: ManualClock, inline: bool) -> None:
        self.timer = SystemTimer("bench", clock=clock, inline=inline)
        self.add = self.timer.add
        self.cancel = TimerTask.cancel
        # One call expires every due bucket; 0 = do not wait.
        self.advance = functools.partial(self.timer.advance_clock, 0)


def make(name: str, clock: ManualClock) -> Any:
    if name.startswith("system_timer"):
        # *_py: add and cancel on the pure-Python core, not the compiled one (#15); the
        # driver binds both when made
        which = "python" if name.endswith("_py") or not core.AVAILABLE else "compiled"
        with core.using(which):
            return SystemTimerDriver(clock, inline="inline" in name)
    if name == "heapq":
        return HeapTimer(clock)
    if name == "heapq_safe":
        return SafeHeapTimer(clock, TaskExecutor("bench"))
    return HashedWheelTimer(clock, tick_ms=1, wheel_size=4096)


def wait_for_executor(driver: Any) -> None:
    """Until the executor thread has run all it was handed (a deadline, not a sleep)."""
    marker = Marker()
    if isinstance(driver, SystemTimerDriver):
        driver.add(marker)  # due already: queued behind every expired batch
    else:
        driver.executor.submit([marker])
    if not marker.done.wait(300):
        raise SystemExit("the executor did not catch up within 300 s")


def expiry_plan(n: int, seed: int) -> list[tuple[int, str, int]]:
    rng = random.Random(seed)
    return [(0, "add", rng.randint(1, 60_000)) for _ in range(n)]


def purgatory_plan(n: int, seed: int, rate_per_s: int = 10_000) -> list[tuple[int, str, int]]:
    """(time_ms, 'add'|'cancel', request index or delay) events in time order."""
    rng = random.Random(seed)
    mu, sigma = math.log(20), math.log(3) / 0.6745  # p50 20 ms, p75 60 ms
    events: list[tuple[int, str, int]] = []
    t = 0.0
    for i in range(n):
        t += rng.expovariate(rate_per_s / 1000)
        events.append((int(t), "add", i))
        latency = rng.lognormvariate(mu, sigma)
        if latency < 200:
            events.append((int(t + latency), "cancel", i))
    events.sort(key=lambda e: (e[0], e[1] == "cancel"))
    return events


def rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def run_case(timer_name: str, workload: str, n: int, seed: int) -> dict[str, Any]:
    clock = ManualClock(0)
    driver = make(timer_name, clock)
    if workload == "purgatory":
        plan = purgatory_plan(n, seed)
        tasks = [BenchTask(200) for _ in range(n)]
    else:
        plan = expiry_plan(n, seed)
        tasks = [BenchTask(delay) for _, _, delay in plan]
    # A cancel in the very ms its timer expires comes after that ms's advance: an inline
    # timer has run the task by then, an executor may not have (and then skips it).
    added_at = {i: at for at, kind, i in plan if kind == "add"} if workload == "purgatory" else {}
    at_expiry = sum(1 for at, kind, i in plan if kind == "cancel" and at == added_at[i] + 200)
    add, cancel, advance, tick = driver.add, driver.cancel, driver.advance, clock.advance
    rss0 = rss_kb()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    adds = cancels = 0
    now = 0
    if workload == "purgatory":
        for at, kind, i in plan:
            if at > now:
                tick(at - now)
                advance()
                now = at
            if kind == "add":
                add(tasks[i])
                adds += 1
            else:
                cancel(tasks[i])
                cancels += 1
        tick(201)
        advance()
    else:
        for task in tasks:
            add(task)
        adds = len(tasks)
        if workload == "expiry":
            tick(60_001)
            advance()
        else:
            for _ in range(60_001):
                tick(1)
                advance()
    if timer_name in THREADED:
        wait_for_executor(driver)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    ops = adds + cancels + BenchTask.ran
    return {
        "timer": timer_name, "workload": workload, "n": n, "adds": adds, "cancels": cancels,
        "expired": BenchTask.ran, "cancels_at_expiry": at_expiry, "ops": ops,
        "wall_seconds": round(wall, 3), "cpu_seconds": round(cpu, 3),
        "ops_per_s": round(ops / wall), "peak_rss_growth_mb": round((rss_kb() - rss0) / 1024, 1),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="100k expiry, 100k purgatory")
    p.add_argument("--only", choices=WORKLOADS, action="append", help="run just this workload")
    p.add_argument("--n", type=count("timers"), default=None, help="expiry timers (default 1M)")
    p.add_argument(
        "--requests", type=count("requests"), default=None, help="purgatory requests (500k)"
    )
    p.add_argument("--seed", type=count("seed", 0), default=1)
    p.add_argument(
        "--repeat",
        type=count("runs"),
        default=3,
        help="runs of each case, interleaved across timers; the fastest counts (default 3)",
    )
    p.add_argument("--case", nargs=2, metavar=("TIMER", "WORKLOAD"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.case:
        timer_name, workload = args.case
        n = args.requests if workload == "purgatory" else args.n
        print(json.dumps(run_case(timer_name, workload, n, args.seed)))
        return 0
    n = args.n or (100_000 if args.quick else 1_000_000)
    requests = args.requests or (100_000 if args.quick else 500_000)
    results: dict[str, Any] = {"benchmark": "engine", "python": sys.version.split()[0]}
    results["repeat"] = args.repeat
    results["compiled_core"] = core.AVAILABLE  # else system_timer* run on Python too
    for workload in args.only or WORKLOADS:
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in TIMERS}
        for attempt in range(args.repeat):  # round-robin, so a noisy spell hits every timer
            for timer_name in TIMERS:
                out = subprocess.run(
                    [sys.executable, "-m", "benchmarks.engine", "--case", timer_name, workload,
                     "--n", str(n), "--requests", str(requests), "--seed", str(args.seed)],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                runs[timer_name].append(json.loads(out.stdout))
            print(f"engine {workload}: run {attempt + 1}/{args.repeat} done", file=sys.stderr)
        rows = {}
        for timer_name, done in runs.items():
            rows[timer_name] = max(done, key=lambda row: row["ops_per_s"])
            rows[timer_name]["ops_per_s_all_runs"] = [row["ops_per_s"] for row in done]
        inline = {row["expired"] for name, row in rows.items() if name not in THREADED}
        if len(inline) != 1:
            raise SystemExit(f"timers disagree on what expired: {rows}")  # a bug, not noise
        (expired,) = inline
        for name in THREADED:
            if not expired - rows[name]["cancels_at_expiry"] <= rows[name]["expired"] <= expired:
                raise SystemExit(f"{name} expired a different set: {rows}")
        for base in ("heapq", "heapq_safe"):
            ops, mem = rows[base]["ops_per_s"], rows[base]["peak_rss_growth_mb"]
            for row in rows.values():
                row[f"ops_ratio_to_{base}"] = round(row["ops_per_s"] / ops, 3)
                if mem > 0:
                    row[f"memory_ratio_to_{base}"] = round(row["peak_rss_growth_mb"] / mem, 3)
        results[workload] = rows
    json.dump(results, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
