"""Prometheus metrics of a worker, read from its live state at scrape time.

A custom collector rather than counters sprinkled through the hot path: the worker keeps
plain integers (``WorkerStats``) and a lateness histogram, and a scrape turns them into
metric families, so firing pays nothing for metrics.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from timer.client import TimerClient
from timer.errors import TimerError
from timer.handlers import Handlers
from timer.histogram import Stages

from .stats import Health, LatenessHistogram, ShardFigures, WorkerStats


class Observed(Protocol):
    """What the collector reads of a worker (``worker.Worker`` is one)."""

    id: str
    stats: WorkerStats
    lateness_histogram: LatenessHistogram
    fire_stages: Stages

    def shard_figures(self) -> list[ShardFigures]: ...

    def shard_count(self) -> int | None: ...

    def health(self) -> Health: ...


COUNTERS = {
    "fired": "Timers this worker expired through fire",
    "swept": "Timers this worker expired through sweep",
    "cascaded": "Far timers the sweep moved from coarse buckets into fine ones (an hour ahead)",
    "completed_seen": "Timers of led shards decided as completed (from events)",
    "cancelled_seen": "Timers of led shards cancelled (from events; no schedule's occurrence)",
    "early_reinserted": "Entries fire refused as early by Redis time and re-inserted",
    "fence_rejections": "fire or sweep refused with FENCED (the shard was dropped)",
    "leases_acquired": "Shard leases acquired",
    "takeovers": "Shard leases acquired after another worker's lease expired (it crashed "
    "or stalled)",
    "handovers": "Shard leases acquired that another worker had given back (a graceful stop "
    "or rebalancing)",
    "leases_lost": "Shard leases lost (renewal refused or too late)",
    "leases_released": "Shard leases released gracefully",
    "redis_errors": "Redis errors survived by the worker loop",
    "outcomes_trimmed": "Outcomes dropped from led shards' streams past the retention",
    "results_dropped": "Retained outcomes dropped from led shards' results tables past result_ttl",
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
        figures = w.shard_figures()  # one pass over the led shards per scrape
        held.add_metric(labels, len(figures))
        yield held
        shards = GaugeMetricFamily(
            "tickwheel_shards",
            "The namespace's shards (max(tickwheel_shards) - sum(tickwheel_leases_held): "
            "shards without a leader)",
            labels=["worker"],
        )
        count = w.shard_count()
        if count is not None:
            shards.add_metric(labels, count)
        yield shards
        in_wheel = GaugeMetricFamily(
            "tickwheel_pending_in_wheel",
            "Timers of a led shard held in the in-memory wheel (inside the horizon)",
            labels=["worker", "shard"],
        )
        pending = GaugeMetricFamily(
            "tickwheel_pending",
            "All pending timers of a led shard in Redis (read every 5 s)",
            labels=["worker", "shard"],
        )
        lag = GaugeMetricFamily(
            "tickwheel_sweep_lag_seconds",
            "How long a led shard's oldest ended durable bucket has waited for a sweep",
            labels=["worker", "shard"],
        )
        for f in figures:
            shard_labels = [w.id, str(f.shard)]
            in_wheel.add_metric(shard_labels, f.in_wheel)
            if f.pending is not None:
                pending.add_metric(shard_labels, f.pending)
            if f.sweep_lag_ms is not None:
                lag.add_metric(shard_labels, f.sweep_lag_ms / 1000)
        yield from (in_wheel, pending, lag)
        health = w.health()
        age = GaugeMetricFamily(
            "tickwheel_last_tick_age_seconds",
            "Since the worker's last successful tick (leases, loading, sweeping)",
            labels=["worker"],
        )
        if health.tick_age_ms is not None:
            age.add_metric(labels, health.tick_age_ms / 1000)
        yield age
        oom = GaugeMetricFamily(
            "tickwheel_redis_refusing_writes",
            "1 while Redis refuses writes for want of memory (OOM: maxmemory reached); "
            "nothing fires meanwhile",
            labels=["worker", "reason"],
        )
        oom.add_metric([*labels, "oom"], 1 if health.refusing_writes else 0)
        yield oom
        ready = GaugeMetricFamily("tickwheel_ready", "1 if /ready answers 200", labels=["worker"])
        ready.add_metric(labels, 1 if health.ready else 0)
        yield ready
        hist = HistogramMetricFamily(
            "tickwheel_lateness_seconds",
            "Decided minus deadline (Redis time) of timers this worker expired",
            labels=["worker"],
        )
        buckets, total, _ = w.lateness_histogram.snapshot()
        hist.add_metric(labels, buckets=buckets, sum_value=total)
        yield hist
        yield stage_family(
            "tickwheel_fire_stage_seconds",
            "Where a fired timer's time went before its outcome was in Redis: deadline to "
            "the wheel's release (due_to_release), waiting for the firer (release_to_send), "
            "the fire script's round trip (fire_call)",
            ["worker"],
            labels,
            w.fire_stages,
        )


def stage_family(
    metric: str, doc: str, names: list[str], labels: list[str], stages: Stages
) -> Metric:
    """A histogram with a ``stage`` label besides ``names``, one series per stage."""
    family = HistogramMetricFamily(metric, doc, labels=[*names, "stage"])
    for stage, hist in stages.by_name.items():
        buckets, total, _ = hist.snapshot()
        family.add_metric([*labels, stage], buckets=buckets, sum_value=total)
    return family


def serve_metrics(worker: Observed, port: int, addr: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve the worker's metrics and health on http://addr:port (a daemon thread).

    ``/metrics``  Prometheus text
    ``/healthz``  liveness: 200, or 503 when the run loop is stuck (restart the process)
    ``/ready``    readiness: 200 when Redis is reachable, the clock synced and the lease
                  loop ticking in time; else 503 with the reasons (JSON)

    Binds to loopback unless told otherwise (``--metrics-host 0.0.0.0`` in a container).
    """
    registry = CollectorRegistry()
    registry.register(WorkerCollector(worker))

    def probe(path: str) -> tuple[int, dict[str, Any]] | None:
        if path not in ("/healthz", "/ready"):
            return None
        health = worker.health()
        ok = health.live if path == "/healthz" else health.ready
        body = {
            "worker": worker.id,
            "live": health.live,
            "ready": health.ready,
            "reasons": list(health.reasons),
            "tick_age_ms": health.tick_age_ms,
        }
        return (200 if ok else 503), body

    return _serve(registry, probe, port, addr, "worker-http")


def _serve(
    registry: CollectorRegistry,
    probe: Callable[[str], tuple[int, dict[str, Any]] | None],
    port: int,
    addr: str,
    name: str,
) -> ThreadingHTTPServer:
    """/metrics from ``registry``; any other path ``probe`` answers (None: 404)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, generate_latest(registry))
                return
            answer = probe(path)
            if answer is None:
                self._send(404, "text/plain", b"try /metrics, /healthz or /ready\n")
            else:
                code, body = answer
                self._send(code, "application/json", json.dumps(body).encode())

        def _send(self, code: int, kind: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a probe every few seconds is not worth a log line

    server = ThreadingHTTPServer((addr, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name=name, daemon=True).start()
    return server


# -- the handler runner's metrics ----------------------------------------------------------

HANDLER_COUNTERS = {
    "failed": "Handler attempts that raised",
    "retried": "Failed attempts scheduled again (with backoff)",
    "later": "Outcomes a handler asked to see again later (Later): not failures",
    "dead_lettered": "Outcomes moved to the dead letters after their last attempt",
    "skipped": "Outcomes of a kind with no handler (acknowledged unseen)",
    "claimed": "Outcomes taken by claim: due retries, a dead consumer's, our own at start",
    "lost": "Outcomes another consumer took over while our handler still ran",
    "ack_errors": "Outcomes that could not be settled with Redis (they come again)",
    "acks_unmatched": "Acknowledgements that found no outcome pending: another consumer's "
    "now, or sent to a server that is not the shard's master (they come again)",
    "limit_waits": "Outcomes that found their key at its --limit and waited for a slot",
}


class HandlerCollector(Collector):
    """A handler runner's counters and histograms, and its group's lag and pending (read
    from Redis at scrape time)."""

    def __init__(self, handlers: Handlers, client: TimerClient) -> None:
        self.handlers = handlers
        self.client = client

    def collect(self) -> Iterator[Metric]:
        h = self.handlers
        s = h.stats
        labels = [h.group, h.consumer]
        names = ["group", "consumer"]
        handled = CounterMetricFamily(
            "tickwheel_handler_handled",
            "Outcomes whose handler returned (acknowledged), by outcome kind",
            labels=[*names, "outcome"],
        )
        for kind, n in sorted(s.by_outcome.items()):
            handled.add_metric([*labels, kind], n)
        yield handled
        for name, doc in HANDLER_COUNTERS.items():
            c = CounterMetricFamily(f"tickwheel_handler_{name}", doc, labels=names)
            c.add_metric(labels, getattr(s, name))
            yield c
        inflight = GaugeMetricFamily(
            "tickwheel_handler_in_flight", "Outcomes in hand (running or queued)", labels=names
        )
        inflight.add_metric(labels, h.in_flight)
        yield inflight
        waiting = GaugeMetricFamily(
            "tickwheel_handler_limit_waiting",
            "Outcomes in hand waiting for a slot of their key's --limit",
            labels=names,
        )
        waiting.add_metric(labels, h.waiting_for_limit)
        yield waiting
        for metric, hist, doc in (
            ("tickwheel_handler_duration_seconds", s.duration, "How long handlers ran"),
            (
                "tickwheel_handler_start_lateness_seconds",
                s.start_lateness,
                "From a timer's deadline to its handler's start (first attempts; wall clock)",
            ),
        ):
            family = HistogramMetricFamily(metric, doc, labels=names)
            buckets, total, _ = hist.snapshot()
            family.add_metric(labels, buckets=buckets, sum_value=total)
            yield family
        yield stage_family(
            "tickwheel_handler_stage_seconds",
            "Where a first attempt's time went after its outcome was in Redis: its decision "
            "(Redis time, a whole ms: up to 1 ms long) to this runner reading it "
            "(decided_to_read, wall clock), then to "
            "its handler's start (read_to_start)",
            names,
            labels,
            s.stages,
        )
        try:
            infos = {g.name: g for g in self.client.groups()}
        except TimerError:
            return  # Redis away: the runner's own figures are still worth having
        g = infos.get(h.group)
        for name, doc, value in (
            ("lag", "Outcomes not yet delivered to the group", None if g is None else g.lag),
            ("pending", "Delivered, not yet acknowledged", None if g is None else g.pending),
            ("retrying", "Failed, waiting for a retry time", None if g is None else g.retrying),
            ("later", "Waiting at their handler's request (Later)", None if g is None else g.later),
        ):
            gauge = GaugeMetricFamily(f"tickwheel_group_{name}", doc, labels=["group"])
            if value is not None:
                gauge.add_metric([h.group], value)
            yield gauge


def serve_handler_metrics(
    handlers: Handlers, client: TimerClient, port: int, addr: str = "127.0.0.1"
) -> ThreadingHTTPServer:
    """Serve a handler runner's metrics on http://addr:port/metrics (``/healthz``: 200)."""
    registry = CollectorRegistry()
    registry.register(HandlerCollector(handlers, client))

    def probe(path: str) -> tuple[int, dict[str, Any]] | None:
        if path != "/healthz":
            return None
        return 200, {"consumer": handlers.consumer, "in_flight": handlers.in_flight}

    return _serve(registry, probe, port, addr, "handler-http")
