"""The clock of a time-skipping env's clients: the env's for every reading, but their
sleeps and waits move the env's time (:class:`~timer.testing.TimeSkipping`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, Protocol

from ..clock import Time, VirtualTime


class Env(Protocol):
    """What a :class:`Driving` clock needs of its :class:`~timer.testing.TimeSkipping`
    (named so, not imported: the env imports this module)."""

    time: VirtualTime
    _moving: bool
    _closed: bool

    def advance(self, seconds: float) -> None: ...

    def settle_now(self) -> None: ...

    def _next_event_ms(self, now: int) -> int: ...


class Driving(Time):
    """The clock of a test's clients: the env's for every reading, but a sleep or a wait
    of theirs (``client.wait`` polling for a decision, a call's backoff) moves time as
    :meth:`~timer.testing.TimeSkipping.advance` does, so what falls due meanwhile fires
    and is handled. Inside a turn (a handler's own call) it moves the clock alone, as
    ``env.time.sleep`` does."""

    __slots__ = ("env",)

    def __init__(self, env: Env) -> None:
        self.env = env

    def wall(self) -> float:
        return self.env.time.wall()

    def wall_ms(self) -> int:
        return self.env.time.wall_ms()

    def monotonic(self) -> float:
        return self.env.time.monotonic()

    def monotonic_ns(self) -> int:
        return self.env.time.monotonic_ns()

    def _alone(self) -> bool:
        """Inside a turn (a handler's call) or once the env is closed: the clock moves
        alone, and nothing else runs."""
        return self.env._moving or self.env._closed

    def sleep(self, seconds: float) -> None:
        if not seconds > 0:
            return
        if self._alone():
            self.env.time.sleep(seconds)
        else:
            self.env.advance(seconds)

    async def asleep(self, seconds: float) -> None:
        await asyncio.to_thread(self.sleep, seconds)  # the turns run off the test's loop

    def poll(self, seconds: float, at_most: float) -> None:
        """A poll for what only a firing or a call changes (``client.wait``): straight
        to the next instant anything is due, if that is sooner than ``at_most`` from
        now, and at least ``seconds`` on. A wait of an hour polled every 100 ms of
        virtual time, each poll a turn of the worker and the runners: 36,000 turns, a
        minute of real time (trial 33); it is a few now."""
        if self._alone() or not at_most > seconds:
            self.sleep(seconds)
            return
        self.env.settle_now()  # what is due at this instant first: it may decide it
        now = self.env.time.wall_ms()
        nxt = (self.env._next_event_ms(now) - now) / 1000
        self.sleep(max(seconds, min(at_most, nxt)))

    async def apoll(self, seconds: float, at_most: float) -> None:
        await asyncio.to_thread(self.poll, seconds, at_most)

    def wait(self, event: threading.Event, timeout: float | None = None) -> bool:
        if event.is_set() or timeout is None:
            return self.env.time.wait(event, timeout)  # set; or no end: refused there
        self.sleep(timeout)
        return event.is_set()

    def wait_on(self, cond: threading.Condition, timeout: float | None = None) -> bool:
        return self.env.time.wait_on(cond, timeout)

    def thread(
        self,
        target: Callable[..., object],
        *,
        name: str,
        daemon: bool = True,
        args: tuple[Any, ...] = (),
    ) -> threading.Thread:
        return self.env.time.thread(target, name=name, daemon=daemon, args=args)

    def host(self) -> str:
        return self.env.time.host()

    def pid(self) -> int:
        return self.env.time.pid()

    @property
    def virtual(self) -> bool:
        return True
