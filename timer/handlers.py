"""Handlers: run your code when a timer ends, with retries, dead letters and concurrency.

::

    handlers = Handlers(group="billing", max_attempts=5)

    @handlers.on("expired")
    def on_timeout(o: Outcome) -> None:      # or `async def`
        mark_job_failed(o.id, key=o.idempotency_key)

    handlers.run(client, concurrency=8)      # until stop() or SIGTERM (handle_signals)

What the runner guarantees (the details are in docs/design-notes.md, "Handlers"):

- **At least once.** An outcome is acknowledged only after its handler returned. A
  handler runs again only if its process died or stalled past ``reclaim_idle_ms`` before
  the acknowledgement, or if it raised. ``Outcome.idempotency_key`` is the same for
  every delivery of one outcome: record it with the handler's effect to skip a repeat.
- **Retries.** A handler that raises is retried with exponential backoff and jitter
  (:class:`Backoff`) until ``max_attempts``; raise :class:`Retry` to choose the delay.
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
  attempt (:class:`HandlerTimedOut`), retried or dead-lettered like any other.
- **Graceful stop.** ``stop()`` (or SIGTERM/SIGINT with ``handle_signals``): no new
  outcome is taken; running handlers get ``drain_timeout_s`` to finish and be
  acknowledged; outcomes read but not started stay pending for the next consumer.

Sync handlers run on ``concurrency`` threads; ``async def`` handlers on one event loop
(in a thread of its own), with at most ``concurrency`` outcomes in hand altogether.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import queue
import random
import signal
import socket
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from .durable.checks import check_seconds
from .durable.groups import Delivery, check_group
from .durable.models import OUTCOMES, Outcome
from .errors import InvalidInput, TimerError
from .histogram import MsHistogram

if TYPE_CHECKING:
    from .client import TimerClient
    from .consumer import ConsumerGroup

log = logging.getLogger("tickwheel.handlers")

Handler = Callable[[Outcome], Any] | Callable[[Outcome], Awaitable[Any]]
F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_GROUP = "handlers"
DEFAULT_RECLAIM_IDLE_MS = 5_000


class HandlerTimedOut(Exception):
    """A handler ran past its ``timeout_s``: a failed attempt like any other."""


def _check_timeout(timeout_s: object) -> float | None:
    if timeout_s is None:  # no timeout
        return None
    return check_seconds("timeout_s", timeout_s, maximum=86_400, positive=True)


class Retry(Exception):
    """Raise from a handler to try the outcome again after ``delay_s`` seconds (default:
    the backoff). It counts as an attempt: the last one dead-letters the outcome."""

    def __init__(self, delay_s: float | None = None, reason: str = "") -> None:
        super().__init__(reason or (f"retry in {delay_s}s" if delay_s is not None else "retry"))
        if delay_s is not None and (not isinstance(delay_s, int | float) or delay_s < 0):
            raise InvalidInput(f"Retry delay must be >= 0 seconds, got {delay_s!r}")
        self.delay_s = delay_s


@dataclass(frozen=True)
class Backoff:
    """Delay before attempt ``n + 1`` after attempt ``n`` failed:
    ``min(max_s, initial_s * multiplier ** (n - 1))``, each scaled by a random factor
    in ``[1 - jitter, 1]`` so failed outcomes do not retry in lockstep."""

    initial_s: float = 1.0
    multiplier: float = 2.0
    max_s: float = 300.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not (self.initial_s >= 0 and self.max_s >= self.initial_s):
            raise InvalidInput(
                f"backoff needs 0 <= initial ({self.initial_s}s) <= max ({self.max_s}s)"
            )
        if self.multiplier < 1:
            raise InvalidInput(f"backoff multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter <= 1:
            raise InvalidInput(f"backoff jitter must be between 0 and 1, got {self.jitter}")

    def delay_s(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        base = min(self.max_s, self.initial_s * self.multiplier ** max(0, attempt - 1))
        return base * (1 - self.jitter * rand())


@dataclass
class HandlerStats:
    """What a runner did since it started (read by its metrics)."""

    handled: int = 0  # handler returned; outcome acknowledged
    failed: int = 0  # handler raised (each attempt)
    retried: int = 0  # failed attempts scheduled again
    dead_lettered: int = 0  # moved to the dead letters
    skipped: int = 0  # no handler for its kind: acknowledged unseen
    claimed: int = 0  # due retries, outcomes of dead consumers, our own taken back at start
    lost: int = 0  # taken over by another consumer while our handler still ran
    ack_errors: int = 0  # could not settle with Redis (the outcome will come again)
    timed_out: int = 0  # attempts that ran past their timeout (counted in failed too)
    duration: MsHistogram = field(default_factory=MsHistogram)  # handler run time
    start_lateness: MsHistogram = field(default_factory=MsHistogram)  # deadline -> start
    by_outcome: dict[str, int] = field(default_factory=dict)  # handled, per outcome kind


def _error_text(exc: BaseException) -> str:
    """``Type: message`` first (what a list shows), then the traceback's last frames."""
    head = "".join(traceback.format_exception_only(exc)).strip()
    tb = exc.__traceback__
    tb = tb.tb_next if tb is not None else None  # the runner's own frame says nothing
    frames = "".join(traceback.format_tb(tb)[-5:])
    return f"{head}\n{frames}".strip()


class Handlers:
    """A set of handlers for one consumer group of a namespace, and the loop running them.

    ``client`` may be given here or to :meth:`run`. ``consumer`` names this process in
    the group; the default (``<host>-<pid>``) is new at each start, so give a stable
    name (a pod or container name) to have a restart take back its own outcomes at once.
    Two live processes must not share a name.
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
    ) -> None:
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise InvalidInput(f"max_attempts must be a whole number >= 1, got {max_attempts!r}")
        if (
            isinstance(reclaim_idle_ms, bool)
            or not isinstance(reclaim_idle_ms, int)
            or reclaim_idle_ms < 100
        ):
            raise InvalidInput(f"reclaim_idle_ms must be >= 100, got {reclaim_idle_ms!r}")
        self.group, self.consumer = check_group(
            group, consumer or f"{socket.gethostname()}-{os.getpid()}"
        )
        self.client = client
        self.max_attempts = max_attempts
        self.backoff = backoff or Backoff()
        self.reclaim_idle_ms = reclaim_idle_ms
        self.timeout_s = _check_timeout(timeout_s)
        self.stats = HandlerStats()
        self._handlers: dict[str, Handler] = {}
        self._timeouts: dict[str, float | None] = {}
        self._stopping = threading.Event()
        self._cond = threading.Condition()
        self._inflight: dict[tuple[int, str], Delivery] = {}
        self._running = False

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
        timeout = _check_timeout(timeout_s)
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

    @property
    def kinds(self) -> tuple[str, ...]:
        """The outcome kinds with a handler (the others are acknowledged unseen)."""
        return tuple(k for k in OUTCOMES if k in self._handlers)

    # -- running ----------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        with self._cond:
            return len(self._inflight)

    def stop(self) -> None:
        """Take no new outcome; ``run`` returns once running handlers are done (or the
        drain timeout passed). Safe from any thread and from a signal handler."""
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()

    def run(
        self,
        client: TimerClient | None = None,
        *,
        concurrency: int = 8,
        stop_when_idle: bool = False,
        handle_signals: bool = False,
        drain_timeout_s: float = 30.0,
        start: str = "0",
    ) -> bool:
        """Handle outcomes until :meth:`stop` (or SIGTERM/SIGINT with ``handle_signals``;
        or, with ``stop_when_idle``, once nothing is left to do). True if every handler
        that started finished and was settled; False if the drain timeout passed first
        (those outcomes stay pending and will be handled again).

        ``start`` is where a group created here starts: ``0`` with every outcome the
        streams hold, ``$`` with the next one.
        """
        client = client or self.client
        if client is None:
            raise InvalidInput("Handlers.run needs a TimerClient (Handlers(client) or run(client))")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidInput(f"concurrency must be a whole number >= 1, got {concurrency!r}")
        if not self._handlers:
            raise InvalidInput("no handler registered: use @handlers.on('expired') first")
        if self._running:
            raise InvalidInput("this Handlers is running already")
        self._running = True
        self._stopping.clear()
        restore = self._install_signals() if handle_signals else None
        client.reserve_connections(concurrency + 8)  # a handler thread settles on its own
        group = client.consumer(
            self.group, self.consumer, reclaim_idle_ms=self.reclaim_idle_ms, held=self._held
        )
        try:
            group.ensure(start=start)
            return _Loop(self, group, concurrency, stop_when_idle, drain_timeout_s).run()
        finally:
            self._running = False
            if restore is not None:
                restore()

    def _held(self) -> list[tuple[int, str]]:
        with self._cond:
            return list(self._inflight)

    def _install_signals(self) -> Callable[[], None]:
        previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

        def on_signal(signum: int, _frame: Any) -> None:
            log.info("%s: stopping (finishing running handlers)", signal.Signals(signum).name)
            for s, h in previous.items():  # a second signal acts as it did before
                signal.signal(s, h)
            self.stop()

        for s in previous:
            signal.signal(s, on_signal)

        def restore() -> None:
            for s, h in previous.items():
                signal.signal(s, h)

        return restore


class _Loop:
    """One run of a Handlers: the reading thread (this one), the handler threads and the
    event loop for ``async def`` handlers."""

    def __init__(
        self,
        h: Handlers,
        group: ConsumerGroup,
        concurrency: int,
        stop_when_idle: bool,
        drain_timeout_s: float,
    ) -> None:
        self.h = h
        self.group = group
        self.concurrency = concurrency
        self.stop_when_idle = stop_when_idle
        self.drain_timeout_s = drain_timeout_s
        self.touch_every_s = group.reader.touch_every_s
        self.work: queue.SimpleQueue[Delivery | None] = queue.SimpleQueue()
        # Handled outcomes wait here for the acker thread, which acknowledges them in
        # batches (one XACK per stream for many ids): one round trip per outcome was the
        # runner's bottleneck under a backlog.
        self.acks: queue.SimpleQueue[Delivery | None] = queue.SimpleQueue()
        self.acker = threading.Thread(target=self._acker_main, name="handler-acks", daemon=True)
        self.threads: list[threading.Thread] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread: threading.Thread | None = None
        self.slots: asyncio.Semaphore | None = None  # made on the loop, by its first task
        # Sync handlers with a timeout, while they run: key -> (deadline, delivery,
        # started, thread name). One past its deadline is released for a retry and put
        # in ``abandoned``: when its handler returns at last, nothing is settled.
        # Keyed by (shard, entry id, attempt): a retry of the same entry is another run.
        self.running: dict[tuple[int, str, int], tuple[float, Delivery, float, str]] = {}
        self.abandoned: set[tuple[int, str, int]] = set()
        self.replaced: set[str] = set()  # stuck threads: they exit once unstuck

    # -- the reading thread -------------------------------------------------------------

    def run(self) -> bool:
        h = self.h
        self._start_executors()
        try:
            self._dispatch_all(self._guard([], self.group.start, max(self.concurrency, 100)))
            next_touch = time.monotonic() + self.touch_every_s
            while not h._stopping.is_set():
                self._release_stuck()
                now = time.monotonic()
                if now >= next_touch:
                    self._touch()
                    next_touch = now + self.touch_every_s
                free = self.concurrency - h.in_flight
                wait_s = max(0.001, next_touch - time.monotonic())
                if free <= 0:
                    with h._cond:
                        h._cond.wait_for(
                            lambda: len(h._inflight) < self.concurrency or h._stopping.is_set(),
                            timeout=wait_s,
                        )
                    continue
                block = None if self.stop_when_idle else max(1, int(min(wait_s, 0.5) * 1000))
                got = self._guard([], self.group.poll, free, block)
                self._dispatch_all(got)
                if self.stop_when_idle and not got and self._idle():
                    break
        finally:
            drained = self._drain()
        return drained

    def _guard(self, default: Any, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a Redis call of the loop; on a Redis error log it, pause, give ``default``."""
        try:
            return fn(*args, **kwargs)
        except TimerError as exc:
            log.warning("consumer %s: %s; retrying", self.h.consumer, exc)
            self.h._stopping.wait(0.5)  # not a busy loop while Redis is away
            return default

    def _idle(self) -> bool:
        """Nothing in hand, nothing to claim, no retry waiting (``stop_when_idle``)."""
        if self.h.in_flight:
            return False
        done, got = self._guard((False, []), self.group.idle)
        self._dispatch_all(got)
        return bool(done) and self.h.in_flight == 0

    def _dispatch_all(self, got: list[Delivery]) -> None:
        # A claimed entry (a due retry, a dead consumer's, our own taken back) was
        # delivered before: only a first delivery has attempt 1.
        self.h.stats.claimed += sum(1 for d in got if d.outcome.attempt > 1)
        for d in got:
            self._dispatch(d)

    def _touch(self) -> None:
        with self.h._cond:
            held = list(self.h._inflight.values())
        if not held:
            return
        lost = self._guard([], self.group.touch, held)
        if lost:
            self.h.stats.lost += len(lost)
            log.warning(
                "consumer %s: %d outcomes were taken over by another consumer while their "
                "handlers ran (they stalled past reclaim_idle_ms?); both will have run them",
                self.h.consumer, len(lost),
            )  # fmt: skip

    def _dispatch(self, d: Delivery) -> None:
        h = self.h
        o = d.outcome
        fn = h._handlers.get(o.outcome)
        if o.attempt > h.max_attempts:
            self._settle_dead(
                d,
                f"delivered {o.attempt} times without an acknowledgement: each consumer "
                "holding it died or stalled before its handler returned (does the handler "
                "crash the process?)",
            )
            return
        if fn is None:
            self._guard(None, self.group.ack, d)
            h.stats.skipped += 1
            return
        with h._cond:
            h._inflight[(o.shard, d.entry_id)] = d
        if inspect.iscoroutinefunction(fn):
            assert self.loop is not None
            asyncio.run_coroutine_threadsafe(self._run_async(fn, d), self.loop)
        else:
            self.work.put(d)

    # -- handler threads and the event loop ----------------------------------------------

    def _start_executors(self) -> None:
        self.acker.start()
        fns = list(self.h._handlers.values())
        if any(not inspect.iscoroutinefunction(f) for f in fns):
            for i in range(self.concurrency):
                t = threading.Thread(target=self._thread_main, name=f"handler-{i}", daemon=True)
                t.start()
                self.threads.append(t)
        if any(inspect.iscoroutinefunction(f) for f in fns):
            self.loop = asyncio.new_event_loop()
            self.loop_thread = threading.Thread(
                target=self.loop.run_forever, name="handler-loop", daemon=True
            )
            self.loop_thread.start()

    def _thread_main(self) -> None:
        me = threading.current_thread().name
        while True:
            d = self.work.get()
            if d is None:
                return
            if self.h._stopping.is_set():  # read but not started: leave it pending
                self._forget(d)
                continue
            kind = d.outcome.outcome
            fn = self.h._handlers[kind]
            timeout = self.h.timeout_of(kind)
            started = self._started(d)
            key = (d.outcome.shard, d.entry_id, d.outcome.attempt)
            if timeout is not None:
                with self.h._cond:
                    self.running[key] = (started + timeout, d, started, me)
            error: BaseException | None = None
            try:
                fn(d.outcome)
            except BaseException as exc:
                error = exc
            with self.h._cond:
                self.running.pop(key, None)
                late = key in self.abandoned
                self.abandoned.discard(key)
            if late:  # released for a retry meanwhile: another attempt owns it now
                log.warning(
                    "thread %s: the handler of %s %s returned after its timeout; its "
                    "outcome had been released for a retry, so nothing is settled here",
                    me, kind, d.outcome.id,
                )  # fmt: skip
            else:
                self._settle(d, error, started)
            if me in self.replaced:  # a new thread took this one's place while it hung
                return

    def _release_stuck(self) -> None:
        """Sync handlers past their timeout: their outcome is released for a retry (the
        attempt counts), no longer touched, and a new thread takes the stuck one's place
        (a thread cannot be stopped; it exits once its handler returns)."""
        if not self.running:  # no sync handler with a timeout runs (the common case)
            return
        now = time.monotonic()
        with self.h._cond:
            stuck = [(k, v) for k, v in self.running.items() if v[0] <= now]
            for key, _ in stuck:
                del self.running[key]
                self.abandoned.add(key)
        for _key, (_, d, started, name) in stuck:
            o = d.outcome
            timeout = self.h.timeout_of(o.outcome)
            log.warning(
                "handler thread %s is stuck: its handler of %s %s (attempt %d) ran past its "
                "%.3gs timeout; the outcome is released for a retry and no longer touched, "
                "and a new thread takes the stuck one's place",
                name, o.outcome, o.id, o.attempt, timeout or 0,
            )  # fmt: skip
            self.h.stats.timed_out += 1
            self.replaced.add(name)
            t = threading.Thread(
                target=self._thread_main, name=f"handler-{len(self.threads)}", daemon=True
            )
            self.threads.append(t)
            t.start()
            self._settle(d, HandlerTimedOut(f"the handler ran past its {timeout:g}s timeout "
                                            f"(thread {name} still runs it)"), started)  # fmt: skip

    async def _run_async(self, fn: Handler, d: Delivery) -> None:
        if self.slots is None:
            self.slots = asyncio.Semaphore(self.concurrency)
        async with self.slots:  # a read may bring more than the free slots (per stream)
            await self._run_async_now(fn, d)

    async def _run_async_now(self, fn: Handler, d: Delivery) -> None:
        if self.h._stopping.is_set():
            self._forget(d)
            return
        started = self._started(d)
        timeout = self.h.timeout_of(d.outcome.outcome)
        error: BaseException | None = None
        try:
            async with asyncio.timeout(timeout) as within:
                await fn(d.outcome)
        except TimeoutError as exc:
            error = exc
            if within.expired():  # ours, not the handler's own TimeoutError
                self.h.stats.timed_out += 1
                error = HandlerTimedOut(f"the handler ran past its {timeout:g}s timeout "
                                        "and was cancelled")  # fmt: skip
        except BaseException as exc:
            error = exc
        await asyncio.to_thread(self._settle, d, error, started)

    def _started(self, d: Delivery) -> float:
        now = time.time()
        if d.outcome.attempt == 1:
            self.h.stats.start_lateness.observe(max(0.0, now * 1000 - d.outcome.deadline_ms))
        return time.monotonic()

    def _settle(self, d: Delivery, exc: BaseException | None, started: float) -> None:
        """Acknowledge, schedule a retry or dead-letter; then free the slot."""
        h, o = self.h, d.outcome
        h.stats.duration.observe((time.monotonic() - started) * 1000)
        if exc is None:
            self.acks.put(d)  # still in hand (and touched) until the acker has acked it
            return
        try:
            h.stats.failed += 1
            if o.attempt >= h.max_attempts:
                self._settle_dead(d, _error_text(exc), forget=False)
            else:
                delay = exc.delay_s if isinstance(exc, Retry) else None
                if delay is None:
                    delay = h.backoff.delay_s(o.attempt)
                log.info(
                    "%s %s (attempt %d/%d) failed: %s; retrying in %.3gs",
                    o.outcome, o.id, o.attempt, h.max_attempts, exc, delay,
                )  # fmt: skip
                self._with_retries(lambda: self.group.retry(d, round(delay * 1000)))
                h.stats.retried += 1
        except TimerError as err:
            h.stats.ack_errors += 1
            log.error("could not settle %s %s (%s); it will come again", o.outcome, o.id, err)
        finally:
            self._forget(d)

    def _acker_main(self) -> None:
        h = self.h
        while True:
            d = self.acks.get()
            if d is None:
                return
            batch = [d]
            stop = False
            while len(batch) < 1000:
                try:
                    nxt = self.acks.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            try:
                self._with_retries(functools.partial(self.group.ack_many, batch))
                h.stats.handled += len(batch)
                for x in batch:
                    kind = x.outcome.outcome
                    h.stats.by_outcome[kind] = h.stats.by_outcome.get(kind, 0) + 1
            except TimerError as err:
                h.stats.ack_errors += len(batch)
                log.error("could not acknowledge %d outcomes (%s); they will come again",
                          len(batch), err)  # fmt: skip
            finally:
                for x in batch:
                    self._forget(x)
            if stop:
                return

    def _settle_dead(self, d: Delivery, error: str, forget: bool = True) -> None:
        o = d.outcome
        try:
            ref = self._with_retries(lambda: self.group.dead_letter(d, error))
            if ref is not None:
                self.h.stats.dead_lettered += 1
                log.error(
                    "%s %s failed %d attempts; dead letter %s: %s",
                    o.outcome, o.id, o.attempt, ref, error.splitlines()[0] if error else "",
                )  # fmt: skip
        except TimerError as err:
            self.h.stats.ack_errors += 1
            log.error("could not dead-letter %s (%s); it will come again", o.id, err)
        finally:
            if forget:
                self._forget(d)

    def _with_retries(self, fn: Callable[[], Any], attempts: int = 3) -> Any:
        """A settling call, tried again on a Redis error (a failover takes a moment)."""
        for i in range(attempts):
            try:
                return fn()
            except TimerError:
                if i == attempts - 1:
                    raise
                time.sleep(0.2 * (i + 1))  # backoff between tries of a failed call
        return None

    def _forget(self, d: Delivery) -> None:
        with self.h._cond:
            self.h._inflight.pop((d.outcome.shard, d.entry_id), None)
            self.h._cond.notify_all()

    # -- stopping -------------------------------------------------------------------------

    def _drain(self) -> bool:
        """Let running handlers finish (touching their outcomes meanwhile), then stop the
        threads and the loop, and leave the group where we owe nothing."""
        h = self.h
        h._stopping.set()
        deadline = time.monotonic() + self.drain_timeout_s
        next_touch = time.monotonic() + self.touch_every_s
        with h._cond:
            while h._inflight and time.monotonic() < deadline:
                h._cond.wait(timeout=max(0.0, min(deadline, next_touch) - time.monotonic()))
                if time.monotonic() >= next_touch:
                    h._cond.release()
                    try:
                        self._release_stuck()
                        self._touch()
                    finally:
                        h._cond.acquire()
                    next_touch = time.monotonic() + self.touch_every_s
            drained = not h._inflight
            left = len(h._inflight)
        for _ in self.threads:
            self.work.put(None)
        self.acks.put(None)
        if self.loop is not None and self.loop_thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.loop_thread.join(5)
            if not self.loop_thread.is_alive():
                self.loop.close()
        if drained:
            self._guard(0, self.group.leave)
        else:
            log.warning(
                "%d handlers still running after %.0fs; their outcomes stay pending and "
                "will be handled again", left, self.drain_timeout_s,
            )  # fmt: skip
        return drained
