"""Per-key limits of the handler runner (#43), under a kill -9. Prints one JSON document.

    python -m benchmarks.limits            # 20,000 outcomes over 20 keys
    python -m benchmarks.limits --quick    # 4,000 outcomes

Three real ``tickwheel handle --limit payload.tenant=2`` processes (8 threads each, a
5 ms handler, reclaim idle time 1 s) share the outcomes of 20 tenants; once a third are
handled, one is killed with kill -9 in the middle of its handlers. Each handler appends
its start and end (wall clock) to its process's log. The same is run again without
the limit (the same kill), in the same run. Reported: per tenant the most handlers seen
at once (the killed ones counted until the kill: never above 2 is the
promise), outcomes handled and handled twice (the killed runner's in-flight ones run
again: at least once), how long after the kill the killed runner's slots were gone
from Redis (against the reclaim idle time), and the rate against the run without it.
Then two runners with ``--rate payload.tenant=5/s`` and work waiting for four tenants:
the starts a second each tenant got against the 5 allowed, and the closest two starts.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from timer import TimerClient
from timer.testing import RedisServer, find_server_binary

from ._harness import ROOT, start_worker, wait_decided
from .options import count

TENANTS = 20
MODULE = """
import os, pathlib, time

LOG = pathlib.Path(os.environ["LIMIT_LOG"]) / f"{os.getpid()}.log"

def handle(o):
    with LOG.open("a") as f:
        f.write(f"start {o.payload['tenant']} {time.time()} {o.id}\\n")
    time.sleep(0.005)  # the handler's work
    with LOG.open("a") as f:
        f.write(f"done {o.payload['tenant']} {time.time()} {o.id}\\n")
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--n", type=count("outcomes"), default=None, help="outcomes (default 20,000)")
    p.add_argument("--server", default=None, help="redis-server or valkey-server binary")
    p.add_argument(
        "--rate-per-key", type=count("outcomes"), default=None,
        help="outcomes per tenant in the rate phase (default 30, --quick 10)",
    )  # fmt: skip
    args = p.parse_args(argv)
    n = args.n or (4_000 if args.quick else 20_000)
    binary = find_server_binary(args.server)
    with (
        tempfile.TemporaryDirectory() as tmp,
        RedisServer(Path(tmp) / "redis", binary=binary) as server,
    ):
        result = run(server.url, Path(tmp), n, args.rate_per_key or (10 if args.quick else 30))
    result.update({"benchmark": "limits", "outcomes": n, "tenants": TENANTS, "at_most": 2,
                   "runners": 3, "reclaim_idle_s": 1.0})  # fmt: skip
    print(json.dumps(result))
    return 0


def run(url: str, tmp: Path, n: int, rate_per_key: int = 30) -> dict[str, Any]:
    (tmp / "limits_handlers.py").write_text(textwrap.dedent(MODULE))
    limited = phase(url, tmp, "limited", n, ["--limit", "payload.tenant=2"])
    free = phase(url, tmp, "free", n, [])
    return {
        **limited,
        "unlimited_per_s": free["per_s"],
        "ratio_limited_to_unlimited_rate": round(limited["per_s"] / free["per_s"], 3),
        "rate": rate_phase(url, tmp, rate_per_key),
    }


RATE_PER_S = 5
RATE_KEYS = 4


def rate_phase(url: str, tmp: Path, per_key: int) -> dict[str, Any]:
    """``--rate payload.tenant=5/s`` on two runners, every outcome waiting from the start
    (#54 D): the starts a second each tenant got (first to last start), against the
    rate allowed, and the closest two starts of a tenant (never under 200 ms is the
    promise, less the log's jitter)."""
    ns = "rate"
    c = TimerClient.from_url(url, ns)
    c.init(shards=16)
    logs = tmp / ns
    logs.mkdir()
    n = per_key * RATE_KEYS
    for j in range(n):
        c.schedule(f"r{j}", 60_000, payload={"tenant": f"t{j % RATE_KEYS}"})
        c.cancel(f"r{j}")
    runners = [
        start_runner(url, ns, name, tmp, logs, ["--on", "cancelled", "--concurrency", "4",
                                                "--rate", f"payload.tenant={RATE_PER_S}/s"])
        for name in ("a", "b")
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while len(done_ids(logs)) < n and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the logs' progress, not a synchronisation
    finally:
        for r in runners:
            r.send_signal(signal.SIGTERM)
            r.wait(30)
        c.close()
    starts: dict[str, list[float]] = {}
    for row in rows(logs):
        if row[0] == "start":
            starts.setdefault(row[1], []).append(float(row[2]))
    per_s, closest = [], []
    for times in starts.values():
        times.sort()
        per_s.append((len(times) - 1) / (times[-1] - times[0]))
        closest.append(min(b - a for a, b in itertools.pairwise(times)))
    return {
        "allowed_per_s": RATE_PER_S,
        "runners": 2,
        "keys": RATE_KEYS,
        "handled": len(done_ids(logs)),
        "per_s_per_key_min": round(min(per_s), 2),
        "per_s_per_key_max": round(max(per_s), 2),
        "ratio_to_allowed_min": round(min(per_s) / RATE_PER_S, 3),
        "closest_starts_ms": round(min(closest) * 1000, 1),
    }


def phase(url: str, tmp: Path, ns: str, n: int, extra: list[str]) -> dict[str, Any]:
    """One run of the three runners over ``n`` outcomes, one killed a third of the way."""
    c = TimerClient.from_url(url, ns)
    c.init(shards=16)
    logs = tmp / ns
    logs.mkdir()
    worker = start_worker(url, ns, f"w-{ns}", 5_000, tmp)
    try:
        past = c.server_time_ms() - 1_000
        for i in range(0, n, 1_000):
            c.schedule_many([{"id": f"o{j}", "deadline_ms": past,
                              "payload": {"tenant": f"t{j % TENANTS}"}}
                             for j in range(i, min(n, i + 1_000))])  # fmt: skip
        wait_decided(c, n, 120)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
    t0 = time.time()
    runners = [
        start_runner(url, ns, name, tmp, logs, ["--on", "expired", "--concurrency", "8",
                                                "--reclaim-idle", "1s", *extra])
        for name in ("a", "b", "c")
    ]  # fmt: skip
    freed_after_s = None
    try:
        while len(done_ids(logs)) < n // 3:
            time.sleep(0.01)  # polling the logs' progress, not a synchronisation
        runners[0].send_signal(signal.SIGKILL)
        runners[0].wait(10)
        killed_at = time.time()
        if extra:
            freed_after_s = until_freed(c, ns, "a/", killed_at)
        deadline = time.monotonic() + 300
        while len(done_ids(logs)) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        took = max(float(r[2]) for r in rows(logs)) - t0
    finally:
        for r in runners:
            if r.poll() is None:
                r.send_signal(signal.SIGTERM)
                r.wait(30)
        c.close()
    handled = done_ids(logs)
    out: dict[str, Any] = {
        "handled": len(handled),
        "per_s": round(n / took),
    }
    if extra:
        out.update(
            most_at_once_per_tenant=most_per_tenant(logs, killed_at),
            slots_freed_after_kill_s=freed_after_s,
        )
    out["handled_twice"] = sum(1 for r in rows(logs) if r[0] == "done") - len(handled)
    return out


def start_runner(  # noqa: PLR0917 - a runner's place and its options, as the phases give them
    url: str, ns: str, name: str, tmp: Path, logs: Path, options: list[str]
) -> subprocess.Popen[bytes]:
    """A ``tickwheel handle limits_handlers:handle`` process, its log lines in ``logs``."""
    return subprocess.Popen(
        [sys.executable, "-m", "timer.cli", "--redis-url", url, "--namespace", ns, "handle",
         "limits_handlers:handle", "--consumer", name, *options],
        cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp}", "LIMIT_LOG": str(logs)},
    )  # fmt: skip


def until_freed(c: TimerClient, ns: str, prefix: str, since: float) -> float | None:
    """Seconds from ``since`` until no slot of a consumer named ``prefix…`` is held."""
    end = time.monotonic() + 30
    while time.monotonic() < end:
        keys = list(c.redis.scan_iter(match=f"{{tw:{ns}}}:lim:*", count=1000))
        held = [m for k in keys for m in c.redis.zrange(k, 0, -1) if m.startswith(prefix.encode())]
        if not held:
            return round(time.time() - since, 3)
        time.sleep(0.01)  # polling Redis for the figure, not a synchronisation
    return None


def rows(logs: Path) -> list[list[str]]:
    out = []
    for f in logs.glob("*.log"):
        out += [line.split() for line in f.read_text().splitlines() if line.count(" ") == 3]
    return out


def done_ids(logs: Path) -> set[str]:
    return {r[3] for r in rows(logs) if r[0] == "done"}


def most_per_tenant(logs: Path, killed_at: float) -> dict[str, int]:
    """Per tenant, the most handler runs open at one instant (one never done: until the
    kill, when its process stopped)."""
    spans: dict[tuple[str, str, str], list[float]] = {}
    for f in logs.glob("*.log"):
        for kind, tenant, at, tid in (
            line.split() for line in f.read_text().splitlines() if line.count(" ") == 3
        ):
            span = spans.setdefault((f.name, tenant, tid), [float(at), killed_at])
            if kind == "done":
                span[1] = float(at)
    edges: dict[str, list[tuple[float, int]]] = {}
    for (_, tenant, _), (a, b) in spans.items():
        edges.setdefault(tenant, []).extend([(a, 1), (b, -1)])
    most: dict[str, int] = {}
    for tenant, es in edges.items():
        now = top = 0
        for _, step in sorted(es):
            now += step
            top = max(top, now)
        most[tenant] = top
    return dict(sorted(most.items()))


if __name__ == "__main__":
    raise SystemExit(main())
