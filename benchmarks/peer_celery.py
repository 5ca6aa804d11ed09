"""The Celery app the peer benchmark runs: one task that records that it ran, and how late.

``celery -A benchmarks.peer_celery worker`` imports this module, so the broker URL comes
from ``PEER_REDIS_URL`` and the optional visibility timeout from ``PEER_CELERY_VT``
(seconds). The enqueuing side builds its own app with :func:`make_app`.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from .handler_jobs import record

TASK = "bench.record"
QUEUE = "bench"


def make_app(
    url: str, visibility_timeout_s: float | None = None, acks_late: bool = False,
    confirm: bool = False,
) -> Celery:  # fmt: skip
    """``confirm``: timer.celery's confirmed delivery (#54): the task class claims each
    task id (tickwheel's Redis is the broker's server here, namespace ``celery``), and
    the sender sends again a task not started 5 s after it was sent."""
    if confirm:
        app = Celery("tickwheel-bench", broker=url, task_cls="timer.celery:ConfirmedTask")
        once = os.environ.get("PEER_CELERY_AT_MOST_ONCE") == "1"  # a start is final
        app.conf.update(tickwheel_url=url, tickwheel_namespace="celery",
                        tickwheel_delivery_timeout_s=5.0, tickwheel_claim_lease_s=5.0,
                        tickwheel_at_most_once=once)  # fmt: skip
    else:
        app = Celery("tickwheel-bench", broker=url)
    app.conf.update(
        task_ignore_result=True,  # no result backend: the job writes what it measured
        task_default_queue=QUEUE,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    if visibility_timeout_s is not None:
        # Redelivery of a dead worker's unacked messages after this long; the sweep that
        # looks for them runs every second instead of every 100 s (10 s x throttle 10).
        app.conf.broker_transport_options = {
            "visibility_timeout": visibility_timeout_s,
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
        }
    if acks_late:  # a task is acked once it ran: one its killed worker was running comes back
        app.conf.task_acks_late = True
    app.task(name=TASK)(_record)
    return app


def _record(peer: str, job_id: str, due_ms: int) -> None:
    record(peer, job_id, due_ms)


def _vt() -> float | None:
    raw = os.environ.get("PEER_CELERY_VT")
    return float(raw) if raw else None


app: Any = make_app(
    os.environ.get("PEER_REDIS_URL", "redis://127.0.0.1:6379/0"),
    _vt(),
    acks_late=os.environ.get("PEER_CELERY_ACKS_LATE") == "1",
    confirm=os.environ.get("PEER_CELERY_CONFIRM") == "1",
)


def sender_handlers() -> Any:
    """``tickwheel handle benchmarks.peer_celery:handlers``: the sender of the tasks kept
    by timer.celery (the celery-on-tickwheel peer), on this module's app."""
    from timer.celery import sender  # noqa: PLC0415

    return sender(app)


handlers = sender_handlers()
