"""The limited runners of the simulation's crossings (:mod:`sim.crossings`): runners of a
second consumer group with a per-key limit and a handler timeout, whose sync handlers
run on handler threads the simulation steps (greenlets: one runs at a time, switched
only where the simulation says), so a handler runs across steps, past its timeout,
beside its own retry."""

from __future__ import annotations

import contextlib
import threading
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import greenlet  # type: ignore[import-untyped]  # no stubs: its few calls are plain

from timer.clock import Killed, SkewedTime
from timer.durable.groups.streams import Delivery
from timer.durable.model.models import Outcome
from timer.handlers import Handlers
from timer.handlers.loop import HandlerLoop

if TYPE_CHECKING:
    from timer.client import TimerClient

    from .crossings import Crossings

LIMITED = "lim"  # the limited runners' consumer group, beside the simulation's own
LIMIT_NAME = "half"
AT_MOST = 1  # handlers at once per value of the key, unless a run draws another
TIMEOUT_S = 1.0  # each handler's timeout: a parked one runs past it
SLOT_LEASE_MS = 10_000  # the limited runners' reclaim idle time, so their slots' lease
THREADS = 4  # handler threads of a limited runner
RUNNERS = 2


def half(o: Outcome) -> str:
    """The limit's key: one of two values, by the timer's id (a stable hash)."""
    return str(zlib.crc32(o.id.encode()) % 2)


@dataclass
class LimitedRun:
    """One attempt's handler on a limited runner, from its start until it returns or its
    process dies; ``lapsed`` once its slot's lease ran out by time."""

    value: str
    slot_key: str
    member: str
    consumer: str
    timer_id: str
    attempt: int
    start_ms: int
    ended: bool = False
    lapsed: bool = False
    last_lease_ms: int | None = None  # the slot's lease end, as last seen
    forgotten: bool = False  # running when a restart lost the store's unsynced writes


class _Unstarted(threading.Thread):
    """The thread a runner asks for in place of a stuck one: a limited runner's handler
    threads are the simulation's own (:class:`LimitedRunner`), so it never starts."""

    def start(self) -> None:
        pass


class ThreadedTime(SkewedTime):
    """A limited runner's clock: the world's, and a thread asked for is never started."""

    def thread(
        self,
        target: Callable[..., object],
        *,
        name: str,
        daemon: bool = True,
        args: tuple[Any, ...] = (),
    ) -> threading.Thread:
        return _Unstarted(target=target, name=name, daemon=daemon, args=args)


class ThreadedHandlers(Handlers):
    """A stepped runner (``run_once``) whose sync handlers go to its process's handler
    threads, as the threaded runner's go to its work queue, instead of running on the
    reading thread: the reading loop keeps its turns (touching, releasing what ran past
    its timeout) while they run."""

    def __init__(self, proc: LimitedRunner, **options: Any) -> None:
        super().__init__(**options)
        self.proc = proc

    def _new_loop(self, client: TimerClient, **options: Any) -> HandlerLoop:
        loop = super()._new_loop(client, **options)
        loop._start = self.proc.enqueue  # type: ignore[method-assign,assignment]
        if loop.waiting is not None:
            self.proc.count_starts(loop.waiting)
        return loop


@dataclass
class Thread:
    g: greenlet.greenlet
    run: LimitedRun
    delivery: Delivery
    started: float  # on its runner's monotonic clock


class LimitedRunner:
    """One limited runner process: its stepped reading loop and its handler threads.
    A handler parks when it starts (it runs) until :meth:`finish` lets it return."""

    def __init__(self, crossings: Crossings, slot: int, consumer: str) -> None:
        world = crossings.world
        self.crossings = crossings
        self.slot = slot
        self.consumer = consumer
        self.time = ThreadedTime(world.time, host=f"lim{slot}", pid=300 + slot)
        self.client = world.client(self.time)
        cfg = world.config
        self.handlers = ThreadedHandlers(
            self,
            group=LIMITED,
            consumer=consumer,
            max_attempts=cfg.max_attempts,
            backoff=cfg.backoff,
            reclaim_idle_ms=SLOT_LEASE_MS,
            timeout_s=TIMEOUT_S,
            limits=[crossings.limit],
        )
        self.handlers.on()(self._handle)
        self.queued: deque[Delivery] = deque()
        self.threads: list[Thread] = []
        self.named = 0

    def enqueue(self, _fn: object, d: Delivery, _coros: object) -> None:
        self.queued.append(d)

    def _handle(self, o: Outcome) -> None:
        run = self.crossings.started(o, self.consumer)
        here = greenlet.getcurrent()
        assert here.parent is not None
        here.parent.switch()  # running, until the simulation lets it return or kills it
        run.ended = True

    def turn(self) -> None:
        """The reading loop's turn, then free threads start what it queued."""
        self.handlers.run_once(self.client)
        self.start_queued()

    def count_starts(self, waiting: Any) -> None:
        """Each start the runner lets through under the limit's rate, as it does (the
        rate's time is the store's)."""
        admit = waiting.admit
        crossings = self.crossings

        def counted(d: Delivery) -> float | None:
            wait: float | None = admit(d)
            if wait is None and crossings.limit.per_s is not None:
                crossings.rate_started(half(d.outcome))
            return wait

        waiting.admit = counted

    def start_queued(self) -> None:
        loop = self.handlers._stepped
        while loop is not None and self.queued and len(self.threads) < THREADS:
            d = self.queued.popleft()
            self.named += 1
            started = self.time.monotonic()
            g = greenlet.greenlet(partial(loop._run_sync, d, f"sim-{self.named}"))
            g.switch()
            if not g.dead:
                self.threads.append(Thread(g, self.crossings.runs[-1], d, started))

    def finish(self, pick: int) -> None:
        """One running handler returns (its runner settles it, unless it was released at
        its timeout), and a free thread takes the next queued."""
        if not self.threads:
            return
        t = self.threads.pop(pick % len(self.threads))
        d, loop = t.delivery, self.handlers._stepped
        key = (d.outcome.shard, d.entry_id, d.outcome.attempt)
        late = self.time.monotonic() - t.started > TIMEOUT_S
        released = loop is None or key in loop.abandoned
        held = late and not released and self._pending_here(d)
        t.g.switch()
        if held and not self._pending_here(d) and d.outcome.attempt < self.handlers.max_attempts:
            self.crossings.late_acked.append(
                f"{d.outcome.id} attempt {d.outcome.attempt} returned past its "
                f"{TIMEOUT_S:g}s timeout on {self.consumer}, unreleased, and was acknowledged "
                "(a handler past its timeout is retried, however late its reader's round)"
            )
        self.start_queued()

    def _pending_here(self, d: Delivery) -> bool:
        """Whether the delivery is still pending for this runner's consumer."""
        rows = self.crossings.world.raw.xpending_range(
            d.keys.outcomes, LIMITED, d.entry_id, d.entry_id, 1
        )
        return bool(rows) and rows[0]["consumer"].decode() == self.consumer

    def kill(self) -> None:
        """kill -9: its handlers stop where they are; nothing is settled or given back."""
        for t in self.threads:
            with contextlib.suppress(Killed):  # it ends the handler's thread, not ours
                t.g.throw(Killed(f"limited runner {self.consumer} killed"))
            t.run.ended = True
        self.threads.clear()
