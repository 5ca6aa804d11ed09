"""``tickwheel handle``: run handlers (``groups``, ``dead``: ``groups_cmd``, ``dead_cmd``)."""

from __future__ import annotations

import logging
from typing import Any

import click

from timer import TimerClient
from timer.handlers import DEFAULT_GROUP, Handlers
from timer.handlers.limits import merged, parse_limit, parse_rate
from timer.redis import local_server
from timer.webhook import MIN_SECRET_CHARS, callbacks, short_secret, webhook
from timer.worker import WorkerSettings, fire_and_handle
from timer.worker.settings import default_worker_id

from .app import App, errors, pass_app, require_extra, starts_server
from .durations import DURATION, MILLIS, DurationOr
from .output import plural, to_json
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
from .spec import HandlerSpec, check_takes_outcome, handlers_of, warn_on_ignored
from .starting import running
from .worker_cmd import one_of

WEBHOOK_SECRET_ENV = "TICKWHEEL_WEBHOOK_SECRET"


@starts_server
@click.command()
@click.argument("spec", type=HandlerSpec(), required=False)
@click.option(
    "--webhook",
    "webhook_url",
    metavar="URL",
    default=None,
    help="Instead of SPEC: POST each outcome to URL as signed JSON (the receiver's side: "
    "the HTTP guide's Webhooks, linked above); a 2xx answer acknowledges it, anything else is "
    "retried and dead-lettered.",
)
@click.option(
    "--webhook-secret",
    envvar=WEBHOOK_SECRET_ENV,
    default=None,
    help=f"The HMAC-SHA256 key the receiver checks [env {WEBHOOK_SECRET_ENV}; needed with "
    "--webhook; at least 16 characters].",
)
@click.option(
    "--callbacks",
    "callbacks_on",
    is_flag=True,
    help="Instead of SPEC: POST each outcome to the callback_url it was scheduled with, "
    "signed as --webhook does, for the hosts --callback-host lists (an outcome without "
    "one is done at once; another host is dead-lettered after its attempts).",
)
@click.option(
    "--callback-host",
    "callback_hosts",
    multiple=True,
    metavar="HOST",
    help="A host --callbacks may POST to (repeat for more).",
)
@click.option(
    "--webhook-timeout",
    "webhook_timeout_ms",
    type=DURATION,
    default="10s",
    show_default=True,
    help="How long a delivery may take before it counts as failed.",
)
@click.option(
    "--group",
    default=None,
    help="Consumer group to read through.  "
    f"[default: {DEFAULT_GROUP}, or the Handlers object's own]",
)
@click.option(
    "--consumer",
    default=None,
    help="This process's name in the group (default host-pid). Give a stable one (a pod "
    "name) so a restart takes back its own unacknowledged outcomes at once; two live "
    "processes must not share it.",
)
@click.option(
    "--on",
    "kinds",
    default="expired",
    show_default=True,
    help="For a function: the outcomes it handles, comma-separated (expired, completed, "
    "cancelled, or all). A Handlers object says this itself.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 10_000),
    default=8,
    show_default=True,
    help="Handlers running at once (threads; async def handlers share one event loop).",
)
@click.option(
    "--max-attempts",
    type=click.IntRange(1, 1000),
    default=None,
    help="Attempts before an outcome goes to the dead letters.  "
    "[default: 5, or the Handlers object's own]",
)
@click.option(
    "--backoff",
    "backoff_ms",
    type=DURATION,
    default=None,
    help="Delay before the first retry; it doubles each attempt, with up to 20% taken "
    "off at random (jitter).  [default: 1s, or the Handlers object's own]",
)
@click.option(
    "--max-backoff",
    "max_backoff_ms",
    type=DURATION,
    default=None,
    help="The longest delay between two attempts; at least --backoff (--backoff alone "
    "past 5m raises it to --backoff).  [default: 5m, or the Handlers object's own]",
)
@click.option(
    "--reclaim-idle",
    "reclaim_idle_ms",
    type=DURATION,
    default=None,
    help="Take over a consumer's outcomes once it has been silent this long (it died).  "
    "[default: 5s, or the Handlers object's own]",
)
@click.option(
    "--drain-timeout",
    "drain_ms",
    type=DURATION,
    default="30s",
    show_default=True,
    help="On SIGTERM/Ctrl-C, how long running handlers get to finish.",
)
@click.option(
    "--from-now",
    is_flag=True,
    help="A group created now starts with the next outcome, not with every one retained.",
)
@click.option(
    "--timeout",
    "timeout_ms",
    type=DURATION,
    default=None,
    help="The longest a handler may run: an async one is cancelled, a sync one's outcome "
    "is released for a retry (the attempt counts) and its stuck thread named in a "
    "warning.  [default: none, or the Handlers object's own]",
)
@click.option(
    "--limit",
    "limit_texts",
    multiple=True,
    metavar="KEY=N",
    help="At most N handlers at once per value of KEY, across every runner of the group "
    "(KEY: id, outcome, payload or payload.<field>, e.g. payload.tenant=2); an outcome "
    "over it waits its turn (repeatable; added to a Handlers object's own).",
)
@click.option(
    "--rate",
    "rate_texts",
    multiple=True,
    metavar="KEY=R/s",
    help="At most R handler starts a second (or /m, /h) per value of KEY, across every "
    "runner of the group, evenly spaced (e.g. payload.tenant=5/s); an outcome over it "
    "waits its turn (repeatable; with --limit of the same KEY, both hold).",
)
@click.option(
    "--fair-by",
    metavar="KEY",
    default=None,
    help="Start the outcomes this runner holds in turn across the values of KEY (id, "
    "outcome, payload or payload.<field>, e.g. payload.tenant), within each priority: "
    "one tenant's flood does not hold the others' back.  [default: in the order read, "
    "or the Handlers object's own]",
)
@click.option("--idle-exit", is_flag=True, help="Exit once nothing is left to handle.")
@click.option(
    "--fire",
    is_flag=True,
    help="Fire timers here too: run a worker in this process (instead of a separate "
    "`tickwheel worker`), whose fire calls hand the outcomes they decide straight to these "
    "handlers, with no read between (about half a millisecond sooner). Start several: "
    "shards and outcomes are shared out, and a crashed one's move to the others.",
)
@click.option(  # as worker's: a bare number is refused, saying where milliseconds go
    "--lease",
    "lease",
    type=DurationOr("--lease-ms"),
    default=None,
    help="With --fire: the worker's shard lease, e.g. 5s (a dead one's shards move after "
    "it).  [default: 5s]",
)
@click.option(
    "--lease-ms",
    "lease_ms",
    type=MILLIS,
    metavar="DURATION",
    default=None,
    help="With --fire: the lease, instead of --lease: a duration such as 5s, or a bare "
    "number of milliseconds, e.g. 5000.",
)
@metrics_options(
    "Serve Prometheus metrics (/metrics) and liveness (/healthz) here.",
    "Address for the metrics; 0.0.0.0 in a container so others can reach it.",
)
@durability_option
@log_level_option
@log_format_option
@pass_app
def handle(
    app: App,
    spec: Any,
    webhook_url: str | None,
    callbacks_on: bool,
    callback_hosts: tuple[str, ...],
    webhook_secret: str | None,
    webhook_timeout_ms: int,
    group: str | None,
    consumer: str | None,
    kinds: str,
    concurrency: int,
    max_attempts: int | None,
    backoff_ms: int | None,
    max_backoff_ms: int | None,
    reclaim_idle_ms: int | None,
    drain_ms: int,
    from_now: bool,
    timeout_ms: int | None,
    limit_texts: tuple[str, ...],
    rate_texts: tuple[str, ...],
    fair_by: str | None,
    idle_exit: bool,
    fire: bool,
    lease: int | None,
    lease_ms: int | None,
    metrics_port: int | None,
    metrics_host: str,
    durability: str,
    log_level: str,
    log_format: str,
) -> None:
    """Run a handler for every outcome of the namespace (at-least-once).

    SPEC is MODULE:FUNCTION, imported from the current directory or the Python path:
    a function taking an Outcome (sync or async def), or a timer.Handlers object.
    An outcome is acknowledged once its handler returned. A handler that raises is
    retried with backoff; after --max-attempts the outcome goes to the dead letters
    (`tickwheel dead list`). SIGTERM or Ctrl-C stops taking outcomes and lets running
    handlers finish (--drain-timeout); exit 0 once they did.

    \b
    Example:
      tickwheel handle myapp.handlers:on_timeout --concurrency 16 --max-attempts 5
      tickwheel handle --webhook https://jobs.example/timeouts --on all

    Webhooks, what a receiver is sent and how it checks the signature:
    https://tickwheel.readthedocs.io/guides/http/#webhooks
    """
    if metrics_port is not None:  # before anything starts
        require_extra("metrics", "--metrics-port")
    setup_logging(log_level, log_format)
    if sum((spec is not None, webhook_url is not None, callbacks_on)) != 1:
        raise click.UsageError(
            "give one of a handler SPEC (MODULE:FUNCTION), --webhook URL or --callbacks"
        )
    if (webhook_url is not None or callbacks_on) and not webhook_secret:
        raise click.UsageError(
            f"--webhook and --callbacks need a secret to sign with: --webhook-secret or "
            f"{WEBHOOK_SECRET_ENV}"
        )
    if callbacks_on and not callback_hosts:
        raise click.UsageError("--callbacks needs the hosts it may POST to: --callback-host")
    if fire and idle_exit:
        raise click.UsageError("--fire runs a worker until stopped: it cannot --idle-exit")
    if (lease, lease_ms) != (None, None) and not fire:
        typed = "--lease" if lease is not None else "--lease-ms"
        raise click.UsageError(f"{typed} is the worker's: give it with --fire")
    lease_ms = one_of("--lease", lease, "--lease-ms", lease_ms, WorkerSettings.lease_ms)
    timeout_s = webhook_timeout_ms / 1000
    with errors():
        check_takes_outcome(spec)  # one an outcome cannot call: said now, not dead-lettered
        if webhook_secret is not None and len(webhook_secret) < MIN_SECRET_CHARS:
            env = click.get_current_context().get_parameter_source("webhook_secret")
            given = env is click.core.ParameterSource.ENVIRONMENT
            raise short_secret(f"${WEBHOOK_SECRET_ENV}" if given else "--webhook-secret")
        if webhook_url is not None:
            spec = webhook(webhook_url, webhook_secret or "", timeout_s=timeout_s)
        elif callbacks_on:
            spec = callbacks(webhook_secret or "", callback_hosts, timeout_s=timeout_s)
    warn_on_ignored(spec)
    with errors():
        handlers = handlers_of(
            spec,
            group,
            consumer,
            kinds,
            max_attempts,
            backoff_ms,
            max_backoff_ms,
            reclaim_idle_ms,
            None if timeout_ms is None else timeout_ms / 1000,
            merged([*(parse_limit(t) for t in limit_texts), *(parse_rate(t) for t in rate_texts)]),
            fair_by,
        )
    client = connect(
        app, f"consumer {handlers.consumer}", logging.getLogger("tickwheel.handlers"), durability
    )
    with errors():
        client.meta  # noqa: B018 - a namespace never initialised fails here, clearly
    _announce(app, handlers, client, concurrency, metrics_port, metrics_host)
    steady_heap()
    try:
        with errors(), local_server.runs_on(app.url):
            if fire:
                drained = _fire_and_handle(
                    client, handlers, concurrency, drain_ms, lease_ms, "$" if from_now else "0"
                )
            else:
                running()  # its own SIGTERM handling from here (cli.starting)
                drained = handlers.run(
                    client,
                    concurrency=concurrency,
                    stop_when_idle=idle_exit,
                    handle_signals=True,
                    drain_timeout_s=drain_ms / 1000,
                    start="$" if from_now else "0",
                )
    finally:
        client.close()
    _report(app, handlers, drained)


def _fire_and_handle(
    client: TimerClient,
    handlers: Handlers,
    concurrency: int,
    drain_ms: int,
    lease_ms: int,
    start: str,
) -> bool:
    """``--fire``: a worker and these handlers in this process (``fire_and_handle``)."""
    settings = WorkerSettings(worker_id=default_worker_id(), lease_ms=lease_ms)
    announce(
        f"worker {settings.worker_id} firing in this process: the outcomes of the shards it "
        f"leads go straight to consumer {handlers.consumer}",
        worker=settings.worker_id,
    )
    return fire_and_handle(
        client,
        handlers,
        settings,
        concurrency=concurrency,
        drain_timeout_s=drain_ms / 1000,
        start=start,
        handle_signals=True,
    )


def _announce(
    app: App,
    handlers: Handlers,
    client: TimerClient,
    concurrency: int,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Serve the metrics (if asked), and say on stderr what this consumer handles."""
    where = ""
    if metrics_port is not None:
        from timer.worker.metrics import serve_handler_metrics  # noqa: PLC0415 - the metrics extra

        serve(
            lambda: serve_handler_metrics(handlers, client, metrics_port, metrics_host),
            metrics_host,
            metrics_port,
        )
        where = f"; metrics on http://{metrics_host}:{metrics_port}/metrics"
    for limit in handlers.limits:  # what holds each key back, as given
        held = [f"{limit.at_most} at once"] if limit.at_most is not None else []
        if limit.per_s is not None:
            held.append(
                f"{limit.per_s:g}/s" + (f" (burst {limit.burst})" if limit.burst > 1 else "")
            )
        where += f"; per {limit.label}: {', '.join(held)}"
    if isinstance(handlers.fair_by, str):
        where += f"; in turn by {handlers.fair_by}"
    announce(
        f"consumer {handlers.consumer} of group {handlers.group!r} handling "
        f"{', '.join(handlers.kinds)} outcomes of namespace {app.namespace!r} at "
        f"{app.safe_url} (concurrency {concurrency}, max attempts {handlers.max_attempts})"
        f"{where}",
        group=handlers.group,
        consumer=handlers.consumer,
    )


def _report(app: App, handlers: Handlers, drained: bool) -> None:
    """The run's summary (stderr; stdout too with --json); exit 1 if it did not drain."""
    s = handlers.stats
    summary = {
        "handled": s.handled,
        "failed": s.failed,
        "retried": s.retried,
        "dead_lettered": s.dead_lettered,
        "later": s.later,
        "skipped": s.skipped,
        "drained": drained,
    }
    if app.json:
        click.echo(to_json(summary))
    announce(
        f"consumer {handlers.consumer} stopped: handled {s.handled}, failed attempts "
        f"{s.failed}, retried {s.retried}, dead-lettered {s.dead_lettered}"
        + (
            # a count of Later answers over the run, not of outcomes still waiting
            f", put off to look at again {plural(s.later, 'time')} (a handler's Later, not a "
            "failure: e.g. a Celery task is looked at again to confirm it started)"
            if s.later
            else ""
        )
        + ("" if drained else "; handlers still running were left pending"),
        group=handlers.group,
        consumer=handlers.consumer,
    )
    if not drained:
        raise SystemExit(1)
