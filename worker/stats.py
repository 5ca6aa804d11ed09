"""What a worker counts: plain integers and a lateness histogram, cheap on the firing path.

No metrics library here, so ``from worker import Worker`` needs no prometheus_client;
``worker.metrics`` turns these into Prometheus metric families at scrape time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Health:
    """What a probe asks: restart me (not ``live``)? send me work (``ready``)?"""

    live: bool
    ready: bool
    reasons: tuple[str, ...]  # why not ready (or not live); empty when ready
    tick_age_ms: int | None  # since the last successful tick (None: none yet)


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
    early_reinserted: int = 0
    fence_rejections: int = 0
    leases_acquired: int = 0
    leases_lost: int = 0
    leases_released: int = 0
    takeovers: int = 0
    redis_errors: int = 0
    loaded: int = 0
    reloads: int = 0
    completed_seen: int = 0
    cancelled_seen: int = 0
    outcomes_trimmed: int = 0


class LatenessHistogram:
    """Cumulative bucket counts of lateness (ms), cheap to update on the firing path."""

    BOUNDS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)

    def __init__(self) -> None:
        self.counts = [0] * (len(self.BOUNDS) + 1)
        self.total = 0

    def observe(self, ms: int) -> None:
        for i, bound in enumerate(self.BOUNDS):
            if ms <= bound:
                self.counts[i] += 1
                break
        else:
            self.counts[-1] += 1
        self.total += ms

    def snapshot(self) -> tuple[list[tuple[str, float]], float, int]:
        """Cumulative buckets with their bounds in seconds (Prometheus' unit), the sum in
        seconds, and the count."""
        running, out = 0, []
        bounds = (*(f"{b / 1000:g}" for b in self.BOUNDS), "+Inf")
        for bound, n in zip(bounds, self.counts, strict=True):
            running += n
            out.append((bound, float(running)))
        return out, self.total / 1000, running
