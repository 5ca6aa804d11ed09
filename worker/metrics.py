"""Prometheus metrics of a worker, read from its live state at scrape time.

A custom collector rather than counters sprinkled through the hot path: the worker keeps
plain integers (``WorkerStats``) and a lateness histogram, and a scrape turns them into
metric families, so firing pays nothing for metrics.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from .stats import LatenessHistogram, WorkerStats


class Observed(Protocol):
    """What the collector reads of a worker (``worker.Worker`` is one)."""

    id: str
    stats: WorkerStats
    lateness_histogram: LatenessHistogram

    @property
    def shards(self) -> Mapping[int, _Led]: ...


class _Led(Protocol):
    @property
    def tasks(self) -> Mapping[str, object]: ...


COUNTERS = {
    "fired": "Timers this worker expired through fire",
    "swept": "Timers this worker expired through sweep",
    "completed_seen": "Timers of led shards decided as completed (from events)",
    "cancelled_seen": "Timers of led shards decided as cancelled (from events)",
    "early_reinserted": "Entries fire refused as early by Redis time and re-inserted",
    "fence_rejections": "fire or sweep refused with FENCED (the shard was dropped)",
    "leases_acquired": "Shard leases acquired",
    "takeovers": "Shard leases acquired that another worker held before",
    "leases_lost": "Shard leases lost (renewal refused or too late)",
    "leases_released": "Shard leases released gracefully",
    "redis_errors": "Redis errors survived by the worker loop",
    "outcomes_trimmed": "Outcomes dropped from led shards' streams past the retention",
}


class WorkerCollector(Collector):
    def __init__(self, worker: Observed) -> None:
        self.worker = worker

    def collect(self) -> Iterator[Metric]:
        w, labels = self.worker, [self.worker.id]
        for name, doc in COUNTERS.items():
            c = CounterMetricFamily(f"tickwheel_{name}", doc, labels=["worker"])
            c.add_metric(labels, getattr(w.stats, name))
            yield c
        held = GaugeMetricFamily("tickwheel_leases_held", "Shards led now", labels=["worker"])
        held.add_metric(labels, len(w.shards))
        yield held
        pending = GaugeMetricFamily(
            "tickwheel_pending_in_wheel",
            "Timers of a led shard held in the in-memory wheel (inside the horizon)",
            labels=["worker", "shard"],
        )
        for shard, state in sorted(w.shards.items()):
            pending.add_metric([w.id, str(shard)], len(state.tasks))
        yield pending
        hist = HistogramMetricFamily(
            "tickwheel_lateness_ms",
            "Decided minus deadline of timers this worker expired, ms",
            labels=["worker"],
        )
        buckets, total, _ = w.lateness_histogram.snapshot()
        hist.add_metric(labels, buckets=buckets, sum_value=total)
        yield hist


def serve_metrics(worker: Observed, port: int, addr: str = "0.0.0.0") -> CollectorRegistry:
    """Serve the worker's metrics on http://addr:port/metrics (a daemon thread)."""
    registry = CollectorRegistry()
    registry.register(WorkerCollector(worker))
    start_http_server(port, addr=addr, registry=registry)
    return registry
