"""The *Measured* table's rows on tickwheel itself (``benchmarks.table``): the engine,
registration, a worker's lateness, failover and recovery, what a timer costs Redis, a
Cluster, Spark.
"""

from __future__ import annotations

from ._figures import Figures, engine, servers


def rows(f: Figures) -> list[tuple[str, str, str, str]]:
    """(what, tickwheel, compared with in the same run, ratio) for each of these rows."""
    return [
        (
            "engine: 1M timers (1 ms to 60 s) added, then the clock jumps past them",
            *engine(f, "expiry"),
        ),
        (
            "engine: the same, the clock stepping 1 ms at a time (a reaper's view)",
            *engine(f, "expiry_step"),
        ),
        (
            "engine: Kafka's purgatory workload, 500k requests, 200 ms timeout",
            *engine(f, "purgatory"),
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
            servers(
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
            servers(
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
            servers(
                f,
                "server_cost",
                lambda s: (
                    f"{f.k(s + '.instructions.schedule')} / {f.k(s + '.instructions.fire')} "
                    f"(a table at its size {f.k(s + '.instructions.fire_steady')}); "
                    f"trim's look at a retained outcome {f.k(s + '.instructions.trim_visit')}"
                ),
            ),
            servers(
                f,
                "server_cost",
                lambda s: f"`EVALSHA` of `return 1` {f.k(s + '.instructions.evalsha_trivial')}",
            ),
            servers(
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
            servers(
                f,
                "server_cost",
                lambda s: (
                    f"{f.k(s + '.instructions.heartbeat')} / "
                    f"{f.k(s + '.instructions.heartbeat_noop')}; "
                    f"{f.k(s + '.instructions.debounce')}; "
                    f"fire of one {f.k(s + '.instructions.fire_single')}"
                ),
            ),
            servers(
                f,
                "server_cost",
                lambda s: f"`return 1` a round trip {f.k(s + '.instructions.evalsha_single')}",
            ),
            servers(
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
    ]
