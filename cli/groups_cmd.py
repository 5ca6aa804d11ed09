"""``tickwheel groups`` and ``dead``: see and manage consumer groups, and look after
dead letters."""

from __future__ import annotations

from typing import Any

import click

from timer.durable.groups.admin import no_group
from timer.durable.groups.dead import MOST
from timer.durable.model.entries import parse_ref
from timer.durable.model.models import DeadBatch, GroupInfo
from timer.errors import NotFound, quoted
from timer.shapes import dead_letter_json, group_json

from .app import App, TimerCommandError, confirm, errors, pass_app
from .durations import DURATION, format_ms
from .output import age_text, emit, plural, table, to_json


def _group_dict(g: GroupInfo, now_ms: int, retention_ms: int) -> dict[str, Any]:
    """A group as every door shows it, and (the CLI's own) whether it is stale by
    ``--retention``."""
    return {**group_json(g), "stale": g.stale(now_ms, retention_ms)}


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
    """Consumer groups: consumers, pending, retrying, later, lag, oldest pending age.

    Of those pending, `retrying` failed and wait for their retry; `later` wait to be
    looked at again at their handler's request (a Celery task sent, its start not yet
    confirmed): no failure.

    A group keeps every outcome it has not acknowledged from being trimmed: delete one
    nobody reads any more with `tickwheel groups delete NAME`. `groups pause NAME` stops
    its runners taking new outcomes (during an incident downstream, a deploy); `groups
    resume NAME` starts them again.
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
        rows.append(
            (
                g.name
                + (" STALE" if g.stale(now, retention_ms) else "")
                + (f" PAUSED by {g.paused_by}" if g.paused else ""),
                names,
                g.pending,
                g.retrying,
                g.later,
                "?" if g.lag is None else g.lag,
                "-" if age is None else age_text(age),
            )
        )
    heads = ("group", "consumers(pending)", "pending", "retrying", "later", "lag", "oldest")
    human = table(rows, heads) if rows else "No consumer groups."
    stale = [g.name for g in found if g.stale(now, retention_ms)]
    if stale and not app.json:
        human += (
            f"\nSTALE: {', '.join(stale)} owe outcomes older than the retention and keep "
            "them from being trimmed; run their handlers, or delete the group."
        )
    if any(g.later for g in found) and not app.json:
        human += (
            "\nlater: pending at their handler's request, not stuck: each is looked at again "
            "when its handler said (the Celery sender: every delivery timeout, 30s by "
            "default, until the task it sent has started)"
        )
    emit(app.json, [_group_dict(g, now, retention_ms) for g in found], human)


@groups.command("pause")
@click.argument("name")
@click.option("--by", default=None, metavar="WHO", help="Who pauses it [default: user@host].")
@pass_app
def groups_pause(app: App, name: str, by: str | None) -> None:
    """Pause consumer group NAME: within a second its runners take nothing new.

    Handlers already running finish and are acknowledged; new outcomes wait in the
    streams (kept from trimming) until `tickwheel groups resume NAME`. The runners keep
    running; outcomes they hold and have not started stay pending, untouched. `tickwheel
    groups` shows who paused it.
    """
    with errors():
        new = app.client.pause_group(name, by=by)
    said = f"Paused group {name!r}" if new else f"Group {name!r} was paused already"
    emit(app.json, {"paused": name, "new": new}, said)


@groups.command("resume")
@click.argument("name")
@pass_app
def groups_resume(app: App, name: str) -> None:
    """Resume consumer group NAME: its runners take up within a second.

    What waited in the streams while it was paused is handled then, oldest first per
    shard, as after any backlog.
    """
    with errors():
        was = app.client.resume_group(name)
    said = f"Resumed group {name!r}" if was else f"Group {name!r} was not paused"
    emit(app.json, {"resumed": name, "was_paused": was}, said)


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
        raise TimerCommandError(no_group(app.namespace, name, known))
    g = known[name]
    if not yes:
        confirm(f"Delete group {name!r} ({g.pending} pending, lag {g.lag})?")
    with errors():
        removed = app.client.delete_group(name)
    emit(
        app.json,
        {"deleted": name, "shards": removed},
        f"Deleted group {name!r} on {plural(removed, 'shard')}",
    )


@click.group()
def dead() -> None:
    """Dead letters: outcomes whose handler failed every attempt.

    Each is named by its ref (SHARD/ID) as `tickwheel dead list` shows it.
    """


def _filters(f: Any) -> Any:
    """--group, --error and --match: which dead letters (each optional)."""
    f = click.option(
        "--match", default=None, metavar="GLOB", help="Only those whose timer id matches GLOB."
    )(f)
    f = click.option(
        "--error",
        default=None,
        metavar="TEXT",
        help="Only those whose error holds TEXT, in any case.",
    )(f)
    return click.option("--group", default=None, help="Only this group's dead letters.")(f)


@dead.command("list")
@_filters
@click.option(
    "--limit",
    type=click.IntRange(1, 100_000),
    default=100,
    show_default=True,
    help="The most dead letters listed.",
)
@pass_app
def dead_list(
    app: App, group: str | None, error: str | None, match: str | None, limit: int
) -> None:
    """Dead letters, oldest first: ref, group, timer, attempts, last error.

    The REF names one for `dead show`, `dead redeliver` and `dead drop`; the same
    --group, --error and --match with `--all` act on what this lists.
    """
    with errors():
        letters = app.client.dead_letters(group, error=error, match=match, limit=limit)
        total = app.client.dead_letters_total()
    if not letters:
        _known(app, group)
    rows = [
        (
            d.ref,
            d.group,
            d.outcome.id if d.outcome else "?",
            d.outcome.outcome if d.outcome else "?",
            d.attempts,
            format_ms(d.failed_ms),
            (d.error.splitlines() or [""])[0][:60],
        )
        for d in letters
    ]
    human = (
        table(rows, ("ref", "group", "timer", "outcome", "attempts", "failed", "error"))
        if rows
        else "No dead letters."
    )
    if len(letters) == limit and total > len(letters) and not app.json:
        human += f"\n({len(letters)} shown of {total} in all; --limit for more)"
    emit(app.json, [dead_letter_json(d) for d in letters], human)


@dead.command("show")
@click.argument("ref")
@pass_app
def dead_show(app: App, ref: str) -> None:
    """One dead letter in full: its outcome, payload, the last error's traceback and the
    earlier attempts' errors.

    REF is <shard>/<id> as `tickwheel dead list` shows it.
    """
    with errors():
        d = app.client.dead_letter(ref)
    if d is None:
        raise TimerCommandError(NotFound(f"no dead letter {ref} (see `tickwheel dead list`)"))
    data = dead_letter_json(d)
    o = data["outcome"]
    human = "\n".join(
        [
            f"ref       {d.ref}",
            f"group     {d.group}  (consumer {d.consumer})",
            f"attempts  {d.attempts}, last failed {format_ms(d.failed_ms)}",
            f"timer     {o['id']} {o['outcome']}, deadline {format_ms(o['deadline_ms'])}"
            if o
            else "timer     (its outcome had been trimmed)",
            f"payload   {to_json(o['payload'], for_people=True)}" if o else "",
            "error:",
            d.error,
            *(
                f"earlier: attempt {e.attempt}, {format_ms(e.failed_ms)}: {e.error.splitlines()[0]}"
                for e in d.earlier
                if e.error
            ),
        ]
    )
    emit(app.json, data, human)


@dead.command("redeliver")
@click.argument("refs", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Every dead letter the filters select.")
@_filters
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (--all asks).")
@pass_app
def dead_redeliver(
    app: App,
    refs: tuple[str, ...],
    everything: bool,
    group: str | None,
    error: str | None,
    match: str | None,
    yes: bool,
) -> None:
    """Put dead letters back in front of their group's handlers (attempts start again).

    Each becomes a new outcome entry for its group only; other groups skip it. Name them
    by REF, or take every one with --all (narrowed by --group, --error, --match; at most
    100,000 at once): --all asks first, saying how many, unless --yes; if another count
    matches by the time you answer, nothing is redelivered (exit 14).
    """
    _check(refs, everything, group, error, match)
    _known(app, group)
    expect: int | None = None
    if everything and not yes:  # as every other bulk action does
        with errors():
            expect = len(app.client.dead_letters(group, error=error, match=match, limit=MOST + 1))
        if expect:
            asked = confirm(
                f"Redeliver {plural(expect, 'dead letter')} to their groups' handlers?",
                unasked_before="dead redeliver --all",
            )
            if not asked:  # as before it asked: every dead letter matching then
                expect = None
    with errors():
        done = app.client.redeliver_dead_letters(
            list(refs) if refs else None, group=group, error=error, match=match, expect=expect
        )
    _report(app, "redelivered", done)


@dead.command("drop")
@click.argument("refs", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Every dead letter the filters select.")
@_filters
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_app
def dead_drop(
    app: App,
    refs: tuple[str, ...],
    everything: bool,
    group: str | None,
    error: str | None,
    match: str | None,
    yes: bool,
) -> None:
    """Delete dead letters for good.

    Name them by REF (as `tickwheel dead list` shows), or every one with --all (narrowed
    by --group, --error, --match). Asks first, saying how many, unless --yes; if another
    count matches by the time you answer, nothing is dropped (exit 14).
    """
    _check(refs, everything, group, error, match)
    _known(app, group)
    expect: int | None = None
    if not yes:
        with errors():
            if refs:
                for ref in refs:  # every ref checked before any question
                    parse_ref(ref, app.client.meta.shards)
                expect = len(set(refs))
            else:
                selected = app.client.dead_letters(group, error=error, match=match, limit=MOST + 1)
                expect = len(selected)
        if expect:
            confirm(f"Delete {plural(expect, 'dead letter')} for good?")
    with errors():
        done = app.client.drop_dead_letters(
            list(refs) if refs else None, group=group, error=error, match=match, expect=expect
        )
    _report(app, "dropped", done)


def _check(
    refs: tuple[str, ...], everything: bool, group: str | None, error: str | None, match: str | None
) -> None:
    if everything == bool(refs):
        raise click.UsageError(
            "name dead letters by their refs (see `tickwheel dead list`), or --all"
        )
    if refs and (group or error or match):
        raise click.UsageError("--group, --error and --match go with --all")


def _known(app: App, group: str | None) -> None:
    """NotFound (exit 6) for a --group that names no consumer group and no dead letter's:
    a mistyped name listed nothing and redelivered 0, as an empty group does (trial 12),
    where `groups delete` of it says there is none. (A deleted group's dead letters keep
    its name, so those still count.)"""
    if group is None:
        return
    with errors():
        names = sorted(g.name for g in app.client.groups())
        if group in names or app.client.dead_letters(group, limit=1):
            return
    raise TimerCommandError(
        NotFound(
            f"no consumer group {quoted(group)} in namespace {quoted(app.namespace)}, "
            "and no dead letter "
            f"of one (groups: {', '.join(names) or 'none'})"
        )
    )


def _report(app: App, verb: str, batch: DeadBatch) -> None:
    done, missing = batch.done, batch.missing
    if missing and not done:
        raise TimerCommandError(
            NotFound(f"no dead letter {', '.join(missing)} (see `tickwheel dead list`)")
        )
    human = f"{verb.capitalize()} {plural(len(done), 'dead letter')}"
    if missing:
        human += f"; not found: {', '.join(missing)}"
    emit(app.json, {verb: done, "missing": missing}, human)
    if missing:  # some were done: say which, and exit as a missing one does
        raise SystemExit(6)
