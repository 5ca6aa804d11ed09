"""Fire and handle by the CLI's own processes, as a deployment runs them
(``benchmarks.capacity``'s ``processes`` and ``steady_rates``): ``tickwheel worker`` and
``tickwheel handle``, or one ``tickwheel handle --fire``; the server's CPU per timer until
every outcome is handled."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import redis

from timer import TimerClient

from ._harness import BIN, kill_group, schedule_due, spawn
from ._meter import Meter, drop_namespace

RATES = (5_000, 20_000)  # timers a second falling due, for steady_rates
RATE_TIMERS = 30_000  # timers at each rate (fewer with a smaller --n)
RATE_LEAD_MS = 3_000  # the first falls due this long after they are scheduled


def process_life(
    r: redis.Redis,
    url: str,
    n: int,
    ns: str,
    *,
    fire: bool,
    logs: Path,
    shards: int,
    rate: int | None = None,
) -> dict[str, float]:
    """Fire and handle as a deployment does, by the CLI's own processes: ``n`` timers due
    at once (or, with ``rate``, falling due at that many a second, from a few seconds
    after the processes start), then either ``tickwheel worker`` and ``tickwheel
    handle`` (two processes, one hop between them) or one ``tickwheel handle --fire``
    (its fire calls hand the outcomes they decide to its handlers), each handler a
    no-op. Server CPU from the processes' start until the group has handled every
    outcome: the leader's reads of its buckets, its fires and sweeps, the group's reads
    and acks, and what the processes do besides (leases, heartbeats, their start) all
    count. At a rate, a leader's fire calls carry what fell due since its last: few
    timers each at a low rate, so a call's own cost is shared by few."""
    c = TimerClient.from_url(url, ns)
    c.init(shards=shards)
    ids = [f"p:{j}" for j in range(n)]
    if rate is None:
        schedule_due(c, ids, c.server_time_ms() - 1_000)
    else:  # the first a little later: the processes lead every shard by then
        schedule_due(c, ids, c.server_time_ms() + RATE_LEAD_MS, per_s=rate)
    cli = [str(BIN / "tickwheel"), "--redis-url", url, "--namespace", ns]
    handle = [*cli, "handle", "benchmarks.handler_jobs:tickwheel_noop", "--group", "capacity",
              "--consumer", "h1", "--concurrency", "8", "--log-level", "WARNING"]  # fmt: skip
    meter = Meter(r)
    meter.start()
    if fire:
        procs = [spawn([*handle, "--fire", "--lease", "2s"], url, logs / f"{ns}-fire.log")]
    else:
        procs = [
            spawn([*cli, "worker", "--lease", "2s", "--log-level", "WARNING"], url,
                  logs / f"{ns}-worker.log"),
            spawn(handle, url, logs / f"{ns}-handle.log"),
        ]  # fmt: skip

    def all_handled() -> bool:
        """Every shard's outcomes read by the group and none pending, n in all."""
        written = 0
        for s in range(shards):
            key = c.keys.shard(s).outcomes
            if not r.exists(key):
                continue
            stream = r.xinfo_stream(key)
            group = next((g for g in r.xinfo_groups(key) if g["name"] == b"capacity"), None)
            if (
                group is None
                or group["pending"]
                or (group["last-delivered-id"] != stream["last-generated-id"])
            ):
                return False
            written += int(stream["length"])
        return written == n

    try:
        deadline = time.monotonic() + 120 + n / 1_000
        while not all_handled():
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"{'--fire' if fire else 'worker + handle'}: not all {n} "
                                   f"handled; their logs are in {logs}")  # fmt: skip
            time.sleep(0.1)  # polling the group: the processes have no readiness signal
        usec = meter.cpu_us() / n
    finally:
        for p in procs:
            kill_group(p, signal.SIGTERM)
        for p in procs:
            p.wait(30)
        c.close()
    drop_namespace(r, ns)
    out = {"usec_per_fire_and_handle": round(usec, 2)}
    if rate is not None:  # the share of a server core fire + handle take at this rate
        out["core_share"] = round(rate * usec / 1e6, 3)
    return out


def steady_rates(r: redis.Redis, url: str, n: int, logs: Path, *, shards: int) -> dict[str, Any]:
    """``process_life`` at steady rates, both ways a deployment runs: what a timer
    costs the server when it falls due among others at that rate, not all at once."""
    count = min(n, RATE_TIMERS)
    return {
        str(rate): {
            "timers": count,
            "worker_and_handle": process_life(
                r, url, count, f"r{rate}", fire=False, logs=logs, shards=shards, rate=rate
            ),
            "handle_fire": process_life(
                r, url, count, f"f{rate}", fire=True, logs=logs, shards=shards, rate=rate
            ),
        }
        for rate in RATES
    }
