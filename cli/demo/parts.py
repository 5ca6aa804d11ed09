"""The demo's moving parts: its worker processes, the kill -9 of one and its successor,
registering the jobs through Spark, and the summary the demo checks its promises on."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import Counter
from typing import Any

import click

from timer import TimerClient
from timer.durable.model.durations import format_duration_ms
from timer.durable.model.keys import NAMESPACES

from ..app import errors, require_extra
from .reaction import child_env, log_dir, pct
from .stop import starting

LEAST_DELAY_MS = 1000  # the least a demo timer waits (--min-delay's floor)


def bad_delays(min_delay: int, max_delay: int) -> str | None:
    """Why the demo cannot run with --min-delay and --max-delay as given (in ms): the
    values, and what to give instead; None when it can."""
    least, low, high = (format_duration_ms(ms) for ms in (LEAST_DELAY_MS, min_delay, max_delay))
    why = f"{least} (the least a demo timer waits)"
    if min_delay < LEAST_DELAY_MS and max_delay < LEAST_DELAY_MS:
        return (
            f"--min-delay {low} and --max-delay {high} are below {why}: give each {least} or more"
        )
    if min_delay < LEAST_DELAY_MS:
        return f"--min-delay {low} is below {why}: give {least} or more"
    if max_delay < min_delay:
        return (
            f"--max-delay {high} is below --min-delay {low}: give a --max-delay of {low} or "
            "more, or a smaller --min-delay"
        )
    return None


def drop_namespace(c: TimerClient) -> int:
    """Delete every key of ``c``'s namespace and its entry in the server's list of
    namespaces, once nothing runs on it any more; the number of keys deleted."""
    dropped = 0
    for pattern in c.keys.patterns:
        batch: list[bytes] = []
        for key in c.redis.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) == 500:
                dropped += c.redis.unlink(*batch)
                batch.clear()
        if batch:
            dropped += c.redis.unlink(*batch)
    c.redis.srem(NAMESPACES, c.namespace)
    return dropped


def start_worker(
    url: str, ns: str, name: str, lease_ms: int, durability: str
) -> subprocess.Popen[bytes]:
    logs = log_dir()
    logs.mkdir(parents=True, exist_ok=True)
    args = [
        "--namespace",
        ns,
        "worker",
        "--lease-ms",
        f"{lease_ms}ms",
        "--id",
        name,
        "--log-level",
        "WARNING",
        "--durability",
        durability,
    ]
    with (logs / f"{ns}-{name}.log").open("wb") as log:  # the child keeps its own fd
        return subprocess.Popen(
            [sys.executable, "-m", "timer.cli", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env(url),
            start_new_session=True,
        )


class Kill:
    """The demo's chaos: kill -9 one worker once (at 40%), start its successor, and
    watch until another worker leads the victim's shards."""

    def __init__(self) -> None:
        self.at: int | None = None  # Redis time of the kill
        self.victim: str | None = None
        self.shards: list[int] = []
        # The last moment (Redis time) the victim's shards were seen with no new leader:
        # fires after it are the successor's, not the victim's own batch in flight.
        self.untaken_at: int | None = None
        self.taken_over = False

    def step(
        self,
        c: TimerClient,
        procs: dict[str, Any],
        due: bool,
        *,
        url: str,
        ns: str,
        lease_ms: int,
        durability: str,
    ) -> None:
        if self.at is None and due:
            victim = self.victim = sorted(procs)[0]
            self.shards = [s for s, who in c.leaders().items() if who == victim]
            self.at = c.server_time_ms()
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].wait()
            with starting():
                procs[f"{victim}-new"] = start_worker(
                    url, ns, f"{victim}-new", lease_ms, durability
                )
        elif self.at is not None and not self.taken_over:
            now, leaders = c.server_time_ms(), c.leaders()
            if all(leaders[s] in (None, self.victim) for s in self.shards):
                self.untaken_at = now
            else:
                self.taken_over = True


def register_with_spark(url: str, namespace: str, jobs: list[dict[str, Any]]) -> None:
    """Register the demo's timeouts through timer.spark from a DataFrame of the jobs."""
    require_extra("spark", "demo --spark (with Java 17)")
    from pyspark.sql import SparkSession  # noqa: PLC0415 - the optional spark extra

    from timer import spark as tws  # noqa: PLC0415

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors need tickwheel
    session = (
        SparkSession.builder.master("local[2]")
        .appName("tickwheel-demo")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    rows = [(j["id"], j["delay_ms"], j["payload"]["job"], j["watch"]) for j in jobs]
    df = session.createDataFrame(rows, "id string, delay_ms long, job long, keys array<string>")
    report = tws.schedule_timers(
        df.repartition(4), url, namespace, payload_cols=["job"], watch_col="keys"
    )
    if report.scheduled != len(jobs):
        raise click.ClickException(
            f"Spark registered {report.scheduled} of {len(jobs)} timers: {report.as_dict()}"
        )


def summarise(
    c: TimerClient,
    jobs: list[dict[str, Any]],
    killed_at: int | None,
    successor_from: int | None,
    victim_shards: list[int],
    lease_ms: int,
) -> dict[str, Any]:
    ids = {j["id"] for j in jobs}
    entries = [o for o in c.all_outcomes() if o.id in ids]  # not an earlier run's
    counts = Counter(o.id for o in entries)
    kinds = Counter(o.outcome for o in entries)
    expired = [(o.shard, o.deadline_ms, o.decided_ms) for o in entries if o.outcome == "expired"]
    late = [dec - dl for _, dl, dec in expired]
    failover = None
    if killed_at is not None:
        # From the kill to the successor's first fire on the victim's shards (a fire of the
        # victim's own batch, in flight at the kill, does not count).
        since = killed_at if successor_from is None else successor_from
        after = [dec for s, _, dec in expired if s in victim_shards and dec > since]
        failover = (min(after) - killed_at) if after else None
    return {
        "scheduled": len(jobs),
        "expired": kinds["expired"],
        "completed": kinds["completed"],
        "cancelled": kinds["cancelled"],
        "lost": sum(1 for j in jobs if j["id"] not in counts),
        "duplicates": sum(1 for v in counts.values() if v > 1),
        "early": sum(1 for x in late if x < 0),
        "lateness_p50_ms": pct(late, 0.5),
        "lateness_p99_ms": pct(late, 0.99),
        "lateness_max_ms": max(late) if late else None,
        "failover_ms": failover,
        "lease_ms": lease_ms,
    }


def run_prefix(c: TimerClient, say: Any) -> str:
    """'' in a namespace no run used; else what starts this run's ids: the same ids would
    each be taken as decided already, and the earlier run's outcomes counted as this
    one's (a kept --namespace, run again)."""
    with errors():
        if c.get("job:{0}") is None:
            return ""
        prefix = f"run{c.server_time_ms() // 1000}:"
    say(f"Namespace {c.namespace!r} holds an earlier run's jobs: this run's ids start {prefix}")
    return prefix


def plan(
    n: int, min_delay: int, max_delay: int, rng: random.Random, prefix: str = ""
) -> tuple[list[dict[str, Any]], list[tuple[float, str, str]], set[str]]:
    """The jobs' timers, what happens to them (notify or cancel, when), and which;
    ``prefix`` starts each id and watch key (a run in a namespace that kept an earlier
    run's jobs: its ids would be theirs)."""
    jobs: list[dict[str, Any]] = []
    actions: list[tuple[float, str, str]] = []
    acted: set[str] = set()
    for i in range(n):
        delay = rng.randint(min_delay, max_delay)
        tid, key = f"{prefix}job:{{{i}}}", f"{prefix}job:{{{i}}}:done"
        jobs.append({"id": tid, "delay_ms": delay, "payload": {"job": i}, "watch": [key]})
        roll = rng.random()
        if roll < 0.55:
            acted.add(tid)
        if roll < 0.5:  # the job finishes in time and says so
            actions.append((delay * rng.uniform(0.1, 0.8) / 1000, "notify", key))
        elif roll < 0.55:  # somebody cancels the job
            actions.append((delay * rng.uniform(0.1, 0.8) / 1000, "cancel", tid))
    return jobs, actions, acted
