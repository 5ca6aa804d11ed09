"""Peers: tickwheel next to arq (deferred jobs) and RQ (``enqueue_in``) on the same Redis.

Same workloads for each, one after the other on one private server:

* **register**: N jobs deferred by an hour, enqueued from one process: jobs/s.
* **lateness**: N jobs due over S seconds, one worker: run time minus due time (wall
  clock for the peers, Redis time for tickwheel), p50/p90/p99/max.
* **kill -9**: the same with two workers; one is killed with SIGKILL (its whole process
  group) once 40% have run, and a new one started; then jobs that never ran by the end of
  the window (span + 45 s: lost, or still queued behind a slow worker) and duplicates.

arq runs with its default poll (0.5 s) and tuned (50 ms); RQ's scheduler polls every
second and has no setting for it. Celery is not measured: its Redis transport (kombu)
pins redis-py below 6, which cannot live beside tickwheel's redis 8 in one environment.
Install the peers with ``pip install -e '.[bench]'``.

    python -m benchmarks.peers [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis

from timer import TimerClient
from timer.outcomes import iter_all
from timer.server import RedisServer, find_server_binary

from .worker import pct

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def spawn(args: list[str], url: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "PEER_REDIS_URL": url, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip


def kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class Peer:
    name = ""

    def __init__(self, url: str, logs: Path) -> None:
        self.url, self.logs = url, logs
        self.r = redis.Redis.from_url(url)

    def enqueue(self, items: list[tuple[str, int]]) -> None:  # (job id, due wall ms)
        raise NotImplementedError

    def worker(self, tag: str) -> subprocess.Popen[bytes]:
        raise NotImplementedError

    def runs(self) -> dict[str, int]:
        return {k.decode(): int(v) for k, v in self.r.hgetall(f"peers:{self.name}:runs").items()}

    def lateness(self) -> list[int]:
        return [int(x) for x in self.r.lrange(f"peers:{self.name}:late", 0, -1)]


class RQPeer(Peer):
    name = "rq"

    def enqueue(self, items: list[tuple[str, int]]) -> None:
        from rq import Queue  # noqa: PLC0415 - the bench extra

        q = Queue("bench", connection=self.r)
        now = time.time() * 1000
        for job_id, due in items:
            q.enqueue_in(timedelta(milliseconds=due - now), "benchmarks.peer_jobs.record",
                         self.name, job_id, due)  # fmt: skip

    def worker(self, tag: str) -> subprocess.Popen[bytes]:
        return spawn([str(BIN / "rq"), "worker", "bench", "--with-scheduler", "--url", self.url,
                      "--path", str(ROOT), "--name", f"rq-{tag}-{time.time_ns()}"],
                     self.url, self.logs / f"rq-{tag}.log")  # fmt: skip


class ArqPeer(Peer):
    name = "arq"
    settings = "benchmarks.peer_jobs.ArqSettings"

    def enqueue(self, items: list[tuple[str, int]]) -> None:
        import asyncio  # noqa: PLC0415

        from arq import create_pool  # noqa: PLC0415 - the bench extra
        from arq.connections import RedisSettings  # noqa: PLC0415

        async def go() -> None:
            pool = await create_pool(RedisSettings.from_dsn(self.url))
            now = time.time() * 1000
            for job_id, due in items:
                await pool.enqueue_job("arq_record", self.name, job_id, due, _job_id=job_id,
                                       _defer_by=timedelta(milliseconds=due - now))  # fmt: skip
            await pool.aclose()

        asyncio.run(go())

    def worker(self, tag: str) -> subprocess.Popen[bytes]:
        return spawn([str(BIN / "arq"), self.settings], self.url, self.logs / f"arq-{tag}.log")


class ArqTunedPeer(ArqPeer):
    name = "arq-poll-50ms"
    settings = "benchmarks.peer_jobs.ArqFastSettings"


class TickwheelPeer(Peer):
    name = "tickwheel"

    def __init__(self, url: str, logs: Path) -> None:
        super().__init__(url, logs)
        self.c = TimerClient.from_url(url, "peers")
        self.c.init(shards=8)
        self.offset = self.c.server_time_ms() - time.time() * 1000

    def enqueue(self, items: list[tuple[str, int]]) -> None:
        for start in range(0, len(items), 1000):
            chunk = [{"id": j, "deadline_ms": int(due + self.offset)}
                     for j, due in items[start : start + 1000]]  # fmt: skip
            self.c.schedule_many(chunk)

    def worker(self, tag: str) -> subprocess.Popen[bytes]:
        return spawn([sys.executable, "-m", "worker", "--redis-url", self.url, "--namespace",
                      "peers", "--lease-ms", "2000", "--id", f"tw-{tag}-{time.time_ns()}",
                      "--log-level", "WARNING"], self.url, self.logs / f"tw-{tag}.log")  # fmt: skip

    def runs(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for o in iter_all(self.c):
            counts[o.id] = counts.get(o.id, 0) + 1
        return counts

    def lateness(self) -> list[int]:
        return [o.lateness_ms for o in iter_all(self.c)]


PEERS: dict[str, Callable[[str, Path], Peer]] = {
    "tickwheel": TickwheelPeer, "arq": ArqPeer, "arq-poll-50ms": ArqTunedPeer, "rq": RQPeer,
}  # fmt: skip


def register(peer: Peer, n: int) -> float:
    due = int(time.time() * 1000) + 3_600_000
    t0 = time.perf_counter()
    peer.enqueue([(f"reg:{i}", due) for i in range(n)])
    return n / (time.perf_counter() - t0)


def run(peer: Peer, n: int, span_s: float, kill: bool) -> dict[str, Any]:
    start = int(time.time() * 1000) + 2_000
    items = [(f"job:{i}", start + int(i * span_s * 1000 / n)) for i in range(n)]
    peer.enqueue(items)
    workers = [peer.worker("a")] + ([peer.worker("b")] if kill else [])
    killed = False
    deadline = time.monotonic() + span_s + 45
    try:
        while time.monotonic() < deadline:
            done = len(peer.runs())
            if done >= n and time.time() * 1000 > items[-1][1] + 3_000:
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
    late = peer.lateness()
    return {
        "jobs": n, "not_run_by_end": sum(1 for j, _ in items if j not in runs),
        "duplicated": sum(1 for v in runs.values() if v > 1), "killed_one_worker": killed,
        "lateness_ms": {"p50": pct(late, 0.5), "p90": pct(late, 0.9), "p99": pct(late, 0.99),
                        "max": max(late) if late else None},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", choices=sorted(PEERS), action="append")
    p.add_argument("--server", default=None)
    args = p.parse_args(argv)
    n_reg, n_run, span = (2_000, 500, 5.0) if args.quick else (10_000, 2_000, 10.0)
    result: dict[str, Any] = {"benchmark": "peers", "quick": args.quick, "peers": {}}
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        binary = find_server_binary(args.server)
        with RedisServer(logs / "data", binary=binary) as server:
            result["server"] = server.version()
            flush = redis.Redis.from_url(server.url)
            for name in args.only or list(PEERS):
                figures: dict[str, Any] = {}
                for phase in ("register", "lateness", "kill9"):
                    flush.flushall()
                    peer = PEERS[name](server.url, logs)
                    if phase == "register":
                        figures["register_per_s"] = round(register(peer, n_reg))
                    else:
                        figures[phase] = run(peer, n_run, span, kill=phase == "kill9")
                    peer.r.close()
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
