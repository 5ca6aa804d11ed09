"""Celery tasks kept as tickwheel timers (``send_later``), and the runner that sends each
to the broker when it falls due (``sender``)."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

from celery import Celery

from ..aio import AsyncTimerClient
from ..client import TimerClient
from ..durable.model.checks import check_seconds
from ..durable.model.models import Outcome, Timer
from ..errors import InvalidInput
from ..handlers import Handlers, HandlersOptions
from ..handlers.policy import Later
from .claims import Claims, ConfirmedTask, claims_of

log = logging.getLogger("timer.celery")

KEY = "celery"  # a Celery timer's payload: {"celery": {"task", "args", "kwargs", "options"}}
PREFIX = "celery."  # a beat entry's schedule is named celery.<entry name>
GROUP = "celery"  # the consumer group that sends them
DELIVERY_TIMEOUT_S = 30.0  # a task sent and not started this long after is sent again
SENDER_ATTEMPTS = 1_000  # the sender's max_attempts: each check of a start is one
# What may travel with a task to the broker. countdown and eta are the timer's own.
OPTIONS = frozenset(
    [
        "queue",
        "routing_key",
        "exchange",
        "priority",
        "expires",
        "headers",
        "time_limit",
        "soft_time_limit",
        "serializer",
        "compression",
        "shadow",
    ]
)


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
    seconds = check_seconds("countdown", countdown)  # 0 to ten years; NaN refused
    return tid, {"delay_ms": round(seconds * 1000), "payload": payload}


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
    task's id. An outcome that carries no Celery task is passed over (acknowledged).

    With ``confirm`` (the default), a task whose class can confirm its start (a
    :class:`ConfirmedTask`, registered in ``app``) counts as sent once it has *started*:
    until then the outcome is looked at again every ``delivery_timeout_s``
    (:class:`~timer.handlers.Later`), or at once when the task ends (the send's
    ``tickwheel_look`` header tells the task which outcome is waiting for it, and it
    makes that look due; so an outcome is not shown as owed for the delivery timeout
    after its task ran), and a task not started by then is sent again, with
    the same id, so a message the broker lost is not a task lost; a task whose worker
    died mid-run (its claim's lease ended) is sent again too. The copies are dropped by
    the claim, so a task runs once.

    Any other task (a plain Celery task, one declared with a ``base=`` of its own, or a
    name this app does not register, run by a remote worker) would never report a start,
    and each copy of it would run: it counts as sent when the broker took it, as without
    ``confirm``, and the first such send of each task name logs one warning saying how to
    opt in. Without ``confirm``: every task is sent at least once, acknowledged when the
    broker took it.

    Under ``task_always_eager`` (a test's app), a task ``app`` registers runs in place, on
    the runner's thread, with the timer's id as its id, as ``apply_async`` would run it
    (``send_task`` alone would still go to the broker); with ``task_eager_propagates`` its
    exception fails the handler, which is retried on the runner's backoff."""

    def __init__(
        self,
        app: Celery,
        *,
        confirm: bool = True,
        delivery_timeout_s: float = DELIVERY_TIMEOUT_S,
        claims: Claims | None = None,
    ) -> None:
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
        self._confirms: dict[str, bool] = {}  # per task name: can it report its start?
        self._imported = False  # the app's task modules (imports, autodiscovery) imported
        self._lock = threading.Lock()  # handlers run on several threads: one warning each

    def confirms(self, task: str) -> bool:
        """Whether ``task`` reports its start (its class in ``app`` is a
        :class:`ConfirmedTask`), so a send of it may wait for that start. Decided once per
        name; a name that cannot is warned about once (with ``confirm``)."""
        with self._lock:
            known = self._confirms.get(task)
            if known is not None:
                return known
            found = self._task(task)
            known = self._confirms[task] = isinstance(found, ConfirmedTask)
        if not known and self.confirm:
            log.warning(
                "task %s %s: it counts as sent when the broker takes it (sent again only "
                "if that fails, so a copy may run twice), not when it starts. To have its "
                "start confirmed and each id run once, declare it in the sender's app with "
                "@app.task(base=timer.celery.ConfirmedTask), or the app with "
                "task_cls='timer.celery:ConfirmedTask'",
                task,
                "is not a task of the sender's app"
                if found is None
                else "cannot confirm its start (its class is not a ConfirmedTask)",
            )
        return known

    def _task(self, name: str) -> object | None:
        found: object | None = self.app.tasks.get(name)
        if found is None and not self._imported:
            # tasks in modules of their own (autodiscover_tasks, imports, include) are
            # registered when Celery's worker and beat import them at start; so here
            self._imported = True
            try:
                self.app.loader.import_default_modules()
            except Exception:
                log.warning("could not import the app's task modules", exc_info=True)
            found = self.app.tasks.get(name)
        return found

    def claims(self) -> Claims:
        if self._claims is None:
            client = self.handlers.client if self.handlers is not None else None
            self._claims = claims_of(self.app, client)
        return self._claims

    def __call__(self, o: Outcome) -> None:
        body = o.payload.get(KEY) if isinstance(o.payload, dict) else None
        if body is None:
            return
        call = task_call(
            body.get("task"), body.get("args", ()), body.get("kwargs"), body.get("options")
        )
        if self.app.conf.task_always_eager:
            task = self._task(call["task"])
            if task is not None:
                # Celery's send_task ignores task_always_eager (it has no task to run);
                # the sender has it, so it runs it in place as apply_async would, and a
                # failure propagates (a retry here) as task_eager_propagates says
                task.apply(call["args"], call["kwargs"], task_id=o.id)  # type: ignore[attr-defined]
                return
        confirm = self.confirm and self.confirms(call["task"])
        if confirm and o.attempt > 1:  # a first attempt has sent nothing yet
            state = self.claims().state(o.id)
            if state in ("done", "retrying", "started"):
                return  # it ran, is Celery's own retry now, or began at most once: delivered
            if state == "running":
                raise Later(self.delivery_timeout_s, "the task runs; looked at again later")
            log.warning(
                "task %s (%s) has not started %.3gs after it was sent (the broker lost "
                "it, no Celery worker took it yet, or its worker died): sent again; if "
                "no task ever starts, is the task a timer.celery.ConfirmedTask in the "
                "Celery workers' app too, with tickwheel_url naming this Redis and "
                "namespace?",
                o.id,
                call["task"],
                self.delivery_timeout_s,
            )
        options = dict(call["options"])
        if confirm and self.handlers is not None and o.entry_id:  # the task says it ended
            look = f"{self.handlers.group} {o.shard}/{o.entry_id}"
            options["headers"] = {**(options.get("headers") or {}), "tickwheel_look": look}
        self.app.send_task(
            call["task"], args=call["args"], kwargs=call["kwargs"], task_id=o.id, **options
        )
        if confirm:
            raise Later(self.delivery_timeout_s, "sent; waiting for the task to start")


def sender(
    app: Celery,
    *,
    group: str = GROUP,
    confirm: bool = True,
    delivery_timeout_s: float | None = None,
    **options: Unpack[HandlersOptions],
) -> Handlers:
    """Handlers that send the Celery tasks of fired timers (``tickwheel handle
    proj.tw:handlers``, or ``.run(client)``); ``options`` are :class:`Handlers`'.
    ``confirm``: a send of a task whose class in ``app`` is :class:`ConfirmedTask`
    counts when the task starts, and one not started within ``delivery_timeout_s`` (the
    app's ``tickwheel_delivery_timeout_s``, else 30 s) is sent again; any other task
    counts as sent when the broker took it (one warning per task name says so)."""
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
