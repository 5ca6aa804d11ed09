"""Celery on tickwheel (#44): countdowns and beat entries kept in Redis, not in a worker.

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
default JSON serializer takes is). Install with ``pip install 'tickwheel[celery]'``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

try:
    from celery import Celery, beat
    from celery.schedules import crontab
    from celery.schedules import schedule as every_schedule
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError("timer.celery needs Celery: pip install 'tickwheel[celery]'") from exc

from .aio import AsyncTimerClient
from .client import TimerClient
from .durable.models import Outcome, Timer
from .durable.schedule_records import ScheduleSpec
from .errors import DuplicateTimer, InvalidInput
from .handlers import Handlers

log = logging.getLogger(__name__)

KEY = "celery"  # a Celery timer's payload: {"celery": {"task", "args", "kwargs", "options"}}
URL_ENV = "TICKWHEEL_REDIS_URL"
PREFIX = "celery."  # a beat entry's schedule is named celery.<entry name>
GROUP = "celery"  # the consumer group that sends them
# What may travel with a task to the broker. countdown and eta are the timer's own.
OPTIONS = frozenset({
    "queue", "routing_key", "exchange", "priority", "expires", "headers",
    "time_limit", "soft_time_limit", "serializer", "compression", "shadow",
})  # fmt: skip


def task_call(
    task: object, args: object = (), kwargs: object = None, options: object = None
) -> dict[str, Any]:
    """A task's call as a timer stores it, checked: InvalidInput says what is wrong."""
    if not isinstance(task, str) or not task:
        raise InvalidInput(f"a Celery task is named by non-empty text, got {task!r}")
    if not isinstance(args, (list, tuple)):
        raise InvalidInput(f"a Celery task's args must be a list or tuple, got {args!r}")
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise InvalidInput(f"a Celery task's kwargs must map text to values, got {kwargs!r}")
    options = {} if options is None else options
    if not isinstance(options, Mapping):
        raise InvalidInput(f"a Celery task's options must be a mapping, got {options!r}")
    timing = sorted({"countdown", "eta"} & set(options))
    if timing:
        raise InvalidInput(
            f"{' and '.join(timing)} in a task's options: the timer is the countdown; "
            "give countdown= or eta= to send_later"
        )
    other = sorted(str(k) for k in options if k not in OPTIONS)
    if other:
        raise InvalidInput(
            f"task options {other} cannot travel with a timer; allowed: {sorted(OPTIONS)}"
        )
    return {"task": task, "args": list(args), "kwargs": dict(kwargs), "options": dict(options)}


def _signature_call(sig: object, args: object, kwargs: object) -> dict[str, Any]:
    if isinstance(sig, str):
        return task_call(sig, args, kwargs)
    if isinstance(sig, Mapping) and "task" in sig:  # a Signature is a dict
        if args != () or kwargs is not None:
            raise InvalidInput("give args and kwargs in the signature (task.s(...)), not beside it")
        return task_call(sig["task"], sig.get("args", ()), sig.get("kwargs"), sig.get("options"))
    raise InvalidInput(f"send_later takes a signature (task.s(...)) or a task's name, got {sig!r}")


def _timer_of(
    sig: object, *, countdown: object, eta: object, timer_id: object, args: object, kwargs: object
) -> tuple[Any, dict[str, Any]]:
    """send_later's timer, checked: its id and ``schedule``'s keyword arguments."""
    call = _signature_call(sig, args, kwargs)
    if (countdown is None) == (eta is None):
        raise InvalidInput("give exactly one of countdown= (seconds) or eta= (a datetime)")
    tid = str(uuid.uuid4()) if timer_id is None else timer_id  # schedule checks it
    payload = {KEY: call}
    if eta is not None:
        if not isinstance(eta, dt.datetime) or eta.tzinfo is None:
            raise InvalidInput(f"eta must be an aware datetime (with its time zone), got {eta!r}")
        return tid, {"deadline_ms": round(eta.timestamp() * 1000), "payload": payload}
    if isinstance(countdown, bool) or not isinstance(countdown, (int, float)):
        raise InvalidInput(f"countdown is seconds (a number), got {countdown!r}")
    if not 0 <= countdown < 10 * 365 * 86_400:  # also refuses NaN
        raise InvalidInput(f"countdown must be between 0 and 10 years of seconds, got {countdown}")
    return tid, {"delay_ms": round(countdown * 1000), "payload": payload}


def send_later(
    client: TimerClient,
    sig: object,
    *,
    countdown: float | None = None,
    eta: dt.datetime | None = None,
    id: str | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
) -> Timer:
    """Send a Celery task to the broker in ``countdown`` seconds or at ``eta`` (an aware
    datetime), through a durable timer; until then it is ``client.cancel(id)``-able.

    ``sig``: a signature (``add.s(2, 2)``, with its options such as ``queue``) or a
    task's name with ``args``/``kwargs``. ``id`` (default a new UUID) is the timer's and
    the task's id: the same id twice is one timer (``created=False``). Everything is
    checked before anything is written (InvalidInput).
    """
    tid, options = _timer_of(
        sig, countdown=countdown, eta=eta, timer_id=id, args=args, kwargs=kwargs
    )
    return client.schedule(tid, **options)


async def asend_later(
    client: AsyncTimerClient,
    sig: object,
    *,
    countdown: float | None = None,
    eta: dt.datetime | None = None,
    id: str | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
) -> Timer:
    """:func:`send_later` on an :class:`~timer.aio.AsyncTimerClient` (a FastAPI app's)."""
    tid, options = _timer_of(
        sig, countdown=countdown, eta=eta, timer_id=id, args=args, kwargs=kwargs
    )
    return await client.schedule(tid, **options)


class Sender:
    """The handler that sends each fired timer's task to the broker, its id as the
    task's id. An outcome that carries no Celery task is passed over (acknowledged)."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    def __call__(self, o: Outcome) -> None:
        body = o.payload.get(KEY) if isinstance(o.payload, dict) else None
        if body is None:
            return
        call = task_call(body.get("task"), body.get("args", ()), body.get("kwargs"),
                         body.get("options"))  # fmt: skip
        self.app.send_task(
            call["task"], args=call["args"], kwargs=call["kwargs"], task_id=o.id,
            **call["options"],
        )  # fmt: skip


def sender(app: Celery, *, group: str = GROUP, **options: Any) -> Handlers:
    """Handlers that send the Celery tasks of fired timers (``tickwheel handle
    proj.tw:handlers``, or ``.run(client)``); ``options`` are :class:`Handlers`'."""
    handlers = Handlers(group=group, **options)
    handlers.on("expired")(Sender(app))
    return handlers


# -- beat -------------------------------------------------------------------------------


def schedule_spec(entry_schedule: object, app: Celery) -> dict[str, Any]:
    """A beat entry's schedule as tickwheel's ``cron``/``tz`` or ``every`` (ms)."""
    if isinstance(entry_schedule, crontab):
        c = entry_schedule
        cron = " ".join(str(part) for part in (
            c._orig_minute, c._orig_hour, c._orig_day_of_month, c._orig_month_of_year,
            c._orig_day_of_week,
        ))  # fmt: skip
        return {"cron": cron, "tz": str(c.tz or app.timezone)}
    if isinstance(entry_schedule, every_schedule):
        ms = round(entry_schedule.run_every.total_seconds() * 1000)
        return {"every": ms}
    raise InvalidInput(
        f"a beat entry's schedule must be a crontab, a number of seconds or a timedelta "
        f"for tickwheel, got {entry_schedule!r}"
    )


class Scheduler(beat.Scheduler):  # type: ignore[misc]
    """``celery beat -S timer.celery:Scheduler``: the app's beat entries kept as tickwheel
    schedules named ``celery.<entry>``, which the workers fire (each occurrence once,
    fenced) and a :func:`sender` runner sends. The beat sends nothing itself, so any
    number of beats may run, and killing one loses nothing.

    Its conf: ``tickwheel_url`` (else ``$TICKWHEEL_REDIS_URL``) and
    ``tickwheel_namespace`` (default ``celery``). A ``celery.`` schedule whose entry
    is gone from the conf is deleted.
    """

    def __init__(self, app: Celery, *args: Any, **kwargs: Any) -> None:
        self._client: TimerClient | None = None
        super().__init__(app, *args, **kwargs)

    @property
    def client(self) -> TimerClient:
        if self._client is None:
            url = self.app.conf.get("tickwheel_url") or os.environ.get(URL_ENV)
            if not url:
                raise InvalidInput(
                    f"timer.celery.Scheduler needs app.conf.tickwheel_url or ${URL_ENV}"
                )
            namespace = self.app.conf.get("tickwheel_namespace") or "celery"
            self._client = TimerClient.from_url(url, namespace)
        return self._client

    def setup_schedule(self) -> None:
        super().setup_schedule()
        self.sync_schedules()

    def sync_schedules(self) -> None:
        """Create, change or delete tickwheel schedules until they match the entries."""
        schedules = self.client.schedules
        wanted = {}
        for name, entry in self.schedule.items():
            spec = schedule_spec(entry.schedule, self.app)
            call = task_call(entry.task, entry.args, entry.kwargs, entry.options)
            wanted[PREFIX + name] = (spec, {KEY: call})
        for name, (spec, payload) in wanted.items():
            info = schedules.get(name)
            if info is None:
                with contextlib.suppress(DuplicateTimer):  # another beat made it first
                    schedules.create(name, payload=payload, **spec)
                    log.info("beat: schedule %s created", name)
                continue
            if info.payload != payload or info.spec != ScheduleSpec.of(**spec):
                schedules.update(name, payload=payload, **spec)
                log.info("beat: schedule %s updated", name)
        for info in schedules.list():
            if info.name.startswith(PREFIX) and info.name not in wanted:
                schedules.delete(info.name)
                log.info("beat: schedule %s deleted (no such entry)", info.name)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Nothing to send: the workers fire the schedules. Look again later."""
        return float(self.max_interval)

    def close(self) -> None:
        super().close()
        if self._client is not None:
            self._client.close()
            self._client = None

    @property
    def info(self) -> str:
        return f"    . tickwheel schedules: {PREFIX}* in namespace {self.client.namespace}"
