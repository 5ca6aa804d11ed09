"""A histogram of milliseconds: plain counts, cheap to update on a hot path.

No metrics library here: ``worker.metrics`` turns a snapshot into a Prometheus histogram
(in seconds, Prometheus' unit) at scrape time. The worker's lateness and the handler
runner's durations and start lateness share these buckets.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterable

# Bucket bounds (ms): a histogram's, and a stage's (sub-millisecond first: a stage takes
# tens of microseconds to a few ms).
MS_BOUNDS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)
_FINE = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 25, 50)
STAGE_BOUNDS: tuple[float, ...] = (*_FINE, 100, 250, 500, 1000, 2500, 5000, 10000)


class MsHistogram:
    """Cumulative bucket counts of durations in milliseconds (thread-safe)."""

    BOUNDS: tuple[float, ...] = MS_BOUNDS

    def __init__(self) -> None:
        self.counts = [0] * (len(self.BOUNDS) + 1)
        self.total = 0.0
        self._lock = threading.Lock()

    def observe(self, ms: float) -> None:
        i = bisect_left(self.BOUNDS, ms)  # the first bucket with ms <= bound (last: +Inf)
        with self._lock:
            self.counts[i] += 1
            self.total += ms

    def observe_all(self, values: Iterable[float], times: int = 1) -> None:
        """``observe`` each of ``values`` (``times`` times each), under one lock: the hot
        path observes a batch at once."""
        bounds, counts = self.BOUNDS, self.counts
        with self._lock:
            for ms in values:
                counts[bisect_left(bounds, ms)] += times
                self.total += ms * times

    def bucket_counts(self) -> list[tuple[float, int]]:
        """Each bucket's own count (not cumulative) with its upper bound in ms, the
        last ``inf``."""
        with self._lock:
            counts = list(self.counts)
        return list(zip((*self.BOUNDS, float("inf")), counts, strict=True))

    def snapshot(self) -> tuple[list[tuple[str, float]], float, int]:
        """Cumulative buckets with their bounds in seconds (Prometheus' unit), the sum in
        seconds, and the count."""
        with self._lock:
            counts, total = list(self.counts), self.total
        running, out = 0, []
        bounds = (*(f"{b / 1000:g}" for b in self.BOUNDS), "+Inf")
        for bound, n in zip(bounds, counts, strict=True):
            running += n
            out.append((bound, float(running)))
        return out, total / 1000, running

    def quantile(self, q: float) -> float | None:
        """The upper bound (ms) of the bucket holding quantile ``q`` (None: empty)."""
        with self._lock:
            counts = list(self.counts)
        n = sum(counts)
        if n == 0:
            return None
        rank, running = q * n, 0
        for bound, c in zip((*self.BOUNDS, float("inf")), counts, strict=True):
            running += c
            if running >= rank:
                return float(bound)
        return float("inf")


class StageHistogram(MsHistogram):
    """Where the milliseconds between a deadline and a handler go, stage by stage:
    sub-millisecond buckets, since a stage takes tens of microseconds to a few ms."""

    BOUNDS = STAGE_BOUNDS


class Stages:
    """One ``StageHistogram`` per named stage, in the order given (thread-safe: each
    histogram locks itself; the names are fixed at construction)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.by_name = {name: StageHistogram() for name in names}

    def observe(self, name: str, ms: float) -> None:
        self.by_name[name].observe(max(0.0, ms))

    def observe_all(self, name: str, values: Iterable[float], times: int = 1) -> None:
        self.by_name[name].observe_all((v if v > 0 else 0.0 for v in values), times)
