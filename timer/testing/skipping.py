"""Time-skipping tests: tickwheel's real scripts, a real worker and real handler runners
in the test's own process, on a clock that moves only when the test says so.

A job timeout of an hour is tested in a fraction of a second::

    from timer.handlers import Handlers
    from timer.testing import TimeSkipping

    def test_a_job_that_never_reports_times_out_once():
        with TimeSkipping() as env:
            seen = []
            handlers = env.handle(Handlers(group="timeouts"))
            handlers.on("expired")(lambda o: seen.append(o.id))

            env.client.schedule("job:{42}", delay_ms=3_600_000)
            env.advance(3_599)
            assert seen == []
            env.advance(1)
            assert seen == ["job:{42}"]

:meth:`TimeSkipping.advance` moves the clock on, and everything that falls due on the
way happens at its own instant: the worker fires each timer at its deadline, and each
runner handles it, retries it after its backoff and dead-letters it after its last
attempt, as a real deployment would, but with no waiting. :meth:`run_until_idle` moves
on until nothing is left to do. The store is a
:class:`~timer.testing.store.FakeStore` (fakeredis running the real Lua, with its
clock); ``pip install '.[testing]'`` from the checkout. What it does not do, and what it refuses,
is in https://tickwheel.readthedocs.io/guides/testing/.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import math
import warnings
from collections.abc import Iterator
from types import TracebackType

from ..aio import AsyncTimerClient
from ..client import TimerClient
from ..clock import VirtualTime
from ..durable.model.durations import format_duration_ms, parse_duration_ms
from ..durable.model.models import DurabilityWarning
from ..errors import InvalidInput, TimerClosed, TimerError
from ..handlers import Handlers
from ..worker import Worker, WorkerSettings
from .driving import Driving
from .store import FakeStore

__all__ = ["NotIdle", "TimeSkipping"]

DAY_S = 86_400.0
# The worker's lease: renewed every third of it, so time may jump by that much between
# its turns without it losing its shards (it holds them alone, and a jump is a turn).
LEASE_MS = 24 * 3_600_000
HORIZON_MS = 1_800_000  # what it keeps in its wheel (under the coarse buckets' hour)
TURNS_AN_INSTANT = 1_000  # turns at one instant before it is taken for a loop


class NotIdle(TimerError):
    """``run_until_idle`` reached its limit with work still left (a timer that re-arms
    itself forever, a handler that asks to be retried forever)."""


class TimeSkipping:
    """An in-process tickwheel on virtual time: a store, a client (:attr:`client`), a
    worker, and the handler runners given to :meth:`handle`.

    ``start``: the wall clock's first reading (an aware datetime, default
    ``2026-01-01T00:00:00Z``). ``namespace`` and ``shards`` are the namespace's. Use it
    as a context manager (or call :meth:`close`). Not thread-safe: one test drives it.
    """

    def __init__(
        self,
        namespace: str = "test",
        *,
        shards: int = 4,
        start: dt.datetime | None = None,
        result_ttl_s: float = 24 * 3600,
    ) -> None:
        if start is not None and (not isinstance(start, dt.datetime) or start.tzinfo is None):
            raise InvalidInput(
                f"start must be an aware datetime (with its time zone), got {start!r}"
            )
        self.time = VirtualTime() if start is None else VirtualTime(start.timestamp())
        self.store = FakeStore(self.time)
        self._moving = False  # advance, run_until_idle or settle_now is running
        self._closed = False
        # the test's client waits as advance() moves time: `client.wait` fires what falls
        # due meanwhile (it moved the clock alone, and the timer stayed pending: trial 31)
        self.client: TimerClient = self.store.timer_client(
            namespace, result_ttl_s=result_ttl_s, time=Driving(self)
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DurabilityWarning)  # the store has no AOF
            self.client.init(shards=shards)
            self.worker = Worker(
                self.store.timer_client(namespace, result_ttl_s=result_ttl_s),
                WorkerSettings(
                    worker_id="time-skipping",
                    lease_ms=LEASE_MS,
                    horizon_ms=HORIZON_MS,
                    result_ttl_ms=round(result_ttl_s * 1000),
                ),
            )
        # it would warn that the store has no AOF (said in the docs), once a test
        worker_log = logging.getLogger("worker")
        level = worker_log.level
        worker_log.setLevel(logging.ERROR)
        try:
            self.worker.prepare()
        finally:
            worker_log.setLevel(level)
        self.namespace = namespace
        self._runners: list[Handlers] = []

    # -- what it runs ----------------------------------------------------------------------

    def handle(self, handlers: Handlers) -> Handlers:
        """Run ``handlers`` here (stepped, on this clock) from now on; returns them, so
        ``h = env.handle(Handlers(group="g"))`` then ``@h.on("expired")``."""
        self._open("handle()")
        if not isinstance(handlers, Handlers):
            raise InvalidInput(f"handle() takes a Handlers, got {handlers!r}")

        if any(
            h.group == handlers.group and h.consumer == handlers.consumer for h in self._runners
        ):
            raise InvalidInput(
                f"a runner of group {handlers.group!r} named {handlers.consumer!r} runs already"
            )
        self._runners.append(handlers)
        return handlers

    # -- the clock -------------------------------------------------------------------------

    @property
    def now(self) -> dt.datetime:
        """The virtual wall clock (UTC), as the store's ``TIME`` reads it."""
        return dt.datetime.fromtimestamp(self.time.wall(), dt.UTC)

    @property
    def now_ms(self) -> int:
        return self.time.wall_ms()

    def advance(self, seconds: float | dt.timedelta | str) -> None:
        """Move the clock on by ``seconds``: a number of seconds, a timedelta, or a
        duration written as the library's others are (``"90s"``, ``"1h30m"``, ``"2d"``).
        Every timer falling due on the way fires at its deadline and is handled then
        (retries after their backoff, likewise)."""
        with self._turn("advance()"):
            end = self.time.wall_ms() + round(_seconds("advance()", seconds) * 1000)
            while True:
                self._settle()
                now = self.time.wall_ms()
                if now >= end:
                    return
                self.time.advance((min(end, self._next_event_ms(now)) - now) / 1000)

    def run_until_idle(self, *, limit: float | dt.timedelta | str = 366 * DAY_S) -> float:
        """Move the clock on until no timer is pending and every outcome a runner here
        reads is handled or dead-lettered; returns the seconds that passed. NotIdle if
        that is not so within ``limit``; ``limit`` is taken as :meth:`advance` takes its
        duration. An active schedule with no end is never idle: NotIdle at once, naming
        it (it ran up to the limit, a year of occurrences)."""
        with self._turn("run_until_idle()"):
            s = _seconds("run_until_idle()'s limit", limit)
            forever = [
                f"{i.name!r} ({i.spec.describe()})"
                for i in self.client.schedules.list()
                if i.state == "active" and i.spec.recurrence.end_ms is None
            ]
            if forever:
                raise NotIdle(
                    f"run_until_idle() would never end: schedule {', '.join(forever)} is "
                    "active with no end; advance() by the time the test needs, or pause "
                    "it (client.schedules.pause) first"
                )
            began = self.time.wall_ms()
            end = began + round(s * 1000)
            while True:
                self._settle()
                now = self.time.wall_ms()
                if self._idle():
                    return (now - began) / 1000
                if now >= end:
                    waited = format_duration_ms(round(s * 1000))
                    raise NotIdle(f"still busy after {waited}: {self._busy()}")
                self.time.advance((min(end, self._next_event_ms(now)) - now) / 1000)

    def settle_now(self) -> None:
        """Without moving the clock: let the worker and every runner take turns until
        none has anything left to do at this instant."""
        with self._turn("settle_now()"):
            self._settle()

    def _settle(self) -> None:
        for _ in range(TURNS_AN_INSTANT):
            before = self._progress()
            self.worker.run_once()
            for handlers in self._runners:
                handlers.run_once(self.client)
            if self._progress() == before:
                return
        raise NotIdle(f"still busy after {TURNS_AN_INSTANT} turns at one instant")

    @contextlib.contextmanager
    def _turn(self, what: str) -> Iterator[None]:
        """One of the calls that move time, refused while another runs: from a handler
        (which runs inside it) it nested the handlers and moved the clock past what the
        test asked for (trial 31)."""
        self._open(what)
        if self._moving:
            raise InvalidInput(
                f"{what} from inside a handler: the handlers run inside advance(), which "
                "is moving the clock already; a handler lets its own time pass with "
                "env.time.sleep(seconds)"
            )
        self._moving = True
        try:
            yield
        finally:
            self._moving = False

    def _open(self, what: str) -> None:
        if self._closed:
            raise TimerClosed(
                f"{what} of a TimeSkipping that was closed (its with-block ended): make "
                "another for this test"
            )

    # -- asyncio ---------------------------------------------------------------------------

    async def aclient(self) -> AsyncTimerClient:
        """An :class:`~timer.aio.AsyncTimerClient` of the namespace on this clock (close it
        with ``await c.aclose()``); its waits move time as :attr:`client`'s do."""
        self._open("aclient()")
        return await self.store.async_timer_client(self.namespace, time=Driving(self))

    async def aadvance(self, seconds: float | dt.timedelta | str) -> None:
        """:meth:`advance` from a coroutine. The worker and runners take their turns on a
        thread of their own (an ``async def`` handler runs on a loop of its runner's,
        not on the test's)."""
        await asyncio.to_thread(self.advance, seconds)

    async def arun_until_idle(self, *, limit: float | dt.timedelta | str = 366 * DAY_S) -> float:
        """:meth:`run_until_idle` from a coroutine (as :meth:`aadvance`)."""
        return await asyncio.to_thread(self.run_until_idle, limit=limit)

    # -- the end ---------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for handlers in self._runners:
            handlers.close()
        self.worker.events.stop()
        self.client.redis.close()
        self.worker.client.redis.close()
        self.store.server.connected = False  # a client kept past the end writes nothing

    def __enter__(self) -> TimeSkipping:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- what is left ------------------------------------------------------------------------

    def _progress(self) -> tuple[int, ...]:
        """Counters that move when anything happens: fires, handler starts and ends."""
        w = self.worker.stats
        counts: list[int] = [w.fired, w.swept, w.cascaded, w.leases_acquired]
        for h in self._runners:
            s = h.stats
            counts += [
                s.handled,
                s.failed,
                s.retried,
                s.dead_lettered,
                s.skipped,
                s.later,
                s.claimed,
            ]
        return tuple(counts)

    def _next_event_ms(self, now: int) -> int:
        """The next instant anything is due: a timer's deadline (those in the worker's
        wheel, and the first bucket of those beyond it), a retry's time, or the worker's
        next lease renewal."""
        soonest = now + LEASE_MS // 3
        raw = self.client.redis
        for shard, state in list(self.worker.shards.items()):
            for task in state.tasks.values():
                soonest = min(soonest, task.deadline_ms)
            sk = self.client.keys.shard(shard)
            first = raw.zrangebyscore(sk.buckets, now + 1, "+inf", start=0, num=1, withscores=True)
            if first:
                soonest = min(soonest, int(first[0][1]))
            coarse = raw.zrange(sk.coarse_buckets, 0, 0, withscores=True)
            if coarse:  # the sweep moves it into fine buckets an hour ahead of its hour
                ahead = int(coarse[0][1]) - 3_600_000
                sweep = now + self.worker.settings.sweep_interval_ms
                soonest = min(soonest, ahead if ahead > now else sweep)
            for handlers in self._runners:
                due = raw.zrange(sk.retries(handlers.group), 0, 0, withscores=True)
                if due:
                    soonest = min(soonest, int(due[0][1]))
        for handlers in self._runners:
            rate = handlers.waiting_until()  # an outcome waiting for its key's rate
            if rate is not None:
                soonest = min(soonest, now + math.ceil((rate - self.time.monotonic()) * 1000))
        return max(now + 1, soonest)

    def _idle(self) -> bool:
        return not self._busy()

    def _busy(self) -> str:
        raw = self.client.redis
        pending = sum(raw.hlen(self.client.keys.shard(s).timers) for s in self._shards())
        if pending:
            return f"{pending} timer{'s' * (pending != 1)} pending"
        for handlers in self._runners:
            for s in self._shards():
                sk = self.client.keys.shard(s)
                if raw.zcard(sk.retries(handlers.group)):
                    return f"retries waiting in group {handlers.group!r}"
                if raw.exists(sk.outcomes):
                    groups = {g["name"].decode(): g for g in raw.xinfo_groups(sk.outcomes)}
                    g = groups.get(handlers.group)
                    if g is not None and (g["pending"] or g.get("lag")):
                        return f"outcomes not yet handled in group {handlers.group!r}"
        return ""

    def _shards(self) -> range:
        return range(self.client.meta.shards)


def _seconds(what: str, value: object) -> float:
    """A duration given as seconds or a timedelta, from 0 to 100 years, or as text the
    way the library writes durations (``"90s"``, ``"1h30m"``, at most ten years); else
    InvalidInput."""
    if isinstance(value, str):
        try:
            return parse_duration_ms(value) / 1000
        except ValueError as exc:
            raise InvalidInput(f"{what}: {exc}") from None
    s = value.total_seconds() if isinstance(value, dt.timedelta) else value
    if isinstance(s, bool) or not isinstance(s, int | float) or not 0 <= s <= 100 * 365 * DAY_S:
        raise InvalidInput(
            f"{what} takes seconds (a number from 0 to 100 years' worth), a timedelta or "
            f'a duration such as "1h30m", got {_python(value)}'
        )
    return float(s)


def _python(value: object) -> str:
    """A value in a refusal as Python writes it (the kit is Python's: ``None``, ``nan``,
    ``-1 day, 23:59:55``, not JSON's ``null`` and ``NaN``), cut to 80 characters."""
    text = str(value) if isinstance(value, dt.timedelta) else repr(value)
    return text if len(text) <= 80 else text[:79] + "…"
