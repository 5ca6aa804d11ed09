"""The *Measured* table's rows beside the peers (``benchmarks.table``): arq, RQ and Celery
deferring the same jobs, Celery on tickwheel, Celery beat, and the handlers beside them.
"""

from __future__ import annotations

from ._figures import Figures, stages


def rows(f: Figures) -> list[tuple[str, str, str, str]]:
    """(what, tickwheel, compared with in the same run, ratio) for each of these rows."""
    peers = "peers.peers"
    fire = "handlers.peers.tickwheel-fire-and-handle"
    fire5 = "handlers.at_5x_rate.tickwheel-fire-and-handle"
    celery = "handlers.peers.celery.start_lateness_ms"
    two = "handlers.peers.tickwheel-handlers.start_lateness_ms"
    pf, pc = "peers_fire.peers.tickwheel-fire-and-handle", "peers_fire.peers.celery"
    return [
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
            f"(p50 by stage: {stages(f)})",
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
    ]
