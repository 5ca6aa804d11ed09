"""Engine benchmark: N timers added then expired, SystemTimer vs a plain ``heapq`` loop.

Both run in this one process on the same task objects and the same delays, so the
ratio holds on a noisy machine even when the absolute rates do not. The clock is a
ManualClock jumped past the last deadline, so the figure is the engine's own cost (adds,
cascades through the levels, hand-off to the executor, run), not time spent waiting.

    python -m benchmarks.engine --n 1000000
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import random
import sys
import threading
import time

from timer import ManualClock, SystemTimer, TimerTask


class Counted(TimerTask):
    __slots__ = ()
    ran = 0
    done = threading.Event()
    target = 0

    def run(self) -> None:
        cls = Counted
        cls.ran += 1
        if cls.ran == cls.target:
            cls.done.set()


def bench_wheel(delays: list[int]) -> dict[str, float]:
    clock = ManualClock(0)
    timer = SystemTimer("bench", tick_ms=1, wheel_size=20, clock=clock)
    tasks = [Counted(d) for d in delays]
    Counted.ran, Counted.target, Counted.done = 0, len(tasks), threading.Event()
    cpu0, t0 = time.process_time(), time.perf_counter()
    add = timer.add
    for task in tasks:
        add(task)
    t_added = time.perf_counter()
    clock.advance(max(delays) + 1)
    while timer.advance_clock(0):
        pass
    Counted.done.wait()
    t1, cpu1 = time.perf_counter(), time.process_time()
    levels = len(timer.wheel.levels())
    timer.close()
    return {
        "seconds": t1 - t0,
        "add_seconds": t_added - t0,
        "expire_seconds": t1 - t_added,
        "cpu_seconds": cpu1 - cpu0,
        "ops_per_s": 2 * len(delays) / (t1 - t0),
        "levels": levels,
    }


def bench_heapq(delays: list[int]) -> dict[str, float]:
    tasks = [Counted(d) for d in delays]
    Counted.ran, Counted.target = 0, len(tasks)
    heap: list[tuple[int, int, Counted]] = []
    seq = itertools.count()
    now = 0
    cpu0, t0 = time.process_time(), time.perf_counter()
    push = heapq.heappush
    for task in tasks:
        push(heap, (now + task.delay_ms, next(seq), task))
    t_added = time.perf_counter()
    now = max(delays) + 1
    pop = heapq.heappop
    while heap and heap[0][0] <= now:
        pop(heap)[2].run()
    t1, cpu1 = time.perf_counter(), time.process_time()
    return {
        "seconds": t1 - t0,
        "add_seconds": t_added - t0,
        "expire_seconds": t1 - t_added,
        "cpu_seconds": cpu1 - cpu0,
        "ops_per_s": 2 * len(delays) / (t1 - t0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="timers (default 1M)")
    parser.add_argument("--max-delay-ms", type=int, default=60_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    delays = [rng.randint(1, args.max_delay_ms) for _ in range(args.n)]
    wheel = bench_wheel(delays)
    heap = bench_heapq(delays)
    result = {
        "benchmark": "engine-expiry",
        "n": args.n,
        "max_delay_ms": args.max_delay_ms,
        "python": sys.version.split()[0],
        "system_timer": wheel,
        "heapq": heap,
        "ratio_system_timer_to_heapq_ops": wheel["ops_per_s"] / heap["ops_per_s"],
    }
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
