"""The job the peer benchmarks run: record that it ran, and how late (wall clock, ms).

Imported by RQ, arq and Celery worker processes (``benchmarks.peer_jobs.record``); the Redis URL
comes from ``PEER_REDIS_URL``.
"""

from __future__ import annotations

import os
from typing import Any

from .handler_jobs import record as record  # noqa: PLC0414 - RQ runs benchmarks.peer_jobs.record


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
