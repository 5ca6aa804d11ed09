"""A Celery app whose countdowns and beat entries wait in tickwheel (docs/guides/celery.md).

Run, each in its own terminal, from this directory::

    export TICKWHEEL_NAMESPACE=celery              # the app's namespace, for the CLI too
    tickwheel init                                 # once
    celery -A proj worker                          # runs the tasks, as always
    tickwheel handle proj:handlers                 # sends each due task to the broker
    celery -A proj beat -S timer.celery:Scheduler  # as many as you like
    tickwheel worker                               # fires the timers

The beat entries are tickwheel schedules (``celery.tick``): stopping every beat stops
none of them. ``tickwheel schedules delete celery.tick --yes`` ends one (or drop it from
``beat_schedule`` and start a beat once).

It needs the celery extra (``pip install '.[celery,server]'`` from the checkout).
``TICKWHEEL_REDIS_URL`` is tickwheel's Redis (by default the
embedded server ``tickwheel server start`` runs), ``CELERY_BROKER_URL`` the broker (by
default the same server), ``TICKWHEEL_NAMESPACE`` the timers' namespace (``celery``).
Each task records its starts and its runs by task id in the broker's Redis
(``proj:starts``, ``proj:runs``), so a test can count them; given ``hold`` (a file),
it waits while that file exists, so a test can kill its worker mid-run.
``PROJ_AT_MOST_ONCE=1`` makes every task at most once (``tickwheel_at_most_once``).
``PROJ_PLAIN=1`` declares the task a plain Celery task (``base=celery.Task``), as an app
written before ``ConfirmedTask`` is: the sender counts it sent when the broker takes it.
"""

from __future__ import annotations

import os
import time

import redis
from celery import Celery, Task

from timer import default_url
from timer.celery import sender

URL = default_url()  # $TICKWHEEL_REDIS_URL, else the running embedded server
BROKER = os.environ.get("CELERY_BROKER_URL", URL)

# ConfirmedTask: each task id runs once, and the sender knows it started (else it sends
# it again): tickwheel_url and tickwheel_namespace say where the claims are kept
app = Celery("proj", broker=BROKER, task_cls="timer.celery:ConfirmedTask")
app.conf.update(
    task_ignore_result=True,
    task_acks_late=True,  # a task its worker died running comes back (and runs once)
    broker_connection_retry_on_startup=True,
    tickwheel_url=URL,
    tickwheel_namespace=os.environ.get("TICKWHEEL_NAMESPACE", "celery"),
    # a task sent and not started this long after is sent again (default 30 s)
    tickwheel_delivery_timeout_s=float(os.environ.get("PROJ_DELIVERY_TIMEOUT_S", "30")),
    # a task whose worker died mid-run is sent again once its claim's lease ends (30 s),
    # unless tasks are at most once: then a start is final
    tickwheel_claim_lease_s=float(os.environ.get("PROJ_CLAIM_LEASE_S", "30")),
    tickwheel_at_most_once=os.environ.get("PROJ_AT_MOST_ONCE") == "1",
    beat_schedule={
        # a tickwheel schedule named celery.tick: every second, each occurrence sent once
        "tick": {"task": "proj.record", "schedule": 1.0, "args": ("tick",)},
    },
)

handlers = sender(app)  # tickwheel handle proj:handlers


# a task with a base of its own is not a ConfirmedTask: sent at least once, as before it
PLAIN: dict[str, type[Task]] = {"base": Task} if os.environ.get("PROJ_PLAIN") == "1" else {}


@app.task(name="proj.record", bind=True, **PLAIN)  # type: ignore[untyped-decorator]
def record(self: Task, what: str, hold: str | None = None) -> None:
    """Count this run under its task id: the timer's id (an occurrence's for beat)."""
    r = redis.Redis.from_url(BROKER)
    r.hincrby("proj:starts", f"{what}|{self.request.id}", 1)
    while hold and os.path.exists(hold):
        time.sleep(0.01)  # the task's own work, held by a test that kills its worker
    r.hincrby("proj:runs", f"{what}|{self.request.id}", 1)
