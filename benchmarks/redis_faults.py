"""Faults of Redis itself, per durability: acknowledged timers lost at a power cut (the
unsynced data really lost: tests/faults/diskshim.c), and lost or decided twice when a
master is partitioned from its replicas and Sentinels (or, on a Cluster, from its replica
and the cluster bus) while clients still reach it.

    python -m benchmarks.redis_faults [--quick] [--server BINARY]

Prints JSON. Every figure is a count from one run; nothing here is timed against a bound.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import redis

from tests.faults import FaultyDisk, build_shim
from tests.faults.cluster_split import cluster_split_set
from tests.faults.partition import Proxy
from tests.faults.split import Splittable, run_split, split_set
from timer import ConfigError, TimerClient, TimerError
from timer.durable.model.models import DurabilityWarning
from timer.testing import RedisServer, find_server_binary

from .options import count

ROOT = Path(__file__).resolve().parents[1]

# (durability, appendfsync) at a power cut; "aof" is refused on everysec (ConfigError)
POWER = [("none", "everysec"), ("none", "always"), ("aof", "everysec"), ("aof", "always")]
# (durability, the master's extra options) in a partition
SPLIT: list[tuple[str, tuple[str, ...]]] = [
    ("none", ()),
    ("replicas:1", ()),
    ("replicas:1", ("--min-replicas-to-write", "1", "--min-replicas-max-lag", "2")),
]
# durability in a partition of a Cluster's master
CLUSTER_SPLIT = ["none", "replicas:1"]


def power_cut(
    base: Path, shim: Path, binary: Path, *, durability: str, fsync: str, n: int
) -> dict[str, Any]:
    disk = FaultyDisk(base, shim, binary=binary, appendfsync=fsync)
    server = disk.start()
    acked: list[str] = []
    refused = ""
    try:
        with TimerClient.from_url(server.url, "p") as c:
            c.init(shards=4)
        with TimerClient.from_url(server.url, "p", durability=durability) as c:
            size = n // 10
            for b in range(10):
                items = [{"id": f"t{b}-{i}", "delay_ms": 3_600_000} for i in range(size)]
                try:
                    replies = c.schedule_many(items)
                except TimerError as exc:
                    refused = type(exc).__name__
                    break
                acked += [str(it["id"]) for it, r in zip(items, replies, strict=True)
                          if not isinstance(r, Exception)]  # fmt: skip
        cut = disk.power_cut()
        server = disk.restart()
        with TimerClient.from_url(server.url, "p") as c:
            try:
                lost = sum(1 for i in acked if c.get(i) is None)
            except ConfigError:  # the namespace itself was never fsynced
                lost = len(acked)
    finally:
        disk.close()
    return {
        "durability": durability, "appendfsync": fsync, "acknowledged": len(acked),
        "lost": lost, "refused": refused or None, "bytes_cut": cut.total,
    }  # fmt: skip


def power_cut_replicated(base: Path, shim: Path, binary: Path, *, n: int) -> dict[str, Any]:
    """The master's host loses power (``everysec``: its unsynced writes gone) and its
    replica is promoted (``REPLICAOF NO ONE``, as a Sentinel would). ``n`` timers under
    ``replicas:1`` first; then the replica's link is cut (a proxy) and ``n`` more are
    asked under ``replicas:1`` (refused: not acknowledged) and under ``none``
    (acknowledged): what each lost, read on the promoted replica."""
    disk = FaultyDisk(base, shim, binary=binary, appendfsync="everysec")
    master = disk.start()
    proxy = Proxy(("127.0.0.1", master.port))
    replica = RedisServer(base / "replica", binary=binary,
                          extra_args=("--replicaof", "127.0.0.1", str(proxy.port)))  # fmt: skip
    replica.start()
    try:
        with redis.Redis.from_url(replica.url) as r:
            end = time.monotonic() + 30
            while r.info("replication").get("master_link_status") != "up":
                if time.monotonic() > end:
                    raise TimeoutError("the replica never linked to its master")
                time.sleep(0.05)  # polling the replica's state, not a synchronisation
        with TimerClient.from_url(master.url, "p", durability="replicas:1") as c:
            c.init(shards=4)
            kept = _batches(c, "k", n)
            proxy.cut()
            items = [{"id": f"r{i}", "delay_ms": 3_600_000} for i in range(max(10, n // 100))]
            asked = [r for r in c.schedule_many(items) if not isinstance(r, Exception)]
        with TimerClient.from_url(master.url, "p") as c:
            unconfirmed = _batches(c, "u", n)
        cut = disk.power_cut()
        with redis.Redis.from_url(replica.url) as r:
            r.execute_command("REPLICAOF", "NO", "ONE")
        with TimerClient.from_url(replica.url, "p") as c:
            lost = sum(1 for i in kept if c.get(i) is None)
            lost_none = sum(1 for i in unconfirmed if c.get(i) is None)
    finally:
        replica.stop()
        proxy.close()
        disk.close()
    return {
        "durability": "replicas:1", "appendfsync": "everysec", "acknowledged": len(kept),
        "lost": lost, "acknowledged_while_cut": len(asked),
        "none_acknowledged_while_cut": len(unconfirmed), "none_lost": lost_none,
        "bytes_cut": cut.total,
    }  # fmt: skip


def _batches(c: TimerClient, prefix: str, n: int) -> list[str]:
    """``n`` timers an hour out in 10 batches: the ids acknowledged."""
    acked: list[str] = []
    size = max(1, n // 10)
    for b in range(10):
        items = [{"id": f"{prefix}{b}-{i}", "delay_ms": 3_600_000} for i in range(size)]
        replies = c.schedule_many(items)
        acked += [str(it["id"]) for it, r in zip(items, replies, strict=True)
                  if not isinstance(r, Exception)]  # fmt: skip
    return acked


def split(base: Path, binary: Path, durability: str, extra: tuple[str, ...]) -> dict[str, Any]:
    with split_set(base, binary=binary, extra=extra) as s:
        figures = _split_run(s, base, durability, shards=4)
    figures["master_options"] = " ".join(extra) or None
    return figures


def cluster_split(base: Path, binary: Path, durability: str) -> dict[str, Any]:
    with cluster_split_set(base, binary=binary) as s:
        return _split_run(s, base, durability, shards=12)


def _split_run(s: Splittable, base: Path, durability: str, *, shards: int) -> dict[str, Any]:
    """One split with a worker process on the set's URL: the run's figures."""
    ns = "split"
    with warnings.catch_warnings():  # `none` beside replicas is the point of the run
        warnings.simplefilter("ignore", DurabilityWarning)
        with TimerClient.from_url(s.url, ns, durability=durability) as c:
            c.init(shards=shards)
    log = (base / "worker.log").open("wb")
    worker = subprocess.Popen(
        [sys.executable, "-m", "timer.worker", "--redis-url", s.url, "--namespace", ns,
         "--lease-ms", "2000", "--durability", durability],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ},
    )  # fmt: skip
    log.close()
    try:
        result, _ = run_split(s, ns, durability)
    finally:
        worker.terminate()
        worker.wait(20)
    return result.figures()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--server", default=None)
    p.add_argument(
        "--n", type=count("timers"), default=None, help="timers a power cut (default 5,000)"
    )
    p.add_argument("--no-partition", action="store_true", help="the power cuts only")
    args = p.parse_args(argv)
    binary = find_server_binary(args.server)
    n = args.n or (1_000 if args.quick else 5_000)
    out: dict[str, Any] = {"server": binary.name, "timers_per_power_cut": n}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        shim = build_shim(base / "shim")
        out["power_cut"] = [
            power_cut(base / f"p{i}", shim, binary, durability=d, fsync=f, n=n)
            for i, (d, f) in enumerate(POWER)
        ]
        out["power_cut_replicated"] = power_cut_replicated(base / "pr", shim, binary, n=n)
        out["partition"] = [
            split(base / f"s{i}", binary, d, extra)
            for i, (d, extra) in enumerate(SPLIT)
            if not args.no_partition
        ]
        out["cluster_partition"] = [
            cluster_split(base / f"c{i}", binary, d)
            for i, d in enumerate(CLUSTER_SPLIT)
            if not args.no_partition
        ]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
