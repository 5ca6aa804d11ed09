"""Priority under a flood (#43): a few high-priority timers due beside a flood due at
the same moment. Prints one JSON document.

    python -m benchmarks.priority            # 200,000 in the flood, 1,000 high
    python -m benchmarks.priority --quick    # 20,000 and 200
    python -m benchmarks.priority --busy-core 0   # the workers starved: one core, a busy loop

Three runs on one private server, two real worker processes each, every timer due at
the same millisecond (a burst, or a restart after an outage, has this shape):

* ``alone``: the high-priority timers by themselves (no flood): the floor;
* ``flood``: the same beside the flood, the high ones at ``priority=50`` and the flood
  at the default 0;
* ``flood_no_priority``: the same with every timer at 0, which is how a flood was
  fired before priorities (first in, first out).

Lateness is each outcome's ``decided_ms - deadline_ms`` (Redis time: when its worker
fired it). The figures to read are the high-priority p99 of ``flood`` against
``alone`` and against ``flood_no_priority``, all from this one run.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from timer import TimerClient
from timer.testing import RedisServer, find_server_binary

from ._harness import busy_loop, pct, start_worker, wait_decided
from .options import count

BATCH = 5_000
HIGH = 50


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="20,000 in the flood, 200 high")
    p.add_argument(
        "--flood", type=count("timers"), default=None, help="low timers (default 200,000)"
    )
    p.add_argument("--high", type=count("timers"), default=None, help="high timers (default 1,000)")
    p.add_argument("--lead-ms", type=count("ms"), default=None,
                   help="all fall due this long after scheduling starts (default: enough "
                        "to schedule them, 15 s; 5 s with --quick)")  # fmt: skip
    p.add_argument("--server", default=None, help="redis-server or valkey-server binary")
    p.add_argument(
        "--outage-flood",
        type=count("timers"),
        default=10_000,
        help="the outage run's timers at priority 0 (default 10,000)",
    )
    p.add_argument("--outage-high", type=count("timers"), default=50,
                   help="the outage run's timers at priority 50 (default 50)")  # fmt: skip
    p.add_argument("--busy-core", type=count("core", minimum=0), default=None,
                   help="pin the workers to this core, beside a busy loop pinned there too "
                        "(the order on a starved worker); default: not pinned")  # fmt: skip
    args = p.parse_args(argv)
    if args.busy_core is not None and args.busy_core not in os.sched_getaffinity(0):
        p.error(f"--busy-core {args.busy_core}: not one of this process's cores "
                f"{sorted(os.sched_getaffinity(0))}")  # fmt: skip
    flood = args.flood if args.flood is not None else (20_000 if args.quick else 200_000)
    high = args.high or (200 if args.quick else 1_000)
    lead_ms = args.lead_ms or (5_000 if args.quick else 15_000)
    result: dict[str, Any] = {"benchmark": "priority", "flood_timers": flood,
                              "high_timers": high, "high_priority": HIGH,
                              "lead_ms": lead_ms, "busy_core": args.busy_core}  # fmt: skip
    core = args.busy_core
    with (
        tempfile.TemporaryDirectory() as tmp,
        RedisServer(Path(tmp) / "redis", binary=find_server_binary(args.server)) as server,
        busy_loop(core),
    ):
        result["server"] = server.version()
        runs = {"alone": (0, HIGH), "flood": (flood, HIGH), "flood_no_priority": (flood, 0)}
        for name, (n_flood, priority) in runs.items():
            result[name] = run(
                server.url, Path(tmp), name, n_flood, high, priority, lead_ms, core=core
            )
        result["outage"] = outage(
            server.url, Path(tmp), args.outage_flood, args.outage_high, core=core
        )
    base, with_flood = result["alone"]["high_ms"]["p99"], result["flood"]["high_ms"]["p99"]
    before = result["flood_no_priority"]["high_ms"]["p99"]
    if base and with_flood:
        result["ratio_high_p99_flood_to_alone"] = round(with_flood / base, 2)
    if with_flood and before:
        result["ratio_high_p99_no_priority_to_priority"] = round(before / with_flood, 2)
    print(json.dumps(result))
    return 0


def run(  # noqa: PLR0917 - one run's parameters, as main passes them
    url: str,
    logs: Path,
    name: str,
    flood: int,
    high: int,
    priority: int,
    lead_ms: int,
    *,
    core: int | None = None,
) -> dict[str, Any]:
    """One run in a namespace of its own: schedule, let two workers fire, read."""
    ns = f"prio-{name}".replace("_", "-")
    c = TimerClient.from_url(url, ns)
    c.init(shards=16)
    workers = [start_worker(url, ns, f"{ns}-w{i}", 2_000, logs, core=core) for i in range(2)]
    try:
        due = c.server_time_ms() + lead_ms
        total = flood + high
        every = max(1, total // high)  # the high ones spread through the flood's order
        specs: list[dict[str, Any]] = []
        made_high = 0
        for i in range(total):
            spec: dict[str, Any] = {"id": f"t{i}", "deadline_ms": due}
            if made_high < high and i % every == 0:
                spec["id"] = f"h{i}"
                made_high += 1
                if priority:
                    spec["priority"] = priority
            specs.append(spec)
        for start in range(0, len(specs), BATCH):
            c.schedule_many(specs[start : start + BATCH])
        wait_decided(c, total, 120 + total / 2_000)
        late: dict[str, list[int]] = {"h": [], "t": []}
        early = 0
        for o in c.all_outcomes():
            late[o.id[0]].append(o.lateness_ms)
            early += o.lateness_ms < 0
        return {
            "timers": total, "early": early,
            "high_ms": _summary(late["h"]), "flood_ms": _summary(late["t"]),
        }  # fmt: skip
    finally:
        for proc in workers:
            proc.kill()
            proc.wait()
        c.close()


def outage(
    url: str, logs: Path, flood: int, high: int, *, core: int | None = None
) -> dict[str, Any]:
    """A restart after an outage (#54 B): every timer overdue when two workers start on
    16 shards. Figures from the first fire on (the outage itself is not the workers'):
    the share of the flood fired before the last high-priority timer, and the high
    ones' p99 against the flood's median."""
    ns = "prio-outage"
    c = TimerClient.from_url(url, ns)
    c.init(shards=16)
    try:
        due = c.server_time_ms() + 1_000
        every = max(1, (flood + high) // high)
        specs = [{"id": f"t{i}", "deadline_ms": due} for i in range(flood)]
        for k in range(high):  # spread through the flood's order (and so its shards)
            specs.insert(k * every, {"id": f"h{k}", "deadline_ms": due, "priority": HIGH})
        for start in range(0, len(specs), BATCH):
            c.schedule_many(specs[start : start + BATCH])
        while c.server_time_ms() < due + 500:  # every one overdue before a worker runs
            time.sleep(0.05)  # waiting for the clock itself, not for another process
        workers = [start_worker(url, ns, f"{ns}-w{i}", 2_000, logs, core=core) for i in range(2)]
        try:
            wait_decided(c, flood + high, 120 + flood / 2_000)
        finally:
            for proc in workers:
                proc.kill()
                proc.wait()
        decided: dict[str, list[int]] = {"h": [], "t": []}
        for o in c.all_outcomes():
            decided[o.id[0]].append(o.decided_ms)
        first = min(decided["h"] + decided["t"])
        last_high = max(decided["h"])
        since = {k: [d - first for d in v] for k, v in decided.items()}
        before = sum(1 for d in decided["t"] if d < last_high)
        highs, floods = _summary(since["h"]), _summary(since["t"])
        out: dict[str, Any] = {
            "flood_timers": flood, "high_timers": high, "shards": 16, "workers": 2,
            "flood_fired_before_last_high": round(before / flood, 3),
            "high_since_first_ms": highs, "flood_since_first_ms": floods,
        }  # fmt: skip
        high_p99, flood_p50 = highs["p99"], floods["p50"]
        if flood_p50:
            out["ratio_high_p99_to_flood_p50"] = round(high_p99 / flood_p50, 3)
        return out
    finally:
        c.close()


def _summary(values: list[int]) -> dict[str, Any]:
    return {"n": len(values), "p50": pct(values, 0.5), "p99": pct(values, 0.99),
            "max": max(values, default=None)}  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
