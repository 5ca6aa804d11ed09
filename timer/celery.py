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
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

try:
    from celery import Celery, Task, beat
    from celery.exceptions import Ignore
    from celery.exceptions import Retry as CeleryRetry
    from celery.schedules import crontab
    from celery.schedules import schedule as every_schedule
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError("timer.celery needs Celery: pip install 'tickwheel[celery]'") from exc

from .aio import AsyncTimerClient
from .client import TimerClient
from .durable.keys import check_name, shard_of
from .durable.models import Outcome, Timer
from .durable.schedule_records import ScheduleSpec
from .durable.steps import Command, Op
from .errors import DuplicateTimer, InvalidInput
from .handlers import Handlers
from .handlers.policy import Later

log = logging.getLogger(__name__)

KEY = "celery"  # a Celery timer's payload: {"celery": {"task", "args", "kwargs", "options"}}
URL_ENV = "TICKWHEEL_REDIS_URL"
PREFIX = "celery."  # a beat entry's schedule is named celery.<entry name>
GROUP = "celery"  # the consumer group that sends them
# What may travel with a task to the broker. countdown and eta are the timer's own.
DELIVERY_TIMEOUT_S = 30.0  # a task sent and not started this long after is sent again
CLAIM_LEASE_S = 30.0  # a running task's claim lasts this long unless renewed (its worker died)
CLAIM_KEEP_S = 86_400.0  # an ended task's claim is kept this long: a copy later is dropped
SENDER_ATTEMPTS = 1_000  # the sender's max_attempts: each check of a start is one
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


class Claims:
    """Each Celery task's start and end, by its task id, in tickwheel's Redis (#54).

    A :class:`ConfirmedTask` claims its id before it runs (``r``, with a lease it renews
    while it runs) and marks it ended after (``d``); a second copy of the task (a
    message the broker delivered twice, or the sender sent again) finds the claim and
    is dropped, not run. The sender reads the claim to know whether a task it sent has
    started: if not, within the delivery timeout, it sends it again (a message a Celery
    worker killed with kill -9 had just taken is lost by the Redis transport,
    celery#7950). Keys: ``P:celery:<task id>`` in the task id's shard."""

    RUNNING, DONE, RETRYING, STARTED = b"r", b"d", b"y", b"s"

    def __init__(
        self, client: TimerClient, *, lease_s: float = CLAIM_LEASE_S, keep_s: float = CLAIM_KEEP_S
    ) -> None:
        for name, value in (("lease_s", lease_s), ("keep_s", keep_s)):
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (0.1 <= value <= 30 * 86_400)
            ):
                raise InvalidInput(f"a claim's {name} must be 0.1 s to 30 days, got {value!r}")
        self.client = client
        self.lease_ms = round(lease_s * 1000)
        self.keep_ms = round(keep_s * 1000)

    def key(self, task_id: str) -> str:
        check_name("task id", task_id)
        shard = shard_of(task_id, self.client.meta.shards)
        return self.client.keys.shard(shard).celery_claim(task_id)

    def claim(self, task_id: str, *, at_most_once: bool = False) -> bool:
        """Take the task's id to run it: True if this copy may run (no copy ran, or the
        one that did handed itself back to Celery's retry, or its worker died and its
        lease ended), False if another copy runs or ran. ``at_most_once``: the claim
        has no lease; a start is final, even if its worker dies mid-run (``started``)."""
        key = self.key(task_id)
        if at_most_once:
            return bool(self.client._run(_claim(key, self.keep_ms, self.STARTED)))
        return bool(self.client._run(_claim(key, self.lease_ms, self.RUNNING)))

    def renew(self, task_id: str) -> None:
        """A running task's lease, from now (its worker is alive)."""
        self.client._run(_renew(self.key(task_id), self.lease_ms))

    def done(self, task_id: str) -> None:
        """The task ended (returned or raised): no copy of it runs again."""
        self.client._run(_put(self.key(task_id), self.DONE, self.keep_ms))

    def retrying(self, task_id: str) -> None:
        """The task handed itself to Celery's retry (``self.retry()``): the copy Celery
        sends back may claim it."""
        self.client._run(_put(self.key(task_id), self.RETRYING, self.keep_ms))

    def state(self, task_id: str) -> str | None:
        """``running``, ``done``, ``retrying`` (Celery's own now), ``started`` (an
        at-most-once task began: it runs, ran, or died mid-run, and never runs again),
        or None: not started (or its worker died and its lease ended)."""
        raw = self.client._run(_get(self.key(task_id)))
        names = {self.RUNNING: "running", self.DONE: "done", self.RETRYING: "retrying",
                 self.STARTED: "started"}  # fmt: skip
        return None if raw is None else names.get(bytes(raw))


def _claim(key: str, ttl_ms: int, value: bytes) -> Op[bool]:
    taken = yield Command("set", (key, value), {"nx": True, "px": ttl_ms})
    if taken:
        return True
    # a copy that retried itself may be claimed again (one copy of those does: the
    # swap answers the value it found)
    found = yield Command("get", (key,))
    if found is None:  # ended between the two: try once more
        again = yield Command("set", (key, value), {"nx": True, "px": ttl_ms})
        return bool(again)
    if bytes(found) != Claims.RETRYING:
        return False
    old = yield Command("set", (key, value), {"xx": True, "px": ttl_ms, "get": True})
    return old is not None and bytes(old) == Claims.RETRYING


def _renew(key: str, lease_ms: int) -> Op[None]:
    yield Command("set", (key, Claims.RUNNING), {"xx": True, "px": lease_ms})


def _put(key: str, value: bytes, ttl_ms: int) -> Op[None]:
    yield Command("set", (key, value), {"px": ttl_ms})


def _get(key: str) -> Op[Any]:
    reply = yield Command("get", (key,))
    return reply


class Sender:
    """The handler that sends each fired timer's task to the broker, its id as the
    task's id. An outcome that carries no Celery task is passed over (acknowledged).

    With ``confirm`` (the default), a send counts once the task has *started*
    (:class:`ConfirmedTask` claims it): until then the outcome is looked at again every
    ``delivery_timeout_s`` (:class:`~timer.handlers.Later`), and a task not started by
    then is sent again, with the same id, so a message the broker lost is not a task
    lost; a task whose worker died mid-run (its claim's lease ended) is sent again
    too. The copies are dropped by the claim, so a task runs once. Without
    ``confirm``: sent at least once, acknowledged when the broker took it."""

    def __init__(
        self, app: Celery, *, confirm: bool = True,
        delivery_timeout_s: float = DELIVERY_TIMEOUT_S, claims: Claims | None = None,
    ) -> None:  # fmt: skip
        if (
            isinstance(delivery_timeout_s, bool)
            or not isinstance(delivery_timeout_s, int | float)
            or not (0.05 <= delivery_timeout_s <= 86_400)
        ):
            raise InvalidInput(
                f"delivery_timeout_s must be 0.05 s to a day, got {delivery_timeout_s!r}"
            )
        self.app = app
        self.confirm = confirm
        self.delivery_timeout_s = float(delivery_timeout_s)
        self._claims = claims
        self.handlers: Handlers | None = None  # the runner it is in: its client's Redis

    def claims(self) -> Claims:
        if self._claims is None:
            client = self.handlers.client if self.handlers is not None else None
            self._claims = claims_of(self.app, client)
        return self._claims

    def __call__(self, o: Outcome) -> None:
        body = o.payload.get(KEY) if isinstance(o.payload, dict) else None
        if body is None:
            return
        call = task_call(body.get("task"), body.get("args", ()), body.get("kwargs"),
                         body.get("options"))  # fmt: skip
        if self.confirm and o.attempt > 1:  # a first attempt has sent nothing yet
            state = self.claims().state(o.id)
            if state in ("done", "retrying", "started"):
                return  # it ran, is Celery's own retry now, or began at most once: delivered
            if state == "running":
                raise Later(self.delivery_timeout_s, "the task runs; looked at again later")
            if o.attempt > 1:
                log.warning(
                    "task %s (%s) has not started %.3gs after it was sent (the broker lost "
                    "it, no Celery worker took it yet, or its worker died): sent again; if "
                    "no task ever starts, is the app's task class timer.celery."
                    "ConfirmedTask, with tickwheel_url naming this Redis and namespace?",
                    o.id, call["task"], self.delivery_timeout_s,
                )  # fmt: skip
        self.app.send_task(
            call["task"], args=call["args"], kwargs=call["kwargs"], task_id=o.id,
            **call["options"],
        )  # fmt: skip
        if self.confirm:
            raise Later(self.delivery_timeout_s, "sent; waiting for the task to start")


def sender(
    app: Celery, *, group: str = GROUP, confirm: bool = True,
    delivery_timeout_s: float | None = None, **options: Any,
) -> Handlers:  # fmt: skip
    """Handlers that send the Celery tasks of fired timers (``tickwheel handle
    proj.tw:handlers``, or ``.run(client)``); ``options`` are :class:`Handlers`'.
    ``confirm``: a send counts when the task starts (its task class is
    :class:`ConfirmedTask`), and one not started within ``delivery_timeout_s`` (the
    app's ``tickwheel_delivery_timeout_s``, else 30 s) is sent again."""
    timeout = delivery_timeout_s
    if timeout is None:
        timeout = float(app.conf.get("tickwheel_delivery_timeout_s") or DELIVERY_TIMEOUT_S)
    if confirm:
        options.setdefault("max_attempts", SENDER_ATTEMPTS)
    handlers = Handlers(group=group, **options)
    send = Sender(app, confirm=confirm, delivery_timeout_s=timeout)
    send.handlers = handlers
    handlers.on("expired")(send)
    return handlers


def claims_of(app: Celery, client: TimerClient | None = None) -> Claims:
    """The app's claims: ``client`` (the sender's), else one from ``tickwheel_url`` (or
    ``$TICKWHEEL_REDIS_URL``) and ``tickwheel_namespace``; the lease and keep times
    from ``tickwheel_claim_lease_s`` and ``tickwheel_claim_keep_s``."""
    if client is None:
        client = _app_client(app)
    return Claims(
        client,
        lease_s=float(app.conf.get("tickwheel_claim_lease_s") or CLAIM_LEASE_S),
        keep_s=float(app.conf.get("tickwheel_claim_keep_s") or CLAIM_KEEP_S),
    )


def _app_client(app: Celery) -> TimerClient:
    url = app.conf.get("tickwheel_url") or os.environ.get(URL_ENV)
    if not url:
        raise InvalidInput(f"timer.celery needs app.conf.tickwheel_url or ${URL_ENV}")
    return TimerClient.from_url(url, app.conf.get("tickwheel_namespace") or "celery")


class ConfirmedTask(Task):  # type: ignore[misc]
    """A task class that runs each task id once (#54): it claims the id in tickwheel's
    Redis before it runs (a second copy, from a broker's redelivery or the sender's
    resend, finds the claim and is dropped with ``Ignore``), renews the claim while it
    runs, and marks it ended after, which is what the sender waits for. A task that
    calls ``self.retry()`` hands its id back to Celery's retry. Use it for the app
    (``Celery(..., task_cls="timer.celery:ConfirmedTask")``) or per task
    (``@app.task(base=ConfirmedTask)``); the app's conf names tickwheel's Redis
    (``tickwheel_url``, ``tickwheel_namespace``).

    A task that must never start twice sets ``tickwheel_at_most_once`` (the app's conf
    for all, or ``@app.task(tickwheel_at_most_once=True)`` for one): its claim has no
    lease, so a task whose worker died mid-run is not sent or run again (by default it
    is, once its claim's lease ends: at least once, never lost)."""

    _tw_claims: Claims | None = None
    tickwheel_at_most_once: bool | None = None  # None: the app's conf says

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        task_id = getattr(self.request, "id", None)
        if not task_id or self.request.called_directly or getattr(self.request, "is_eager", False):
            return super().__call__(*args, **kwargs)  # no broker, no copies: nothing to claim
        claims = self._claims()
        once = self.tickwheel_at_most_once
        if once is None:
            once = bool(self.app.conf.get("tickwheel_at_most_once"))
        if not claims.claim(task_id, at_most_once=once):
            log.info("task %s (%s): a copy of it runs or ran%s; this one is dropped",
                     task_id, self.name, " (at most once)" if once else "")  # fmt: skip
            raise Ignore()
        running: set[str] = set() if once else _Renewer.of(claims).running  # no lease: none
        running.add(task_id)
        try:
            result = super().__call__(*args, **kwargs)
        except CeleryRetry:
            running.discard(task_id)
            claims.retrying(task_id)
            raise
        except BaseException:
            running.discard(task_id)
            claims.done(task_id)
            raise
        running.discard(task_id)
        claims.done(task_id)
        return result

    def _claims(self) -> Claims:
        if ConfirmedTask._tw_claims is None:  # one client per worker process
            ConfirmedTask._tw_claims = claims_of(self.app)
        return ConfirmedTask._tw_claims


class _Renewer:
    """One thread per worker process renewing the claims of the tasks it runs, every
    third of a lease (a task that runs for hours keeps its claim while its worker lives)."""

    _one: _Renewer | None = None
    _made = threading.Lock()

    def __init__(self, claims: Claims) -> None:
        self.claims = claims
        self.running: set[str] = set()
        self.pid = os.getpid()
        threading.Thread(target=self._loop, name="tickwheel-claims", daemon=True).start()

    @classmethod
    def of(cls, claims: Claims) -> _Renewer:
        with cls._made:  # a forked child (prefork) makes its own: threads do not fork
            if cls._one is None or cls._one.pid != os.getpid():
                cls._one = cls(claims)
            return cls._one

    def _loop(self) -> None:
        every = self.claims.lease_ms / 3000
        while True:
            time.sleep(every)  # the renewal's own period, not a synchronisation
            for task_id in list(self.running):
                try:
                    self.claims.renew(task_id)
                except Exception:  # Redis away: the next round may do; the lease says the rest
                    log.warning("task %s: could not renew its claim", task_id, exc_info=True)


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
