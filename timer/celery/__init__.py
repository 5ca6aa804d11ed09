"""Celery on tickwheel: countdowns and beat entries kept in Redis, not in a worker.

Celery holds an ETA or countdown task in the memory of the worker that prefetched it
(a kill -9 loses it until the broker's visibility timeout, or for good), and a second
``celery beat`` sends every entry twice. Here the task waits as a tickwheel timer, and a
``tickwheel handle`` runner sends it to the broker when it falls due::

    # proj/tw.py
    from proj.celery import app                 # your Celery app
    from timer import TimerClient
    from timer.celery import send_later, sender

    timers = TimerClient.from_url("redis://localhost:6379/0", "celery")
    handlers = sender(app)                      # tickwheel handle proj.tw:handlers

    t = send_later(timers, add.s(2, 2), countdown=600)   # Celery's task id is t.id
    timers.cancel(t.id)                                  # revoke, before it is sent

and beat entries become tickwheel schedules, whose every occurrence is sent once however
many beats run (``celery -A proj beat -S timer.celery:Scheduler``, with
``tickwheel_url`` and ``tickwheel_namespace`` in the app's conf).

A task is sent at least once: a runner killed after the broker took the task and before
the outcome was acknowledged sends it again, with the same task id (the timer's), which
a task can check (``self.request.id``). The arguments must be msgpack-able (what Celery's
default JSON serializer takes is). Install with ``pip install '.[celery]'`` from the checkout.

The package: ``sending`` (send_later, and the runner that sends fired tasks), ``claims``
(each task id's start and end, and the task class that claims it) and ``beat`` (the beat
scheduler whose entries are tickwheel schedules).
"""

from __future__ import annotations

from ..errors import install_line

try:
    import celery  # noqa: F401 - present, or the message below
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError(f"timer.celery needs Celery: {install_line('celery')}") from exc

from .beat import Scheduler, schedule_spec
from .claims import Claims, ConfirmedTask, claims_of
from .sending import KEY, PREFIX, Sender, asend_later, send_later, sender, task_call

__all__ = [
    "KEY",
    "PREFIX",
    "Claims",
    "ConfirmedTask",
    "Scheduler",
    "Sender",
    "asend_later",
    "claims_of",
    "schedule_spec",
    "send_later",
    "sender",
    "task_call",
]
