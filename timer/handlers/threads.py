"""The handler threads of a runner: ``concurrency`` daemon threads (``handler-<n>``), each
running sync handlers to their end and settling their outcomes; one past its handler's
timeout has its outcome released for a retry and a new thread takes its place (a thread
cannot be stopped). A mixin of :class:`~timer.handlers.loop.HandlerLoop`, which starts
the threads and releases the stuck ones each round."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import threading
from typing import TYPE_CHECKING, NamedTuple

from .. import tracing
from ..clock import Killed, Time
from ..durable.groups.streams import Delivery
from .policy import HandlerTimedOut, span_fields

if TYPE_CHECKING:
    from ..durable.model.models import Outcome
    from .policy import InHand, Registry, WorkQueue
    from .settle import Settler

log = logging.getLogger("tickwheel.handlers")
# The name a stepped runner's sync handler runs under: on the reading thread itself, so
# nothing can release it while it runs (a simulation's own handler threads are not it)
ON_READER = "inline"


class Running(NamedTuple):
    """A sync handler with a timeout, while it runs (monotonic seconds)."""

    deadline: float  # past it, its outcome is released for a retry
    delivery: Delivery
    started: float
    thread: str  # the handler thread's name


class ThreadRunner:
    """Runs a runner's sync handlers on its threads."""

    running: dict[tuple[int, str, int], Running]  # sync handlers with a timeout, running
    abandoned: set[tuple[int, str, int]]  # released past their timeout, still running
    replaced: set[str]  # stuck threads: they exit once unstuck
    threads: list[threading.Thread]

    if TYPE_CHECKING:  # the loop's own, which these run with
        h: Registry
        hand: InHand
        settler: Settler
        time: Time
        work: WorkQueue
        inline: bool
        concurrency: int
        loop: asyncio.AbstractEventLoop | None
        loop_thread: threading.Thread | None

        def _give_back(self, d: Delivery) -> None: ...

        def _fields(self, o: Outcome | None = None) -> dict[str, object]: ...

    def _start_executors(self) -> None:
        self.settler.start()
        fns = list(self.h.functions())
        if self.inline:  # no thread: sync handlers run as dispatched, coroutines here
            if any(inspect.iscoroutinefunction(f) for f in fns):
                self.loop = asyncio.new_event_loop()
            return
        if any(not inspect.iscoroutinefunction(f) for f in fns):
            for i in range(self.concurrency):
                t = self.time.thread(self._thread_main, name=f"handler-{i}")
                t.start()
                self.threads.append(t)
        if any(inspect.iscoroutinefunction(f) for f in fns):
            self.loop = asyncio.new_event_loop()
            self.loop_thread = self.time.thread(self.loop.run_forever, name="handler-loop")
            self.loop_thread.start()

    def _thread_main(self) -> None:
        me = threading.current_thread().name
        while True:
            d = self.work.get()
            if d is None:
                return
            if self.hand.stopping.is_set():  # read but not started: leave it pending
                self._give_back(d)
                self.settler.forget(d)
                continue
            self._run_sync(d, me)
            if me in self.replaced:  # a new thread took this one's place while it hung
                return

    def _run_sync(self, d: Delivery, me: str) -> None:
        """Run a sync handler on this thread (``me``) and settle its outcome."""
        kind = d.outcome.outcome
        fn = self.h.handler(kind)
        assert fn is not None  # dispatched only with a handler
        timeout = self.h.timeout_of(kind)
        started = self._started(d)
        key = (d.outcome.shard, d.entry_id, d.outcome.attempt)
        # Whether the reading thread can release it past its timeout depends on where the
        # handler runs, not on whether the loop is stepped: a simulation steps handler
        # threads of its own beside a stepped reading loop
        on_reader = me == ON_READER
        if timeout is not None and not on_reader:
            with self.hand.cond:
                self.running[key] = Running(started + timeout, d, started, me)
        error: BaseException | None = None
        try:
            with tracing.span(
                "tickwheel.handle", d.outcome.traceparent, span_fields(self.h, d.outcome)
            ):
                fn(d.outcome)
        except Killed:
            raise  # the process is gone: nothing is settled (a simulation's kill -9)
        except BaseException as exc:
            error = exc
        took = self.time.monotonic() - started
        self._give_back(d)  # even after its timeout: the slot was in use until now
        with self.hand.cond:
            self.running.pop(key, None)
            late = key in self.abandoned
            self.abandoned.discard(key)
        if not late and self._past_timeout(took, timeout):
            # Past its timeout, and not released: stepped (nothing can release a handler
            # on the reading thread), or the reading thread did not get the core before
            # it returned (a busy machine). Either way it is settled as a released one
            # is: whether a handler past its timeout is retried must not depend on how
            # soon the reading thread ran.
            self.h.stats.timed_out += 1
            error = HandlerTimedOut(
                f"the handler ran past its {timeout:g}s timeout (it returned after {took:.3g}s)"
            )
        if late:  # released for a retry meanwhile: another attempt owns it now
            log.warning(
                "thread %s: the handler of %s %s returned after its timeout; its "
                "outcome had been released for a retry, so nothing is settled here",
                me,
                kind,
                d.outcome.id,
                extra=self._fields(d.outcome),
            )
        else:
            self.settler.settle(d, error, started)

    def _past_timeout(self, took: float, timeout: float | None) -> bool:
        """Whether a handler that returned after ``took`` seconds ran past its timeout."""
        return timeout is not None and took > timeout

    def _next_deadline(self) -> float:
        """When (monotonic s) the first running sync handler reaches its timeout: the
        reading thread waits no longer than that, so it releases it on time."""
        if not self.running:
            return math.inf
        with self.hand.cond:
            return min((r.deadline for r in self.running.values()), default=math.inf)

    def _release_stuck(self) -> None:
        """Sync handlers past their timeout: their outcome is released for a retry (the
        attempt counts), no longer touched, and a new thread takes the stuck one's place
        (a thread cannot be stopped; it exits once its handler returns)."""
        if not self.running:  # no sync handler with a timeout runs (the common case)
            return
        now = self.time.monotonic()
        with self.hand.cond:
            stuck = [(k, r) for k, r in self.running.items() if r.deadline <= now]
            for key, _ in stuck:
                del self.running[key]
                self.abandoned.add(key)
        for _key, r in stuck:
            d, name, started = r.delivery, r.thread, r.started
            o = d.outcome
            timeout = self.h.timeout_of(o.outcome)
            log.warning(
                "handler thread %s is stuck: its handler of %s %s (attempt %d) ran past its "
                "%.3gs timeout; the outcome is released for a retry and no longer touched, "
                "and a new thread takes the stuck one's place",
                name,
                o.outcome,
                o.id,
                o.attempt,
                timeout or 0,
                extra=self._fields(o),
            )
            self.h.stats.timed_out += 1
            self.replaced.add(name)
            t = self.time.thread(self._thread_main, name=f"handler-{len(self.threads)}")
            self.threads.append(t)
            t.start()
            self.settler.settle(
                d,
                HandlerTimedOut(
                    f"the handler ran past its {timeout:g}s timeout (thread {name} still runs it)"
                ),
                started,
            )

    def _started(self, d: Delivery) -> float:
        now = self.time.wall()
        o = d.outcome
        if o.attempt == 1:
            stats = self.h.stats
            stats.start_lateness.observe(max(0.0, now * 1000 - o.deadline_ms))
            stats.stages.observe("decided_to_read", d.received * 1000 - o.decided_ms)
            stats.stages.observe("read_to_start", (now - d.received) * 1000)
        return self.time.monotonic()
