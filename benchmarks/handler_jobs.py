"""What a benchmark job does when it runs: record that it ran and how late (wall clock).

``record`` is the peers' job (``benchmarks.peer_jobs`` imports it); ``tickwheel_record``
and ``tickwheel_hold`` are tickwheel's handlers (``tickwheel handle
benchmarks.handler_jobs:tickwheel_record``). This module needs nothing from the bench
extra (the peers' module needs arq at import). The Redis URL comes from
``PEER_REDIS_URL``."""

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


def record(peer: str, job_id: str, due_ms: int, decided_ms: int | None = None) -> None:
    """One round trip: the run, its lateness, and for tickwheel (``decided_ms``) how long
    the outcome took from its decision to here."""
    now = time.time() * 1000
    pipe = _redis().pipeline(transaction=False)
    pipe.hincrby(f"peers:{peer}:runs", job_id, 1)
    # ms, to 10 µs: the goals are 1 and 3 ms; the first run's
    pipe.hsetnx(f"peers:{peer}:late", job_id, round(now - due_ms, 2))
    if decided_ms is not None:
        pipe.hsetnx(f"peers:{peer}:delivery", job_id, round(now - decided_ms, 2))
    pipe.execute()


def tickwheel_record(o: Any) -> None:
    """tickwheel's handler (``tickwheel handle benchmarks.handler_jobs:tickwheel_record``):
    the same record as the peers' jobs, due at the timer's deadline (the server runs on
    this machine, so its clock is this wall clock)."""
    # where the time went too: deciding (the worker's fire), delivering (stream -> handler)
    record(os.environ.get("PEER_NAME", "tickwheel-handlers"), o.id, o.deadline_ms, o.decided_ms)


def tickwheel_hold(o: Any) -> None:
    """A handler that starts, then works while the hold file exists (a recovery run kills
    its process mid-work), then records like the others."""
    r = _redis()
    r.hincrby("peers:hold:starts", o.id, 1)
    hold = os.environ.get("HOLD_FILE", "")
    while hold and os.path.exists(hold):
        time.sleep(0.01)  # the handler's own work, held by the benchmark
    r.hincrby("peers:hold:runs", o.id, 1)


def tickwheel_noop(outcome: Any) -> None:
    """tickwheel's handler that does nothing (``benchmarks.capacity``: what Redis spends
    on the handling itself)."""
