"""Each Celery task's start and end by its task id, kept in tickwheel's Redis: a
copy of a task that already started is dropped, and the sender knows whether what it
sent has started."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from celery import Celery, Task
from celery.exceptions import Ignore
from celery.exceptions import Retry as CeleryRetry

from ..client import TimerClient
from ..durable.model.entries import parse_ref
from ..durable.model.keys import check_name, shard_of
from ..durable.model.steps import Command, Op
from ..errors import InvalidInput, TimerError

log = logging.getLogger("timer.celery")

CLAIM_LEASE_S = 30.0  # a running task's claim lasts this long unless renewed (its worker died)
CLAIM_KEEP_S = 86_400.0  # an ended task's claim is kept this long: a copy later is dropped


class Claims:
    """Each Celery task's start and end, by its task id, in tickwheel's Redis.

    A :class:`ConfirmedTask` claims its id before it runs (``r``, with a lease it renews
    while it runs) and marks it ended after (``d``); a second copy of the task (a
    message the broker delivered twice, or the sender sent again) finds the claim and
    is dropped, not run. The sender reads the claim to know whether a task it sent has
    started: if not, within the delivery timeout, it sends it again (a message a Celery
    worker killed with kill -9 had just taken is lost by the Redis transport,
    celery/celery#7950). Keys: ``P:celery:<task id>`` in the task id's shard."""

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

    def look_now(self, look: object) -> None:
        """Have the sender look at a task it sent now, not after its delivery timeout:
        ``look`` is the send's ``tickwheel_look`` header, ``<group> <outcome ref>``, and the
        outcome's retry (the sender's next look) becomes due at once (ZADD LT 0), or is
        when the sender records it, if the task ended before it did. So a task that
        ended has its outcome acknowledged within a moment, not shown as owed for up to
        the delivery timeout. A header of another form is left."""
        if not isinstance(look, str):
            return
        group, _, ref = look.partition(" ")
        try:
            check_name("group", group)
            shard, entry = parse_ref(ref, self.client.meta.shards, "outcome")
        except InvalidInput:
            log.debug("a task's tickwheel_look header %r is not <group> <ref>: left", look)
            return
        key = self.client.keys.shard(shard).retries(group)
        self.client._run(_look_now(key, entry))

    def state(self, task_id: str) -> str | None:
        """``running``, ``done``, ``retrying`` (Celery's own now), ``started`` (an
        at-most-once task began: it runs, ran, or died mid-run, and never runs again),
        or None: not started (or its worker died and its lease ended)."""
        raw = self.client._run(_get(self.key(task_id)))
        names = {
            self.RUNNING: "running",
            self.DONE: "done",
            self.RETRYING: "retrying",
            self.STARTED: "started",
        }
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


def _look_now(key: str, entry: str) -> Op[None]:
    # not XX: a look asked before the sender's Later is recorded (the task ended first)
    # stays at time 0, and retry.lua makes that Later due at once; an entry acknowledged
    # meanwhile is dropped by the next claim
    yield Command("zadd", (key, {entry: 0}), {"lt": True})


def _get(key: str) -> Op[Any]:
    reply = yield Command("get", (key,))
    return reply


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
    """``tickwheel_url``, else what ``from_url()`` finds ($TICKWHEEL_REDIS_URL, else the
    running embedded server, else a ConfigError that says what to do), as the client,
    the CLI and the Django backend do."""
    url = app.conf.get("tickwheel_url") or None
    return TimerClient.from_url(url, app.conf.get("tickwheel_namespace") or "celery")


class ConfirmedTask(Task):  # type: ignore[misc]
    """A task class that runs each task id once: it claims the id in tickwheel's
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
            log.info(
                "task %s (%s): a copy of it runs or ran%s; this one is dropped",
                task_id,
                self.name,
                " (at most once)" if once else "",
            )
            raise Ignore()
        running: set[str] = set() if once else _Renewer.of(claims).running  # no lease: none
        running.add(task_id)
        try:
            result = super().__call__(*args, **kwargs)
        except CeleryRetry:
            running.discard(task_id)
            claims.retrying(task_id)
            self._look_now(claims)
            raise
        except BaseException:
            running.discard(task_id)
            claims.done(task_id)
            self._look_now(claims)
            raise
        running.discard(task_id)
        claims.done(task_id)
        self._look_now(claims)
        return result

    def _look_now(self, claims: Claims) -> None:
        """Ended: the sender looks at once (its send's header says where), so the
        outcome is acknowledged now. Best effort: the sender looks anyway by its
        delivery timeout, so a failure here is logged, never the task's."""
        look = getattr(self.request, "tickwheel_look", None)
        if look is None:  # as Celery keeps a message's own headers, in some versions
            look = (getattr(self.request, "headers", None) or {}).get("tickwheel_look")
        if look is None:
            return
        try:
            claims.look_now(look)
        except TimerError as exc:
            log.warning("task %s: telling the sender it ended failed (%s)", self.name, exc)

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
