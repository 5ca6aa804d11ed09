"""Memory: Redis bytes per pending timer, and a worker's RSS with timers far beyond its
horizon (it must not grow with them).

1M timers (quick: 100k) with deadlines spread over a week. Redis ``INFO memory``
``used_memory`` before and after gives bytes per timer; a worker process's RSS is read
(``/proc/<pid>/status``) with an empty namespace and again with all the timers pending.

    python -m benchmarks.memory [--quick]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from timer import TimerClient
from timer.testing import RedisServer, find_server_binary

from ._harness import WEEK_MS, schedule_spread
from .options import count

ROOT = Path(__file__).resolve().parents[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def worker_rss(c: TimerClient, url: str, ns: str) -> float:
    proc = subprocess.Popen(
        [sys.executable, "-m", "timer.worker", "--redis-url", url, "--namespace", ns,
         "--log-level", "WARNING"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while None in c.leaders().values():
            if time.monotonic() > deadline:
                raise TimeoutError("the worker did not take every shard")
            time.sleep(0.05)
        time.sleep(1.0)  # its first horizon load and sweep, then read its memory
        return rss_mb(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--n", type=count("timers"), default=None)
    p.add_argument("--server", default=None)
    args = p.parse_args(argv)
    n = args.n or (100_000 if args.quick else 1_000_000)
    result: dict[str, Any] = {"benchmark": "memory", "timers": n}
    with tempfile.TemporaryDirectory() as tmp:
        binary = find_server_binary(args.server)
        with RedisServer(Path(tmp) / "data", binary=binary) as server:
            c = TimerClient.from_url(server.url, "mem")
            c.init(shards=16)
            empty_rss = worker_rss(c, server.url, "mem")
            before = int(c.redis.info("memory")["used_memory"])
            schedule_spread(c, n, WEEK_MS, "job")
            after = int(c.redis.info("memory")["used_memory"])
            full_rss = worker_rss(c, server.url, "mem")
            result.update(
                {
                    "server": server.version(),
                    "redis_bytes_per_timer": round((after - before) / n, 1),
                    "redis_used_memory_mb": round(after / 2**20, 1),
                    "worker_rss_mb_no_timers": round(empty_rss, 1),
                    "worker_rss_mb_with_timers_beyond_horizon": round(full_rss, 1),
                    "worker_rss_ratio": round(full_rss / empty_rss, 3),
                }
            )
            c.close()
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
