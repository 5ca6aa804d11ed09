"""What the client returns: plain frozen dataclasses."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

OUTCOMES = ("expired", "completed", "cancelled")


@dataclass(frozen=True)
class Timer:
    """A scheduled timer. ``created`` is False when the id already existed (idempotent retry);
    ``state`` is ``pending`` or, for an id whose outcome is retained, that outcome."""

    id: str
    shard: int
    deadline_ms: int
    state: str = "pending"
    created: bool = True
    origin: str = ""  # the token it was created under (schedule_many(..., origin=...))


@dataclass(frozen=True)
class TimerInfo:
    id: str
    shard: int
    state: str  # pending | expired | completed | cancelled
    deadline_ms: int
    payload: Any
    created_ms: int | None = None
    decided_ms: int | None = None
    watch: tuple[str, ...] = ()
    need: int = 1
    got: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """How a timer ended. From ``outcomes()`` it carries the stream entry to ``ack()``."""

    id: str
    outcome: str
    deadline_ms: int
    decided_ms: int
    payload: Any
    shard: int
    entry_id: str | None = None
    _ack: Callable[[], None] | None = field(default=None, repr=False, compare=False)
    _aack: Callable[[], Awaitable[None]] | None = field(default=None, repr=False, compare=False)

    @property
    def lateness_ms(self) -> int:
        """decided - deadline (negative for a timer completed or cancelled before its deadline)."""
        return self.decided_ms - self.deadline_ms

    def ack(self) -> None:
        """Acknowledge the outcome in its consumer group (handled; never delivered again)."""
        if self._aack is not None:
            raise TypeError("this outcome came from AsyncTimerClient.outcomes: await o.aack()")
        if self._ack is not None:
            self._ack()

    async def aack(self) -> None:
        """``ack`` for an outcome read with ``AsyncTimerClient.outcomes``."""
        if self._ack is not None:
            raise TypeError("this outcome came from TimerClient.outcomes: call o.ack()")
        if self._aack is not None:
            await self._aack()


@dataclass(frozen=True)
class Trimmed:
    """What ``trim_outcomes`` did to one shard's outcome stream."""

    shard: int
    removed: int
    held_by_group: bool  # a consumer group still owed entries the retention would drop
