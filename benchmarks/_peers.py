"""The peers as the benchmarks drive them: arq, RQ, Celery (at their defaults and tuned),
Celery on tickwheel, and tickwheel itself, each a :class:`Peer` that enqueues jobs due at
given times, starts a worker, and reports each job's runs and lateness.

``benchmarks.peers`` runs them side by side, ``benchmarks.handlers`` some of them beside
tickwheel's handlers. The jobs they run are ``benchmarks.peer_jobs`` (RQ, arq),
``benchmarks.peer_celery`` (Celery) and ``benchmarks.handler_jobs`` (tickwheel's
handlers). Install the peers with ``pip install -e '.[bench]'`` (``make bench`` does).
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import redis

from timer import TimerClient

from ._harness import BIN, ROOT, spawn


def at(due_ms: int) -> datetime:
    """An absolute due time. The peers' relative forms (``countdown``, ``_defer_by``,
    ``enqueue_in``) count from each call, so a batch that takes a second to enqueue
    would shift its last jobs by that second and bill it as lateness."""
    return datetime.fromtimestamp(due_ms / 1000, tz=UTC)


class Peer:
    name = ""
    requires: tuple[str, ...] = ()  # modules from the bench extra
    kill9_runs = 1  # the kill -9 phase is run this many times (not with --quick)
    by_default = True  # run when no --only names the peers

    def __init__(self, url: str, logs: Path) -> None:
        self.url, self.logs = url, logs
        self.r = redis.Redis.from_url(url)

    def enqueue(self, items: list[tuple[str, int]]) -> None:  # (job id, due wall ms)
        raise NotImplementedError

    def worker(self, tag: str) -> subprocess.Popen[bytes]:
        raise NotImplementedError

    def _by_job(self, what: str) -> dict[str, int]:
        got = self.r.hgetall(f"peers:{self.name}:{what}")
        return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in got.items()}

    def lateness(self) -> dict[str, float]:
        """Job id -> ms between due and its first run (to 10 µs)."""
        got = self.r.hgetall(f"peers:{self.name}:late")
        return {(k.decode() if isinstance(k, bytes) else k): float(v) for k, v in got.items()}

    def runs(self) -> dict[str, int]:
        """Job id -> how many times it ran."""
        return self._by_job("runs")


class RQPeer(Peer):
    name = "rq"
    requires = ("rq",)

    def enqueue(self, items: list[tuple[str, int]]) -> None:
        from rq import Queue  # noqa: PLC0415 - the bench extra

        q = Queue("bench", connection=self.r)
        for job_id, due in items:
            q.enqueue_at(at(due), "benchmarks.peer_jobs.record", self.name, job_id, due)

    def worker(self, tag: str) -> subprocess.Popen[bytes]:
        return spawn([str(BIN / "rq"), "worker", "bench", "--with-scheduler", "--url", self.url,
                      "--path", str(ROOT), "--name", f"rq-{tag}-{time.time_ns()}"],
                     self.url, self.logs / f"rq-{tag}.log")  # fmt: skip


class ArqPeer(Peer):
    name = "arq"
    requires = ("arq",)
    settings = "benchmarks.peer_jobs.ArqSettings"

    def enqueue(self, items: list[tuple[str, int]]) -> None:
        import asyncio  # noqa: PLC0415

        from arq import create_pool  # noqa: PLC0415 - the bench extra
        from arq.connections import RedisSettings  # noqa: PLC0415

        async def go() -> None:
            pool = await create_pool(RedisSettings.from_dsn(self.url))
            for job_id, due in items:
                await pool.enqueue_job(
                    "arq_record", self.name, job_id, due, _job_id=job_id, _defer_until=at(due)
                )
            await pool.aclose()

        asyncio.run(go())

    def worker(self, tag: str) -> subprocess.Popen[bytes]:
        return spawn([str(BIN / "arq"), self.settings], self.url, self.logs / f"arq-{tag}.log")


class ArqTunedPeer(ArqPeer):
    name = "arq-poll-50ms"
    settings = "benchmarks.peer_jobs.ArqFastSettings"


class CeleryPeer(Peer):
    """Celery's defaults: prefork pool (one process per core), visibility timeout 1 h.

    A worker takes an ETA job off the queue at once and holds it, unacked, until it is
    due; a worker killed with kill -9 leaves its held jobs in the unacked set until the
    visibility timeout has passed.
    """

    name = "celery"
    requires = ("celery",)
    visibility_timeout_s: float | None = None

    def enqueue(self, items: list[tuple[str, int]]) -> None:
        from .peer_celery import TASK, make_app  # noqa: PLC0415 - the bench extra

        app = make_app(self.url, self.visibility_timeout_s)
        task = app.tasks[TASK]
        with app.producer_or_acquire() as producer:  # one connection for the whole batch
            for job_id, due in items:
                task.apply_async(
                    (self.name, job_id, due), eta=at(due), task_id=job_id, producer=producer
                )
        app.close()

    def worker(self, tag: str) -> subprocess.Popen[bytes]:
        vt = self.visibility_timeout_s
        return spawn([str(BIN / "celery"), "-A", "benchmarks.peer_celery", "worker", "-Q", "bench",
                      "-n", f"celery-{tag}-{time.time_ns()}@%h", "--loglevel", "WARNING"],
                     self.url, self.logs / f"{self.name}-{tag}.log",
                     {"PEER_CELERY_VT": "" if vt is None else str(vt)})  # fmt: skip


class CeleryTunedPeer(CeleryPeer):
    """Visibility timeout 15 s (longer than any countdown in the run, as Celery's docs
    ask), swept every second: a dead worker's jobs come back after about 15 s."""

    name = "celery-vt-15s"
    visibility_timeout_s = 15.0


class CeleryShortTimeoutPeer(CeleryPeer):
    """Visibility timeout 5 s, shorter than the longest countdown in the run (~12 s): the
    setting Celery's docs warn against, measured to show what it costs (duplicates)."""

    name = "celery-vt-5s"
    visibility_timeout_s = 5.0


class CeleryOnTickwheelPeer(CeleryPeer):
    """Celery's tasks, its worker at its defaults, the countdown kept by timer.celery: each
    job is a timer (``send_later``) that a ``tickwheel handle`` runner sends to the broker
    when due. A "worker" here is all three processes in one group, a tickwheel worker, the
    sender and a Celery worker, so the kill -9 takes every one of them at once. The Celery
    worker acks a task once it ran (``task_acks_late``), so one it was running when killed
    comes back after the visibility timeout (15 s); delivery is confirmed (#54): the task
    class claims each id (a copy is dropped) and the sender sends again a task not
    started 5 s after it was sent (a message the killed Celery worker had just popped is
    lost by the Redis transport, celery#7950). The rest of Celery is at its defaults."""

    name = "celery-on-tickwheel"
    visibility_timeout_s = 15.0  # for a task the killed Celery worker had taken
    kill9_runs = 10  # its promise is 0 lost, 0 twice under kill -9: tried 10 times a run

    def __init__(self, url: str, logs: Path) -> None:
        super().__init__(url, logs)
        self.c = TimerClient.from_url(url, "celery")
        self.c.init(shards=8)

    def enqueue(self, items: list[tuple[str, int]]) -> None:
        from timer.celery import send_later  # noqa: PLC0415 - the bench extra

        from .peer_celery import TASK  # noqa: PLC0415

        for job_id, due in items:
            send_later(self.c, TASK, args=[self.name, job_id, due], eta=at(due), id=job_id)

    def worker(self, tag: str) -> subprocess.Popen[bytes]:
        py, vt = sys.executable, self.visibility_timeout_s
        script = (
            f"{py} -m timer.worker --redis-url {self.url} --namespace celery --lease-ms 2000 "
            f"--id tw-{tag}-{time.time_ns()} --log-level WARNING & "
            f"{py} -m timer.cli --redis-url {self.url} --namespace celery handle "
            f"benchmarks.peer_celery:handlers --consumer send-{tag}-{time.time_ns()} "
            f"--reclaim-idle 2s & "
            f"{BIN / 'celery'} -A benchmarks.peer_celery worker -Q bench "
            f"-n celery-{tag}-{time.time_ns()}@%h --loglevel WARNING & wait"
        )
        return spawn(["/bin/sh", "-c", script], self.url, self.logs / f"{self.name}-{tag}.log",
                     {"PEER_CELERY_VT": str(vt), "PEER_CELERY_ACKS_LATE": "1",
                      "PEER_CELERY_CONFIRM": "1", **self.env})  # fmt: skip

    env: dict[str, str] = {}  # noqa: RUF012 - more of the Celery app's settings


class CeleryOnTickwheelAtMostOncePeer(CeleryOnTickwheelPeer):
    """The same, with ``tickwheel_at_most_once``: a task's start is final, so a task whose
    Celery worker was killed mid-run is never run again (not twice; lost instead)."""

    name = "celery-on-tickwheel-at-most-once"
    env = {"PEER_CELERY_AT_MOST_ONCE": "1"}  # noqa: RUF012


class TickwheelPeer(Peer):
    name = "tickwheel"

    def __init__(self, url: str, logs: Path) -> None:
        super().__init__(url, logs)
        self.c = TimerClient.from_url(url, "peers")
        self.c.init(shards=8)
        self.offset = self.c.server_time_ms() - time.time() * 1000

    def enqueue(self, items: list[tuple[str, int]]) -> None:
        for start in range(0, len(items), 1000):
            chunk = [
                {"id": j, "deadline_ms": int(due + self.offset)}
                for j, due in items[start : start + 1000]
            ]
            self.c.schedule_many(chunk)

    def worker(self, tag: str) -> subprocess.Popen[bytes]:
        return spawn([sys.executable, "-m", "timer.worker", "--redis-url", self.url, "--namespace",
                      "peers", "--lease-ms", "2000", "--id", f"tw-{tag}-{time.time_ns()}",
                      "--log-level", "WARNING"], self.url, self.logs / f"tw-{tag}.log")  # fmt: skip

    def runs(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for o in self.c.all_outcomes():
            counts[o.id] = counts.get(o.id, 0) + 1
        return counts

    def lateness(self) -> dict[str, float]:
        late: dict[str, float] = {}
        for o in self.c.all_outcomes():
            late.setdefault(o.id, o.lateness_ms)
        return late


class TickwheelFireAndHandlePeer(TickwheelPeer):
    """Two ``tickwheel handle --fire`` processes (#55), each a worker and its handlers: a
    job is a handler's run (``benchmarks.handler_jobs:tickwheel_record``), recorded as the
    other peers' jobs record theirs (its runs; its lateness by the wall clock). At least
    once: a handler running when its process is killed runs again (a duplicate here, as
    it would be for Celery); a timer is still decided once."""

    name = "tickwheel-fire-and-handle"
    by_default = False  # its own run (make bench: peers_fire), beside Celery and tickwheel

    def worker(self, tag: str) -> subprocess.Popen[bytes]:
        return spawn([sys.executable, "-m", "timer.cli", "--redis-url", self.url, "--namespace",
                      "peers", "handle", "benchmarks.handler_jobs:tickwheel_record",
                      "--consumer", f"h-{tag}-{time.time_ns()}", "--fire", "--lease", "2s",
                      "--reclaim-idle", "2s", "--log-level", "WARNING"],
                     self.url, self.logs / f"twf-{tag}.log", {"PEER_NAME": self.name})  # fmt: skip

    def runs(self) -> dict[str, int]:
        return Peer.runs(self)

    def lateness(self) -> dict[str, float]:
        return Peer.lateness(self)


PEERS: dict[str, type[Peer]] = {
    "tickwheel": TickwheelPeer, "tickwheel-fire-and-handle": TickwheelFireAndHandlePeer,
    "arq": ArqPeer, "arq-poll-50ms": ArqTunedPeer, "rq": RQPeer,
    "celery": CeleryPeer, "celery-vt-15s": CeleryTunedPeer, "celery-vt-5s": CeleryShortTimeoutPeer,
    "celery-on-tickwheel": CeleryOnTickwheelPeer,
    "celery-on-tickwheel-at-most-once": CeleryOnTickwheelAtMostOncePeer,
}  # fmt: skip


def warm_up(peer: Peer, timeout_s: float = 60.0) -> None:
    """Wait until a worker has run a probe job, so that start-up (a second or two for
    Celery) is not billed as lateness: in production the workers are already running."""
    probe = f"probe:{time.time_ns()}"
    peer.enqueue([(probe, int(time.time() * 1000) + 100)])
    deadline = time.monotonic() + timeout_s
    while probe not in peer.runs():
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"no {peer.name} worker ran a probe job within {timeout_s:.0f} s; "
                f"see its log in {peer.logs}"
            )
        time.sleep(0.05)
