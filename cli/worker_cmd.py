"""``tickwheel worker``: run one worker process until SIGTERM or Ctrl-C."""

from __future__ import annotations

import logging
import signal

import click

from worker import Worker, WorkerSettings
from worker.metrics import serve_metrics
from worker.settings import default_worker_id

from .app import App, errors, pass_app
from .durations import DURATION


@click.command()
@click.option(
    "--lease-ms",
    "--lease",
    "lease_ms",
    type=DURATION,
    default="5000ms",
    show_default=True,
    help="Shard lease TTL; a dead worker's shards move after it.",
)
@click.option(
    "--horizon-ms",
    "--horizon",
    "horizon_ms",
    type=DURATION,
    default="10000ms",
    show_default=True,
    help="How far ahead timers are held in memory.",
)
@click.option(
    "--outcome-retention",
    "retention_ms",
    type=DURATION,
    default="7d",
    show_default=True,
    help="Trim outcomes older than this from the led shards' streams (never one a consumer "
    "group has not acked); 0s keeps them forever.",
)
@click.option("--id", "worker_id", default=None, help="Worker id (default host-pid-random).")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics on this port (/metrics).",
)
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
)
@pass_app
def worker(
    app: App,
    lease_ms: int,
    horizon_ms: int,
    retention_ms: int,
    worker_id: str | None,
    metrics_port: int | None,
    log_level: str,
) -> None:
    """Lead a fair share of the namespace's shards and fire their timers.

    Start as many as you like: shards are shared out and move to the survivors when one
    dies. SIGTERM releases this worker's shards and stops it within seconds.
    """
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    with errors():
        settings = WorkerSettings(
            worker_id=worker_id or default_worker_id(),
            lease_ms=lease_ms,
            horizon_ms=horizon_ms,
            outcome_retention_ms=retention_ms,
        )
        w = Worker(app.client, settings)
    if metrics_port is not None:
        serve_metrics(w, metrics_port)

    def on_signal(signum: int, _frame: object) -> None:
        w.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    where = f"; metrics on :{metrics_port}/metrics" if metrics_port is not None else ""
    click.echo(
        f"worker {settings.worker_id} ready: namespace {app.namespace!r} at {app.safe_url}{where}",
        err=True,
    )
    w.run()
    click.echo(f"worker {settings.worker_id} stopped; its shards were released", err=True)
