"""The steps an operation asks its I/O layer to take, and what runs an operation.

An operation (:data:`Op`) is a generator: it yields steps — a :class:`ScriptCall`, a
plain redis-py :class:`Command`, a :class:`Pipeline` of either, a :class:`Sleep`, an
:class:`Emit` of a value to its caller, a :class:`Send` ahead and its :class:`Collect`,
a question (:class:`Waits`, :class:`Clock`) —
and gets each reply back (a call that failed raises its TimerError at the ``yield``, so
an operation can answer it: refuse with a clearer error, take back what it wrote); it
returns its result. A driver (the sync client's
``timer.client.driver``, the asyncio client's) does the I/O; the builders of
:mod:`timer.durable.timers.calls` and the operations of :mod:`timer.durable.timers.ops` never do.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from ...errors import TimerError
from .scripts import ScriptName


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """One run of a Lua script: its name, KEYS and ARGV; ``wait`` False for a call that
    writes no timer (a read, a namespace's creation): a client that waits for
    durability does not wait on it."""

    script: ScriptName
    keys: list[str]
    args: list[Any]
    wait: bool = True


@dataclass(frozen=True, slots=True)
class Command:
    """One plain command, named as redis-py's method (``hget``, ``xreadgroup``…).

    With ``every_primary`` it runs on each primary of a Redis Cluster (one server
    otherwise) and the reply is a ``{node name: reply}`` mapping. With ``confirmed``,
    a client that waits for durability gets the reply only once the server has made
    what it read that durable (the wait after it, on its connection): an outcome read
    from a master about to be replaced is not handed to a handler (XREADGROUP). On a
    Redis Cluster a confirmed command names its ``key``: the read and the wait go to
    that key's master, on one connection.
    """

    name: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    every_primary: bool = False
    confirmed: bool = False
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Calls sent together (per node on a cluster); the replies come back in order.

    All of one kind: every call a ScriptCall or every call a Command. With
    ``errors_in_slots`` a failed call's slot holds its TimerError instead of raising.
    """

    calls: Sequence[ScriptCall] | Sequence[Command]
    errors_in_slots: bool = False


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait this long before the next step (polling with backoff). With ``at_most``, a
    poll for what changes only when something else happens: the driver's clock may let
    up to that long pass at once (:meth:`timer.clock.Time.poll`)."""

    seconds: float
    at_most: float | None = None


@dataclass(frozen=True, slots=True)
class Emit:
    """Hand a value to the caller of a streaming operation (an outcome read)."""

    value: Any


@dataclass(frozen=True, slots=True)
class Send:
    """Start ``pipeline`` and go on before its replies are read; the reply to this step
    is a ticket for :class:`Collect`. A driver that can send ahead (the blocking client
    on one server) writes the calls and returns at once, so the server runs them while
    the operation prepares its next batch; any other driver runs the pipeline here."""

    pipeline: Pipeline


@dataclass(frozen=True, slots=True)
class Collect:
    """The replies of a :class:`Send`'s pipeline (as ``Pipeline``'s reply), by its ticket.
    Tickets are collected in the order they were sent."""

    ticket: Any


@dataclass(frozen=True, slots=True)
class Waits:
    """Ask whether the client waits for durability (its reply: True or False), for an
    operation that writes differently when its writes are waited on (acknowledgements:
    a plain XACK otherwise, a script the wait can always cover when they are)."""


@dataclass(frozen=True, slots=True)
class Clock:
    """Ask for the time the client was given (its reply: a :class:`timer.clock.Time`), for
    an operation that keeps a deadline or stamps what it read: an operation never reads
    the system's clock, so a simulation or a test drives it (a :class:`Sleep` on virtual
    time moves that clock)."""


Step = ScriptCall | Command | Pipeline | Sleep | Emit | Send | Collect | Waits | Clock
T = TypeVar("T")
Op = Generator[Step, Any, T]  # an operation: yields steps, gets replies, returns a T


class Run(Protocol):
    """Runs an operation to its result: a client's driver (``TimerClient._run``); what
    the facades over one client (``ShardStore``, ``Schedules``, ``Timers``, ...) hold."""

    def __call__(self, op: Op[T], /) -> T: ...


def error_or(reply: Any) -> Any:
    """A pipelined reply, raising the TimerError an ``errors_in_slots`` pipeline put there."""
    if isinstance(reply, TimerError):
        raise reply
    return reply


def server_time_ms() -> Op[int]:
    """The Redis server's clock, epoch ms: the one clock deadlines are computed on."""
    return (yield from server_time_us()) // 1000


def server_time_us() -> Op[int]:
    """The Redis server's clock, epoch microseconds (TIME's own resolution)."""
    secs, micros = yield Command("time")
    return int(secs) * 1_000_000 + int(micros)
