"""Handlers: what users feel, from a timer's deadline to the start of their code.

Side by side in one run, on one private server, the same workload for each: two
processes deciding when jobs are due and two running the handler, N jobs due evenly over
S seconds (absolute due times), every job recording its first start (wall clock):

* **tickwheel-handlers**: two ``tickwheel worker`` processes fire the timers and two
  ``tickwheel handle`` processes (the Handlers runner) run the handler.
* **tickwheel-fire-and-handle** (#55): two ``tickwheel handle --fire`` processes, each a
  worker whose fire calls hand the outcomes they decide to its own handlers.
* **celery** (prefork, ETA jobs held in worker memory) and **arq** (polling every 0.5 s;
  and tuned to 50 ms) with two workers each.

tickwheel's figures include ``stages_ms``: where the time went, from the processes'
stage histograms. Without ``--quick`` (or ``--jobs``), tickwheel and Celery run again at
five times the rate (``at_5x_rate``).

Then **recovery**: a ``tickwheel handle`` process holding N outcomes mid-handler is
killed with SIGKILL while a second consumer runs; the time until the second has handled
them all (the goal: at most the reclaim idle time + 1 s) and how many handler runs were
repeats (at-least-once: exactly the ones in hand at the kill).

    python -m benchmarks.handlers [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import redis
from prometheus_client.parser import text_string_to_metric_families

from timer import TimerClient
from timer.testing import RedisServer, find_server_binary, free_port

from ._harness import BIN, kill_group, pct, spawn
from ._peers import ArqPeer, ArqTunedPeer, CeleryPeer, Peer, warm_up
from .options import count, seconds


class TickwheelHandlers(Peer):
    name = "tickwheel-handlers"

    def __init__(self, url: str, logs: Path) -> None:
        super().__init__(url, logs)
        self.c = TimerClient.from_url(url, "handlers")
        self.c.init(shards=8)
        self.ports: list[int] = []  # every process's --metrics-port: where time went
        self.engine = [
            spawn([str(BIN / "tickwheel"), "--redis-url", url, "--namespace", "handlers",
                   "worker", "--lease", "2s", "--id", f"tw-{i}", "--log-level", "WARNING",
                   "--metrics-port", str(self._port())],
                  url, logs / f"tw-worker-{i}.log")
            for i in range(2)
        ]  # fmt: skip

    def _port(self) -> int:
        self.ports.append(free_port())
        return self.ports[-1]

    def stages(self) -> dict[str, dict[str, float | None]]:
        """Per stage, p50/p99/max (ms) over every process's stage histograms: the worker's
        (deadline -> released by the wheel -> sent -> answered) and the runner's
        (decided -> read -> handler start)."""
        texts = [scrape(port) for port in self.ports]
        return {
            **stage_quantiles(texts, "tickwheel_fire_stage_seconds"),
            **stage_quantiles(texts, "tickwheel_handler_stage_seconds"),
        }

    def enqueue(self, items: list[tuple[str, int]]) -> None:
        for start in range(0, len(items), 1000):
            chunk = [{"id": j, "deadline_ms": due} for j, due in items[start : start + 1000]]
            self.c.schedule_many(chunk)

    def worker(self, tag: str) -> Any:
        return spawn([str(BIN / "tickwheel"), "--redis-url", self.url, "--namespace", "handlers",
                      "handle", "benchmarks.handler_jobs:tickwheel_record", "--consumer", tag,
                      "--concurrency", "8", "--log-level", "WARNING",
                      "--metrics-port", str(self._port())],
                     self.url, self.logs / f"tw-handle-{tag}.log")  # fmt: skip

    def close(self) -> None:
        for p in self.engine:
            kill_group(p, 15)
        self.c.close()


class TickwheelFireAndHandle(TickwheelHandlers):
    """Two ``tickwheel handle --fire`` processes, each a worker and its handlers (#55):
    a fire call hands the outcomes it decides to its own process's handlers, with no
    read between; as many processes as the others' workers."""

    name = "tickwheel-fire-and-handle"

    def __init__(self, url: str, logs: Path) -> None:
        Peer.__init__(self, url, logs)
        self.c = TimerClient.from_url(url, "handlers")
        self.c.init(shards=8)
        self.ports = []
        self.engine = []  # the workers are in the handle processes

    def worker(self, tag: str) -> Any:
        return spawn([str(BIN / "tickwheel"), "--redis-url", self.url, "--namespace", "handlers",
                      "handle", "benchmarks.handler_jobs:tickwheel_record", "--consumer", tag,
                      "--fire", "--lease", "2s", "--concurrency", "8", "--log-level", "WARNING",
                      "--metrics-port", str(self._port())],
                     self.url, self.logs / f"tw-fire-{tag}.log",
                     {"PEER_NAME": self.name})  # fmt: skip


PEERS: dict[str, Callable[[str, Path], Peer]] = {
    "tickwheel-handlers": TickwheelHandlers,
    "tickwheel-fire-and-handle": TickwheelFireAndHandle,
    "celery": CeleryPeer,
    "arq": ArqPeer,
    "arq-poll-50ms": ArqTunedPeer,
}


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return str(r.read().decode())


def stage_quantiles(texts: list[str], metric: str) -> dict[str, dict[str, float | None]]:
    """p50 and p99 (ms) per ``stage`` of histogram ``metric`` summed over the scrapes,
    interpolated within a bucket as Prometheus' ``histogram_quantile`` does, and the
    count."""
    buckets: dict[str, dict[float, float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            if family.name != metric:
                continue
            for sample in family.samples:
                if sample.name == f"{metric}_bucket":
                    per = buckets.setdefault(sample.labels["stage"], {})
                    le = float(sample.labels["le"])
                    per[le] = per.get(le, 0.0) + sample.value
    return {stage: {"p50": _quantile(cumulative, 0.5), "p99": _quantile(cumulative, 0.99),
                    "count": max(cumulative.values())}
            for stage, cumulative in buckets.items()}  # fmt: skip


def _quantile(cumulative: dict[float, float], q: float) -> float | None:
    """Quantile ``q`` (ms) of cumulative bucket counts keyed by upper bound (seconds)."""
    bounds = sorted(cumulative)
    total = cumulative[bounds[-1]]
    if total == 0:
        return None
    rank, below, lower = q * total, 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= rank:
            if math.isinf(bound):
                return round(lower * 1000, 3)  # past the last bound: that bound
            share = (rank - below) / (count - below) if count > below else 1.0
            return round((lower + (bound - lower) * share) * 1000, 3)
        below, lower = count, bound
    return None


def latency(peer: Peer, jobs: int, span_s: float, lead_ms: int) -> dict[str, Any]:
    workers = [peer.worker("a"), peer.worker("b")]
    try:
        warm_up(peer)
        start = int(time.time() * 1000) + lead_ms
        items = [(f"job:{i}", start + int(i * span_s * 1000 / jobs)) for i in range(jobs)]
        peer.enqueue(items)
        deadline = time.monotonic() + lead_ms / 1000 + span_s + 30
        ids = {j for j, _ in items}
        # counted (HLEN) while waiting, read once near the end: reading 25,000 ids ten
        # times a second took more of these 2 cores than the peers' handlers did
        runs = f"peers:{peer.name}:runs"
        while time.monotonic() < deadline and (
            peer.r.hlen(runs) < jobs or len(ids & peer.runs().keys()) < jobs
        ):
            time.sleep(0.1)
        stages = peer.stages() if isinstance(peer, TickwheelHandlers) else None
    finally:
        for w in workers:
            kill_group(w, 15)
    first = peer.lateness()
    late = [first[j] for j, _ in items if j in first]
    split: dict[str, Any] = {}
    if isinstance(peer, TickwheelHandlers):
        delivery = [float(v) for v in peer.r.hvals(f"peers:{peer.name}:delivery")]
        fired = [o.lateness_ms for o in peer.c.all_outcomes() if o.id.startswith("job:")]
        split = {
            "fire_lateness_ms": {"p50": pct(fired, 0.5), "p99": pct(fired, 0.99)},
            "delivery_ms": {
                "p50": pct(delivery, 0.5),
                "p99": pct(delivery, 0.99),
                "max": max(delivery) if delivery else None,
            },
            "stages_ms": stages,
        }
    return {
        **split,
        "jobs": jobs, "span_s": span_s, "not_run": jobs - len(late),
        "start_lateness_ms": {"p50": pct(late, 0.5), "p99": pct(late, 0.99),
                              "max": max(late) if late else None},
    }  # fmt: skip


def recovery(url: str, logs: Path, n: int, reclaim_idle_s: float) -> dict[str, Any]:
    """Kill -9 a consumer holding ``n`` outcomes mid-handler; another takes them over."""
    r = redis.Redis.from_url(url)
    c = TimerClient.from_url(url, "recovery")
    c.init(shards=8)
    hold = logs / "hold"
    hold.touch()

    def consumer(tag: str, hold_file: str) -> Any:
        return spawn([str(BIN / "tickwheel"), "--redis-url", url, "--namespace", "recovery",
                      "handle", "benchmarks.handler_jobs:tickwheel_hold", "--on", "cancelled",
                      "--consumer", tag, "--concurrency", str(n), "--reclaim-idle",
                      f"{int(reclaim_idle_s * 1000)}ms", "--log-level", "WARNING"],
                     url, logs / f"recovery-{tag}.log", {"HOLD_FILE": hold_file})  # fmt: skip

    for i in range(n):
        c.schedule(f"r:{i}", 60_000)
        c.cancel(f"r:{i}")
    a = consumer("a", str(hold))
    try:
        while r.hlen("peers:hold:starts") < n:
            time.sleep(0.02)
        b = consumer("b", "")
        log_b = logs / "recovery-b.log"
        while "consumer b of group" not in (log_b.read_text() if log_b.exists() else ""):
            time.sleep(0.02)  # b is up and reading (nothing is left to read: all are a's)
        kill_group(a)
        killed = time.monotonic()
        while r.hlen("peers:hold:runs") < n and time.monotonic() - killed < 120:
            time.sleep(0.01)
        took = time.monotonic() - killed
        kill_group(b, 15)
    finally:
        kill_group(a)
    starts = sum(int(v) for v in r.hgetall("peers:hold:starts").values())
    c.close()
    r.close()
    return {
        "in_flight_at_kill": n,
        "reclaim_idle_s": reclaim_idle_s,
        "all_handled_after_s": round(took, 2),
        "goal_s": reclaim_idle_s + 1,
        "within_goal": took <= reclaim_idle_s + 1,
        "repeated_runs": starts - n,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1,000 jobs over 4 s; tickwheel, celery")
    p.add_argument("--only", choices=sorted(PEERS), action="append")
    p.add_argument("--jobs", type=count("jobs"))
    p.add_argument("--span", type=seconds())
    p.add_argument("--server", default=None)
    p.add_argument(
        "--in-flight", type=count("outcomes"), help="outcomes held by the killed consumer"
    )
    p.add_argument("--reclaim-idle", type=seconds(), default=5.0, help="seconds (the default: 5)")
    args = p.parse_args(argv)
    jobs = args.jobs or (1000 if args.quick else 5000)
    span = args.span or (4.0 if args.quick else 8.0)
    quick = ["tickwheel-handlers", "tickwheel-fire-and-handle", "celery"]
    names = args.only or (quick if args.quick else list(PEERS))
    names = [n for n in names if n.startswith("tickwheel") or find_spec(n.split("-")[0])]
    result: dict[str, Any] = {"benchmark": "handlers", "quick": args.quick, "peers": {}}
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        with RedisServer(logs / "data", binary=find_server_binary(args.server)) as server:
            result["server"] = server.version()
            flush = redis.Redis.from_url(server.url)
            runs = [("peers", name, jobs) for name in names]
            if not args.quick and not args.jobs:  # and at 5x the rate, the fast ones
                runs += [
                    ("at_5x_rate", name, jobs * 5)
                    for name in names
                    if name in ("tickwheel-handlers", "tickwheel-fire-and-handle", "celery")
                ]
            for part, name, n_jobs in runs:
                flush.flushall()
                peer = PEERS[name](server.url, logs)
                try:
                    result.setdefault(part, {})[name] = latency(peer, n_jobs, span, lead_ms=2000)
                finally:
                    close = getattr(peer, "close", None)
                    if close is not None:
                        close()
                    peer.r.close()
                print(f"handlers {name} ({part}): done", file=sys.stderr)
            flush.flushall()
            n = args.in_flight or (50 if args.quick else 200)
            result["recovery"] = recovery(server.url, logs, n, args.reclaim_idle)
            flush.close()
    tw = result["peers"].get("tickwheel-handlers", {}).get("start_lateness_ms", {})
    for figures in result["peers"].values():
        mine = figures["start_lateness_ms"]
        figures["p99_ratio_to_tickwheel"] = (
            round(mine["p99"] / tw["p99"], 2) if tw.get("p99") and mine["p99"] else None
        )
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
