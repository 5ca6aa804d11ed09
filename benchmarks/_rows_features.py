"""The *Measured* table's rows on each feature's own figures (``benchmarks.table``):
schedules, the HTTP API, the handler runner, debounce, heartbeats, per-key limits,
priority, the dashboard, and the simulation and the test kit.
"""

from __future__ import annotations

from ._figures import Figures, faster


def rows(f: Figures) -> list[tuple[str, str, str, str]]:
    """(what, tickwheel, compared with in the same run, ratio) for each of these rows."""
    return [
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
            f"dashboard's Timers view (#74): its first page (50 timers due next, every shard "
            f"merged) at {f.n('dashboard.timers')} pending, read from the shards' heads",
            f"p50 {f.n('dashboard.big.timers_page_ms.p50', '.2f')} ms (p99 "
            f"{f.n('dashboard.big.timers_page_ms.p99', '.1f')}: the first, which fills the "
            f"heads); the next page {f.n('dashboard.big.timers_next_page_ms.p50', '.2f')} ms",
            f"an empty namespace, same run: {f.n('dashboard.empty.timers_page_ms.p50', '.2f')} "
            f"ms, the next {f.n('dashboard.empty.timers_next_page_ms.p50', '.2f')} ms",
            f"{f.x('dashboard.ratio_big_to_empty.timers_page_p50')}, the next "
            f"{f.x('dashboard.ratio_big_to_empty.timers_next_page_p50')}",
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
            faster(f, "simulation.time_skipping.virtual_s", "simulation.time_skipping.best_s"),
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
