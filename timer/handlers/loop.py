"""The loop of one ``Handlers.run``: the reading thread (this one), the handler threads,
the acker thread and the event loop for ``async def`` handlers.

Threads: the thread that called ``run`` reads, claims and touches (through the
group's :class:`~timer.durable.reader.GroupReader`) and dispatches; ``concurrency``
daemon threads (``handler-<n>``) run sync handlers and settle their failures; the
``handler-acks`` thread acknowledges handled outcomes in batches (``settle.py``:
acks, retries and dead letters); one
``handler-loop`` thread runs an event loop for ``async def`` handlers. The outcomes in
hand (:class:`~timer.handlers.policy.InHand`) are guarded by one condition variable.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import tracing
from ..durable.groups import Delivery
from ..durable.models import Outcome
from ..errors import TimerError
from .policy import (
    Handler,
    HandlerTimedOut,
    InHand,
    Registry,
    WorkQueue,
)
from .settle import Settler

if TYPE_CHECKING:
    from ..consumer import ConsumerGroup
    from .limits import Slots

log = logging.getLogger("tickwheel.handlers")
READ_AHEAD = 256  # outcomes read ahead of the free handlers, by default (see HandlerLoop)
LIMIT_RETRY_S = 0.05  # how often outcomes waiting for a key's slot try again (at most)
RATE_NEAR_S = 0.25  # a rate's next start this near: waited for here, not in a blocking read


class HandlerLoop:
    """One run of a Handlers: the reading thread (this one), the handler threads and the
    event loop for ``async def`` handlers."""

    def __init__(
        self,
        h: Registry,
        hand: InHand,
        group: ConsumerGroup,
        *,
        concurrency: int,
        stop_when_idle: bool,
        drain_timeout_s: float,
        read_ahead: int = 0,
        slots: Slots | None = None,
        fair_by: Callable[[Outcome], str | None] | None = None,
    ) -> None:
        self.h = h
        # Per-key limits (limits.py): outcomes whose key is at its limit wait in
        # hand (touched) in `waiting`, in the order read, until a slot comes free.
        self.slots = slots
        self.waiting: deque[Delivery] = deque()
        # one refused by a rate: not asked again before this (monotonic s)
        self.not_before: dict[tuple[int, str], float] = {}
        self.admitting = threading.Lock()  # `waiting` changes under it (reader and handlers)
        self.next_admit = 0.0
        self.hand = hand
        self.group = group
        self.concurrency = concurrency
        # Outcomes held at once: those running and those read ahead, waiting for a free
        # handler. Reading only as many as run at once made each read bring one or two a
        # shard under a backlog, a round trip for every few outcomes (#32); read ahead,
        # they are touched while they wait, as the running ones are.
        self.in_hand_limit = concurrency + read_ahead
        self.stop_when_idle = stop_when_idle
        self.drain_timeout_s = drain_timeout_s
        self.touch_every_s = group.reader.touch_every_s
        self.work = WorkQueue(fair_by)  # highest priority first, then key by key
        self.settler = Settler(h, hand, group, self._fields)  # acks, retries, dead letters
        self.threads: list[threading.Thread] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread: threading.Thread | None = None
        self.async_slots: asyncio.Semaphore | None = None  # made on the loop, by its first task
        self.running_tasks: set[asyncio.Task[None]] = set()  # the loop holds tasks weakly
        # Sync handlers with a timeout, while they run: key -> (deadline, delivery,
        # started, thread name). One past its deadline is released for a retry and put
        # in ``abandoned``: when its handler returns at last, nothing is settled.
        # Keyed by (shard, entry id, attempt): a retry of the same entry is another run.
        self.running: dict[tuple[int, str, int], tuple[float, Delivery, float, str]] = {}
        self.abandoned: set[tuple[int, str, int]] = set()
        self.replaced: set[str] = set()  # stuck threads: they exit once unstuck

    # -- the reading thread -------------------------------------------------------------

    def run(self) -> bool:
        self._start_executors()
        try:
            self._dispatch_all(self._guard([], self.group.start, max(self.concurrency, 100)))
            next_touch = time.monotonic() + self.touch_every_s
            while not self.hand.stopping.is_set():
                self._release_stuck()
                if self.waiting:
                    self._admit_waiting()
                now = time.monotonic()
                if now >= next_touch:
                    self._touch()
                    next_touch = now + self.touch_every_s
                held = len(self.hand)
                room = self.in_hand_limit - held  # to read, counting those read ahead
                # that could start one now (one waiting for its key's slot runs nowhere)
                idle_handlers = self.concurrency - held + len(self.waiting)
                wait_s = max(0.001, next_touch - time.monotonic())
                if self.waiting:  # back soon to try them again (a rate's wait may be shorter)
                    wait_s = min(wait_s, LIMIT_RETRY_S, self._soonest_retry() - now)
                    wait_s = max(0.001, wait_s)
                if room <= 0:
                    self._wait_for_room(self.in_hand_limit, wait_s)
                    continue
                # With a handler free, wait for new outcomes; with every handler busy, read
                # ahead only what is already there (a read never waits while the runner
                # has nothing to start: a stop meanwhile takes nothing more).
                # A rate's next start, when near, is waited for here, not in the read: a
                # read's BLOCK ends on the server's clock tick (100 ms at hz 10), which
                # turned a 50 ms wait into 100 and halved a rate of 20/s (#54 D).
                block = None
                rate_near = self.not_before and self._soonest_retry() - now < RATE_NEAR_S
                if idle_handlers > 0 and not self.stop_when_idle and not rate_near:
                    block = max(1, int(min(wait_s, 0.5) * 1000))
                got = self._guard([], self.group.poll, room, block)
                self._dispatch_all(got)
                if got:
                    continue
                if idle_handlers <= 0:
                    self._wait_for_room(self.concurrency, wait_s)
                    continue
                if self.stop_when_idle and self._idle():
                    break
                if self.waiting and block is None:  # the read did not wait (it would have
                    # waited as long): until the next round, or the next touch if sooner,
                    # for a waiting outcome is held, and must be touched like a running one.
                    # Waiting after a read that waited too left a rate's start allowed for
                    # a whole round unused (#54 D: half of 20/s).
                    self.hand.stopping.wait(min(wait_s, LIMIT_RETRY_S))
        finally:
            drained = self._drain()
        return drained

    def _wait_for_room(self, limit: int, timeout_s: float) -> None:
        """Until fewer than ``limit`` outcomes are in hand (a handler finished), the
        runner stops, or ``timeout_s`` passes."""
        with self.hand.cond:
            self.hand.cond.wait_for(
                lambda: len(self.hand.held) < limit or self.hand.stopping.is_set(),
                timeout=timeout_s,
            )

    def _guard(self, default: Any, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a Redis call of the loop; on a Redis error log it, pause, give ``default``."""
        try:
            return fn(*args, **kwargs)
        except TimerError as exc:
            log.warning("consumer %s: %s; retrying", self.h.consumer, exc, extra=self._fields())
            self.hand.stopping.wait(0.5)  # not a busy loop while Redis is away
            return default

    def _fields(self, o: Outcome | None = None) -> dict[str, object]:
        """A log record's structured fields: group, consumer, and the timer if one."""
        fields: dict[str, object] = {"group": self.h.group, "consumer": self.h.consumer}
        if o is not None:
            fields["timer_id"] = o.id
            fields["attempt"] = o.attempt
        return fields

    def _span_fields(self, o: Outcome) -> dict[str, object]:
        """The attributes of a handler run's span (timer/tracing.py)."""
        return {
            "tickwheel.timer_id": o.id,
            "tickwheel.outcome": o.outcome,
            "tickwheel.group": self.h.group,
            "tickwheel.consumer": self.h.consumer,
            "tickwheel.attempt": o.attempt,
        }

    def _idle(self) -> bool:
        """Nothing in hand, nothing to claim, no retry waiting (``stop_when_idle``)."""
        if len(self.hand):
            return False
        done, got = self._guard((False, []), self.group.idle)
        self._dispatch_all(got)
        return bool(done) and len(self.hand) == 0

    def _dispatch_all(self, got: list[Delivery]) -> None:
        # A claimed entry (a due retry, a dead consumer's, our own taken back) was
        # delivered before: only a first delivery has attempt 1.
        self.h.stats.claimed += sum(1 for d in got if d.outcome.attempt > 1)
        coros: list[tuple[Handler, Delivery]] = []
        for d in got:
            self._dispatch(d, coros)
        if coros:  # one hand-over to the event loop for the read, not one an outcome
            assert self.loop is not None
            self.loop.call_soon_threadsafe(self._start_async, coros)

    def _start_async(self, coros: list[tuple[Handler, Delivery]]) -> None:
        """On the event loop: a task for each of a read's ``async def`` handlers, the
        highest priorities first (the slots' semaphore lets them in in this order)."""
        coros.sort(key=lambda c: -c[1].outcome.priority)
        for fn, d in coros:
            assert self.loop is not None
            task = self.loop.create_task(self._run_async(fn, d))
            self.running_tasks.add(task)
            task.add_done_callback(self.running_tasks.discard)

    def _touch(self) -> None:
        if self.slots is not None:  # a timed-out handler still running keeps its slot,
            self._guard(None, self.slots.renew)  # though its outcome is no longer in hand
        with self.hand.cond:
            held = list(self.hand.held.values())
        if not held:
            return
        lost = self._guard([], self.group.touch, held)
        if lost:
            self.h.stats.lost += len(lost)
            log.warning(
                "consumer %s: %d outcomes were taken over by another consumer while their "
                "handlers ran (they stalled past reclaim_idle_ms?); both will have run them",
                self.h.consumer,
                len(lost),
            )

    def _dispatch(self, d: Delivery, coros: list[tuple[Handler, Delivery]]) -> None:
        h = self.h
        o = d.outcome
        fn = self.h.handler(o.outcome)
        if o.attempt > h.max_attempts:
            self.settler.settle_dead(
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
        with self.hand.cond:
            self.hand.held[(o.shard, d.entry_id)] = d
        if self.slots is not None:
            retry_s = self._guard(0.0, self.slots.admit, d)
            if retry_s is not None:  # its key is at its limit or rate: it waits, in hand
                with self.admitting:
                    if retry_s > 0:
                        self.not_before[(o.shard, d.entry_id)] = time.monotonic() + retry_s
                    self.waiting.append(d)
                h.stats.limit_waits += 1
                return
        self._start(fn, d, coros)

    def _rate_due(self, now: float) -> bool:
        """Whether an outcome refused by a rate may be asked again now."""
        with self.admitting:
            return any(t <= now for t in self.not_before.values())

    def _soonest_retry(self) -> float:
        """When the first outcome waiting on a rate may be asked again (monotonic s)."""
        with self.admitting:  # one past (asked late) is due now
            return min(self.not_before.values(), default=time.monotonic() + LIMIT_RETRY_S)

    def _start(self, fn: Handler, d: Delivery, coros: list[tuple[Handler, Delivery]]) -> None:
        if inspect.iscoroutinefunction(fn):
            coros.append((fn, d))
        else:
            self.work.put(d)

    def _admit_waiting(self, freed: list[str] | None = None) -> None:
        """Start the waiting outcomes whose keys have a free slot now, in the order they
        were read. The reading thread tries every LIMIT_RETRY_S (another runner's slot
        frees without a word); a handler thread that gave back the slots ``freed`` tries
        at once the outcomes waiting for those, so a slot of this runner passes to the
        next outcome of its key without a wait."""
        assert self.slots is not None
        if freed is None:
            now = time.monotonic()
            # Slots of other runners are polled every LIMIT_RETRY_S; a rate says when
            # its next start is allowed, and is asked again then, not up to a poll later
            # (a start late by that is lost for good: GCRA does not carry it over).
            if now < self.next_admit and not self._rate_due(now):
                return
            self.next_admit = now + LIMIT_RETRY_S
        coros: list[tuple[Handler, Delivery]] = []
        # keys found at their limit this round, not asked again: when a rate allows the
        # next start (monotonic s), or None for a slot (freed when a handler returns)
        full: dict[str, float | None] = {}
        with self.admitting:
            now = time.monotonic()
            for d in list(self.waiting):
                if self.hand.stopping.is_set():
                    break
                at = (d.outcome.shard, d.entry_id)
                if self.not_before.get(at, 0.0) > now:
                    continue
                keys = [k for k, _ in self.slots.needed(d)]
                rates = [k for k, _, _ in self.slots.rates(d)]
                if freed is not None and not any(k in freed for k in keys):
                    continue
                behind = [full[k] for k in (*keys, *rates) if k in full]
                if behind:  # after one of its keys' outcomes: asked when that one is
                    if None in behind:
                        self.not_before.pop(at, None)
                    else:
                        self.not_before[at] = max(t for t in behind if t is not None)
                    continue
                retry_s = self._guard(0.0, self.slots.admit, d)
                if retry_s is None:
                    self.waiting.remove(d)
                    self.not_before.pop(at, None)
                    fn = self.h.handler(d.outcome.outcome)
                    assert fn is not None  # waiting only with a handler
                    self._start(fn, d, coros)
                elif retry_s > 0:
                    self.not_before[at] = now + retry_s
                    full.update(dict.fromkeys(rates, now + retry_s))
                else:  # waits for a slot now, not for its rate
                    self.not_before.pop(at, None)
                    full.update(dict.fromkeys(keys))
        if coros:
            assert self.loop is not None
            self.loop.call_soon_threadsafe(self._start_async, coros)

    def _give_back(self, d: Delivery) -> None:
        """The handler of ``d`` returned (or gave up): its key's slots are free, and the
        next outcome waiting for one of them starts."""
        if self.slots is None:
            return
        freed = self._guard([], self.slots.release, d)
        if freed and self.waiting and not self.hand.stopping.is_set():
            self._admit_waiting(freed)

    # -- handler threads and the event loop ----------------------------------------------

    def _start_executors(self) -> None:
        self.settler.start()
        fns = list(self.h.functions())
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
            if self.hand.stopping.is_set():  # read but not started: leave it pending
                self._give_back(d)
                self.settler.forget(d)
                continue
            kind = d.outcome.outcome
            fn = self.h.handler(kind)
            assert fn is not None  # dispatched only with a handler
            timeout = self.h.timeout_of(kind)
            started = self._started(d)
            key = (d.outcome.shard, d.entry_id, d.outcome.attempt)
            if timeout is not None:
                with self.hand.cond:
                    self.running[key] = (started + timeout, d, started, me)
            error: BaseException | None = None
            try:
                with tracing.span("tickwheel.handle", d.outcome.traceparent,
                                  self._span_fields(d.outcome)):  # fmt: skip
                    fn(d.outcome)
            except BaseException as exc:
                error = exc
            self._give_back(d)  # even after its timeout: the slot was in use until now
            with self.hand.cond:
                self.running.pop(key, None)
                late = key in self.abandoned
                self.abandoned.discard(key)
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
            if me in self.replaced:  # a new thread took this one's place while it hung
                return

    def _release_stuck(self) -> None:
        """Sync handlers past their timeout: their outcome is released for a retry (the
        attempt counts), no longer touched, and a new thread takes the stuck one's place
        (a thread cannot be stopped; it exits once its handler returns)."""
        if not self.running:  # no sync handler with a timeout runs (the common case)
            return
        now = time.monotonic()
        with self.hand.cond:
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
                name, o.outcome, o.id, o.attempt, timeout or 0, extra=self._fields(o),
            )  # fmt: skip
            self.h.stats.timed_out += 1
            self.replaced.add(name)
            t = threading.Thread(
                target=self._thread_main, name=f"handler-{len(self.threads)}", daemon=True
            )
            self.threads.append(t)
            t.start()
            self.settler.settle(d, HandlerTimedOut(f"the handler ran past its {timeout:g}s timeout "
                                            f"(thread {name} still runs it)"), started)  # fmt: skip

    async def _run_async(self, fn: Handler, d: Delivery) -> None:
        if self.async_slots is None:
            self.async_slots = asyncio.Semaphore(self.concurrency)
        async with self.async_slots:  # a read may bring more than the free slots (per stream)
            await self._run_async_now(fn, d)

    async def _run_async_now(self, fn: Handler, d: Delivery) -> None:
        if self.hand.stopping.is_set():
            if self.slots is not None:
                await asyncio.to_thread(self._give_back, d)
            self.settler.forget(d)
            return
        started = self._started(d)
        timeout = self.h.timeout_of(d.outcome.outcome)
        error: BaseException | None = None
        try:
            async with asyncio.timeout(timeout) as within:
                with tracing.span("tickwheel.handle", d.outcome.traceparent,
                                  self._span_fields(d.outcome)):  # fmt: skip
                    await fn(d.outcome)
        except TimeoutError as exc:
            error = exc
            if within.expired():  # ours, not the handler's own TimeoutError
                self.h.stats.timed_out += 1
                error = HandlerTimedOut(
                    f"the handler ran past its {timeout:g}s timeout and was cancelled"
                )
        except BaseException as exc:
            error = exc
        if self.slots is not None:
            await asyncio.to_thread(self._give_back, d)
        if error is None:  # acknowledged by the acker thread: nothing here waits on Redis
            self.settler.settle(d, None, started)
        else:  # a retry or a dead letter is a Redis call: off the loop
            await asyncio.to_thread(self.settler.settle, d, error, started)

    def _started(self, d: Delivery) -> float:
        now = time.time()
        o = d.outcome
        if o.attempt == 1:
            stats = self.h.stats
            stats.start_lateness.observe(max(0.0, now * 1000 - o.deadline_ms))
            stats.stages.observe("decided_to_read", d.received * 1000 - o.decided_ms)
            stats.stages.observe("read_to_start", (now - d.received) * 1000)
        return time.monotonic()

    # -- stopping -------------------------------------------------------------------------

    def _drain(self) -> bool:
        """Let running handlers finish (touching their outcomes meanwhile), then stop the
        threads and the loop, and leave the group where we owe nothing."""
        self.hand.stopping.set()
        with self.admitting:
            for d in self.waiting:  # read but never started: left pending for the next one
                self.settler.forget(d)
            self.waiting.clear()
            self.not_before.clear()
        deadline = time.monotonic() + self.drain_timeout_s
        next_touch = time.monotonic() + self.touch_every_s
        with self.hand.cond:
            while self.hand.held and time.monotonic() < deadline:
                self.hand.cond.wait(timeout=max(0.0, min(deadline, next_touch) - time.monotonic()))
                if time.monotonic() >= next_touch:
                    self.hand.cond.release()
                    try:
                        self._release_stuck()
                        self._touch()
                    finally:
                        self.hand.cond.acquire()
                    next_touch = time.monotonic() + self.touch_every_s
            drained = not self.hand.held
            left = len(self.hand.held)
        for _ in self.threads:
            self.work.put(None)
        self.settler.stop()
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
                "will be handled again",
                left,
                self.drain_timeout_s,
            )
        return drained
