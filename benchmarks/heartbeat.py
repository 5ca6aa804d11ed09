"""Heartbeats at a rate beside the lateness workload (#43). Prints one JSON document.

    python -m benchmarks.heartbeat            # 10,000 heartbeats/s asked, 30 s a phase
    python -m benchmarks.heartbeat --quick    # 10 s a phase

One private server, two namespaces, one after the other in one run: the worker
benchmark's lateness workload (1,000 timers falling due a second, one worker) alone,
then again while three other processes heartbeat 10,000 pending job timers of the
same namespace as fast as they may up to ``--rate`` together (each call one round trip, moving its
timer later: a record write, a bucket entry and an event the leader applies). Reported:
the heartbeats' rate reached and their latency (p50/p99 as the caller sees it, the
worst process's), and the
fired timers' lateness in both phases, with the ratio of their p99. On a 2-core machine
the load process shares the cores with the server and the worker: part of any change in
lateness is that, not the heartbeats' design.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from timer import TimerClient
from timer.testing import RedisServer, find_server_binary

from ._harness import ROOT, lateness_run, pct
from .options import count

JOBS = 10_000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seconds", type=count("seconds"), default=None, help="each phase (default 30)")
    p.add_argument(
        "--rate",
        type=count("heartbeats a second"),
        default=10_000,
        help="heartbeats a second asked",
    )
    p.add_argument(
        "--processes", type=count("processes"), default=3, help="load processes sharing the rate"
    )
    p.add_argument("--server", default=None, help="redis-server or valkey-server binary")
    p.add_argument("--load", nargs=4, metavar=("URL", "NS", "SECONDS", "OUT"),
                   help=argparse.SUPPRESS)  # fmt: skip  # the load process's own mode
    args = p.parse_args(argv)
    if args.load:
        url, ns, seconds, out = args.load
        load(url, ns, float(seconds), args.rate, Path(out))
        return 0
    seconds = args.seconds or (10 if args.quick else 30)
    binary = find_server_binary(args.server)
    with (
        tempfile.TemporaryDirectory() as tmp,
        RedisServer(Path(tmp) / "redis", binary=binary) as server,
    ):
        result = run(server.url, Path(tmp), seconds, args.rate, args.processes)
    result.update({"benchmark": "heartbeat", "seconds": seconds, "rate_asked": args.rate,
                   "load_processes": args.processes})  # fmt: skip
    print(json.dumps(result))
    return 0


def run(url: str, logs: Path, seconds: int, rate: int, processes: int) -> dict[str, Any]:
    alone = TimerClient.from_url(url, "alone")
    alone.init(shards=16)
    beating = TimerClient.from_url(url, "beating")
    beating.init(shards=16)
    try:
        before = lateness_run(alone, url, logs, seconds=seconds, pending_total=seconds * 1_000)
        beating.schedule_many(
            [{"id": f"job:{i}", "delay_ms": 3_600_000, "max_total_ms": 7_200_000}
             for i in range(JOBS)]
        )  # fmt: skip
        outs = [logs / f"load-{k}.json" for k in range(processes)]
        # the load runs through the whole phase: from the due timers' scheduling (part of
        # lateness_run) until the last has fired, and a few seconds longer
        loaders = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.heartbeat",
                    "--rate",
                    str(rate // processes),
                    "--load",
                    url,
                    "beating",
                    str(seconds + 8 + seconds // 10),
                    str(out),
                ],
                cwd=ROOT,
            )
            for out in outs
        ]
        ready = time.monotonic() + 60
        while not all(out.with_suffix(".ready").exists() for out in outs):
            if time.monotonic() > ready or any(x.poll() is not None for x in loaders):
                raise RuntimeError("a heartbeat load process did not start")
            time.sleep(0.01)  # polling for the processes' start, with a deadline
        try:
            during = lateness_run(
                beating, url, logs, seconds=seconds, pending_total=seconds * 1_000 + JOBS
            )
        finally:
            for loader in loaders:  # the phase is over: each writes what it measured
                loader.send_signal(signal.SIGTERM)
            for loader in loaders:
                loader.wait(60)
        each = [json.loads(out.read_text()) for out in outs]
        beats = {
            "calls": sum(b["calls"] for b in each),
            "per_s": sum(b["per_s"] for b in each),
            "latency_ms": {q: max(b["latency_ms"][q] for b in each) for q in ("p50", "p99")},
        }
    finally:
        alone.close()
        beating.close()
    p99 = before["lateness_ms"]["p99"] or 1
    return {
        "heartbeats": beats,
        "lateness_alone": before,
        "lateness_with_heartbeats": during,
        "ratio_lateness_p99_with_to_alone": round(during["lateness_ms"]["p99"] / p99, 2),
    }


def load(url: str, ns: str, seconds: float, rate: int, out: Path) -> None:
    """Heartbeat the namespace's job timers round robin, at most ``rate`` a second, for
    ``seconds`` or until SIGTERM; write the calls made, the rate reached and the
    latencies."""
    c = TimerClient.from_url(url, ns)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    out.with_suffix(".ready").touch()  # a SIGTERM from now on ends the load cleanly
    latencies: list[float] = []
    gap = 1 / rate
    start = time.perf_counter()
    end = start + seconds
    i = 0
    try:
        while (now := time.perf_counter()) < end and not stop.is_set():
            ahead = start + i * gap - now
            if ahead > 0:
                time.sleep(ahead)  # the load's pace, not a wait for anything
            t0 = time.perf_counter()
            c.heartbeat(f"job:{i % JOBS}", 3_600_000 + i)  # always later: a move each
            latencies.append((time.perf_counter() - t0) * 1000)
            i += 1
    finally:
        c.close()
    took = time.perf_counter() - start
    out.write_text(json.dumps({
        "calls": i, "per_s": round(i / took),
        "latency_ms": {"p50": round(pct(latencies, 0.5) or 0, 3),
                       "p99": round(pct(latencies, 0.99) or 0, 3)},
    }))  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
