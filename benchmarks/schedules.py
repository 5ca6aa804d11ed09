"""Recurring schedules (#29): occurrence lateness next to one-shot timers', Redis bytes
per schedule, schedules created per second. Prints one JSON document.

    python -m benchmarks.schedules            # 10,000 schedules of 1 s, 10 s of firing
    python -m benchmarks.schedules --quick    # 1,000 schedules, 5 s

Two real worker processes on a private server fire both kinds side by side in one run:
N schedules of every second, and N one-shot timers due on each of the same whole
seconds (both fall n at once, a burst a second; with ``--spread`` both are spread
over each second instead), so the ratio of their lateness (decided - deadline, both
Redis time; an occurrence's deadline is its nominal time plus its jitter) is the cost
of arming the next occurrence in the fire call. Bytes per schedule: the server's
``used_memory`` after creating them, less before, over N (the record and its armed
occurrence, with its bucket entry).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from timer import TimerClient
from timer.durable.schedules.records import occurrence_name
from timer.testing import RedisServer, find_server_binary

from ._harness import pct, start_worker
from .options import count


def used_memory(c: TimerClient) -> int:
    return int(c.redis.info("memory")["used_memory"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true")
    p.add_argument(
        "--n",
        type=count("schedules"),
        default=None,
        help="schedules (and one-shot timers a second)",
    )
    p.add_argument(
        "--seconds", type=count("seconds"), default=None, help="how long to let them fire"
    )
    p.add_argument("--server", default=None, help="redis-server or valkey-server binary")
    p.add_argument("--alone", action="store_true", help="no one-shot timers beside the schedules")
    p.add_argument(
        "--spread",
        action="store_true",
        help="schedules with a jitter of up to 999 ms, one-shot timers at random ms of each "
        "second (deadlines spread over the second, not n at once)",
    )
    args = p.parse_args(argv)
    n = args.n or (1_000 if args.quick else 10_000)
    seconds = args.seconds or (5 if args.quick else 10)
    binary = find_server_binary(args.server)
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp) / "redis", binary=binary).start()
        try:
            result = run(server.url, Path(tmp), n, seconds, spread=args.spread, alone=args.alone)
        finally:
            server.stop()
    result.update({"benchmark": "schedules", "n": n, "seconds": seconds, "spread": args.spread,
                   "alone": args.alone})  # fmt: skip
    print(json.dumps(result))
    return 0


def run(
    url: str, logs: Path, n: int, seconds: int, *, spread: bool = False, alone: bool = False
) -> dict[str, Any]:
    c = TimerClient.from_url(url, "bench")
    c.init(shards=16)
    before = used_memory(c)
    t0 = time.perf_counter()
    for i in range(n):
        c.schedules.create(f"s{i}", every="1s", jitter=999 if spread else 0)
    create_s = time.perf_counter() - t0
    per_schedule = (used_memory(c) - before) / n
    # One-shot timers beside them, due at the same instants: n on each whole second
    # (the occurrences of n schedules of every second fall together, a burst a second).
    start = (c.server_time_ms() // 1_000 + 2) * 1_000
    rng = random.Random(7)
    items = [
        {
            "id": f"one:{k}:{i}",
            "deadline_ms": start + 1_000 * k + (rng.randrange(1_000) if spread else 0),
        }
        for k in range(seconds)
        for i in range(0 if alone else n)
    ]
    for i in range(0, len(items), 10_000):
        c.schedule_many(items[i : i + 10_000])
    workers = [start_worker(url, "bench", f"w{i}", 2_000, logs) for i in range(2)]
    try:
        end = start + 1_000 * seconds
        while c.server_time_ms() < end + 2_000:
            time.sleep(0.2)
        # and until every schedule fired the window's last occurrence: workers a loaded
        # machine started late still fire them (a condition, with a deadline)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
            s.last_ms is not None and s.last_ms >= end - 1_000 for s in c.schedules.list()
        ):
            time.sleep(0.2)
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(30)
    late_s: list[int] = []
    late_one: list[int] = []
    per: dict[str, int] = {}
    fired = 0  # every occurrence fired, in the window or not (missed ones: its policy's)
    for o in c.all_outcomes():
        found = occurrence_name(o.id)
        if found is None:
            late_one.append(o.decided_ms - o.deadline_ms)
            continue
        fired += 1
        per[o.id] = per.get(o.id, 0) + 1  # none twice: in the window or not
        if start <= found[1] < end:  # every worker was up for these
            late_s.append(o.decided_ms - o.deadline_ms)  # its deadline: nominal + jitter
    c.close()
    twice = sum(1 for v in per.values() if v > 1)
    p99_s, p99_one = pct(late_s, 0.99), pct(late_one, 0.99)
    return {
        "schedules_created_per_s": round(n / create_s),
        "redis_bytes_per_schedule": round(per_schedule, 1),
        "occurrences": len(late_s),
        "occurrences_fired": fired,
        "occurrences_fired_twice": twice,
        "occurrence_lateness_ms": {"p50": pct(late_s, 0.5), "p99": p99_s},
        "one_shot_lateness_ms": {"p50": pct(late_one, 0.5), "p99": pct(late_one, 0.99)},
        "ratio_p99_occurrence_to_one_shot": (
            round(p99_s / p99_one, 2) if p99_s is not None and p99_one else None
        ),
    }


if __name__ == "__main__":
    sys.exit(main())
