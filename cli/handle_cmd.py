"""``tickwheel handle``, ``groups`` and ``dead``: run handlers, see and manage consumer
groups, and look after dead letters."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

import click

from timer.durable.entries import parse_ref
from timer.durable.models import OUTCOMES, DeadLetter, GroupInfo
from timer.handlers import DEFAULT_GROUP, DEFAULT_RECLAIM_IDLE_MS, Backoff, Handlers
from worker.metrics import serve_handler_metrics

from .app import App, errors, pass_app
from .durations import DURATION, format_ms
from .output import emit, table, to_json
from .service import connect, log_level_option, metrics_options, serve, setup_logging


class HandlerSpec(click.ParamType):  # type: ignore[type-arg]  # click stubs vary by version
    """``module:attribute``: a function, or a :class:`~timer.handlers.Handlers`."""

    name = "MODULE:FUNCTION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        module_name, sep, attr = value.partition(":")
        if not sep or not module_name or not attr:
            self.fail(f"{value!r} is not MODULE:FUNCTION (e.g. myapp.handlers:on_timeout)")
        if os.getcwd() not in sys.path:  # as `python -m` does: the project you run it in
            sys.path.insert(0, os.getcwd())
        try:
            target: Any = importlib.import_module(module_name)
        except Exception as exc:
            self.fail(f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}")
        for part in attr.split("."):
            if not hasattr(target, part):
                self.fail(f"module {module_name!r} has no attribute {attr!r}")
            target = getattr(target, part)
        if not isinstance(target, Handlers) and not callable(target):
            self.fail(f"{value} is a {type(target).__name__}, not a function or a Handlers")
        return target


@click.command()
@click.argument("spec", type=HandlerSpec())
@click.option(
    "--group", default=None, help=f"Consumer group to read through.  [default: {DEFAULT_GROUP}]"
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
    help="Attempts before an outcome goes to the dead letters.  [default: 5]",
)
@click.option(
    "--backoff",
    "backoff_ms",
    type=DURATION,
    default=None,
    help="Delay before the first retry; it doubles each attempt, with up to 20% taken "
    "off at random (jitter).  [default: 1s]",
)
@click.option(
    "--max-backoff",
    "max_backoff_ms",
    type=DURATION,
    default=None,
    help="The longest delay between two attempts.  [default: 5m]",
)
@click.option(
    "--reclaim-idle",
    "reclaim_idle_ms",
    type=DURATION,
    default=None,
    help="Take over a consumer's outcomes once it has been silent this long (it died).  "
    "[default: 5s]",
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
@click.option("--idle-exit", is_flag=True, help="Exit once nothing is left to handle.")
@metrics_options(
    "Serve Prometheus metrics (/metrics) and liveness (/healthz) here.",
    "Address for the metrics; 0.0.0.0 in a container so others can reach it.",
)
@log_level_option
@pass_app
def handle(
    app: App,
    spec: Any,
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
    idle_exit: bool,
    metrics_port: int | None,
    metrics_host: str,
    log_level: str,
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
    """
    setup_logging(log_level)
    with errors():
        handlers = _handlers_of(
            spec, group, consumer, kinds, max_attempts, backoff_ms, max_backoff_ms,
            reclaim_idle_ms, None if timeout_ms is None else timeout_ms / 1000,
        )  # fmt: skip
    namespace = app.namespace
    client = connect(app, f"consumer {handlers.consumer}", logging.getLogger("tickwheel.handlers"))
    with errors():
        client.meta  # noqa: B018 - a namespace never initialised fails here, clearly
    where = ""
    if metrics_port is not None:
        serve(
            lambda: serve_handler_metrics(handlers, client, metrics_port, metrics_host),
            metrics_host, metrics_port,
        )  # fmt: skip
        where = f"; metrics on http://{metrics_host}:{metrics_port}/metrics"
    click.echo(
        f"consumer {handlers.consumer} of group {handlers.group!r} handling "
        f"{', '.join(handlers.kinds)} outcomes of namespace {namespace!r} at {app.safe_url} "
        f"(concurrency {concurrency}, max attempts {handlers.max_attempts}){where}",
        err=True,
    )
    try:
        with errors():
            drained = handlers.run(
                client, concurrency=concurrency, stop_when_idle=idle_exit,
                handle_signals=True, drain_timeout_s=drain_ms / 1000,
                start="$" if from_now else "0",
            )  # fmt: skip
    finally:
        client.close()
    s = handlers.stats
    summary = {
        "handled": s.handled,
        "failed": s.failed,
        "retried": s.retried,
        "dead_lettered": s.dead_lettered,
        "skipped": s.skipped,
        "drained": drained,
    }
    if app.json:
        click.echo(to_json(summary))
    click.echo(
        f"consumer {handlers.consumer} stopped: handled {s.handled}, failed attempts "
        f"{s.failed}, retried {s.retried}, dead-lettered {s.dead_lettered}"
        + ("" if drained else "; handlers still running were left pending"),
        err=True,
    )
    if not drained:
        raise SystemExit(1)


def _handlers_of(
    spec: Any,
    group: str | None,
    consumer: str | None,
    kinds: str,
    max_attempts: int | None,
    backoff_ms: int | None,
    max_backoff_ms: int | None,
    reclaim_idle_ms: int | None,
    timeout_s: float | None,
) -> Handlers:
    base = spec.backoff if isinstance(spec, Handlers) else Backoff()
    initial_s = base.initial_s if backoff_ms is None else backoff_ms / 1000
    max_s = base.max_s if max_backoff_ms is None else max_backoff_ms / 1000
    backoff = Backoff(initial_s=initial_s, multiplier=base.multiplier,
                      max_s=max(initial_s, max_s), jitter=base.jitter)  # fmt: skip
    if isinstance(spec, Handlers):  # the object's own settings, unless overridden here
        h = Handlers(
            group=group or spec.group,
            consumer=consumer,
            max_attempts=max_attempts or spec.max_attempts,
            backoff=backoff,
            reclaim_idle_ms=reclaim_idle_ms or spec.reclaim_idle_ms,
            timeout_s=timeout_s or spec.timeout_s,
        )
        for kind in spec.kinds:
            fn = spec.handler(kind)
            assert fn is not None
            own = spec.timeout_of(kind) if timeout_s is None else timeout_s
            h.add(kind, fn, timeout_s=own)
        return h
    wanted = OUTCOMES if kinds.strip() == "all" else tuple(k.strip() for k in kinds.split(","))
    h = Handlers(
        group=group or DEFAULT_GROUP,
        consumer=consumer,
        max_attempts=max_attempts or 5,
        backoff=backoff,
        reclaim_idle_ms=reclaim_idle_ms or DEFAULT_RECLAIM_IDLE_MS,
        timeout_s=timeout_s,
    )
    for kind in wanted:
        h.add(kind, spec)
    return h


# -- groups ----------------------------------------------------------------------------------


def _group_dict(g: GroupInfo, now_ms: int, retention_ms: int) -> dict[str, Any]:
    return {
        "group": g.name,
        "consumers": [
            {"name": c.name, "pending": c.pending, "idle_ms": c.idle_ms} for c in g.consumers
        ],
        "pending": g.pending,
        "retrying": g.retrying,
        "lag": g.lag,
        "oldest_pending_age_ms": g.oldest_pending_age_ms,
        "owes_since_ms": g.owes_since_ms,
        "stale": g.stale(now_ms, retention_ms),
    }


@click.group(invoke_without_command=True)
@click.option(
    "--retention",
    "retention_ms",
    type=DURATION,
    default="1h",
    show_default=True,
    help="Flag a group owing outcomes older than this (it keeps them from being trimmed).",
)
@click.pass_context
def groups(ctx: click.Context, retention_ms: int) -> None:
    """Consumer groups: consumers, pending, retrying, lag, oldest pending age.

    A group keeps every outcome it has not acknowledged from being trimmed: delete one
    nobody reads any more with `tickwheel groups delete NAME`.
    """
    if ctx.invoked_subcommand is not None:
        return
    app = ctx.find_object(App)
    assert app is not None
    with errors():
        found = app.client.groups()
        now = app.client.server_time_ms()
    rows = []
    for g in found:
        names = ", ".join(f"{c.name}({c.pending})" for c in g.consumers) or "-"
        age = g.oldest_pending_age_ms
        rows.append((
            g.name + (" STALE" if g.stale(now, retention_ms) else ""),
            names, g.pending, g.retrying, "?" if g.lag is None else g.lag,
            "-" if age is None else f"{age / 1000:.1f}s",
        ))  # fmt: skip
    human = (
        table(rows, ("group", "consumers(pending)", "pending", "retrying", "lag", "oldest"))
        if rows
        else "No consumer groups."
    )
    stale = [g.name for g in found if g.stale(now, retention_ms)]
    if stale and not app.json:
        human += (
            f"\nSTALE: {', '.join(stale)} owe outcomes older than the retention and keep "
            "them from being trimmed; run their handlers, or delete the group."
        )
    emit(app.json, [_group_dict(g, now, retention_ms) for g in found], human)


@groups.command("delete")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_app
def groups_delete(app: App, name: str, yes: bool) -> None:
    """Delete consumer group NAME on every shard.

    Its unacknowledged outcomes will never be handled by it, and the streams can be
    trimmed past them; its dead letters stay. Asks first unless --yes.
    """
    with errors():
        known = {g.name: g for g in app.client.groups()}
    if name not in known:
        raise click.UsageError(
            f"no consumer group {name!r} in namespace {app.namespace!r} "
            f"(groups: {', '.join(known) or 'none'})"
        )
    g = known[name]
    if not yes:
        click.confirm(
            f"Delete group {name!r} ({g.pending} pending, lag {g.lag})?", abort=True, err=True
        )
    with errors():
        removed = app.client.delete_group(name)
    emit(
        app.json,
        {"deleted": name, "shards": removed},
        f"Deleted group {name!r} on {removed} shards",
    )


# -- dead letters ------------------------------------------------------------------------------


def _dead_dict(d: DeadLetter) -> dict[str, Any]:
    o = d.outcome
    return {
        "ref": d.ref,
        "group": d.group,
        "attempts": d.attempts,
        "failed_ms": d.failed_ms,
        "consumer": d.consumer,
        "error": d.error,
        "entry_id": d.entry_id,
        "outcome": None
        if o is None
        else {
            "id": o.id,
            "outcome": o.outcome,
            "deadline_ms": o.deadline_ms,
            "decided_ms": o.decided_ms,
            "payload": o.payload,
        },
    }


@click.group()
def dead() -> None:
    """Dead letters: outcomes whose handler failed every attempt.

    Each is named by its ref (SHARD/ID) as `tickwheel dead list` shows it.
    """


@dead.command("list")
@click.option("--group", default=None, help="Only this group's dead letters.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@pass_app
def dead_list(app: App, group: str | None, limit: int) -> None:
    """Dead letters, oldest first: ref, group, timer, attempts, last error.

    The REF names one for `dead show`, `dead redeliver` and `dead drop`.
    """
    with errors():
        letters = app.client.dead_letters(group, limit=limit)
        total = app.client.dead_letters_total()
    rows = [
        (
            d.ref, d.group, d.outcome.id if d.outcome else "?",
            d.outcome.outcome if d.outcome else "?", d.attempts, format_ms(d.failed_ms),
            (d.error.splitlines() or [""])[0][:60],
        )
        for d in letters
    ]  # fmt: skip
    human = (
        table(rows, ("ref", "group", "timer", "outcome", "attempts", "failed", "error"))
        if rows
        else "No dead letters."
    )
    if total > len(letters) and not app.json:
        human += f"\n({len(letters)} of {total} shown; --limit for more)"
    emit(app.json, [_dead_dict(d) for d in letters], human)


@dead.command("show")
@click.argument("ref")
@pass_app
def dead_show(app: App, ref: str) -> None:
    """One dead letter in full: its outcome, payload and the last error's traceback.

    REF is <shard>/<id> as `tickwheel dead list` shows it.
    """
    with errors():
        d = app.client.dead_letter(ref)
    if d is None:
        raise click.ClickException(f"no dead letter {ref} (see `tickwheel dead list`)")
    data = _dead_dict(d)
    o = data["outcome"]
    human = "\n".join([
        f"ref       {d.ref}",
        f"group     {d.group}  (consumer {d.consumer})",
        f"attempts  {d.attempts}, last failed {format_ms(d.failed_ms)}",
        f"timer     {o['id']} {o['outcome']}, deadline {format_ms(o['deadline_ms'])}"
        if o else "timer     (its outcome had been trimmed)",
        f"payload   {to_json(o['payload'])}" if o else "",
        "error:",
        d.error,
    ])  # fmt: skip
    emit(app.json, data, human)


@dead.command("redeliver")
@click.argument("refs", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Every dead letter (of --group).")
@click.option("--group", default=None, help="With --all: only this group's.")
@pass_app
def dead_redeliver(app: App, refs: tuple[str, ...], everything: bool, group: str | None) -> None:
    """Put dead letters back in front of their group's handlers (attempts start again).

    Each becomes a new outcome entry for its group only; other groups skip it. Name them
    by REF, or take every one with --all.
    """
    picked = _pick(app, refs, everything, group)
    done: list[str] = []
    missing: list[str] = []
    with errors():
        for ref in picked:
            new_id = app.client.redeliver(ref)
            (done if new_id else missing).append(ref)
    _report(app, "redelivered", done, missing)


@dead.command("drop")
@click.argument("refs", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Every dead letter (of --group).")
@click.option("--group", default=None, help="With --all: only this group's.")
@pass_app
def dead_drop(app: App, refs: tuple[str, ...], everything: bool, group: str | None) -> None:
    """Delete dead letters for good.

    Name them by REF (as `tickwheel dead list` shows), or every one with --all.
    """
    picked = _pick(app, refs, everything, group)
    done: list[str] = []
    missing: list[str] = []
    with errors():
        for ref in picked:
            (done if app.client.drop_dead_letter(ref) else missing).append(ref)
    _report(app, "dropped", done, missing)


def _pick(app: App, refs: tuple[str, ...], everything: bool, group: str | None) -> list[str]:
    if everything == bool(refs):
        raise click.UsageError(
            "name dead letters by their refs (see `tickwheel dead list`), or --all"
        )
    if refs and group:
        raise click.UsageError("--group goes with --all")
    with errors():
        if everything:
            return [d.ref for d in app.client.dead_letters(group, limit=1_000_000)]
        shards = app.client.meta.shards
        for ref in refs:  # every ref checked before any change
            parse_ref(ref, shards)
        return list(refs)


def _report(app: App, verb: str, done: list[str], missing: list[str]) -> None:
    human = f"{verb.capitalize()} {len(done)} dead letters"
    if missing:
        human += f"; not found: {', '.join(missing)}"
    emit(app.json, {verb: done, "missing": missing}, human)
    if missing and not done:
        raise SystemExit(6)
