"""The loop of one ``Handlers.run``: the reading thread (this one), the handler threads,
the acker thread and the event loop for ``async def`` handlers.

Threads: the thread that called ``run`` reads, claims and touches (through the
group's :class:`~timer.durable.groups.reader.GroupReader`) and dispatches; ``concurrency``
daemon threads (``handler-<n>``) run sync handlers and settle their failures
(``threads.py``); the ``handler-acks`` thread acknowledges handled outcomes in batches
(``settle.py``: acks, retries and dead letters); one ``handler-loop`` thread runs an
event loop for ``async def`` handlers (``coroutines.py``).
Outcomes whose key is at its limit wait in line (``admission.py``). The outcomes in hand
(:class:`~timer.handlers.policy.InHand`) are guarded by one condition variable.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from ..clock import Killed
from ..durable.groups.streams import Delivery
from ..durable.model.models import Outcome
from ..durable.shards.calls import Hand
from ..errors import TimerError
from . import admission
from . import history as runner_history
from .admission import Waiting
from .coroutines import CoroutineRunner
from .history import RunnerHistory
from .pause import PauseWatch
from .policy import Handler, InHand, Registry, WorkQueue
from .settle import Settler
from .threads import ON_READER, Running, ThreadRunner

if TYPE_CHECKING:
    from ..client.consumer import ConsumerGroup
    from .limits import Slots

log = logging.getLogger("tickwheel.handlers")
READ_AHEAD = 256  # outcomes read ahead of the free handlers, by default (see HandlerLoop)
RATE_NEAR_S = 0.25  # a rate's next start this near: waited for here, not in a blocking read


def _minus_priority(d: Delivery) -> int:
    return -d.outcome.priority


class HandlerLoop(CoroutineRunner, ThreadRunner):
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
        history: RunnerHistory | None = None,
        inline: bool = False,
    ) -> None:
        self.h = h
        # Stepped (a simulation, a test on virtual time): no threads; each handler runs on
        # the reading thread as it is dispatched, and is settled (acknowledged) at once.
        self.inline = inline
        self.stumbled = False  # inline: a call of this turn met a Redis error
        self._next_touch = self._next_history = 0.0  # when (monotonic s): set by begin
        self.time = group.time  # its clock, sleeps, waits and threads (the client's)
        self.history = history  # what it adds to the namespace's per-minute history
        self.hand = hand
        # Per-key limits (limits.py): outcomes whose key is at its limit wait in
        # hand (touched) in `waiting`, in the order read, until a slot comes free.
        self.slots = slots
        self.waiting: Waiting | None = None
        if slots is not None:
            self.waiting = Waiting(
                slots, hand.stopping, partial(self._guard, 0.0, slots.admit), time=group.time
            )
        self.group = group
        self.concurrency = concurrency
        # Outcomes held at once: those running and those read ahead, waiting for a free
        # handler. Reading only as many as run at once would make each read bring one or two a
        # shard under a backlog, a round trip for every few outcomes; read ahead,
        # they are touched while they wait, as the running ones are.
        self.in_hand_limit = concurrency + read_ahead
        self.stop_when_idle = stop_when_idle
        self.drain_timeout_s = drain_timeout_s
        self.touch_every_s = group.reader.touch_every_s
        self.work = WorkQueue(fair_by)  # highest priority first, then key by key
        self.settler = Settler(h, hand, group, self._fields, inline=inline)  # acks, retries, dead
        self.threads: list[threading.Thread] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread: threading.Thread | None = None
        self.async_slots: asyncio.Semaphore | None = None  # made on the loop, by its first task
        self.running_tasks: set[asyncio.Task[None]] = set()  # the loop holds tasks weakly
        # Sync handlers with a timeout, while they run. One past its deadline is released
        # for a retry and put in ``abandoned``: when its handler returns at last, nothing
        # is settled. Keyed by (shard, entry id, attempt): a retry is another run.
        self.running: dict[tuple[int, str, int], Running] = {}
        self.abandoned: set[tuple[int, str, int]] = set()
        self.replaced: set[str] = set()  # stuck threads: they exit once unstuck
        self.pause = PauseWatch(h.stats, h.group, group.paused, self._fields())  # by an operator
        self.duties = self._loop_duties()

    # -- outcomes a worker in this process fired (timer.worker.fire_and_handle) ----------

    def at_fire(self, most: int) -> Hand | None:
        """How many new outcomes (at most ``most``) a fire call of a worker in this
        process may read for this runner (``fire.lua``'s hand), and as whom: as many as
        its own read would take now (its room, read-ahead included). None while it
        stops or its group is paused."""
        if self.hand.stopping.is_set() or self.pause.paused:
            return None
        with self.hand.cond:
            room = min(most, self.in_hand_limit - len(self.hand.held))
        return Hand(room, self.h.group, self.h.consumer) if room > 0 else None

    def accept(self, shard: int, entries: list[tuple[str, dict[bytes, bytes]]]) -> None:
        """Entries a fire call read for this consumer, started as a read's are (their
        key's limit, their priority, the handler's timeout): called on the firer's
        thread, the moment the fire call answered."""
        got = self._guard([], self.group.handed, shard, entries)
        self.h.stats.handed_at_fire += len(got)
        self._dispatch_all(got)

    # -- the reading thread -------------------------------------------------------------

    def run(self) -> bool:
        """Until stopped (or idle, with ``stop_when_idle``); the executors are started."""
        try:
            self.begin()
            while not self.hand.stopping.is_set() and self.turn():
                pass
        except Killed:
            self.hand.stopping.set()  # gone at once: no drain, no ack, no leaving the group
            raise
        except BaseException:
            self._drain()
            raise
        return self._drain()

    def begin(self) -> None:
        """This consumer's own pending outcomes first (a restart under its name)."""
        self._dispatch_all(self._guard([], self.group.start, max(self.concurrency, 100)))
        self._next_touch = self.time.monotonic() + self.touch_every_s
        self._next_history = self.time.monotonic() + runner_history.HISTORY_EVERY_S

    def turn(self) -> bool:
        """One round of the reading loop: its duties, then read, claim and dispatch
        (waiting when there is nothing to do); False once it should stop
        (``stop_when_idle``, and idle)."""
        self.stumbled = False
        now = self.time.monotonic()
        for due, run in self.duties:
            if due(now):
                run(now)
        now = self.time.monotonic()
        if self.pause.look(now):  # read and claim nothing; what is in hand goes on
            return self._paused(now)
        return self._read(now)

    def _loop_duties(self) -> tuple[tuple[Callable[[float], bool], Callable[[float], None]], ...]:
        """A round's duties, in order, each (due at ``now``?, do it): handlers past their
        timeout released; outcomes waiting for their key's slot or rate admitted; what it
        holds touched (so no other runner claims it); its counts added to the history."""

        def touch(now: float) -> None:
            self._touch()
            self._next_touch = now + self.touch_every_s

        def flush(now: float) -> None:
            assert self.history is not None
            self.history.flush()
            self._next_history = now + runner_history.HISTORY_EVERY_S

        return (
            (lambda now: True, lambda now: self._release_stuck()),
            (lambda now: bool(self.waiting), lambda now: self._admit_waiting()),
            (lambda now: now >= self._next_touch, touch),
            (lambda now: self.history is not None and now >= self._next_history, flush),
        )

    def _paused(self, now: float) -> bool:
        if self.stop_when_idle and (self.inline or not len(self.hand)):
            return False
        self.time.wait(
            self.hand.stopping,
            max(0.001, min(self._next_touch, self.pause.next_check, self._next_deadline()) - now),
        )
        return True

    def _read(self, now: float) -> bool:
        """Read what there is room for and dispatch it; wait when there is nothing."""
        held = len(self.hand)
        room = self.in_hand_limit - held  # to read, counting those read ahead
        # that could start one now (one waiting for its key's slot runs nowhere)
        idle_handlers = self.concurrency - held + (len(self.waiting) if self.waiting else 0)
        wait_s = max(0.001, min(self._next_touch, self._next_deadline()) - self.time.monotonic())
        if self.waiting:  # back soon to try them again (a rate's wait may be shorter)
            wait_s = max(0.001, min(wait_s, admission.LIMIT_RETRY_S, self.waiting.soonest() - now))
        if room <= 0:
            if self.inline:  # stepped: only time frees a waiting key's slot
                return False
            self._wait_for_room(self.in_hand_limit, wait_s)
            return True
        # With a handler free, wait for new outcomes; with every handler busy, read
        # ahead only what is already there (a read never waits while the runner
        # has nothing to start: a stop meanwhile takes nothing more).
        # A rate's next start, when near, is waited for here, not in a blocking read:
        # a read's BLOCK ends on the server's clock tick (100 ms at hz 10), which would
        # turn a 50 ms wait into 100 and halve a rate of 20/s.
        block = None
        rate_near = (
            self.waiting is not None
            and self.waiting.on_rate()
            and self.waiting.soonest() - now < RATE_NEAR_S
        )
        if idle_handlers > 0 and not self.stop_when_idle and not rate_near:
            block = max(1, int(min(wait_s, 0.5) * 1000))
        got = self._guard([], self.group.poll, room, block)
        self._dispatch_all(got)
        if self.stumbled:
            return False
        return True if got else self._nothing_read(idle_handlers, wait_s, waited=block is not None)

    def _nothing_read(self, idle_handlers: int, wait_s: float, *, waited: bool) -> bool:
        if idle_handlers <= 0:
            if self.inline:
                return False
            self._wait_for_room(self.concurrency, wait_s)
            return True
        if self.stop_when_idle:
            idle, found = self._idle()
            if idle or (self.inline and not found):
                # stepped: what is left (a retry, a rate) waits for its time, which the
                # caller moves on
                return False
        if self.waiting and not waited:
            # The read did not wait (it would have waited as long): until the next round,
            # or the next touch if sooner, for a waiting outcome is held, and must be
            # touched like a running one; after a read that waited, a rate's start would
            # stay unused for a whole round.
            if self.inline:
                return False
            self.time.wait(self.hand.stopping, min(wait_s, admission.LIMIT_RETRY_S))
        return True

    def _wait_for_room(self, limit: int, timeout_s: float) -> None:
        """Until fewer than ``limit`` outcomes are in hand (a handler finished), the
        runner stops, or ``timeout_s`` passes."""
        if self.inline:  # nothing runs meanwhile: only time frees a waiting key's slot
            self.time.wait(self.hand.stopping, timeout_s)
            return
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
            if self.inline:  # stepped: the caller's next turn tries again, not this one
                self.stumbled = True
            else:
                self.time.wait(self.hand.stopping, 0.5)  # not a busy loop while Redis is away
            return default

    def _fields(self, o: Outcome | None = None) -> dict[str, object]:
        """A log record's structured fields: group, consumer, and the timer if one."""
        fields: dict[str, object] = {"group": self.h.group, "consumer": self.h.consumer}
        if o is not None:
            fields["timer_id"] = o.id
            fields["attempt"] = o.attempt
        return fields

    def _idle(self) -> tuple[bool, int]:
        """(Nothing in hand, nothing to claim, no retry waiting: ``stop_when_idle``; how
        many outcomes a whole scan of claims found and dispatched)."""
        if len(self.hand):
            return False, 0
        done, got = self._guard((False, []), self.group.idle)
        self._dispatch_all(got)
        return bool(done) and len(self.hand) == 0, len(got)

    def _dispatch_all(self, got: list[Delivery]) -> None:
        # A claimed entry (a due retry, a dead consumer's, our own taken back) was
        # delivered before: only a first delivery has attempt 1.
        self.h.stats.claimed += sum(1 for d in got if d.outcome.attempt > 1)
        if self.inline:  # started here one by one: the highest priorities first, as the
            # work queue hands them to the threads (stable: read order within a priority)
            got = sorted(got, key=lambda d: -d.outcome.priority)
        coros: list[tuple[Handler, Delivery]] = []
        # Highest priority first (stable: each priority in stream order): the handler
        # threads take from the work queue while a read is put there, so a read put in
        # stream order let an idle thread start a low one read before the read's high
        # ones were in the queue (a read holds each shard's stream in turn).
        for d in sorted(got, key=_minus_priority) if len(got) > 1 else got:
            self._dispatch(d, coros)
        if coros:  # one hand-over to the event loop for the read, not one an outcome
            self._hand_over(coros)

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
            if (o.shard, d.entry_id) in self.hand.held:
                # handed out again while it runs or waits here: as the same delivery (a
                # server restart lost the read), or claimed again (this process stalled
                # past reclaim_idle_ms): a second start would run it beside itself, and
                # the run in hand settles it
                return
            self.hand.held[(o.shard, d.entry_id)] = d
        if self.waiting is not None:
            retry_s = self.waiting.admit(d)
            if retry_s is not None:  # its key is at its limit or rate: it waits, in hand
                self.waiting.add(d, retry_s)
                h.stats.limit_waits += 1
                return
        self._start(fn, d, coros)

    def _start(self, fn: Handler, d: Delivery, coros: list[tuple[Handler, Delivery]]) -> None:
        if inspect.iscoroutinefunction(fn):
            coros.append((fn, d))
        elif self.inline:
            self._run_sync(d, ON_READER)
        else:
            self.work.put(d)

    def _hand_over(self, coros: list[tuple[Handler, Delivery]]) -> None:
        """A read's ``async def`` handlers to the event loop (inline: run to their end)."""
        assert self.loop is not None
        if self.inline:
            self.loop.run_until_complete(self._run_all_async(coros))
        else:
            self.loop.call_soon_threadsafe(self._start_async, coros)

    def _admit_waiting(self, freed: list[str] | None = None) -> None:
        """Start the waiting outcomes whose keys have a free slot now (admission.py)."""
        assert self.waiting is not None
        coros: list[tuple[Handler, Delivery]] = []

        def start(d: Delivery) -> None:
            fn = self.h.handler(d.outcome.outcome)
            assert fn is not None  # waiting only with a handler
            self._start(fn, d, coros)

        self.waiting.admit_round(start, freed)
        if coros:
            self._hand_over(coros)

    def _give_back(self, d: Delivery) -> None:
        """The handler of ``d`` returned (or gave up): its key's slots are free, and the
        next outcome waiting for one of them starts."""
        if self.slots is None or self.waiting is None:
            return
        freed = self._guard([], self.slots.release, d)
        if freed and self.waiting and not self.hand.stopping.is_set():
            self._admit_waiting(freed)

    # -- stopping -------------------------------------------------------------------------

    def _drain(self) -> bool:
        """Let running handlers finish (touching their outcomes meanwhile), then stop the
        threads and the loop, and leave the group where we owe nothing."""
        self.hand.stopping.set()
        if self.waiting is not None:  # read but never started: left pending for the next one
            for d in self.waiting.clear():
                self.settler.forget(d)
        deadline = self.time.monotonic() + self.drain_timeout_s
        next_touch = self.time.monotonic() + self.touch_every_s
        with self.hand.cond:
            while self.hand.held and self.time.monotonic() < deadline:
                self.time.wait_on(
                    self.hand.cond, max(0.0, min(deadline, next_touch) - self.time.monotonic())
                )
                if self.time.monotonic() >= next_touch:
                    self.hand.cond.release()
                    try:
                        self._release_stuck()
                        self._touch()
                    finally:
                        self.hand.cond.acquire()
                    next_touch = self.time.monotonic() + self.touch_every_s
            drained = not self.hand.held
            left = len(self.hand.held)
        for _ in self.threads:
            self.work.put(None)
        self.settler.stop()
        if self.history is not None:  # after the last acks: they count
            self.history.flush()
        if self.loop is not None and self.loop_thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.loop_thread.join(5)
            if not self.loop_thread.is_alive():
                self.loop.close()
        elif self.loop is not None:  # inline: the loop ran here, and nothing runs on it now
            self.loop.close()
        if drained:
            self._guard(0, self.group.leave)
        else:
            log.warning(
                "%s still running after %.0fs; %s pending and will be handled again",
                "1 handler" if left == 1 else f"{left} handlers",
                self.drain_timeout_s,
                "its outcome stays" if left == 1 else "their outcomes stay",
            )
        return drained
