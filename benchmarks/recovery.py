"""Recovery: how long a new leader takes to take over a shard holding 100k timers that are
due within its horizon (lease acquisition plus loading them all into its wheel).

    python -m benchmarks.recovery [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from timer import TimerClient
from timer.testing import RedisServer, find_server_binary
from timer.worker import Worker, WorkerSettings

from .options import count


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--n", type=count("timers"), default=None)
    p.add_argument("--server", default=None)
    args = p.parse_args(argv)
    n = args.n or (20_000 if args.quick else 100_000)
    with tempfile.TemporaryDirectory() as tmp:
        binary = find_server_binary(args.server)
        with RedisServer(Path(tmp) / "data", binary=binary) as server:
            c = TimerClient.from_url(server.url, "rec")
            c.init(shards=1)
            now = c.server_time_ms()
            for i in range(0, n, 5_000):
                c.schedule_many(
                    [
                        {"id": f"job:{j}", "deadline_ms": now + 60_000 + j % 20_000}
                        for j in range(i, min(n, i + 5_000))
                    ]
                )
            settings = WorkerSettings(worker_id="successor", horizon_ms=120_000)
            w = Worker(TimerClient.from_url(server.url, "rec"), settings)
            w.leases.sync_clock()
            t0 = time.perf_counter()
            assert w.leases.acquire(0)
            took = time.perf_counter() - t0
            loaded = w.timer.size
            w.close()
            w.client.close()
            version = server.version()
            c.close()
    result = {
        "benchmark": "recovery",
        "timers_in_shard": n,
        "server": version,
        "takeover_seconds": round(took, 3),
        "timers_loaded": loaded,
        "timers_loaded_per_s": round(loaded / took),
    }
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
