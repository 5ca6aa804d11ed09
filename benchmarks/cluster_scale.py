"""A big backlog on a Redis Cluster, and a master killed under it (#55).

A 3-master cluster with a replica each (``cluster-node-timeout`` 2 s, AOF on every
node), a namespace of 24 shards (8 a master), and in one run:

* **registration**: ``--timers`` timers an hour out (``schedule_many`` calls of 1,000,
  from two processes): timers/s, and the masters' memory it took, bytes a timer;
* **workers**: two ``python -m timer.worker`` processes (2 s leases) leading the shards
  over that backlog: their memory (RSS) once every shard is led;
* **lateness beside the backlog**: ``--due`` timers due over ``--window`` seconds,
  scheduled a second or two ahead with ``durability=replicas:1`` (acknowledged once a
  replica has them), their outcomes' lateness (decided - deadline, Redis time);
* **a master killed** (SIGKILL) halfway through the window: how long until its replica
  is promoted, and its shards' timers decided again after that (the goal: within the
  lease + 250 ms); the dead node restarted then, rejoining as a replica (until it
  does, ``replicas:1`` refuses writes to its slots: not acknowledged); every
  acknowledged timer decided exactly once, never early;
* per master: its memory, and what its part of the registration and fire took.

    python -m benchmarks.cluster_scale [--timers 10000000] [--due 60000] [--window 30]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

from timer import TimerClient
from timer.testing import RedisServer, find_server_binary, redis_cluster

from ._harness import pct, register_pending
from .options import count, seconds

MASTERS = 3
SHARDS = 24
LEASE_MS = 2_000
RESUME_SLACK_MS = 250
NAMESPACE = "scale"


def used_memory(server: RedisServer) -> int:
    with redis.Redis(host=server.host, port=server.port) as r:
        return int(r.info("memory")["used_memory"])


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def owner_port(seen_from: RedisServer, slot: int) -> int | None:
    with redis.Redis(host=seen_from.host, port=seen_from.port) as r:
        for start, end, master, *_ in r.execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return int(master[1])
    return None


def shard_slot(c: TimerClient, shard: int) -> int:
    """The cluster slot of a shard (its keys' hash tag)."""
    return int(key_slot(c.keys.shard(shard).prefix.encode()))


def is_master(server: RedisServer) -> bool:
    with redis.Redis(host=server.host, port=server.port) as r:
        return str(r.info("replication")["role"]) == "master"


def wait_until(what: str, check: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.01)


def in_sync(masters: list[RedisServer], replicas: list[RedisServer]) -> bool:
    """Every replica has its master's whole replication stream."""
    for m, rep in zip(masters, replicas, strict=True):
        with (
            redis.Redis(host=m.host, port=m.port) as a,
            redis.Redis(host=rep.host, port=rep.port) as b,
        ):
            if a.info("replication")["master_repl_offset"] != b.info("replication").get(
                "slave_repl_offset", -1
            ):
                return False
    return True


class DueTraffic:
    """Timers due a second or two ahead, ``rate`` a second, acknowledged by a replica."""

    def __init__(self, url: str, total: int, window_s: float) -> None:
        self.url, self.total, self.window_s = url, total, window_s
        self.acked: set[str] = set()
        self.errors = 0
        self.thread = threading.Thread(target=self._run, name="due", daemon=True)

    def _run(self) -> None:
        c = TimerClient.from_url(self.url, NAMESPACE, durability="replicas:1", socket_timeout_s=2)
        batch = max(1, self.total // int(self.window_s * 10))  # ten calls a second
        start, sent = time.monotonic(), 0
        while sent < self.total and time.monotonic() < start + self.window_s:
            items = [
                {"id": f"due:{sent + i}", "delay_ms": 1_000 + (sent + i) % 1_000}
                for i in range(min(batch, self.total - sent))
            ]
            try:
                ok = [not isinstance(r, Exception) for r in c.schedule_many(items)]
            except Exception:  # the master being killed: not acknowledged, so not owed
                ok = [False] * len(items)
            self.acked.update(str(it["id"]) for it, yes in zip(items, ok, strict=True) if yes)
            self.errors += ok.count(False)
            sent += len(items)
            time.sleep(max(0.0, start + sent / self.total * self.window_s - time.monotonic()))
        c.close()


def run(binary: Path, timers: int, due: int, window_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {"timers": timers, "due": due, "window_s": window_s}
    with (
        tempfile.TemporaryDirectory() as tmp,
        redis_cluster(
            Path(tmp) / "cluster", binary=binary, masters=MASTERS, replicas=1, node_timeout_ms=2_000
        ) as servers,
    ):
        masters, replicas = servers[:MASTERS], servers[MASTERS:]
        out["server"] = masters[0].version()
        url = masters[0].url
        c = TimerClient.from_url(url, NAMESPACE, socket_timeout_s=5)
        with warnings.catch_warnings():  # the bulk load runs at `none`, as most do
            warnings.simplefilter("ignore")
            c.init(shards=SHARDS)
        before = [used_memory(m) for m in masters]
        rate = register_pending(url, NAMESPACE, timers)
        wait_until("the replicas in sync", lambda: in_sync(masters, replicas), 600)
        after = [used_memory(m) for m in masters]
        per_master = [a - b for a, b in zip(after, before, strict=True)]
        out["register_per_s"] = round(rate)
        out["register_per_s_per_master"] = round(rate / MASTERS)
        out["bytes_per_timer"] = round(sum(per_master) / max(1, timers), 1)
        out["master_memory_mb"] = [round(a / 2**20) for a in after]
        out["pending"] = sum(int(row["pending"]) for row in c.stats(servers=False)["shards"])

        workers = []
        for k in range(2):
            with (Path(tmp) / f"w{k}.log").open("wb") as log:  # the child keeps its own copy
                workers.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "timer.worker", "--redis-url", url,
                         "--namespace", NAMESPACE, "--lease-ms", str(LEASE_MS),
                         "--id", f"scale-{k}", "--log-level", "WARNING"],
                        stdout=subprocess.DEVNULL, stderr=log,
                    )
                )  # fmt: skip
        try:
            wait_until(
                "every shard led",
                lambda: all(v is not None for v in c.leaders().values()),
                120,
            )
            out["worker_rss_mb"] = [round(rss_kb(w.pid) / 1024, 1) for w in workers]
            out["worker_rss_mb_max"] = max(out["worker_rss_mb"])

            victim, replica = masters[1], replicas[1]
            touched = {
                s for s in range(SHARDS)
                if owner_port(masters[0], shard_slot(c, s)) == victim.port
            }  # fmt: skip
            traffic = DueTraffic(url, due, window_s)
            traffic.thread.start()
            time.sleep(window_s / 2)  # the pace of the traffic: halfway through it
            killed_ms = time.time() * 1000
            victim.kill()
            wait_until(
                "the replica promoted",
                lambda: (
                    is_master(replica)
                    and owner_port(masters[0], shard_slot(c, min(touched))) == replica.port
                ),
                60,
            )
            promoted_ms = time.time() * 1000
            # the dead node restarted, as an orchestrator would: it rejoins as a replica
            # of the promoted one (until then, writes there cannot be on two nodes, so
            # replicas:1 refuses them: not acknowledged, not owed)
            victim.restart(timeout_s=120)
            wait_until("the old master back as a replica", lambda: not is_master(victim), 120)
            rejoined_ms = time.time() * 1000
            traffic.thread.join()
            acked = traffic.acked
            wait_until(
                "every acknowledged timer decided",
                lambda: acked <= {o.id for o in c.all_outcomes() if o.id.startswith("due:")},
                120,
            )
            outcomes = [o for o in c.all_outcomes() if o.id.startswith("due:")]
            out["worker_rss_mb_after"] = [round(rss_kb(w.pid) / 1024, 1) for w in workers]
            out["workers_alive"] = all(w.poll() is None for w in workers)
        finally:
            for w in workers:
                w.terminate()
            for w in workers:
                w.wait(30)
        counts = Counter(o.id for o in outcomes)
        healthy = [
            o.decided_ms - o.deadline_ms for o in outcomes if c.shard_of(o.id) not in touched
        ]
        past = [
            o.decided_ms - max(o.deadline_ms, promoted_ms)
            for o in outcomes
            if c.shard_of(o.id) in touched and o.deadline_ms < promoted_ms + LEASE_MS
        ]
        out.update(
            {
                "acknowledged": len(acked),
                "not_acknowledged": traffic.errors,
                "lost": len(acked - counts.keys()),
                "decided_twice": sum(1 for n in counts.values() if n > 1),
                "early": sum(1 for o in outcomes if o.decided_ms < o.deadline_ms),
                "lateness_ms": {"p50": pct(healthy, 0.5), "p99": pct(healthy, 0.99),
                                "max": max(healthy, default=None)},
                "failover_ms": round(promoted_ms - killed_ms),
                "replica_back_ms": round(rejoined_ms - killed_ms),
                "touched_shards": len(touched),
                "resumed_after_promotion_ms": round(max(past, default=0)),
                "resume_goal_ms": LEASE_MS + RESUME_SLACK_MS,
            }
        )  # fmt: skip
        out["resumed_within_goal"] = out["resumed_after_promotion_ms"] <= out["resume_goal_ms"]
        c.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--timers", type=count("timers"), default=10_000_000)
    p.add_argument("--due", type=count("due timers"), default=60_000)
    p.add_argument("--window", type=seconds(above=1), default=30.0)
    p.add_argument("--server", default=None)
    args = p.parse_args(argv)
    figures = run(find_server_binary(args.server), args.timers, args.due, args.window)
    result = {"benchmark": "cluster_scale", "masters": MASTERS, "shards": SHARDS, **figures}
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
