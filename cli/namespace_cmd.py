"""Namespace commands: init, migrate, trim, stats, shards. Each is thin: parse, call
the library, print."""

from __future__ import annotations

import warnings
from typing import Any

import click

from timer.durable.admin.views import MEASURED_AT_LEAST
from timer.durable.model.codec import FORMAT_VERSION
from timer.durable.model.durations import format_duration_ms, ms_text
from timer.durable.model.models import DurabilityWarning, Meta
from timer.durable.shards.calls import MigrateStep
from timer.errors import ConfigError, TimerError, quoted

from .app import App, confirm, errors, pass_app, starts_server, warn
from .durations import DURATION
from .output import emit, pairs, plural, table

# finer buckets than a worker's tick fire nothing sooner (init warns below it)
FINEST_USEFUL_BUCKET_MS = 100


@starts_server
@click.command()
@click.option(
    "--shards",
    type=click.IntRange(1, 16384),
    default=16,
    show_default=True,
    help="Fixed number of shards (parallelism: at most one worker leads each).",
)
@click.option(
    "--bucket",
    "bucket_ms",
    type=DURATION,
    default="1s",
    show_default=True,
    help="Width of a durable bucket (the sweep's granularity).",
)
@click.option(
    "--allow-eviction",
    is_flag=True,
    help="Initialise even if the server's maxmemory-policy may evict keys (timers can then "
    "be lost without a trace).",
)
@pass_app
def init(app: App, shards: int, bucket_ms: int, allow_eviction: bool) -> None:
    """Create the namespace once (again is a no-op: without --shards it keeps the
    shards it has; another --shards than those is refused).

    The shard count is fixed for the life of the namespace: it bounds how many workers
    can fire in parallel. Every other command needs the namespace initialised. The server
    must not evict keys (maxmemory-policy noeviction) and should keep an AOF.
    """
    ctx = click.get_current_context()
    typed = {
        name
        for name in ("shards", "bucket_ms")
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
    }
    with errors():
        existing = _existing(app)
    if existing is not None and "shards" not in typed:
        # a bare `tickwheel init` (as the guides run it) on a namespace made with other
        # shards than the default: the namespace as it is, not a refusal of a count the
        # user never gave
        shards = existing.shards
    with errors(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DurabilityWarning)
        meta = app.client.init(shards=shards, bucket_ms=bucket_ms, allow_eviction=allow_eviction)
    for w in caught:
        click.echo(f"Warning: {w.message}", err=True)
    if existing is not None and "bucket_ms" in typed and meta.bucket_ms != bucket_ms:
        click.echo(
            f"Warning: namespace {quoted(app.namespace)} keeps its "
            f"{format_duration_ms(meta.bucket_ms)} buckets: --bucket applies only when it "
            "is created",
            err=True,
        )
    if meta.bucket_ms < FINEST_USEFUL_BUCKET_MS:
        # the library takes down to 1 ms (a namespace made so keeps working); a worker
        # fires from its in-memory wheel on ~100 ms ticks, so a finer bucket fires nothing
        # sooner and costs a key and a sweep step for each
        click.echo(
            f"Warning: {format_duration_ms(meta.bucket_ms)} buckets fire nothing sooner than "
            f"{format_duration_ms(FINEST_USEFUL_BUCKET_MS)} ones (a worker fires on ~100ms "
            "ticks) and cost a key each; the default is 1s (--bucket 1s)",
            err=True,
        )
    info = {
        "namespace": app.namespace,
        "shards": meta.shards,
        "bucket_ms": meta.bucket_ms,
        "format": meta.version,
        "redis": app.safe_url,
        "already": existing is not None,  # initialised before this call: nothing made
    }
    emit(
        app.json,
        info,
        f"Namespace {app.namespace!r}{' (initialised already)' if existing else ''}: "
        f"{meta.shards} shards, {format_duration_ms(meta.bucket_ms)} buckets, data format "
        f"{meta.version}, at {app.safe_url}",
    )


def _existing(app: App) -> Meta | None:
    """The namespace's meta if it was created already (in this release's format), else
    None: a namespace never initialised, or one `migrate` must convert first (whose
    init refuses as it did)."""
    try:
        return app.client.meta
    except ConfigError:
        return None


@click.command()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_app
def migrate(app: App, yes: bool) -> None:
    """Convert a namespace an earlier release made to this release's data format.

    This release reads and writes one layout (format 5: compact records, list buckets,
    timers due hours ahead in one bucket per hour, retained outcomes in small hashes,
    outcome entries of two fields). A namespace an earlier release wrote is refused by
    every client and worker until this command converts it: shard by shard, a bounded
    step per call (at most 500 records, bucket ids, keys or entries), with progress on
    stderr. Stop the namespace's workers first (it refuses while one holds a shard's
    lease). Interrupted (Ctrl-C, a lost connection), it leaves every shard consistent:
    run it again and it goes on. It is one way: an earlier release cannot read the
    converted namespace.

    \b
    Example:
      tickwheel --namespace jobs migrate --yes
    """
    with errors():
        current = app.client.data_format()
        if current < FORMAT_VERSION and not yes:
            confirm(
                f"Convert namespace {app.namespace!r} from format {current} to "
                f"{FORMAT_VERSION}? Its workers must be stopped, and only this tickwheel "
                "version reads it afterwards"
            )
        shards_done: set[int] = set()

        def progress(shard: int, step: MigrateStep) -> None:
            if step.done and shard not in shards_done:
                shards_done.add(shard)
                click.echo(f"shard {shard}: converted", err=True)
            elif not step.done and step.converted:
                click.echo(f"shard {shard}: {step.step}, {step.converted} converted", err=True)

        before, after = app.client.migrate(progress=progress)
    done = {"namespace": app.namespace, "before": before, "after": after}
    if before == after:
        text = f"Namespace {app.namespace!r} already uses format {after}; nothing to do"
    else:
        text = f"Namespace {app.namespace!r}: format {before} -> {after}, every shard converted"
    emit(app.json, done, text)


@click.command()
@click.option(
    "--older-than",
    "retention_ms",
    type=DURATION,
    required=True,
    help="Drop outcomes decided more than this long ago (Redis clock), e.g. 1h or 7d.",
)
@click.option(
    "--drop-unread",
    is_flag=True,
    help="Also drop outcomes a consumer group has not acked yet (that group never sees "
    "them); asks first unless --yes.",
)
@click.option("--yes", is_flag=True, help="With --drop-unread: do not ask for confirmation.")
@pass_app
def trim(app: App, retention_ms: int, drop_unread: bool, yes: bool) -> None:
    """Drop old outcomes from every shard's stream.

    An outcome stays, whatever its age, until every consumer group of its stream has been
    handed it and has acked it (unless --drop-unread). Workers do this on their own for
    the shards they lead (tickwheel worker --outcome-retention, 1 hour by default). Each
    run also drops, from part of each shard's results table, the outcomes kept for get,
    wait and retries whose result_ttl (24 hours by default) has passed.
    """
    if yes and not drop_unread:
        warn(
            "--yes is ignored: without --drop-unread trim keeps every outcome a consumer "
            "group still owes and asks nothing"
        )
    if drop_unread and not yes:
        confirm(
            f"Drop outcomes older than {ms_text(retention_ms)} even where a consumer "
            "group has not handled them (they are never delivered to it)?"
        )
    with errors():
        done = app.client.trim_outcomes(retention_ms, keep_unread=not drop_unread)
    removed = sum(t.removed for t in done)
    dropped = sum(t.results_dropped for t in done)
    held = [t.shard for t in done if t.held_by_group]
    owing = _owing_groups(app) if held else []
    on = f"shard{'s' * (len(held) > 1)} {', '.join(map(str, held))}"
    by = f"consumer group{'s' * (len(owing) != 1)} {', '.join(map(quoted, owing))}"
    note = f"; {by if owing else 'consumer groups'} kept older entries on {on}" if held else ""
    counts = {"removed": removed, "held_by_group": held, "shards": len(done)}
    emit(
        app.json,
        {**counts, "results_dropped": dropped, "held_by": owing},
        f"Removed {plural(removed, 'outcome')} from {plural(len(done), 'shard')}{note}; "
        f"dropped {plural(dropped, 'retained outcome')} past their retention (worker --result-ttl)",
    )
    if owing:
        click.echo(
            "A group keeps every outcome it has not acknowledged: `tickwheel groups` shows "
            "what each owes; `tickwheel groups delete NAME` drops one nobody reads",
            err=True,
        )


def _owing_groups(app: App) -> list[str]:
    """The consumer groups that owe outcomes (pending or not yet read): the ones a trim
    left entries for. Named after the trim, not by it: a group that read meanwhile may
    be among them, and an operator user without the rights to list them is told none."""
    try:
        found = app.client.groups()
    except TimerError:  # naming them is a courtesy: the trim is done
        return []
    return [g.name for g in found if g.pending or g.lag is None or g.lag > 0]


@click.command()
@click.option(
    "--retention",
    "retention_ms",
    type=DURATION,
    default="1h",
    show_default=True,
    help="The outcome retention: a group owing outcomes older than this is flagged stale.",
)
@click.option(
    "--memory",
    is_flag=True,
    help="Also estimate the Redis bytes held per pending and per decided timer "
    "(MEMORY USAGE of each shard's keys, sampled; two more round trips), and count the "
    "outcomes retained in the results tables.",
)
@pass_app
def stats(app: App, retention_ms: int, memory: bool) -> None:
    """Totals for the namespace: pending timers, outcomes, leaders, worst lag, consumer
    groups and dead letters.

    Lag is how long the oldest ended durable bucket has waited for a sweep: it grows when
    no worker leads a shard. A stale group owes outcomes older than the retention (it
    has not read for that long) and holds them back from trimming.
    """
    with errors():
        st = app.client.stats()
        groups = app.client.groups()
        dead = app.client.dead_letters_total()
        held = app.client.memory() if memory else None
    stale = [g.name for g in groups if g.stale(st["now_ms"], retention_ms)]
    led = sum(1 for s in st["shards"] if s["leader"])
    summary = {
        "namespace": st["namespace"],
        "pending": st["pending"],
        "outcomes": st["outcomes"],
        "shards": len(st["shards"]),
        "shards_led": led,
        "workers": len({s["leader"] for s in st["shards"] if s["leader"]}),
        "max_lag_ms": st["max_lag_ms"],
        "eviction": ", ".join(sorted({v["maxmemory_policy"] for v in st["servers"]})),
        "aof": _aof(st["servers"]),
        "consumer_groups": len(groups),
        "stale_groups": ", ".join(stale) or "none",
        "dead_letters": dead,
        "data_format": app.client.meta.version,
    }
    if held is not None:
        summary["bytes_per_pending_timer"] = held["bytes_per_pending_timer"]
        summary["bytes_per_decided_timer"] = held["bytes_per_decided_timer"]
        summary["retained_outcomes"] = held["retained_in_table"]  # the results table's
    shown = dict(summary)
    for kind in ("pending", "decided"):  # none: too few timers of the kind to estimate
        if held is not None and held[f"bytes_per_{kind}_timer"] is None:
            shown[f"bytes_per_{kind}_timer"] = f"- (too few {kind}: under {MEASURED_AT_LEAST})"
    emit(
        app.json,
        summary
        if not app.json
        else {**summary, "per_shard": st["shards"], "servers": st["servers"]},
        pairs(shown),
    )
    if held is not None and not app.json:
        _note_small_sample(held, st["pending"], len(st["shards"]))


def _note_small_sample(held: dict[str, Any], pending: int, shards: int) -> None:
    """The figures shown on fewer than SMALL_SAMPLE timers a shard are mostly each key's
    fixed overhead: said of those shown, not of a figure left out."""
    few = SMALL_SAMPLE * shards
    small = [
        kind
        for kind, count in (("pending", pending), ("decided", held["retained_in_table"]))
        if held[f"bytes_per_{kind}_timer"] is not None and count < few
    ]
    if small:
        click.echo(
            f"Note: fewer than {few:,} {' and '.join(small)} timers ({SMALL_SAMPLE:,} a shard): "
            "the bytes per timer include each key's fixed overhead and fall as the shards "
            "fill (~80 B pending, ~47 B decided at 200,000: "
            "https://tickwheel.readthedocs.io/capacity/).",
            err=True,
        )


SMALL_SAMPLE = 1000  # timers a shard below which stats --memory's per-timer bytes mislead


@click.command()
@pass_app
def shards(app: App) -> None:
    """One line per shard: leader, epoch, pending timers, outcomes, lag.

    The epoch rises by one at every lease acquisition (the fencing token).
    """
    with errors():
        st = app.client.stats()
    rows = [
        (s["shard"], s["leader"], s["epoch"], s["pending"], s["outcomes"], s["lag_ms"])
        for s in st["shards"]
    ]
    emit(
        app.json,
        st["shards"],
        table(rows, ("shard", "leader", "epoch", "pending", "outcomes", "lag_ms")),
    )


def _aof(servers: list[dict[str, object]]) -> str:
    """AOF as `stats` says it: on, OFF (one server), or OFF on the nodes without it."""
    off = [str(v.get("node", "?")) for v in servers if not v["aof"]]
    if not off:
        return "on"
    return "OFF" if len(servers) == 1 else f"OFF on {', '.join(off)}"
