"""What the worker's parts share: the led shards and their lock, the wheel, the clock."""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from dataclasses import dataclass, field

from timer import SystemTimer, TimerClient
from timer.clock import SYSTEM_TIME, Time
from timer.durable.model.models import Meta
from timer.errors import StoreError
from timer.histogram import Stages

from .logs import RateLimitedLog
from .redis_clock import RedisClock
from .settings import WorkerSettings
from .shard import FireTask, RaisedSink, ShardState, Sink
from .stats import LatenessHistogram, WorkerStats, fire_stages

log = logging.getLogger("worker")


@dataclass
class WorkerContext:
    """The state every part of a worker reads and writes.

    ``shards`` (the led shards, each with its timers in the wheel) is guarded by
    ``lock``, which is never held across a call to Redis from the firer. ``failing``
    and ``shard_failed`` keep one failing Redis Cluster node from holding up the other
    shards.
    """

    client: TimerClient
    settings: WorkerSettings
    id: str
    # the process's time: every clock read, sleep and wait of the worker's parts
    time: Time = SYSTEM_TIME
    clock: RedisClock = field(init=False)  # its estimate of Redis time, on ``time``
    timer: SystemTimer = field(init=False)
    # Timers of a priority above the default, in a wheel of their own: a wheel
    # expires a bucket in arrival order, so in one wheel a high one due beside a flood
    # would wait until the reaper had put the flood before it on fire_queue; here its own
    # reaper puts it there while the flood's still runs.
    raised: SystemTimer = field(init=False)
    # What the wheels expired, for the firer (None: only a wake-up, see RaisedSink)
    fire_queue: queue.SimpleQueue[FireTask | None] = field(default_factory=queue.SimpleQueue)
    # What the raised wheel expired: the firer takes it first, whole
    raised_queue: queue.SimpleQueue[FireTask] = field(default_factory=queue.SimpleQueue)
    # The raised wheel's entries by deadline (a heap; under ``lock``; dead ones dropped
    # as the firer meets them): before it sends a trip the firer takes every one due no
    # later than the trip's timers, whatever the raised wheel's reaper has done so far
    raised_due: list[tuple[int, int, FireTask]] = field(default_factory=list)
    raised_seq: itertools.count[int] = field(default_factory=itertools.count)
    shards: dict[int, ShardState] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)
    stats: WorkerStats = field(default_factory=WorkerStats)
    lateness: LatenessHistogram = field(default_factory=LatenessHistogram)
    stages: Stages = field(default_factory=fire_stages)  # where fired timers' time went
    stopping: threading.Event = field(default_factory=threading.Event)
    warn: RateLimitedLog = field(init=False)
    failing_until: dict[int | None, float] = field(default_factory=dict)  # backed off
    # Since when (monotonic ms) Redis refuses writes for want of memory (OOM), or None
    oom_since_mono_ms: float | None = None
    # Shards taken in the rebalance going on now, not all loaded yet: what they
    # have overdue is held back by the firer until every one is loaded, so a restart
    # after an outage fires its backlog by priority across the shards, not shard by shard
    catching_up: set[int] = field(default_factory=set)
    # The last error it met (type: message) and when (epoch ms), for its card
    last_error: str | None = None
    last_error_ms: int | None = None

    def __post_init__(self) -> None:
        self.clock = RedisClock(time=self.time)
        self.warn = RateLimitedLog(log, every_s=10.0, clock=self.time.monotonic)
        # Inline: a FireTask only puts itself on fire_queue, so the reaper runs it directly
        # instead of handing it to an executor thread first (one thread hop fewer).
        self.timer = SystemTimer(f"worker-{self.id}", clock=self.clock.wheel, inline=True)
        self.raised = SystemTimer(f"worker-{self.id}-raised", clock=self.clock.wheel, inline=True)
        self.raised_sink = RaisedSink(self.raised_queue, self.fire_queue)

    def wheel_of(self, priority: int) -> SystemTimer:
        """The wheel a timer of this priority waits in."""
        return self.raised if priority > 0 else self.timer

    def sink_of(self, priority: int) -> Sink:
        """Where a timer of this priority goes when its wheel expires it."""
        return self.raised_sink if priority > 0 else self.fire_queue

    @property
    def meta(self) -> Meta:
        return self.client.meta  # read once by the client, then cached

    def shard_failed(self, shard: int | None, doing: str, exc: StoreError) -> None:
        """A Redis error while working on one shard (None: the namespace's keys).

        On a Redis Cluster the shard's node may be down while the others serve: count it,
        say it (rate-limited) and go on with the other shards, so one node's failure
        touches only its own shards. On one server every shard shares its fate: re-raise,
        and the loop backs off as a whole.
        """
        self.note_error(exc)
        if not self.client.cluster:
            raise exc
        # Leave it alone for a third of a lease, so calls to a dead node (each may wait
        # out retries) cannot eat the time the healthy shards' renewals need.
        self.failing_until[shard] = self.clock.mono_ms() + self.settings.renew_every_ms
        self.stats.redis_errors += 1
        what = "namespace" if shard is None else f"shard {shard}"
        self.warn.warning(
            "%s: %s failed (%s); other shards go on", what, doing, exc, extra=self.fields(shard)
        )

    def note_error(self, exc: BaseException) -> None:
        """Say once (and show in /ready and the metrics) that Redis refuses writes for
        want of memory: nothing fires meanwhile, leases are kept by PEXPIRE (which Redis
        still takes), and firing resumes as soon as memory is freed."""
        self.last_error = f"{type(exc).__name__}: {exc}"[:500]
        self.last_error_ms = self.time.wall_ms()
        if isinstance(exc, StoreError) and exc.code == "OOM" and self.oom_since_mono_ms is None:
            self.oom_since_mono_ms = self.clock.mono_ms()
            log.error(
                "Redis refuses writes: it is out of memory (maxmemory reached, policy "
                "noeviction). No timer fires until memory is freed; leases are kept. "
                "Raise maxmemory or free memory (what a timer takes: "
                "https://tickwheel.readthedocs.io/capacity/)",
                extra=self.fields(),
            )

    def writes_accepted(self) -> None:
        """A write went through: if Redis was refusing them, it takes them again."""
        if self.oom_since_mono_ms is not None:
            lasted = self.clock.mono_ms() - self.oom_since_mono_ms
            self.oom_since_mono_ms = None
            log.warning(
                "Redis accepts writes again (it refused them for %.0f ms)",
                lasted,
                extra=self.fields(),
            )

    def fields(self, shard: int | None = None) -> dict[str, object]:
        """A log record's structured fields: this worker, and the shard if there is one
        (``--log-format json`` prints them; text logs say them in the message)."""
        return {"worker": self.id} if shard is None else {"worker": self.id, "shard": shard}

    def failing(self, shard: int | None) -> bool:
        """True while a recent failure on this shard (None: namespace keys) is backed off."""
        until = self.failing_until.get(shard)
        return until is not None and self.clock.mono_ms() < until
