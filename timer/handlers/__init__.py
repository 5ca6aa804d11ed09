"""Handlers: run your code when a timer ends, with retries, dead letters and concurrency.

::

    handlers = Handlers(group="billing", max_attempts=5)

    @handlers.on("expired")
    def on_timeout(o: Outcome) -> None:      # or `async def`
        mark_job_failed(o.id, key=o.idempotency_key)

    handlers.run(client, concurrency=8)      # until stop() or SIGTERM (handle_signals)

What the runner guarantees (the details are in https://tickwheel.readthedocs.io/design-notes/,
"Handlers"):

- **At least once.** An outcome is acknowledged only after its handler returned. A
  handler runs again only if its process died or stalled past ``reclaim_idle_ms`` before
  the acknowledgement, or if it raised. ``Outcome.idempotency_key`` is the same for
  every delivery of one outcome: record it with the handler's effect to skip a repeat.
- **Retries.** A handler that raises is retried with exponential backoff and jitter
  (:class:`Backoff`) until ``max_attempts``; raise :class:`Retry` to choose the delay,
  or :class:`Later` to look at it again later without it counting as a failure.
  ``Outcome.attempt`` is Redis's delivery count, and the retry time is kept in Redis,
  so both survive a crash of the handler process.
- **Dead letters.** The last failed attempt moves the outcome, with its error text and
  attempt count, to the namespace's dead letters, atomically with its acknowledgement
  (``TimerClient.dead_letters`` / ``redeliver`` / ``drop_dead_letter``, or
  ``tickwheel dead``). An outcome delivered more than ``max_attempts`` times without an
  acknowledgement (its handler crashes the process) goes there without running again.
- **Fast recovery.** At start, a consumer takes back its own unacknowledged outcomes at
  once (a restart under the same name); a dead consumer's are taken over after
  ``reclaim_idle_ms`` (5 s), on a timer of their own. A running handler keeps its
  outcomes from being taken over (the runner touches them every ``reclaim_idle_ms / 3``).
- **Timeouts.** ``timeout_s`` (per ``Handlers``, or per registration) bounds a handler:
  an ``async def`` one is cancelled; a sync one cannot be stopped, so its outcome is
  released for a retry (the attempt counts), the runner stops touching it, a warning
  names the stuck thread, and a new thread takes its place. Either way it is a failed
  attempt (:class:`HandlerTimedOut`), retried or dead-lettered like any other. A stuck
  sync handler keeps its ``limits`` slot until it returns: it still runs.
- **Graceful stop.** ``stop()`` (or SIGTERM/SIGINT with ``handle_signals``): no new
  outcome is taken; running handlers get ``drain_timeout_s`` to finish and be
  acknowledged; outcomes read but not started stay pending for the next consumer.

Sync handlers run on ``concurrency`` threads; ``async def`` handlers on one event loop
(in a thread of its own), with at most ``concurrency`` outcomes in hand altogether.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from ..clock import Killed
from ..durable.groups.streams import check_group
from ..durable.model.checks import check_int, check_ms
from ..durable.model.models import OUTCOMES
from ..errors import InvalidInput
from ..signals import stop_on_signals
from .history import RunnerHistory
from .limits import KeyOf, Limit, Slots, check_fair_by, check_limits, key_value
from .loop import READ_AHEAD, HandlerLoop
from .policy import (
    Backoff,
    Handler,
    HandlerStats,
    HandlerTimedOut,
    InHand,
    Later,
    Retry,
    check_timeout,
)

if TYPE_CHECKING:
    from ..client import TimerClient

__all__ = [
    "DEFAULT_GROUP",
    "DEFAULT_RECLAIM_IDLE_MS",
    "Backoff",
    "Handler",
    "HandlerStats",
    "HandlerTimedOut",
    "Handlers",
    "HandlersOptions",
    "Later",
    "Limit",
    "Retry",
]

log = logging.getLogger("tickwheel.handlers")

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_GROUP = "handlers"
DEFAULT_RECLAIM_IDLE_MS = 5_000


class HandlersOptions(TypedDict, total=False):
    """:class:`Handlers`' settings but its group, for code that makes one for you and
    passes them on (``timer.celery.sender(app, **these)``)."""

    client: TimerClient | None
    consumer: str | None
    max_attempts: int
    backoff: Backoff | None
    reclaim_idle_ms: int
    timeout_s: float | None
    limits: Sequence[Limit] | None
    fair_by: str | KeyOf | None


class Handlers:
    """A set of handlers for one consumer group of a namespace, and the loop running them.

    ``client`` may be given here or to :meth:`run`. ``consumer`` names this process in
    the group; the default (``<host>-<pid>``) is new at each start, so give a stable
    name (a pod or container name) to have a restart take back its own outcomes at once.
    Two live processes must not share a name. ``limits``: at most N handlers at once
    per value of a key, across every runner of the group (:class:`Limit`; an outcome
    over its limit waits its turn, held and touched, and is not counted as an attempt).
    ``fair_by``: a key as a limit takes it (``"payload.tenant"``, or a function of the
    outcome); the outcomes this runner holds start in turn across its values, within
    each priority, so one tenant's flood does not hold the others' back.
    """

    def __init__(
        self,
        client: TimerClient | None = None,
        *,
        group: str = DEFAULT_GROUP,
        consumer: str | None = None,
        max_attempts: int = 5,
        backoff: Backoff | None = None,
        reclaim_idle_ms: int = DEFAULT_RECLAIM_IDLE_MS,
        timeout_s: float | None = None,
        limits: Sequence[Limit] | None = None,
        fair_by: str | KeyOf | None = None,
    ) -> None:
        check_int("max_attempts", max_attempts, 1)
        check_ms("reclaim_idle_ms", reclaim_idle_ms, 100)
        self.group, self.consumer = check_group(
            group, consumer or f"{socket.gethostname()}-{os.getpid()}"
        )
        self.client = client
        self.max_attempts = max_attempts
        self.backoff = backoff or Backoff()
        self.reclaim_idle_ms = reclaim_idle_ms
        self.timeout_s = check_timeout(timeout_s)
        self.limits = check_limits(limits)
        self.fair_by = check_fair_by(fair_by)
        self.stats = HandlerStats()
        self._handlers: dict[str, Handler] = {}
        self._timeouts: dict[str, float | None] = {}
        self._hand = InHand()  # the outcomes in hand, and the stop flag
        self._running = False
        self._loop: HandlerLoop | None = None  # while run() runs
        self._stepped: HandlerLoop | None = None  # a stepped runner's, between turns

    # -- registering ------------------------------------------------------------------

    def on(self, *outcomes: str, timeout_s: float | None = None) -> Callable[[F], F]:
        """Decorator: run the function for outcomes of these kinds (``expired``,
        ``completed``, ``cancelled``; none named: all three). ``timeout_s`` bounds it
        (default: the Handlers' own)."""

        def register(fn: F) -> F:
            for kind in outcomes or OUTCOMES:
                self.add(kind, fn, timeout_s=timeout_s)
            return fn

        return register

    def add(self, outcome: str, fn: Handler, *, timeout_s: float | None = None) -> None:
        """Run ``fn`` for outcomes of this kind; ``timeout_s`` bounds each run of it
        (None: the Handlers' ``timeout_s``)."""
        timeout = check_timeout(timeout_s)
        if outcome not in OUTCOMES:
            raise InvalidInput(f"outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}")
        if not callable(fn):
            raise InvalidInput(f"a handler must be callable, got {fn!r}")
        if outcome in self._handlers and self._handlers[outcome] is not fn:
            raise InvalidInput(f"{outcome!r} already has a handler: {self._handlers[outcome]!r}")
        self._handlers[outcome] = fn
        self._timeouts[outcome] = timeout

    def handler(self, outcome: str) -> Handler | None:
        """The handler registered for outcomes of this kind, if any."""
        return self._handlers.get(outcome)

    def timeout_of(self, outcome: str) -> float | None:
        """How long a handler of this kind may run (None: no limit)."""
        own = self._timeouts.get(outcome)
        return own if own is not None else self.timeout_s

    def functions(self) -> list[Handler]:
        """The handlers registered, one per kind (the same function may be several)."""
        return list(self._handlers.values())

    @property
    def kinds(self) -> tuple[str, ...]:
        """The outcome kinds with a handler (the others are acknowledged unseen)."""
        return tuple(k for k in OUTCOMES if k in self._handlers)

    # -- running ----------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return len(self._hand)

    @property
    def waiting_for_limit(self) -> int:
        """Outcomes in hand waiting for a slot of their key (``limits``), in a running
        runner or a stepped one (:meth:`run_once`) between its turns."""
        loop = self._loop or self._stepped
        return 0 if loop is None or loop.waiting is None else len(loop.waiting)

    def hand_off(self) -> HandlerLoop | None:
        """While :meth:`run` runs, the loop a worker in this process reads outcomes for
        as it fires them (``at_fire``, ``accept``: ``timer.worker.fire_and_handle``);
        None otherwise."""
        return self._loop

    def stop(self) -> None:
        """Take no new outcome; ``run`` returns once running handlers are done (or the
        drain timeout passed). Safe from any thread (a signal handler: see timer.signals)."""
        self._hand.stopping.set()
        with self._hand.cond:
            self._hand.cond.notify_all()

    def run(
        self,
        client: TimerClient | None = None,
        *,
        concurrency: int = 8,
        stop_when_idle: bool = False,
        handle_signals: bool = False,
        drain_timeout_s: float = 30.0,
        start: str = "0",
        read_ahead: int = READ_AHEAD,
        inline: bool | None = None,
    ) -> bool:
        """Handle outcomes until :meth:`stop` (or SIGTERM/SIGINT with ``handle_signals``;
        or, with ``stop_when_idle``, once nothing is left to do). True if every handler
        that started finished and was settled; False if the drain timeout passed first
        (those outcomes stay pending and will be handled again).

        ``start`` is where a group created here starts: ``0`` with every outcome the
        streams hold, ``$`` with the next one. ``read_ahead``: how many outcomes may wait
        in this process for a free handler (read in larger batches under a backlog;
        touched while they wait; 0: read only what can start at once).

        ``inline`` (default: when the client's time is virtual, :mod:`timer.clock`): no
        threads; each handler runs on this thread as it is read and is acknowledged at
        once, and with ``stop_when_idle`` the run returns as soon as nothing can be done
        *now* (a retry or a rate waits for its time, which the caller moves on): a stepped
        runner, for a simulation or a test (``timer.testing``).
        """
        client = self._client_for(client, "run")
        check_int("concurrency", concurrency, 1)
        check_int("read_ahead", read_ahead, 0)
        if self._running:
            raise InvalidInput("this Handlers is running already")
        self._running = True
        self._hand.stopping.clear()
        signals = contextlib.ExitStack()
        try:
            if handle_signals:  # a second signal acts as it did before
                signals.enter_context(
                    stop_on_signals(self._on_signal, name="handlers", second_as_before=True)
                )
            client.reserve_connections(concurrency + 8)  # a handler thread settles on its own
            loop = self._new_loop(
                client,
                concurrency=concurrency,
                stop_when_idle=stop_when_idle,
                drain_timeout_s=drain_timeout_s,
                read_ahead=read_ahead,
                start=start,
                inline=client.time.virtual if inline is None else inline,
            )
            self._loop = loop
            return loop.run()
        finally:
            self._loop = None
            self._running = False
            signals.close()

    def run_once(self, client: TimerClient | None = None, *, start: str = "0") -> None:
        """A stepped runner's turn, for a simulation or a test on virtual time
        (``timer.testing``): handle, on this thread, every outcome that can be handled
        now (each acknowledged, retried or dead-lettered at once), then return. The first
        turn joins the group and takes back this consumer's own pending outcomes; the
        runner stays joined between turns, until :meth:`close`. A
        :class:`~timer.clock.Killed` raised in a handler ends the runner at once, as
        ``kill -9`` would (nothing settled; a later turn starts it again)."""
        loop = self._stepped
        if loop is None:
            client = self._client_for(client, "run_once")
            if self._running:
                raise InvalidInput("this Handlers is running already")
            loop = self._new_loop(  # reading as a runner with run()'s defaults reads
                client,
                concurrency=8,
                stop_when_idle=True,
                drain_timeout_s=0.0,
                read_ahead=READ_AHEAD,
                start=start,
                inline=True,
            )
            self._hand.stopping.clear()
            self._stepped = loop
            try:
                loop.begin()
            except Killed:
                self._stepped = None
                raise
        try:
            while loop.turn():
                pass
        except Killed:
            self._stepped = None  # gone: the next turn is a new process's
            raise

    def waiting_until(self) -> float | None:
        """A stepped runner (:meth:`run_once`): when (monotonic s, on its client's clock)
        an outcome that waits for its key's rate may start; None if none waits."""
        loop = self._stepped
        if loop is None or not loop.waiting or not loop.waiting.on_rate():
            return None
        return loop.waiting.soonest()

    def close(self) -> None:
        """End a stepped runner (:meth:`run_once`): leave the group where nothing is owed."""
        loop, self._stepped = self._stepped, None
        if loop is not None:
            loop._drain()

    def _client_for(self, client: TimerClient | None, what: str) -> TimerClient:
        client = client or self.client
        if client is None:
            raise InvalidInput(
                f"Handlers.{what} needs a TimerClient (Handlers(client) or {what}(client))"
            )
        if self.client is None:  # kept: a handler may need it (timer.celery's sender does)
            self.client = client
        if not self._handlers:
            raise InvalidInput("no handler registered: use @handlers.on('expired') first")
        return client

    def _new_loop(
        self,
        client: TimerClient,
        *,
        concurrency: int,
        stop_when_idle: bool,
        drain_timeout_s: float,
        read_ahead: int,
        start: str,
        inline: bool,
    ) -> HandlerLoop:
        group = client.consumer(
            self.group,
            self.consumer,
            reclaim_idle_ms=self.reclaim_idle_ms,
            held=self._hand.keys,
        )
        group.ensure(start=start)
        loop = HandlerLoop(
            self,
            self._hand,
            group,
            concurrency=concurrency,
            stop_when_idle=stop_when_idle,
            drain_timeout_s=drain_timeout_s,
            read_ahead=read_ahead,
            fair_by=None if self.fair_by is None else partial(key_value, self.fair_by),
            slots=Slots(client, self.group, self.consumer, self.limits, self.reclaim_idle_ms)
            if self.limits
            else None,
            history=RunnerHistory(self.stats, self.group, client.add_history),
            inline=inline,
        )
        loop._start_executors()  # inline: no thread (an event loop if a handler is async)
        return loop

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info("%s: stopping (finishing running handlers)", sig.name)
        self.stop()
