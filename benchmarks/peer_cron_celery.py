"""Celery beat on tickwheel for ``benchmarks.peer_cron``: the entry of every second kept
as a tickwheel schedule by ``timer.celery.Scheduler`` (``celery -A
benchmarks.peer_cron_celery beat -S timer.celery:Scheduler``), sent by ``tickwheel handle
benchmarks.peer_cron_celery:handlers``. Its task runs under the occurrence's id, so the
second it ran for is known. Needs Celery only (not arq: it runs in ``make test``'s smoke
test too); the Redis URL comes from ``PEER_REDIS_URL``."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis
from celery import Celery

from timer.celery import sender

PEER = "celery-beat-on-tickwheel"
URL = os.environ.get("PEER_REDIS_URL", "redis://127.0.0.1:6379/0")
_client = redis.Redis.from_url(URL)

app = Celery("tickwheel-cron-bench-tw", broker=URL)
app.conf.update(
    task_ignore_result=True,
    task_default_queue="cron",
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    tickwheel_url=URL,
    tickwheel_namespace="celery-cron",
    beat_schedule={"tick": {"task": "bench.tick_tw", "schedule": 1.0}},
)


@app.task(name="bench.tick_tw", bind=True)  # type: ignore[untyped-decorator]
def tick(self: Any) -> None:
    """Its id is ``{celery.tick}@<nominal ms>``: the second it ran for, and how late."""
    nominal = int(str(self.request.id).rsplit("@", 1)[1])
    _client.rpush(f"cron:{PEER}", json.dumps([nominal, int(time.time() * 1000) - nominal]))


handlers = sender(app)  # tickwheel handle benchmarks.peer_cron_celery:handlers
