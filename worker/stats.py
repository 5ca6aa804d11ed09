"""What a worker counts: plain integers and a lateness histogram, cheap on the firing path.

No metrics library here, so ``from timer.worker import Worker`` needs no
prometheus_client; ``timer.worker.metrics`` turns these into Prometheus metric families
at scrape time.
"""

from __future__ import annotations

from dataclasses import dataclass

from timer.histogram import MsHistogram, Stages


@dataclass(frozen=True)
class Health:
    """What a probe asks: restart me (not ``live``)? send me work (``ready``)?"""

    live: bool
    ready: bool
    reasons: tuple[str, ...]  # why not ready (or not live); empty when ready
    tick_age_ms: int | None  # since the last successful tick (None: none yet)
    refusing_writes: bool = False  # Redis refuses writes for want of memory (OOM)


@dataclass(frozen=True)
class ShardFigures:
    """One led shard, as the metrics show it."""

    shard: int
    in_wheel: int  # timers held in the in-memory wheel (inside the horizon)
    pending: int | None  # all its pending timers in Redis (None: not read yet)
    sweep_lag_ms: int | None  # how long its oldest ended bucket has waited for a sweep


@dataclass
class WorkerStats:
    """Counters of one worker since it started (read by the metrics collector)."""

    fired: int = 0
    swept: int = 0
    cascaded: int = 0  # far timers the sweep moved from coarse buckets into fine ones
    early_reinserted: int = 0
    fence_rejections: int = 0
    leases_acquired: int = 0
    leases_lost: int = 0
    leases_released: int = 0
    takeovers: int = 0
    handovers: int = 0
    redis_errors: int = 0
    loaded: int = 0
    reloads: int = 0
    scheduled_seen: int = 0  # timers the led shards' S and M events announced (no occurrence)
    completed_seen: int = 0
    cancelled_seen: int = 0  # a schedule's occurrence taken out with it: not counted
    outcomes_trimmed: int = 0
    results_dropped: int = 0


# Decided minus deadline (ms) of the timers a worker expired; the same buckets as the
# handler runner's histograms, so the figures line up.
LatenessHistogram = MsHistogram


# Where a fired timer's time went before its outcome was in Redis, per timer:
# due_to_release: its deadline to the wheel letting it go (Redis time, estimated);
# release_to_send: waiting for the firer to send its batch; fire_call: the fire script's
# round trip, sent to answered.
FIRE_STAGES = ("due_to_release", "release_to_send", "fire_call")


def fire_stages() -> Stages:
    return Stages(FIRE_STAGES)
