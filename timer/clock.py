"""The time a process is given: every read of the clock, every sleep, every blocking wait
and every thread a tickwheel process starts goes through one :class:`Time`.

Real processes get :data:`SYSTEM_TIME` (the operating system's clocks, threads and
waits: what they always did). A simulation and a user's test give a :class:`VirtualTime`
instead, whose clocks move only when it is told to (or when something sleeps on it), so a
one-hour job timeout is tested in a fraction of a second and a run replays exactly; a
:class:`SkewedTime` over it gives one worker a clock that is off, or runs fast or slow,
against the others'.

Two clocks, as the operating system has: ``wall`` (epoch time, which can step) and
``monotonic`` (never steps back). Deadlines and expiry are decided on the Redis server's
clock, never on either: a process's clocks only decide *when to try*. The identity a
process writes into Redis (its host and pid) comes from here too, so a simulation's
keyspace is the same from run to run.

A test of the suite fails on a direct ``time.time()``, ``time.monotonic()``,
``time.sleep()`` or ``threading.Thread`` outside the few modules allowed to have them.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["SYSTEM_TIME", "Killed", "SkewedTime", "SystemTime", "Time", "VirtualTime"]


class Killed(BaseException):
    """Raised by a simulation or a test, in a stepped process, to end it at once as
    ``kill -9`` would: nothing it holds is settled, released or written after it (a
    handler runner does not acknowledge, retry or leave its group). Never caught as a
    handler's failure."""


class Time:
    """Where a process reads the time, sleeps, waits and starts its threads.

    The base class is the system's (:data:`SYSTEM_TIME`); subclasses replace what they
    virtualise. Thread-safe."""

    __slots__ = ()

    # --- clocks -------------------------------------------------------------------------
    def wall(self) -> float:
        """Seconds since the epoch (``time.time()``); may step."""
        return time.time()

    def wall_ms(self) -> int:
        """Whole milliseconds since the epoch."""
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        """Seconds on a clock that never steps back (``time.monotonic()``)."""
        return time.monotonic()

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()

    def monotonic_ms(self) -> float:
        return self.monotonic_ns() / 1_000_000

    # --- waiting ------------------------------------------------------------------------
    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` pass (no less)."""
        if seconds > 0:
            time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        """``asyncio.sleep``: let ``seconds`` pass without blocking the event loop."""
        await asyncio.sleep(max(0.0, seconds))

    def poll(self, seconds: float, at_most: float) -> None:
        """Before polling again for what changes only when something else happens (a
        timer decided: it fires at its deadline, or a call decides it): let ``seconds``
        pass. A clock that knows when the next thing happens (the time-skipping kit's)
        may let up to ``at_most`` pass at once, so a long wait is a few polls, not one
        every ``seconds``. ``at_most`` no more than ``seconds``: a plain sleep."""
        self.sleep(seconds)

    async def apoll(self, seconds: float, at_most: float) -> None:
        """:meth:`poll` without blocking the event loop."""
        await self.asleep(seconds)

    def wait(self, event: threading.Event, timeout: float | None = None) -> bool:
        """``event.wait(timeout)``: True once the event is set, False if the time ran out."""
        return event.wait(timeout)

    def wait_on(self, cond: threading.Condition, timeout: float | None = None) -> bool:
        """``cond.wait(timeout)`` (the caller holds ``cond``)."""
        return cond.wait(timeout)

    # --- threads ------------------------------------------------------------------------
    def thread(
        self,
        target: Callable[..., object],
        *,
        name: str,
        daemon: bool = True,
        args: tuple[Any, ...] = (),
    ) -> threading.Thread:
        """A thread (not started) that runs ``target(*args)``."""
        return threading.Thread(target=target, name=name, daemon=daemon, args=args)

    # --- identity -----------------------------------------------------------------------
    def host(self) -> str:
        """The host name a process writes into Redis (a worker's card)."""
        return socket.gethostname()

    def pid(self) -> int:
        return os.getpid()

    @property
    def virtual(self) -> bool:
        """True when this clock moves only when told (a simulation, a test)."""
        return False


class SystemTime(Time):
    """The operating system's clocks, sleeps, waits and threads."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "SYSTEM_TIME"


SYSTEM_TIME: Time = SystemTime()


class VirtualTime(Time):
    """Clocks that move only when told to: ``advance(seconds)``, ``advance_to(wall)``, or
    a ``sleep``, which moves them by the time slept at once (time-skipping).

    Single-threaded by design: a simulation or a test steps each process in turn, so
    nothing runs while another waits. A ``wait`` on an event that is not set moves the
    clock by its whole timeout and returns False (nothing else could have set it
    meanwhile); a wait with no timeout would never end and raises instead. Starting a
    thread raises: a stepped process has no threads of its own.

    ``start_wall``: the wall clock's reading at the start (default
    ``2026-01-01T00:00:00Z``, a fixed instant so runs compare); the monotonic clock
    starts at ``start_monotonic``.
    One process's clock that is off or drifts: a :class:`SkewedTime` over this one.
    """

    __slots__ = ("_lock", "_mono_ns", "_wall_ns", "host_name", "pid_no")

    DEFAULT_START_WALL = 1_767_225_600.0  # 2026-01-01T00:00:00Z

    def __init__(
        self,
        start_wall: float = DEFAULT_START_WALL,
        *,
        start_monotonic: float = 1_000.0,
        host: str = "sim",
        pid: int = 1,
    ) -> None:
        self._wall_ns = round(start_wall * 1e9)
        self._mono_ns = round(start_monotonic * 1e9)
        self._lock = threading.Lock()
        self.host_name = host
        self.pid_no = pid

    def __repr__(self) -> str:
        return f"VirtualTime(wall={self.wall():.3f})"

    @property
    def virtual(self) -> bool:
        return True

    def wall(self) -> float:
        return self._wall_ns / 1e9

    def wall_ms(self) -> int:
        return self._wall_ns // 1_000_000

    def monotonic(self) -> float:
        return self._mono_ns / 1e9

    def monotonic_ns(self) -> int:
        return self._mono_ns

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds`` (>= 0)."""
        if not seconds >= 0:  # also NaN
            raise ValueError(f"time moves forward: advance by >= 0 s, got {seconds!r}")
        ns = round(seconds * 1e9)
        with self._lock:
            self._wall_ns += ns
            self._mono_ns += ns

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)
        await asyncio.sleep(0)  # the other tasks of the loop still take their turn

    def wait(self, event: threading.Event, timeout: float | None = None) -> bool:
        if event.is_set():
            return True
        if timeout is None:
            raise RuntimeError(
                "a wait with no timeout on virtual time would never end: nothing runs "
                "while a stepped process waits"
            )
        self.sleep(timeout)
        return event.is_set()

    def wait_on(self, cond: threading.Condition, timeout: float | None = None) -> bool:
        if timeout is None:
            raise RuntimeError("a wait with no timeout on virtual time would never end")
        self.sleep(timeout)
        return False

    def thread(
        self,
        target: Callable[..., object],
        *,
        name: str,
        daemon: bool = True,
        args: tuple[Any, ...] = (),
    ) -> threading.Thread:
        raise RuntimeError(
            f"a process on virtual time is stepped, not threaded (it asked for thread {name!r})"
        )

    def host(self) -> str:
        return self.host_name

    def pid(self) -> int:
        return self.pid_no


class SkewedTime(Time):
    """Another process's view of a :class:`VirtualTime`: its wall clock ``offset``
    seconds off and both its clocks running at ``rate`` times the base's speed, so a
    simulation can give one worker a clock that is wrong or drifts (:meth:`retune`
    changes it later). Sleeping and waiting move the base by the base's time that passes
    meanwhile."""

    __slots__ = (
        "_base",
        "_from_base_ns",
        "_from_mono_ns",
        "_from_wall_ns",
        "host_name",
        "pid_no",
        "rate",
    )

    def __init__(
        self,
        base: VirtualTime,
        *,
        offset: float = 0.0,
        rate: float = 1.0,
        host: str = "sim",
        pid: int = 1,
    ) -> None:
        self._base = base
        self.rate = _rate(rate)
        self._from_base_ns = base.monotonic_ns()  # the base's reading at the anchor
        self._from_mono_ns = base.monotonic_ns()  # this clock's readings at the anchor
        self._from_wall_ns = round((base.wall() + offset) * 1e9)
        self.host_name = host
        self.pid_no = pid

    @property
    def virtual(self) -> bool:
        return True

    @property
    def base(self) -> VirtualTime:
        return self._base

    def retune(
        self, *, step_wall: float = 0.0, skip_monotonic: float = 0.0, rate: float | None = None
    ) -> None:
        """From now on: the wall clock stepped by ``step_wall`` s (either way, as an NTP
        correction steps it), the monotonic clock moved ``skip_monotonic`` s forward (a
        VM paused and resumed; never back), and the rate ``rate`` if given."""
        if not skip_monotonic >= 0:
            raise ValueError(f"a monotonic clock never steps back, got {skip_monotonic!r}")
        wall, mono = self.wall_ns(), self.monotonic_ns()
        self._from_base_ns = self._base.monotonic_ns()
        self._from_wall_ns = wall + round(step_wall * 1e9)
        self._from_mono_ns = mono + round(skip_monotonic * 1e9)
        if rate is not None:
            self.rate = _rate(rate)

    def _elapsed_ns(self) -> int:
        return int((self._base.monotonic_ns() - self._from_base_ns) * self.rate)

    def wall_ns(self) -> int:
        return self._from_wall_ns + self._elapsed_ns()

    def wall(self) -> float:
        return self.wall_ns() / 1e9

    def wall_ms(self) -> int:
        return self.wall_ns() // 1_000_000

    def monotonic(self) -> float:
        return self.monotonic_ns() / 1e9

    def monotonic_ns(self) -> int:
        return self._from_mono_ns + self._elapsed_ns()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._base.sleep(seconds / self.rate)

    async def asleep(self, seconds: float) -> None:
        await self._base.asleep(max(0.0, seconds) / self.rate)

    def wait(self, event: threading.Event, timeout: float | None = None) -> bool:
        return self._base.wait(event, None if timeout is None else timeout / self.rate)

    def wait_on(self, cond: threading.Condition, timeout: float | None = None) -> bool:
        return self._base.wait_on(cond, None if timeout is None else timeout / self.rate)

    def thread(
        self,
        target: Callable[..., object],
        *,
        name: str,
        daemon: bool = True,
        args: tuple[Any, ...] = (),
    ) -> threading.Thread:
        return self._base.thread(target, name=name, daemon=daemon, args=args)

    def host(self) -> str:
        return self.host_name

    def pid(self) -> int:
        return self.pid_no


def _rate(rate: float) -> float:
    if not 0 < rate < 1e6:
        raise ValueError(f"a clock's rate is > 0, got {rate!r}")
    return float(rate)
