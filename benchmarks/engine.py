"""Engine benchmark (no Redis): SystemTimer against a heapq timer and a Netty-style wheel.

Two workloads, on virtual time (a manual clock jumped from event to event), so the
figures are each timer's own cost, not time spent waiting:

* ``expiry``: N timers (delays uniform in 1 ms .. 60 s) added, then all expired.
* ``purgatory``: Kafka's TestPurgatoryPerformance shape: requests arrive as a Poisson
  process, each with a 200 ms timeout; completion latency is log-normal with p50 20 ms and
  p75 60 ms, so most complete (cancel their timer) before they expire.

Each (timer, workload) runs in its own process so peak memory is its own; the parent
prints one JSON document with ops/s, CPU seconds, peak RSS growth and ratios to heapq.

    python -m benchmarks.engine                 # 1M expiry, 500k purgatory requests
    python -m benchmarks.engine --quick
"""

from __future__ import annotations

import argparse
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

from .baselines import HashedWheelTimer, HeapTimer

TIMERS = ("system_timer", "heapq", "hashed_wheel")
WORKLOADS = ("expiry", "purgatory")


class BenchTask(TimerTask):
    __slots__ = ("bucket", "cancelled")
    ran = 0
    done = threading.Event()
    target = -1

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.bucket: Any = None
        self.cancelled = False

    def run(self) -> None:
        BenchTask.ran += 1
        if BenchTask.ran == BenchTask.target:
            BenchTask.done.set()


class SystemTimerDriver:
    """SystemTimer on a manual clock, driven like the baselines."""

    def __init__(self) -> None:
        self.clock = ManualClock(0)
        self.timer = SystemTimer("bench", tick_ms=1, wheel_size=20, clock=self.clock)

    def add(self, task: BenchTask, now_ms: int) -> None:
        self.timer.add(task)

    def cancel(self, task: BenchTask) -> None:
        task.cancel()

    def advance_to(self, now_ms: int) -> None:
        if now_ms > self.clock.now_ms():
            self.clock.advance(now_ms - self.clock.now_ms())
        while self.timer.advance_clock(0):
            pass

    def finish(self, expected: int) -> None:
        if BenchTask.ran < expected:
            BenchTask.target = expected
            if BenchTask.ran < expected:
                BenchTask.done.wait(120)
        self.timer.close()


def make(name: str) -> Any:
    if name == "system_timer":
        return SystemTimerDriver()
    if name == "heapq":
        return HeapTimer()
    return HashedWheelTimer(tick_ms=1, wheel_size=4096)


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
    driver = make(timer_name)
    if workload == "expiry":
        plan = expiry_plan(n, seed)
        tasks = [BenchTask(delay) for _, _, delay in plan]
    else:
        plan = purgatory_plan(n, seed)
        tasks = [BenchTask(200) for _ in range(n)]
    rss0 = rss_kb()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    adds = cancels = 0
    now = 0
    if workload == "expiry":
        for task in tasks:
            driver.add(task, 0)
        adds = len(tasks)
        end = 60_001
    else:
        for at, kind, i in plan:
            if at > now:
                driver.advance_to(at)
                now = at
            if kind == "add":
                driver.add(tasks[i], at)
                adds += 1
            else:
                driver.cancel(tasks[i])
                cancels += 1
        end = now + 201
    driver.advance_to(end)
    expected = adds - cancels
    if isinstance(driver, SystemTimerDriver):
        driver.finish(expected)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    ops = adds + cancels + BenchTask.ran
    return {
        "timer": timer_name, "workload": workload, "n": n, "adds": adds, "cancels": cancels,
        "expired": BenchTask.ran, "ops": ops,
        "wall_seconds": round(wall, 3), "cpu_seconds": round(cpu, 3),
        "ops_per_s": round(ops / wall), "peak_rss_growth_mb": round((rss_kb() - rss0) / 1024, 1),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="100k expiry, 100k purgatory")
    p.add_argument("--n", type=int, default=None, help="expiry timers (default 1M)")
    p.add_argument("--requests", type=int, default=None, help="purgatory requests (500k)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--case", nargs=2, metavar=("TIMER", "WORKLOAD"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.case:
        timer_name, workload = args.case
        n = args.n if workload == "expiry" else args.requests
        print(json.dumps(run_case(timer_name, workload, n, args.seed)))
        return 0
    n = args.n or (100_000 if args.quick else 1_000_000)
    requests = args.requests or (100_000 if args.quick else 500_000)
    results: dict[str, Any] = {"benchmark": "engine", "python": sys.version.split()[0]}
    for workload in WORKLOADS:
        rows = {}
        for timer_name in TIMERS:
            out = subprocess.run(
                [sys.executable, "-m", "benchmarks.engine", "--case", timer_name, workload,
                 "--n", str(n), "--requests", str(requests), "--seed", str(args.seed)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            rows[timer_name] = json.loads(out.stdout)
            print(f"engine {workload} {timer_name}: done", file=sys.stderr)
        if len({row["expired"] for row in rows.values()}) != 1:
            raise SystemExit(f"timers disagree on what expired: {rows}")  # a bug, not noise
        base = rows["heapq"]["ops_per_s"]
        for row in rows.values():
            row["ops_ratio_to_heapq"] = round(row["ops_per_s"] / base, 3)
        results[workload] = rows
    json.dump(results, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
