"""``tickwheel dead``: look after dead letters, outcomes whose handler failed every
attempt (the groups they came from: ``groups_cmd``)."""

from __future__ import annotations

import shlex
from typing import Any

import click

from timer.durable.groups.dead import MOST
from timer.durable.model.entries import parse_ref
from timer.durable.model.models import DeadBatch
from timer.errors import NotFound, quoted
from timer.shapes import dead_letter_json

from .app import App, NoAnswer, TimerCommandError, confirm, errors, pass_app
from .durations import format_ms
from .output import emit, plural, table, to_json


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
            _first_line(d.error, 60),
        )
        for d in letters
    ]
    human = (
        table(rows, ("ref", "group", "timer", "outcome", "attempts", "failed", "error"))
        if rows
        else _none_listed(total, group, error, match)
    )
    if len(letters) == limit and total > len(letters) and not app.json:
        human += f"\n({len(letters)} shown of {total} in all; --limit for more)"
    emit(app.json, [dead_letter_json(d) for d in letters], human)


def _first_line(text: str, most: int) -> str:
    """An error's first line in at most ``most`` characters, ``…`` where it was cut (or
    where more lines follow): `dead show REF` has the whole of it."""
    lines = text.splitlines() or [""]
    first = lines[0]
    if len(first) > most:
        return first[: most - 1] + "…"
    return first + (" …" if len(lines) > 1 else "")


def _none_listed(total: int, group: str | None, error: str | None, match: str | None) -> str:
    """What `dead list` says when it lists none: that the filters selected none of those
    there are (it said "No dead letters." with 3 there, trial 30), or that there are none."""
    given = [(flag, v) for flag, v in (("--group", group), ("--error", error), ("--match", match))]
    filters = " ".join(f"{flag} {shlex.quote(v)}" for flag, v in given if v is not None)
    if not filters or not total:
        return "No dead letters."
    return f"No dead letters match {filters} ({total} in the namespace)."


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
    100,000 at once): --all asks first, saying how many, unless --yes; with no terminal
    to answer on it goes ahead, warned, as it did before it asked (unlike `dead drop`,
    it is not for good); if another count matches by the time you answer, nothing is
    redelivered (exit 14).
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
                # why it goes ahead where `dead drop` does not: see NOT_FOR_GOOD
                unasked_before=f"dead redeliver --all ({NOT_FOR_GOOD})",
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
    by --group, --error, --match). Asks first, saying how many, unless --yes; a REF that
    names no dead letter is refused before the question (exit 6). With no terminal to
    answer on it drops nothing (exit 2: add --yes); if another count matches by the time
    you answer, nothing is dropped (exit 14).
    """
    _check(refs, everything, group, error, match)
    _known(app, group)
    expect: int | None = None
    if not yes:
        with errors():
            if refs:
                expect = len(_existing(app, refs))
            else:
                selected = app.client.dead_letters(group, error=error, match=match, limit=MOST + 1)
                expect = len(selected)
        if expect:
            try:
                confirm(f"Delete {plural(expect, 'dead letter')} for good?")
            except NoAnswer as exc:  # why it stops where `dead redeliver --all` goes ahead
                raise NoAnswer(f"{exc.message} ({FOR_GOOD})") from None
    with errors():
        done = app.client.drop_dead_letters(
            list(refs) if refs else None, group=group, error=error, match=match, expect=expect
        )
    _report(app, "dropped", done)


# `dead redeliver --all` and `dead drop` with no terminal to ask on: a redeliver goes
# ahead (warned) as it did before it asked, and loses nothing; a drop, which always
# asked, refuses (exit 2): what it deletes is gone. Each says why, naming the other.
NOT_FOR_GOOD = "unlike `dead drop`, not for good: a letter that fails again is dead-lettered again"
FOR_GOOD = (
    "a drop is for good: unlike `dead redeliver --all`, which loses nothing, it does not go "
    "ahead unasked"
)


def _existing(app: App, refs: tuple[str, ...]) -> list[str]:
    """The refs given, each as the library names it (``03/…`` is ``3/…``; once each),
    after checking every one names a dead letter: before any question, a ref of none is
    refused (exit 6), where `dead drop 3/1-0` asked to delete 1 dead letter for good, and
    with no terminal said to add --yes (trial 30). Called under ``errors()``."""
    named = list(
        dict.fromkeys(
            f"{shard}/{eid}"
            for shard, eid in (parse_ref(ref, app.client.meta.shards) for ref in refs)
        )
    )  # every ref's form checked before any is looked up
    missing = [ref for ref in named if app.client.dead_letter(ref) is None]
    if missing:
        raise NotFound(
            f"no dead letter {', '.join(missing)} (see `tickwheel dead list`): nothing dropped"
        )
    return named


def _check(
    refs: tuple[str, ...], everything: bool, group: str | None, error: str | None, match: str | None
) -> None:
    if everything == bool(refs):
        given = [f for f, v in (("--group", group), ("--error", error), ("--match", match)) if v]
        narrows = f" ({' and '.join(given)} narrow{'s' * (len(given) == 1)} --all)"
        raise click.UsageError(
            "name dead letters by their refs (see `tickwheel dead list`), or --all"
            + (narrows if given and not refs else "")
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


_VERBS = {"redelivered": "redeliver", "dropped": "drop"}


def _report(app: App, verb: str, batch: DeadBatch) -> None:
    done, missing = batch.done, batch.missing
    if missing and not done:
        raise TimerCommandError(
            NotFound(f"no dead letter {', '.join(missing)} (see `tickwheel dead list`)")
        )
    human = f"{verb.capitalize()} {plural(len(done), 'dead letter')}"
    if not done and not missing:  # --all selected none: "Redelivered 0" read as a failure
        human = f"No dead letters to {_VERBS[verb]}: none matched (nothing changed)"
    if missing:
        human += f"; not found: {', '.join(missing)}"
    emit(app.json, {verb: done, "missing": missing}, human)
    if missing:  # some were done: say which, and exit as a missing one does
        raise SystemExit(6)
