"""The job the peer benchmarks run: record that it ran, and how late (wall clock, ms).

Imported by RQ, arq and Celery worker processes (``benchmarks.peer_jobs.record``); the Redis URL
comes from ``PEER_REDIS_URL``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis

_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        # a pool for every handler thread (redis-py's default stops at 100 connections)
        _client = redis.Redis.from_url(os.environ["PEER_REDIS_URL"], max_connections=1000)
    return _client


def record(peer: str, job_id: str, due_ms: int) -> None:
    late = int(time.time() * 1000) - due_ms
    pipe = _redis().pipeline(transaction=False)
    pipe.hincrby(f"peers:{peer}:runs", job_id, 1)
    pipe.hsetnx(f"peers:{peer}:late", job_id, late)  # the first run's
    pipe.execute()


async def arq_record(ctx: Any, peer: str, job_id: str, due_ms: int) -> None:
    record(peer, job_id, due_ms)


def _arq_redis() -> Any:
    from arq.connections import RedisSettings  # noqa: PLC0415 - the bench extra

    return RedisSettings.from_dsn(os.environ.get("PEER_REDIS_URL", "redis://127.0.0.1:6379/0"))


class ArqSettings:
    """arq's defaults (poll_delay 0.5 s)."""

    functions = [arq_record]  # noqa: RUF012 - arq reads class attributes
    redis_settings = _arq_redis()
    max_jobs = 50


class ArqFastSettings:
    """arq tuned: poll every 50 ms (arq reads only the class's own attributes)."""

    functions = [arq_record]  # noqa: RUF012 - arq reads class attributes
    redis_settings = _arq_redis()
    max_jobs = 50
    poll_delay = 0.05


def tickwheel_record(o: Any) -> None:
    """tickwheel's handler (``tickwheel handle benchmarks.peer_jobs:tickwheel_record``):
    the same record as the peers' jobs, due at the timer's deadline (the server runs on
    this machine, so its clock is this wall clock)."""
    peer = os.environ.get("PEER_NAME", "tickwheel-handlers")
    started = int(time.time() * 1000)
    record(peer, o.id, o.deadline_ms)
    # where the time went: deciding (the worker's fire) and delivering (stream -> handler)
    _redis().hsetnx(f"peers:{peer}:delivery", o.id, started - o.decided_ms)


def tickwheel_hold(o: Any) -> None:
    """A handler that starts, then works while the hold file exists (a recovery run kills
    its process mid-work), then records like the others."""
    r = _redis()
    r.hincrby("peers:hold:starts", o.id, 1)
    hold = os.environ.get("HOLD_FILE", "")
    while hold and os.path.exists(hold):
        time.sleep(0.01)  # the handler's own work, held by the benchmark
    r.hincrby("peers:hold:runs", o.id, 1)
