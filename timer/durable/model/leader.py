"""What a shard's leader gets back from its scripts: the lease's grant and renewal, the
fire and sweep results (with the timers fired in a trace), the due timers it loads, and
the events it follows. Plain values, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(frozen=True)
class LeaseGrant:
    """``lease_acquire``: acquired at ``epoch``, or held by ``holder`` for ``pttl_ms`` more."""

    acquired: bool
    epoch: int
    holder: str | None
    pttl_ms: int
    now_ms: int  # Redis TIME when the script ran: the worker measures its clock offset
    handover: bool = False  # the lease before was given back, not left to expire


@dataclass(frozen=True)
class LeaseRenewal:
    renewed: bool  # False: lost (expired, taken over, another epoch): drop the shard
    now_ms: int


class Traced(NamedTuple):
    """A timer fired with a trace context: what the leader records as its fire span."""

    id: str
    traceparent: str
    decided_ms: int


@dataclass(frozen=True)
class FireResult:
    """``fire``: ids expired by this call; ids Redis time says are early, with deadlines."""

    fired: list[str]
    early: dict[str, int]
    armed: dict[str, int] = field(default_factory=dict)  # next occurrences armed: id -> deadline
    queued: int = 0  # schedules left for the leader to plan (see worker/planning.py)
    traced: list[Traced] = field(default_factory=list)  # fired with a trace context
    now_ms: int | None = None  # Redis time when the call ran (an early one's clock check)
    # New entries read for the caller's own consumer in the same step (fire_call's hand):
    # (entry id, fields)
    handed: list[tuple[str, dict[bytes, bytes]]] = field(default_factory=list)


@dataclass(frozen=True)
class SweepResult:
    """``sweep``: (id, deadline_ms) expired by this call; ``more`` if ended buckets remain;
    ``moved``: far timers it moved from coarse buckets into the fine ones."""

    fired: list[tuple[str, int]]
    more: bool
    moved: int = 0
    queued: int = 0  # schedules whose armed occurrence it expired: the leader plans them
    held: dict[str, int] = field(default_factory=dict)  # buffered occurrences, moved later
    traced: list[Traced] = field(default_factory=list)  # fired with a trace context


@dataclass(frozen=True)
class DueTimers:
    """``read_due``: the bucket numbers read whole, and their timers oldest first."""

    buckets: list[int]
    timers: list[tuple[int, str]]  # (deadline_ms, id)
    priorities: dict[str, int] = field(default_factory=dict)  # those not 0


@dataclass(frozen=True)
class Event:
    """One message of a shard's events channel (what the leader follows).

    ``kind`` is ``scheduled``, ``rescheduled`` (with ``deadline_ms``), ``decided``
    (with ``outcome``) or ``prioritized`` (with ``priority``: a timer just scheduled
    has one, after the event that scheduled it).
    """

    kind: str
    timer_id: str
    deadline_ms: int | None = None
    outcome: str | None = None
    priority: int = 0
