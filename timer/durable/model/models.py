"""The durable layer's values: what the clients return and what the worker reads.

Plain frozen dataclasses with no I/O. ``Timer``, ``TimerInfo``, ``Outcome`` and
``Trimmed`` are the public results (re-exported by ``timer``); ``Meta`` and
``ClientSettings`` configure the call builders. What a shard's leader gets back from
its scripts (the lease, fire and sweep results, its events) is in ``leader.py``.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from ...errors import ConfigError, InvalidInput, quoted
from .checks import check_int, check_seconds
from .codec import DEFAULT_MAX_PAYLOAD, MAX_PAYLOAD_LIMIT
from .durations import TEN_YEARS_DAYS, TEN_YEARS_MS, ms_text

# What a shard's leader gets back is in leader.py; imported from here too, as it was.
from .leader import DueTimers as DueTimers  # noqa: PLC0414
from .leader import Event as Event  # noqa: PLC0414
from .leader import FireResult as FireResult  # noqa: PLC0414
from .leader import LeaseGrant as LeaseGrant  # noqa: PLC0414
from .leader import LeaseRenewal as LeaseRenewal  # noqa: PLC0414
from .leader import SweepResult as SweepResult  # noqa: PLC0414
from .leader import Traced as Traced  # noqa: PLC0414

OUTCOMES = ("expired", "completed", "cancelled")
# What a reader without a consumer group shows for an entry it cannot decode (its
# ``error`` says why); a consumer group dead-letters such an entry instead.
UNDECODABLE = "undecodable"
MAX_DELAY_MS = TEN_YEARS_MS
# Width of a coarse bucket: far timers wait in one per hour, not one per
# fine bucket, until the sweep moves them an hour ahead (COARSE_MS in lua/include/keys.lua).
COARSE_MS = 3_600_000


@dataclass(frozen=True)
class Meta:
    """A namespace's fixed shape, chosen once at ``init``, and its data format.

    ``version`` is the record format the namespace's timers are created in: 1 for
    namespaces made before the compact records (a map per record), 2 for the compact
    ones (``tickwheel migrate`` moves a namespace from 1 to 2). Every version is read.
    """

    shards: int
    bucket_ms: int
    version: int = 1


class DurabilityWarning(UserWarning):
    """The server keeps timers less safely than it could (AOF off, an evicting policy),
    or a durability asked for could not be checked."""


@dataclass(frozen=True)
class Durability:
    """When a write counts as done. Parse one with :meth:`parse`:

    ``none``            the master applied it (and its AOF per ``appendfsync``)
    ``aof``             the master fsynced it to its AOF (``WAITAOF 1 0``): survives a
                        crash or power loss of the master's host, not the loss of its disk.
                        Needs ``appendfsync always`` (under ``everysec`` a server answers
                        WAITAOF before its fsync): checked before the first write, a
                        ConfigError otherwise
    ``replicas:N``      N replicas have it (``WAIT N``): survives the master's failure if
                        one of them is promoted (Sentinel, Cluster failover)
    ``aof+replicas:N``  both (``WAITAOF 1 N``: N replicas fsynced it too)

    A write not confirmed within ``timeout_ms`` raises :class:`~timer.errors.NotDurable`
    (it was applied on the master; it may be lost if the master fails now).
    """

    replicas: int = 0
    aof: bool = False
    timeout_ms: int = 1000

    @classmethod
    def parse(cls, text: str, timeout_ms: int = 1000) -> Durability:
        parts = [p.strip() for p in text.strip().lower().split("+") if p.strip()]
        replicas, aof = 0, False
        for part in parts:
            if part == "none":
                continue
            if part == "aof":
                aof = True
            elif part.startswith("replicas:") and part[len("replicas:") :].isdigit():
                replicas = int(part[len("replicas:") :])
            else:
                raise InvalidInput(
                    f"durability {quoted(text)} is not one of none, aof, replicas:N, aof+replicas:N"
                )
        check_int("durability timeout (ms)", timeout_ms, 1)
        return cls(replicas, aof, timeout_ms)

    @property
    def waits(self) -> bool:
        return self.aof or self.replicas > 0

    def command(self) -> tuple[str | int, ...]:
        """The command sent after the writes, on their connection."""
        if self.aof:
            return ("WAITAOF", 1, self.replicas, self.timeout_ms)
        return ("WAIT", self.replicas, self.timeout_ms)

    def shortfall(self, reply: Any) -> str | None:
        """What the wait's reply lacks, or None when the writes are durable as asked."""
        local, replicas = (int(reply[0]), int(reply[1])) if self.aof else (0, int(reply))
        missing = []
        if self.aof and local < 1:
            missing.append("the master's AOF fsync")
        if replicas < self.replicas:
            missing.append(f"{self.replicas} replica(s) (only {replicas} confirmed)")
        if not missing:
            return None
        return (
            f"written on the master but not confirmed by {' and '.join(missing)} within "
            f"{self.timeout_ms} ms; it may be lost if the master fails now"
        )

    def refused(self, message: str) -> ConfigError:
        """The error for a server that refused the wait itself (no WAITAOF before 7.2)."""
        return ConfigError(
            f"durability {self} cannot be had from this server ({message}); 'aof' needs "
            "WAITAOF (Redis >= 7.2, Valkey >= 7.2) and appendonly yes"
        )

    def __str__(self) -> str:
        parts = (["aof"] if self.aof else []) + (
            [f"replicas:{self.replicas}"] if self.replicas else []
        )
        return "+".join(parts) or "none"


# A retained outcome's expiry is kept in whole seconds, as 32 bits of epoch seconds.
MIN_RESULT_TTL_MS = 1_000
MAX_RESULT_TTL_MS = TEN_YEARS_MS


def check_result_ttl_ms(ttl_ms: int) -> int:
    """``ttl_ms`` if it is a retention an outcome can have; InvalidInput otherwise."""
    if (
        isinstance(ttl_ms, bool)
        or not isinstance(ttl_ms, int)
        or not MIN_RESULT_TTL_MS <= ttl_ms <= MAX_RESULT_TTL_MS
    ):
        raise InvalidInput.about(
            "{0} must be from 1 second to {days} days (how long a decided timer's outcome "
            "answers get, wait and a retried schedule of its id), got {got}",
            "result_ttl",
            days=TEN_YEARS_DAYS,
            got=ms_text(ttl_ms),
        )
    return ttl_ms


class ConnectOptions(TypedDict, total=False):
    """A client's settings as ``TimerClient.from_url`` and ``AsyncTimerClient.connect``
    take them, for code that passes them on (``timer.fastapi.lifespan(url, ns, **these)``)."""

    result_ttl_s: float
    max_payload_bytes: int
    socket_timeout_s: float
    durability: str
    durability_timeout_s: float


@dataclass(frozen=True)
class ClientSettings:
    """Limits, retention and durability a client applies to the calls it makes."""

    result_ttl_ms: int = 24 * 3600 * 1000
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD
    max_delay_ms: int = MAX_DELAY_MS
    notify_batch: int = 1000
    pipeline_batch: int = 1000
    durability: Durability = Durability()

    @classmethod
    def of(
        cls,
        *,
        result_ttl_s: float,
        max_payload_bytes: int,
        durability: str = "none",
        durability_timeout_s: float = 1.0,
    ) -> ClientSettings:
        """From the keyword arguments both clients' constructors take."""
        if (
            isinstance(result_ttl_s, bool)
            or not isinstance(result_ttl_s, int | float)
            or not math.isfinite(result_ttl_s)
        ):
            raise InvalidInput(
                f"result_ttl_s must be a number of seconds, got {quoted(result_ttl_s)}"
            )
        check_int("max_payload_bytes", max_payload_bytes, 1, MAX_PAYLOAD_LIMIT)
        check_seconds("durability_timeout_s", durability_timeout_s, maximum=3600, positive=True)
        if not isinstance(durability, str):
            raise InvalidInput(f'durability must be text such as "aof", got {quoted(durability)}')
        return cls(
            # 1e305 s is finite, but not in ms: out of range either way is refused by the check
            result_ttl_ms=check_result_ttl_ms(
                int(max(-1, min(result_ttl_s * 1000, 2 * MAX_RESULT_TTL_MS)))
            ),
            max_payload_bytes=max_payload_bytes,
            durability=Durability.parse(durability, round(durability_timeout_s * 1000)),
        )


@dataclass(frozen=True)
class Timer:
    """A scheduled timer. ``created`` is False when the id already existed (idempotent retry);
    ``state`` is ``pending`` or, for an id whose outcome is retained, that outcome;
    ``moved``, after a reschedule or a heartbeat, whether that call changed the deadline
    (False: it was due there already, e.g. a heartbeat that moves only later)."""

    id: str
    shard: int
    deadline_ms: int
    state: str = "pending"
    created: bool = True
    origin: str = ""  # the token it was created under (schedule_many(..., origin=...))
    absorbed: int = 0  # debounce: the later calls its window has absorbed so far
    moved: bool = False


@dataclass(frozen=True)
class TimerInfo:
    """A timer as ``get`` reads it: pending, or the outcome retained for it. A decided
    timer's outcome keeps the watch keys notified (``got``) but not its watch keys, need
    or cap: those hold their defaults then (its JSON, in the CLI, the HTTP API and the
    dashboard, leaves them out)."""

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
    traceparent: str | None = None  # the trace given at schedule (W3C), if one was
    callback_url: str | None = None  # where its outcome is POSTed (timer/webhook.py)
    note: str | None = None  # a line for people, given at schedule
    max_total_ms: int | None = None  # its cap: never due after created + this (heartbeat)
    absorbed: int = 0  # debounce: the later calls its window absorbed (schedule(debounce=))
    priority: int = 0  # its order under a backlog (-100..100, higher first)


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
    attempt: int = 1  # through a consumer group: its delivery count, this one included
    redelivery_of: str | None = None  # a dead letter put back: the entry id it first had
    error: str | None = None  # outcome "undecodable": why the entry could not be read
    traceparent: str | None = None  # the trace given at schedule (W3C): the handler's parent
    callback_url: str | None = None  # where it is POSTed (tickwheel handle --callbacks)
    created_ms: int | None = None  # when it was scheduled (Redis ms), as its record says
    note: str | None = None  # a line for people, given at schedule
    absorbed: int = 0  # debounce: the later calls its window absorbed (one outcome for all)
    priority: int = 0  # its order under a backlog: a runner starts higher ones first
    _ack: Callable[[], None] | None = field(default=None, repr=False, compare=False)
    _aack: Callable[[], Awaitable[None]] | None = field(default=None, repr=False, compare=False)

    @property
    def lateness_ms(self) -> int:
        """decided - deadline (negative for a timer completed or cancelled before its deadline)."""
        return self.decided_ms - self.deadline_ms

    @property
    def idempotency_key(self) -> str:
        """``<shard>/<stream entry id>``: the same for every delivery of this outcome (a
        retry, a reclaim after a crash, a dead letter put back), unique in its namespace.
        A handler that records it with its effect, atomically, can skip a repeat."""
        return f"{self.shard}/{self.redelivery_of or self.entry_id}"

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
    results_dropped: int = 0  # retained outcomes past result_ttl dropped
    # hashes of the results table this round still has to visit (``until_done=False``):
    # pass them to ``ShardStore.trim_results``, a call at a time
    results_left: int = 0


@dataclass(frozen=True)
class ConsumerInfo:
    """One consumer of a group, over every shard's stream."""

    name: str
    pending: int  # entries delivered to it and not acknowledged (backoffs included)
    idle_ms: int  # since its last read or claim, on the shard it used most recently


@dataclass(frozen=True)
class GroupInfo:
    """One consumer group of a namespace, summed over every shard's stream."""

    name: str
    consumers: tuple[ConsumerInfo, ...]
    pending: int  # delivered, not acknowledged (in a handler, or waiting for a retry)
    retrying: int  # of those, waiting for their retry time after a failed attempt
    lag: int | None  # outcomes not yet delivered to it (None: the server cannot say)
    oldest_pending_age_ms: int | None  # how long the oldest unacknowledged one has waited
    owes_since_ms: int | None  # decided time of the oldest outcome it still needs
    shards: int  # streams it exists on (a group is created on every shard)
    paused_since_ms: int | None = None  # paused by an operator since (Redis ms), or None
    paused_by: str | None = None  # who paused it, as they said
    # Of those pending, waiting to be looked at again at their handler's request (Later),
    # not after a failure: a Celery task sent, its start not yet confirmed
    later: int = 0

    @property
    def paused(self) -> bool:
        """Its runners read and claim nothing new until it is resumed."""
        return self.paused_since_ms is not None

    def stale(self, now_ms: int, retention_ms: int) -> bool:
        """True if it holds outcomes older than ``retention_ms`` back from trimming."""
        return self.owes_since_ms is not None and now_ms - self.owes_since_ms > retention_ms


@dataclass(frozen=True)
class AttemptError:
    """One failed attempt of a handler: which, when (Redis ms) and its error."""

    attempt: int
    failed_ms: int
    error: str


@dataclass(frozen=True)
class DeadLetter:
    """An outcome whose handler failed every attempt, kept for a person to look at.

    ``ref`` (``<shard>/<id>``) names it for ``redeliver`` and ``drop``; ``outcome`` is
    None if the outcome had been trimmed from its stream before it died.
    """

    ref: str
    shard: int
    group: str
    entry_id: str  # the outcome's entry id in its stream (its idempotency key there)
    consumer: str
    attempts: int
    error: str
    failed_ms: int
    outcome: Outcome | None
    # the attempts before the last, oldest first (the last ten; ``error`` is the last's);
    # a letter redelivered and dead again starts with the attempts of its earlier deaths
    earlier: tuple[AttemptError, ...] = ()


@dataclass(frozen=True)
class DeadBatch:
    """What an action on many dead letters did: ``matched`` were selected (by a filter,
    or named), ``done`` the refs re-delivered or dropped, ``missing`` the refs gone
    before their turn (re-delivered or dropped by someone else meanwhile)."""

    action: str
    matched: int
    done: list[str]
    missing: list[str]


@dataclass(frozen=True)
class ServerSettings:
    """What one server (one primary of a cluster) says about keeping our data.

    Timers must never be evicted: only ``maxmemory-policy noeviction`` keeps every
    pending timer (a ``volatile-*`` policy drops retained outcomes, so a retried
    ``schedule`` would create the timer again). Without AOF a crash loses what was
    written since the last snapshot.
    """

    node: str
    version: str
    maxmemory_policy: str
    aof_enabled: bool
    replicas: int = 0  # connected now (INFO's connected_slaves)

    @property
    def evicts(self) -> bool:
        return self.maxmemory_policy != "noeviction"
