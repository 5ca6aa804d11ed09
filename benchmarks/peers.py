"""Peers: tickwheel next to arq, RQ and Celery, each deferring jobs on the same Redis.

Same workloads for each, one after the other on one private server:

* **register**: N jobs deferred by an hour, enqueued from one process: jobs/s.
* **lateness**: N jobs due over S seconds, one worker (already running: a probe job has
  run): run time minus due time (wall clock for the peers, Redis time for tickwheel),
  p50/p90/p99/max.
* **kill -9**: the same with two workers; one is killed with SIGKILL (its whole process
  group) once 40% have run, and a new one started; then jobs that never ran by the end of
  the window (45 s after the last is due: lost, or still queued behind a slow worker)
  and duplicates.

``tickwheel`` is its worker alone (a job is its timer's decision); ``tickwheel-fire-and-handle``
(#55) is ``tickwheel handle --fire`` processes, each a worker and its handlers, a job a
handler's run, recorded as the other peers' jobs record theirs.

``--quick``: 200 jobs over 2 s, a 10 s window, and each peer at its defaults only.

Every peer is given absolute due times (arq ``_defer_until``, RQ ``enqueue_at``, Celery
``eta``): the relative forms count from each call and would bill the enqueue time as
lateness. Defaults first, then one tuned setting where the peer has one, labelled: arq
polls every 0.5 s by default (tuned: 50 ms); RQ's scheduler polls every second and has no
setting for it; a Celery worker holds ETA jobs in memory, unacked, and a dead worker's
come back after the visibility timeout (default 1 h; tuned: 15 s, swept every second;
and 5 s, shorter than the longest countdown, which Celery's docs warn against).
Install the peers with ``pip install -e '.[bench]'`` (``make bench`` does).

    python -m benchmarks.peers [--quick]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import redis

from timer.testing import RedisServer, find_server_binary

from ._harness import kill_group, pct
from ._peers import PEERS, Peer, warm_up
from .options import count, seconds


def register(peer: Peer, n: int) -> float:
    due = int(time.time() * 1000) + 3_600_000
    t0 = time.perf_counter()
    peer.enqueue([(f"reg:{i}", due) for i in range(n)])
    return n / (time.perf_counter() - t0)


@dataclass(frozen=True)
class Plan:
    register: int  # jobs in the register phase
    jobs: int  # jobs in the lateness and kill -9 phases
    span_s: float  # ... falling due evenly over this long
    lead_ms: int = 2_000  # the first falls due this long after enqueuing starts
    grace_s: float = 45.0  # the window ends this long after the last is due
    settle_ms: int = 3_000  # once all have run, wait this long for duplicates to show


FULL = Plan(register=10_000, jobs=2_000, span_s=10.0)
# Under a minute and a half: fewer jobs, a shorter window, and the defaults only.
QUICK = Plan(register=2_000, jobs=200, span_s=2.0, lead_ms=1_000, grace_s=10.0, settle_ms=1_000)
QUICK_PEERS = ("tickwheel", "arq", "rq", "celery")


def run(peer: Peer, plan: Plan, kill: bool) -> dict[str, Any]:
    n, span_s = plan.jobs, plan.span_s
    workers = [peer.worker("a")] + ([peer.worker("b")] if kill else [])
    warm_up(peer)
    start = int(time.time() * 1000) + plan.lead_ms
    items = [(f"job:{i}", start + int(i * span_s * 1000 / n)) for i in range(n)]
    t0 = time.perf_counter()
    peer.enqueue(items)
    enqueue_s = time.perf_counter() - t0
    ids = {j for j, _ in items}
    killed = False
    deadline = time.monotonic() + plan.lead_ms / 1000 + span_s + plan.grace_s
    try:
        while time.monotonic() < deadline:
            done = len(ids & peer.runs().keys())
            if done >= n and time.time() * 1000 > items[-1][1] + plan.settle_ms:
                break
            if kill and not killed and done >= 0.4 * n:
                kill_group(workers.pop(0))
                workers.append(peer.worker("c"))
                killed = True
            time.sleep(0.1)
    finally:
        for w in workers:
            kill_group(w, signal.SIGTERM)
    runs = peer.runs()
    first = peer.lateness()
    late = [first[j] for j, _ in items if j in first]
    return {
        "jobs": n, "enqueue_s": round(enqueue_s, 2),
        "not_run_by_end": sum(1 for j, _ in items if j not in runs),
        "duplicated": sum(1 for j in ids if runs.get(j, 0) > 1), "killed_one_worker": killed,
        "lateness_ms": {"p50": pct(late, 0.5), "p90": pct(late, 0.9), "p99": pct(late, 0.99),
                        "max": max(late) if late else None},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK.jobs} jobs over {QUICK.span_s:g} s, peers at their defaults only",
    )
    p.add_argument("--only", choices=sorted(PEERS), action="append", help="a peer to run")
    p.add_argument("--server", default=None)
    p.add_argument("--register", type=count("jobs"), help="jobs in the register phase")
    p.add_argument("--jobs", type=count("jobs"), help="jobs in the lateness and kill -9 phases")
    p.add_argument("--span", type=seconds(), help="seconds over which those jobs fall due")
    args = p.parse_args(argv)
    plan = QUICK if args.quick else FULL
    plan = replace(
        plan,
        register=args.register or plan.register,
        jobs=args.jobs or plan.jobs,
        span_s=args.span or plan.span_s,
    )
    names = args.only or list(
        QUICK_PEERS if args.quick else (n for n, c in PEERS.items() if c.by_default)
    )
    missing = sorted({m for n in names for m in PEERS[n].requires if find_spec(m) is None})
    if missing:
        p.error(
            f"not installed: {', '.join(missing)}; install the peers with "
            "pip install -e '.[bench]' (make bench does), or choose with --only"
        )
    result: dict[str, Any] = {"benchmark": "peers", "quick": args.quick, "plan": asdict(plan)}
    result["peers"] = {}
    result["versions"] = {m: version(m) for n in names for m in PEERS[n].requires}
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        binary = find_server_binary(args.server)
        with RedisServer(logs / "data", binary=binary) as server:
            result["server"] = server.version()
            flush = redis.Redis.from_url(server.url)
            for name in names:
                figures: dict[str, Any] = {}
                repeats = 1 if args.quick else PEERS[name].kill9_runs
                phases = ["register", "lateness", *["kill9"] * repeats]
                kills: list[dict[str, Any]] = []
                for phase in phases:
                    flush.flushall()
                    peer = PEERS[name](server.url, logs)
                    if phase == "register":
                        figures["register_per_s"] = round(register(peer, plan.register))
                    elif phase == "lateness":
                        figures[phase] = run(peer, plan, kill=False)
                    else:
                        kills.append(run(peer, plan, kill=True))
                    peer.r.close()
                figures["kill9"] = kills[0]
                if repeats > 1:  # every run's losses and duplicates, and how many had none
                    figures["kill9_repeated"] = {
                        "runs": len(kills),
                        "clean": sum(1 for k in kills
                                     if k["not_run_by_end"] == k["duplicated"] == 0),
                        "lost": sum(k["not_run_by_end"] for k in kills),
                        "twice": sum(k["duplicated"] for k in kills),
                    }  # fmt: skip
                result["peers"][name] = figures
                print(f"peers {name}: done", file=sys.stderr)
            flush.close()
    base = result["peers"].get("tickwheel", {}).get("register_per_s")
    if base:
        for figures in result["peers"].values():
            figures["register_ratio_to_tickwheel"] = round(figures["register_per_s"] / base, 3)
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
