"""Timer commands: init, schedule, cancel, reschedule, notify, complete, get, wait, tail,
trim, stats, shards. Each is thin: parse, call the library, print."""

from __future__ import annotations

import json
import os
import socket
import time
import warnings
from typing import Any

import click

from timer import Outcome, TimerInfo, TimerNotFound
from timer.client import DurabilityWarning
from timer.durable.codec import FORMAT_VERSION
from timer.durable.shard_calls import MigrateStep

from .app import App, TimerCommandError, errors, pass_app
from .durations import DURATION, INSTANT, SECONDS, format_ms
from .output import emit, pairs, table, to_json


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
    """Create the namespace once (again with the same --shards is a no-op).

    The shard count is fixed for the life of the namespace: it bounds how many workers
    can fire in parallel. Every other command needs the namespace initialised. The server
    must not evict keys (maxmemory-policy noeviction) and should keep an AOF.
    """
    with errors(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DurabilityWarning)
        meta = app.client.init(shards=shards, bucket_ms=bucket_ms, allow_eviction=allow_eviction)
    for w in caught:
        click.echo(f"Warning: {w.message}", err=True)
    info = {
        "namespace": app.namespace,
        "shards": meta.shards,
        "bucket_ms": meta.bucket_ms,
        "format": meta.version,
        "redis": app.safe_url,
    }
    emit(
        app.json,
        info,
        f"Namespace {app.namespace!r}: {meta.shards} shards, "
        f"{meta.bucket_ms} ms buckets, data format {meta.version}, at {app.safe_url}",
    )


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
    stderr. Stop the namespace's workers first. Interrupted (Ctrl-C, a lost
    connection), it leaves every shard consistent: run it again and it goes on. It is
    one way: an earlier release cannot read the converted namespace.

    \b
    Example:
      tickwheel --namespace jobs migrate --yes
    """
    with errors():
        current = app.client.data_format()
        if current < FORMAT_VERSION and not yes:
            click.confirm(
                f"Convert namespace {app.namespace!r} from format {current} to "
                f"{FORMAT_VERSION}? Its workers must be stopped, and only this tickwheel "
                "version reads it afterwards",
                abort=True,
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


def _payload(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except RecursionError:
        raise click.BadParameter(
            "JSON nested too deep to read; a payload nests at most 500 levels",
            param_hint="--payload",
        ) from None
    except ValueError as exc:
        raise click.BadParameter(
            f"not valid JSON ({exc}); e.g. --payload '{{\"job\": 42}}'", param_hint="--payload"
        ) from None


def _timer_dict(t: Any) -> dict[str, Any]:
    return {
        "id": t.id,
        "shard": t.shard,
        "deadline_ms": t.deadline_ms,
        "deadline": format_ms(t.deadline_ms),
        "state": t.state,
        "created": t.created,
    }


@click.command()
@click.argument("timer_id")
@click.option("--in", "delay_ms", type=DURATION, help="Fire after this long, e.g. 30s, 500ms, 2m.")
@click.option("--at", "deadline_ms", type=INSTANT, help="Fire at this ISO-8601 time (Redis clock).")
@click.option("--payload", help="JSON payload delivered with the outcome.")
@click.option(
    "--watch",
    multiple=True,
    metavar="KEY",
    help="Watch key; notifying it completes the timer early (repeatable).",
)
@click.option(
    "--need",
    type=int,
    default=1,
    show_default=True,
    help="How many distinct watch keys must be notified to complete.",
)
@click.option(
    "--rearm",
    is_flag=True,
    help="If TIMER_ID already ended (its outcome is kept for 24 h), schedule it again as a "
    "new timer instead of showing that outcome.",
)
@pass_app
def schedule(
    app: App,
    timer_id: str,
    delay_ms: int | None,
    deadline_ms: int | None,
    payload: str | None,
    watch: tuple[str, ...],
    need: int,
    rearm: bool,
) -> None:
    """Schedule timer TIMER_ID (idempotent: the same id again returns the existing one).

    \b
    Example: tickwheel schedule 'job:{42}' --in 30s --watch 'job:{42}:done'
    """
    if (delay_ms is None) == (deadline_ms is None):
        raise click.UsageError("give exactly one of --in DURATION or --at ISO-TIME")
    data = _payload(payload)
    with errors():
        t = app.client.schedule(
            timer_id, delay_ms, deadline_ms=deadline_ms, payload=data, watch=list(watch),
            need=need, rearm=rearm,
        )  # fmt: skip
    what = (
        "Scheduled"
        if t.created
        else ("Already pending" if t.state == "pending" else f"Already decided ({t.state})")
    )
    emit(
        app.json,
        _timer_dict(t),
        f"{what}: {t.id} on shard {t.shard}, deadline {format_ms(t.deadline_ms)}",
    )
    if deadline_ms is not None and t.created and deadline_ms < time.time() * 1000 - 1_000:
        # Allowed on purpose (a catch-up after downtime), but rarely what a person meant.
        click.echo(
            f"Note: {format_ms(deadline_ms)} is in the past: the timer is due at once.",
            err=True,
        )


@click.command()
@click.argument("timer_id")
@pass_app
def cancel(app: App, timer_id: str) -> None:
    """Cancel a pending timer (safe to repeat).

    Its outcome 'cancelled' goes to the outcome stream; cancelling a timer that already
    ended changes nothing and says so.
    """
    with errors():
        decided = app.client.cancel(timer_id)
    emit(
        app.json,
        {"id": timer_id, "cancelled": decided},
        f"Cancelled {timer_id}" if decided else f"{timer_id} was already decided",
    )


@click.command()
@click.argument("timer_id")
@click.option("--in", "delay_ms", type=DURATION, help="New delay from now.")
@click.option("--at", "deadline_ms", type=INSTANT, help="New ISO-8601 deadline.")
@pass_app
def reschedule(app: App, timer_id: str, delay_ms: int | None, deadline_ms: int | None) -> None:
    """Move a pending timer's deadline.

    Give the new deadline with --in (from now, by the Redis clock) or --at. A timer that
    has already ended is left as it is.
    """
    if (delay_ms is None) == (deadline_ms is None):
        raise click.UsageError("give exactly one of --in DURATION or --at ISO-TIME")
    with errors():
        t = app.client.reschedule(timer_id, delay_ms, deadline_ms=deadline_ms)
    if t is None:
        emit(
            app.json,
            {"id": timer_id, "rescheduled": False},
            f"{timer_id} was already decided; nothing changed",
        )
    else:
        emit(
            app.json,
            {**_timer_dict(t), "rescheduled": True},
            f"Rescheduled {timer_id} to {format_ms(t.deadline_ms)}",
        )


@click.command()
@click.argument("key")
@pass_app
def notify(app: App, key: str) -> None:
    """Notify watch key KEY: completes the timers that now have enough keys.

    A timer completes when --need of its watch keys were notified; notifying the same key
    twice counts once. Only timers watching KEY now are affected.
    """
    with errors():
        n = app.client.notify(key)
    emit(app.json, {"key": key, "completed": n}, f"Notified {key}: {n} timer(s) completed")


@click.command()
@click.argument("timer_id")
@pass_app
def complete(app: App, timer_id: str) -> None:
    """Decide a pending timer as completed now.

    Like notifying its watch keys, for a timer you know by id. Safe to repeat.
    """
    with errors():
        decided = app.client.complete(timer_id)
    emit(
        app.json,
        {"id": timer_id, "completed": decided},
        f"Completed {timer_id}" if decided else f"{timer_id} was already decided",
    )


def _info_dict(info: TimerInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "state": info.state,
        "shard": info.shard,
        "deadline_ms": info.deadline_ms,
        "deadline": format_ms(info.deadline_ms),
        "decided_ms": info.decided_ms,
        "created_ms": info.created_ms,
        "payload": info.payload,
        "watch": list(info.watch),
        "need": info.need,
        "got": list(info.got),
    }


@click.command()
@click.argument("timer_id")
@pass_app
def get(app: App, timer_id: str) -> None:
    """Show a timer: pending with its deadline, or how it ended.

    Ended timers are remembered for the result TTL (24 h by default); after that, and
    for ids never scheduled, it exits 6.
    """
    with errors():
        info = app.client.get(timer_id)
    if info is None:
        raise TimerCommandError(
            TimerNotFound(
                f"no timer {timer_id!r} in namespace {app.namespace!r} (or its outcome is "
                "older than the result TTL)"
            )
        )
    d = _info_dict(info)
    emit(
        app.json,
        d,
        pairs({k: (to_json(v) if isinstance(v, (dict, list, bytes)) else v) for k, v in d.items()}),
    )


def _outcome_dict(o: Outcome) -> dict[str, Any]:
    return {
        "id": o.id,
        "outcome": o.outcome,
        "deadline_ms": o.deadline_ms,
        "decided_ms": o.decided_ms,
        "lateness_ms": o.lateness_ms,
        "shard": o.shard,
        "payload": o.payload,
    }


@click.command()
@click.argument("timer_id")
@click.option("--timeout", type=SECONDS, default=30.0, show_default=True, help="Seconds to wait.")
@pass_app
def wait(app: App, timer_id: str, timeout: float) -> None:
    """Block until the timer is decided and print how it ended.

    Exits 8 if it is still pending after --timeout seconds, 6 if there is no such timer.
    """
    with errors():
        o = app.client.wait(timer_id, timeout=timeout)
    emit(
        app.json,
        _outcome_dict(o),
        f"{o.id}: {o.outcome} at {format_ms(o.decided_ms)} "
        f"({o.lateness_ms:+d} ms from its deadline)",
    )


@click.command()
@click.option(
    "--group",
    default=None,
    help="Read through this consumer group, acknowledging each outcome once printed "
    "(each goes to one consumer of the group).",
)
@click.option("--consumer", default=None, help="Consumer name in the group (default host-pid).")
@click.option(
    "--history",
    is_flag=True,
    help="Without --group: start with every outcome the streams hold, not only new ones.",
)
@click.option("--count", type=int, default=None, help="Stop after this many outcomes.")
@click.option("--idle-exit", is_flag=True, help="Stop when no outcome is waiting.")
@pass_app
def tail(
    app: App,
    group: str | None,
    consumer: str | None,
    history: bool,
    count: int | None,
    idle_exit: bool,
) -> None:
    """Print outcomes as they come (one JSON object per line with --json).

    Without --group this only watches: it shows each new outcome (every retained one
    first with --history) and leaves nothing behind in Redis. With --group, outcomes
    are read through that consumer group and acknowledged once printed; to run code
    per outcome, use `tickwheel handle` instead.
    """
    if group is None and consumer is not None:
        raise click.UsageError("--consumer goes with --group")
    if group is not None and history:
        raise click.UsageError("--history is for watching without --group")
    seen = 0
    with errors():
        if group is None:
            stream = app.client.follow(history=history, stop_when_idle=idle_exit)
        else:
            name = consumer or f"{socket.gethostname()}-{os.getpid()}"
            stream = app.client.outcomes(group, name, block_ms=1000, stop_when_idle=idle_exit)
        for o in stream:
            if app.json:
                click.echo(to_json(_outcome_dict(o)))
            else:
                click.echo(
                    f"{format_ms(o.decided_ms)}  {o.outcome:<9}  {o.id}  "
                    f"late {o.lateness_ms} ms  payload {to_json(o.payload)}"
                )
            if group is not None:
                o.ack()
            seen += 1
            if count is not None and seen >= count:
                break


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
    help="Also drop outcomes a consumer group has not acked yet (that group never sees them).",
)
@pass_app
def trim(app: App, retention_ms: int, drop_unread: bool) -> None:
    """Drop old outcomes from every shard's stream.

    An outcome stays, whatever its age, until every consumer group of its stream has been
    handed it and has acked it (unless --drop-unread). Workers do this on their own for
    the shards they lead (tickwheel worker --outcome-retention, 1 hour by default). Each
    run also drops, from part of each shard's results table, the outcomes kept for get,
    wait and retries whose result_ttl (24 hours by default) has passed.
    """
    with errors():
        done = app.client.trim_outcomes(retention_ms, keep_unread=not drop_unread)
    removed = sum(t.removed for t in done)
    dropped = sum(t.results_dropped for t in done)
    held = [t.shard for t in done if t.held_by_group]
    note = f"; consumer groups kept older entries on shards {held}" if held else ""
    counts = {"removed": removed, "held_by_group": held, "shards": len(done)}
    emit(
        app.json,
        {**counts, "results_dropped": dropped},
        f"Removed {removed} outcomes from {len(done)} shards{note}; dropped {dropped} "
        "retained outcomes past their result_ttl",
    )


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
        "aof": "on" if all(v["aof"] for v in st["servers"]) else "OFF on some server",
        "consumer_groups": len(groups),
        "stale_groups": ", ".join(stale) or "none",
        "dead_letters": dead,
        "data_format": app.client.meta.version,
    }
    if held is not None:
        summary["bytes_per_pending_timer"] = held["bytes_per_pending_timer"]
        summary["bytes_per_decided_timer"] = held["bytes_per_decided_timer"]
        summary["retained_outcomes"] = held["retained_in_table"]  # the results table's
    emit(
        app.json,
        summary if not app.json else {**summary, "per_shard": st["shards"],
                                      "servers": st["servers"]},
        pairs(summary),
    )  # fmt: skip


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
