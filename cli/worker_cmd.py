"""``tickwheel worker``: run one worker process until SIGTERM or Ctrl-C."""

from __future__ import annotations

import contextlib
import logging

import click

from timer.errors import StoreError
from timer.worker import Worker, WorkerSettings
from timer.worker.settings import default_worker_id

from .app import App, errors, pass_app, require_extra, starts_server
from .durations import DURATION, MILLIS, DurationOr
from .service import (
    announce,
    connect,
    durability_option,
    log_format_option,
    log_level_option,
    metrics_options,
    serve,
    setup_logging,
    steady_heap,
)
from .starting import running


@starts_server
@click.command()
@click.option(
    "--lease",
    "lease",
    type=DurationOr("--lease-ms"),
    default=None,
    help="Shard lease TTL, e.g. 5s: a dead worker's shards move after it; at least "
    "300ms.  [default: 5s]",
)
@click.option(
    "--lease-ms",
    "lease_ms",
    type=MILLIS,
    metavar="DURATION",
    default=None,
    help="The lease TTL, instead of --lease: a duration such as 5s, or a bare number of "
    "milliseconds, e.g. 5000.",
)
@click.option(
    "--horizon",
    "horizon",
    type=DurationOr("--horizon-ms"),
    default=None,
    help="How far ahead timers are held in memory, e.g. 10s; at least 100ms.  [default: 10s]",
)
@click.option(
    "--horizon-ms",
    "horizon_ms",
    type=MILLIS,
    metavar="DURATION",
    default=None,
    help="The horizon, instead of --horizon: a duration such as 10s, or a bare number of "
    "milliseconds, e.g. 10000.",
)
@click.option(
    "--outcome-retention",
    "retention_ms",
    type=DURATION,
    default="1h",
    show_default=True,
    help="Trim outcomes older than this from the led shards' streams (never one a consumer "
    "group has not acked); 0s keeps them forever. Raise it if you read outcomes without a "
    "consumer group (tail, Spark) less often than this.",
)
@click.option(
    "--result-ttl",
    "result_ttl_ms",
    type=DURATION,
    default="24h",
    show_default=True,
    help="Keep the outcome of each timer this worker fires this long: it answers get, wait "
    "and a retried schedule of the same id (which returns the outcome instead of arming a "
    "new timer). Each costs Redis about 50 bytes, so 24h at 1,000 timers/s holds ~4 GB; a "
    "shorter one holds less. 1s to 3660d. Timers a client cancels or completes keep its "
    "own result_ttl_s.",
)
@click.option(
    "--history-every",
    "history_every_ms",
    type=DURATION,
    default="10s",
    show_default=True,
    help="Add what it counted to the namespace's per-minute history (the dashboard's charts) "
    "this often, and when it stops or lets a shard go; 100ms to 60s, 0s never. A kill -9 "
    "loses what it counted since the last time: at most this long's worth.",
)
@click.option("--id", "worker_id", default=None, help="Worker id (default host-pid-random).")
@click.option(
    "--allow-eviction",
    is_flag=True,
    help="Start even if the server's maxmemory-policy may evict keys (timers can be lost).",
)
@metrics_options(
    "Serve Prometheus metrics (/metrics) and health probes (/healthz, /ready) here.",
    "Address for metrics and health (/metrics, /healthz, /ready); 0.0.0.0 in a "
    "container so others can reach it.",
)
@durability_option
@log_level_option
@log_format_option
@pass_app
def worker(
    app: App,
    lease: int | None,
    lease_ms: int | None,
    horizon: int | None,
    horizon_ms: int | None,
    retention_ms: int,
    result_ttl_ms: int,
    history_every_ms: int,
    worker_id: str | None,
    allow_eviction: bool,
    metrics_port: int | None,
    metrics_host: str,
    durability: str,
    log_level: str,
    log_format: str,
) -> None:
    """Lead a fair share of the namespace's shards and fire their timers.

    Start as many as you like: shards are shared out and move to the survivors when one
    dies. SIGTERM releases this worker's shards and stops it within seconds.
    """
    if metrics_port is not None:  # before anything starts
        require_extra("metrics", "--metrics-port")
    lease_ms = one_of("--lease", lease, "--lease-ms", lease_ms, WorkerSettings.lease_ms)
    horizon_ms = one_of("--horizon", horizon, "--horizon-ms", horizon_ms, WorkerSettings.horizon_ms)
    setup_logging(log_level, log_format)
    with errors():
        settings = WorkerSettings(
            worker_id=worker_id or default_worker_id(),
            lease_ms=lease_ms,
            horizon_ms=horizon_ms,
            outcome_retention_ms=retention_ms,
            result_ttl_ms=result_ttl_ms,
            history_every_ms=history_every_ms,
            allow_eviction=allow_eviction,
        )
    client = connect(app, f"worker {settings.worker_id}", logging.getLogger("worker"), durability)
    w = Worker(client, settings)
    # A namespace never initialised, or a server whose maxmemory-policy may evict timers,
    # is refused before "ready" (it said ready, then refused); unreachable: run() waits.
    with errors(), contextlib.suppress(StoreError):
        w.prepare()
    if metrics_port is not None:
        from timer.worker.metrics import serve_metrics  # noqa: PLC0415 - the metrics extra

        asked = metrics_port
        listening = serve(lambda: serve_metrics(w, asked, metrics_host), metrics_host, asked)
        metrics_port = listening.server_address[1]  # --metrics-port 0: the one it was given

    where = (
        f"; metrics and health on http://{metrics_host}:{metrics_port}"
        if metrics_port is not None
        else ""
    )
    announce(
        f"worker {settings.worker_id} ready: namespace {app.namespace!r} at {app.safe_url}{where}",
        worker=settings.worker_id,
    )
    steady_heap()
    try:
        with errors():
            running()  # its own SIGTERM handling from here (cli.starting)
            w.run()  # SIGTERM/Ctrl-C stop it gracefully; it waits for Redis at start-up
    finally:
        client.close()
    announce(
        f"worker {settings.worker_id} stopped; its shards were released", worker=settings.worker_id
    )


def one_of(name: str, value: int | None, ms_name: str, ms_value: int | None, default: int) -> int:
    """The value of a pair of options that say the same thing (a duration, or ms)."""
    if value is not None and ms_value is not None:
        raise click.UsageError(f"give {name} or {ms_name}, not both")
    if value is not None:
        return value
    return default if ms_value is None else ms_value
