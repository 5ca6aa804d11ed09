"""The recurring job of ``benchmarks.peer_cron`` for arq (cron) and Celery (beat): record
the second it ran for and how late. Needs the bench extra (arq, Celery); the Redis URL
comes from ``PEER_REDIS_URL``."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis
from arq import cron
from celery import Celery

URL = os.environ.get("PEER_REDIS_URL", "redis://127.0.0.1:6379/0")
_client = redis.Redis.from_url(URL)


def _record(peer: str, second_ms: int, late_ms: int | None) -> None:
    _client.rpush(f"cron:{peer}", json.dumps([second_ms, late_ms]))


async def arq_tick(ctx: Any) -> None:
    """arq runs it under the id ``arq_tick:<nominal ms>`` (a unique cron job)."""
    nominal = int(str(ctx["job_id"]).rsplit(":", 1)[1])
    _record("arq", nominal, int(time.time() * 1000) - nominal)


def _arq_redis() -> Any:
    from arq.connections import RedisSettings  # noqa: PLC0415

    return RedisSettings.from_dsn(URL)


class ArqCronSettings:
    """arq's defaults, with the job on every whole second (arq's own default runs it at
    .123456 of a second)."""

    functions: list[Any] = []  # noqa: RUF012 - arq reads class attributes
    cron_jobs = [cron(arq_tick, second=set(range(60)), microsecond=0)]  # noqa: RUF012
    redis_settings = _arq_redis()


app = Celery("tickwheel-cron-bench", broker=URL)
app.conf.update(
    task_ignore_result=True,
    task_default_queue="cron",
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    beat_schedule={"tick": {"task": "bench.tick", "schedule": 1.0}},
)


@app.task(name="bench.tick")  # type: ignore[untyped-decorator]
def celery_tick() -> None:
    """Beat sends no nominal time: the run counts in the wall-clock second it ran in."""
    _record("celery-beat", int(time.time()) * 1000, None)
