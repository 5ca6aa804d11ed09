"""Recurring jobs (#29): tickwheel schedules next to arq cron and Celery beat.

A job every second for ``--seconds`` (30; quick 16) on one private server, two workers
(Celery: one worker and its one beat, as Celery requires), and halfway one of them is
killed with SIGKILL (its whole process group) and a new one started: for tickwheel the
worker leading the schedule's shard (lease 2 s), for arq a worker, for Celery the beat.
Then, over the seconds after start-up and before the end, per second: how late its run
was, and the seconds that ran no job (missed) or more than one (twice).

* tickwheel: ``every="1s"`` with ``missed="all"``; the run is the occurrence's fire
  (its outcome's decided time, Redis time, against its nominal second).
* arq: ``cron(second=every second)``, unique (arq's default): each worker enqueues the
  run under the id ``<name>:<ms>``, so the second is known; arq polls every 0.5 s.
* Celery beat: ``schedule: 1.0`` s. Beat sends no nominal time, so a run is counted in
  the wall-clock second it ran in, and its lateness is not reported.
* Celery beat on tickwheel: the same entry, two beats with ``-S timer.celery:Scheduler``
  (it keeps the entry as a tickwheel schedule), one tickwheel worker, the sender
  (``tickwheel handle``) and a Celery worker; halfway one beat is killed. A run's task id
  is its occurrence's, so its second and lateness are known. Counted from the first
  run (the five processes' start-up left out, as a running worker is for the others).

    python -m benchmarks.peer_cron [--quick] [--only tickwheel]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import redis

from timer import TimerClient
from timer.durable.schedules.records import occurrence_name
from timer.testing import RedisServer, find_server_binary

from ._harness import BIN, kill_group, pct, spawn
from .options import count

PEERS = ("tickwheel", "arq", "celery-beat", "celery-beat-on-tickwheel")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seconds", type=count("seconds"), default=None)
    p.add_argument("--only", action="append", choices=PEERS)
    p.add_argument("--server", default=None)
    args = p.parse_args(argv)
    seconds = args.seconds or (16 if args.quick else 30)
    names = [n for n in (args.only or PEERS) if n == "tickwheel" or find_spec(n.split("-")[0])]
    binary = find_server_binary(args.server)
    out: dict[str, Any] = {"benchmark": "peer_cron", "seconds": seconds, "peers": {}}
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            server = RedisServer(Path(tmp) / "redis", binary=binary).start()
            try:
                out["peers"][name] = RUN[name](server.url, Path(tmp), seconds)
            finally:
                server.stop()
        print(f"peer_cron {name}: done", file=sys.stderr)
    print(json.dumps(out))
    return 0


def summary(runs: dict[int, list[int]], start_ms: int, end_ms: int) -> dict[str, Any]:
    """From nominal second -> the lateness of each run there (ms; None when unknown)."""
    seconds = range(start_ms // 1000 + 2, end_ms // 1000 - 1)  # after start-up, before the end
    counts = [len(runs.get(s * 1000, [])) for s in seconds]
    late = [v[0] for s in seconds for v in [runs.get(s * 1000, [])] if v and v[0] is not None]
    return {
        "seconds": len(counts),
        "missed": sum(1 for n in counts if n == 0),
        "twice": sum(1 for n in counts if n > 1),
        "lateness_ms": {"p50": pct(late, 0.5), "p99": pct(late, 0.99)} if late else None,
    }


def halfway(seconds: int, kill: Any) -> None:
    """Sleep to the middle of the run, call ``kill``, sleep to its end."""
    time.sleep(seconds / 2)
    kill()
    time.sleep(seconds / 2)


def run_tickwheel(url: str, logs: Path, seconds: int) -> dict[str, Any]:
    c = TimerClient.from_url(url, "cron")
    c.init(shards=4)
    shard = c.schedules.create("tick", every="1s", missed="all").shard
    start = c.server_time_ms()
    args = [str(BIN / "tickwheel"), "--redis-url", url, "--namespace", "cron", "worker",
            "--lease", "2s", "--log-level", "WARNING"]  # fmt: skip
    procs = {f"w{i}": spawn([*args, "--id", f"w{i}"], url, logs / f"w{i}.log") for i in range(2)}

    def kill() -> None:  # the schedule's leader
        leader = c.leaders()[shard] or "w0"
        kill_group(procs.pop(leader))
        procs["w2"] = spawn([*args, "--id", "w2"], url, logs / "w2.log")

    try:
        halfway(seconds, kill)
        end = c.server_time_ms()
    finally:
        for proc in procs.values():
            kill_group(proc, 15)
    runs: dict[int, list[int]] = {}
    for o in c.all_outcomes():
        found = occurrence_name(o.id)
        if found is not None:
            runs.setdefault(found[1], []).append(o.decided_ms - found[1])
    c.close()
    return summary(runs, start, end)


def run_arq(url: str, logs: Path, seconds: int) -> dict[str, Any]:
    start = int(time.time() * 1000)
    args = [str(BIN / "arq"), "benchmarks.peer_cron_jobs.ArqCronSettings"]
    procs = [spawn(args, url, logs / f"arq-{i}.log") for i in range(2)]

    def kill() -> None:
        kill_group(procs.pop(0))
        procs.append(spawn(args, url, logs / "arq-2.log"))

    try:
        halfway(seconds, kill)
        end = int(time.time() * 1000)
    finally:
        for proc in procs:
            kill_group(proc, 15)
    return summary(_recorded(url, "arq"), start, end)


def run_celery_beat(url: str, logs: Path, seconds: int) -> dict[str, Any]:
    start = int(time.time() * 1000)
    app = ["-A", "benchmarks.peer_cron_jobs"]
    worker = spawn(
        [str(BIN / "celery"), *app, "worker", "-Q", "cron", "--loglevel", "WARNING"],
        url,
        logs / "celery-worker.log",
    )

    def beat(tag: str) -> Any:
        args = [str(BIN / "celery"), *app, "beat", "--loglevel", "WARNING",
                "--schedule", str(logs / "beat-schedule")]  # fmt: skip
        return spawn(args, url, logs / f"beat-{tag}.log")

    beats = [beat("0")]

    def kill() -> None:
        kill_group(beats.pop(0))
        beats.append(beat("1"))

    try:
        halfway(seconds, kill)
        end = int(time.time() * 1000)
    finally:
        for proc in [*beats, worker]:
            kill_group(proc, 15)
    return summary(_recorded(url, "celery-beat"), start, end)


def _recorded(url: str, peer: str) -> dict[int, list[int]]:
    """The runs a peer's job recorded: nominal (or wall-clock) second ms -> lateness."""
    runs: dict[int, list[int]] = {}
    with redis.Redis.from_url(url) as r:
        for raw in r.lrange(f"cron:{peer}", 0, -1):
            second, late = json.loads(raw)
            runs.setdefault(int(second), []).append(late)
    return runs


def run_celery_beat_on_tickwheel(url: str, logs: Path, seconds: int) -> dict[str, Any]:
    with TimerClient.from_url(url, "celery-cron") as c:
        c.init(shards=4)
    app = ["-A", "benchmarks.peer_cron_celery"]
    tw = [str(BIN / "tickwheel"), "--redis-url", url, "--namespace", "celery-cron"]
    procs = [
        spawn([str(BIN / "celery"), *app, "worker", "-Q", "cron", "--loglevel", "WARNING"],
              url, logs / "celery-worker.log"),
        spawn([*tw, "worker", "--log-level", "WARNING"], url, logs / "tw-worker.log"),
        spawn([*tw, "handle", "benchmarks.peer_cron_celery:handlers"], url, logs / "send.log"),
    ]  # fmt: skip
    beat = [str(BIN / "celery"), *app, "beat", "-S", "timer.celery:Scheduler",
            "--loglevel", "WARNING"]  # fmt: skip
    beats = [spawn(beat, url, logs / f"beat-{i}.log") for i in range(2)]

    def kill() -> None:  # one of the two beats, not replaced
        kill_group(beats.pop(0))

    try:
        # Counted from its first run, as the others are from a running worker: before it,
        # five processes start (Celery's take a second or two each on a busy machine).
        deadline = time.monotonic() + 60
        while not _recorded(url, "celery-beat-on-tickwheel"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no tick ran within 60 s; see the logs in {logs}")
            time.sleep(0.05)
        start = int(time.time() * 1000)
        halfway(seconds, kill)
        end = int(time.time() * 1000)
    finally:
        for proc in [*beats, *procs]:
            kill_group(proc, 15)
    return summary(_recorded(url, "celery-beat-on-tickwheel"), start, end)


RUN = {
    "tickwheel": run_tickwheel, "arq": run_arq, "celery-beat": run_celery_beat,
    "celery-beat-on-tickwheel": run_celery_beat_on_tickwheel,
}  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
