"""``tickwheel timers``: find timers by id pattern, state and deadline, and act on many at
once (cancel, complete, notify, reschedule) with a dry run, a confirmation and progress.
Each call to Redis scans a bounded page (``TimerClient.timers``)."""

from __future__ import annotations

import functools
import shlex
import sys
from collections.abc import Callable
from typing import Any, TypedDict, Unpack

import click

from timer.durable.model.models import TimerInfo
from timer.durable.timers.finding import STATES, Bulk, MoveOptions
from timer.shapes import timer_info_json

from .app import App, confirm, errors, pass_app
from .choice import Choice
from .durations import DURATION, INSTANT, format_ms
from .one_timer_cmd import say_past
from .output import emit, plural, table, to_json

STATE_CHOICE = Choice([*STATES, "decided", "any"])


@click.group()
def timers() -> None:
    """Find timers by id pattern, state and deadline; act on many at once.

    MATCH is a glob on the timer id as Redis reads it: `*` any run of characters, `?` one,
    `[abc]` a set, `\\` escapes; quote it for the shell ('job:*'). Every call to Redis
    scans a bounded page, never the whole keyspace at once.
    """


def selection_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.option(
                "--from",
                "deadline_from",
                type=INSTANT,
                default=None,
                help="Only deadlines at or after this ISO-8601 time "
                "(UTC unless it gives an offset).",
            ),
            click.option(
                "--to",
                "deadline_to",
                type=INSTANT,
                default=None,
                help="Only deadlines at or before this ISO-8601 time "
                "(UTC unless it gives an offset).",
            ),
            click.option(
                "--page",
                "page_size",
                type=click.IntRange(1, 100_000),
                default=1000,
                show_default=True,
                help="Entries each call to Redis scans.",
            ),
        ]
    ):
        fn = option(fn)

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        lo, hi = kwargs.get("deadline_from"), kwargs.get("deadline_to")
        if lo is not None and hi is not None and lo > hi:  # said as the options, not the API's
            raise click.UsageError(
                f"--from {format_ms(lo)} is after --to {format_ms(hi)}: nothing is between "
                "them (swap them?)"
            )
        return fn(*args, **kwargs)

    return checked


def _row(t: TimerInfo) -> tuple[Any, ...]:
    return (
        t.id,
        t.state,
        t.shard,
        format_ms(t.deadline_ms) if t.deadline_ms else "?",
        format_ms(t.decided_ms) if t.decided_ms else "-",
        to_json(t.payload, for_people=True)[:40],
    )


@timers.command("list")
@click.argument("match", default="*")
@click.option(
    "--state",
    "states",
    type=STATE_CHOICE,
    multiple=True,
    help="pending (default), expired, cancelled, completed, decided or any; repeatable.",
)
@selection_options
@click.option(
    "--limit",
    type=click.IntRange(1, 1_000_000),
    default=100,
    show_default=True,
    help="Show at most this many: the first found in the order above, not the soonest due.",
)
@pass_app
def list_(
    app: App,
    match: str,
    states: tuple[str, ...],
    deadline_from: int | None,
    deadline_to: int | None,
    page_size: int,
    limit: int,
) -> None:
    """List the timers whose id matches MATCH (default: all), pending unless --state says
    otherwise: id, state, shard, deadline, decided, payload.

    Order: as found, shard by shard (shard 0 first), in no set order within a shard, the
    pending before the ended; not by deadline. --limit keeps the first it finds in that
    order. The Timers view of `tickwheel dashboard` lists the pending timers by next due.

    \b
    Example: tickwheel timers list 'job:*' --state decided --limit 20
    """
    shown: list[TimerInfo] = []
    with errors():
        found = app.client.timers.scan(
            match,
            state=list(states) or "pending",
            deadline_from_ms=deadline_from,
            deadline_to_ms=deadline_to,
            count=page_size,
        )
        for t in found:
            if len(shown) == limit:
                if not app.json:
                    click.echo(f"(the first {limit} shown; --limit for more)", err=True)
                break
            shown.append(t)
    headers = ("id", "state", "shard", "deadline", "decided", "payload")
    human = (
        table([_row(t) for t in shown], headers)
        if shown
        else f"No {_which(states)}timers match {match!r}{literal_hint(match, 0) or '.'}"
    )
    emit(app.json, [timer_info_json(t) for t in shown], human)


def literal_hint(match: str, found: int) -> str:
    """What a pattern that matched nothing adds: without glob characters it matches that
    one id only, so ``job`` finds no ``job:{1}`` (a new user's first try); with a ``[``
    no ``]`` closes, that the set it opens runs to the pattern's end."""
    if found:
        return ""
    opened = unclosed_bracket(match)
    if opened is not None:
        literal = shlex.quote(match[:opened] + "\\" + match[opened:])
        return (
            f" (its [ at character {opened + 1} opens a set of characters that no ] closes: "
            f"the set runs to the end of the pattern; for a bracket itself write \\[, as in "
            f"{literal})"
        )
    if any(c in match for c in "*?["):
        return ""
    return f" (a pattern without * matches that id only: did you mean {match + '*'!r}?)"


def unclosed_bracket(match: str) -> int | None:
    """Where in ``match`` a ``[`` opens a set that no ``]`` closes, read as Redis reads a
    glob (``\\`` escapes the next character, in a set too; a ``^`` first negates it, a
    ``]`` closes it, except as a range's end: ``[a-]`` is open), or None."""
    i = 0
    while i < len(match):
        if match[i] == "\\":
            i += 2
            continue
        if match[i] == "[":
            start, i = i, i + 1 + (match[i + 1 : i + 2] == "^")
            while i < len(match) and match[i] != "]":
                ranged = i + 2 < len(match) and match[i + 1] == "-"  # a-z: z may be a ]
                i += 3 if ranged else 2 if match[i] == "\\" else 1
            if i >= len(match):
                return start
        i += 1
    return None


def _which(states: tuple[str, ...]) -> str:
    """The states selected, as the words before "timers": ``pending ``, ``expired/failed ``
    (none given: pending), or nothing for any."""
    return "" if "any" in states else "/".join(states or ("pending",)) + " "


@timers.command()
@click.argument("match", default="*")
@click.option(
    "--state",
    "states",
    type=STATE_CHOICE,
    multiple=True,
    help="pending (default), expired, cancelled, completed, decided or any; repeatable.",
)
@selection_options
@pass_app
def count(
    app: App,
    match: str,
    states: tuple[str, ...],
    deadline_from: int | None,
    deadline_to: int | None,
    page_size: int,
) -> None:
    """Count the timers whose id matches MATCH (default: all), pending unless --state
    says otherwise (a whole scan, page by page)."""
    with errors():
        n = app.client.timers.count(
            match,
            state=list(states) or "pending",
            deadline_from_ms=deadline_from,
            deadline_to_ms=deadline_to,
        )
    # the state counted is said, as `timers list` says it: "3 timers match" read as all
    said = f"{plural(n, _which(states) + 'timer')} {'matches' if n == 1 else 'match'} {match!r}"
    said += literal_hint(match, n)
    emit(app.json, {"match": match, "count": n}, said)


class ActionArgs(TypedDict):
    """What ``action_options`` and ``selection_options`` give a bulk action's callback."""

    deadline_from: int | None
    deadline_to: int | None
    page_size: int
    dry_run: bool
    yes: bool


def action_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.argument("match"),
            click.option(
                "--dry-run", is_flag=True, help="Only say how many timers it would act on."
            ),
            click.option("--yes", is_flag=True, help="Do not ask for confirmation."),
        ]
    ):
        fn = option(fn)
    return selection_options(fn)


VERBS = {
    "cancel": "cancelled",
    "complete": "completed",
    "notify": "notified",
    "reschedule": "rescheduled",
}


def _run(app: App, action: str, match: str, opts: ActionArgs, **move: Unpack[MoveOptions]) -> None:
    """Count (dry run), ask unless --yes, then act page by page with progress."""
    run = getattr(app.client.timers, action)
    where = {
        "deadline_from_ms": opts["deadline_from"],
        "deadline_to_ms": opts["deadline_to"],
        "count": opts["page_size"],
    }
    with errors():
        if opts["dry_run"] or not opts["yes"]:
            n = run(match, dry_run=True, **where, **move).selected
            if opts["dry_run"]:
                emit(
                    app.json,
                    {"action": action, "match": match, "selected": n, "dry_run": True},
                    f"Would {action} {plural(n, 'pending timer')} matching {match!r}"
                    + literal_hint(match, n),
                )
                return
            if n == 0:
                said = f"No pending timer matches {match!r}{literal_hint(match, 0) or '.'}"
                emit(app.json, _report(Bulk(action), match), said)
                return
            confirm(f"{action.capitalize()} {plural(n, 'pending timer')} matching {match!r}?")
        done = run(match, progress=_progress(app, action), **where, **move)
    if sys.stderr.isatty() and not app.json:
        click.echo("\r\x1b[K", nl=False, err=True)  # the progress line gives way to the count
    human = (
        f"{VERBS[action].capitalize()} {done.done} of {plural(done.selected, 'pending timer')}"
        f" matching {match!r}{literal_hint(match, done.selected)}"
    )
    if action == "notify":
        human += f" ({plural(done.keys, 'watch key')} notified)"
    if done.skipped:
        human += f"; {done.skipped} decided meanwhile"
    if done.errors:
        human += f"; {plural(len(done.errors), 'error')}: {done.errors[0]}"
    emit(app.json, _report(done, match), human)
    if done.errors:
        raise SystemExit(1)


def _report(b: Bulk, match: str) -> dict[str, Any]:
    return {
        "action": b.action,
        "match": match,
        "selected": b.selected,
        "done": b.done,
        "skipped": b.skipped,
        "keys": b.keys,
        "errors": b.errors,
    }


def _progress(app: App, action: str) -> Callable[[Bulk], None] | None:
    if app.json or not sys.stderr.isatty():
        return None

    def show(b: Bulk) -> None:
        click.echo(f"\r{VERBS[action]} {b.done} of {b.selected} so far", nl=False, err=True)

    return show


@timers.command()
@action_options
@pass_app
def cancel(app: App, /, match: str, **opts: Unpack[ActionArgs]) -> None:
    """Cancel every pending timer whose id matches MATCH ('*' for all), within --from and
    --to. Counts them and asks first unless --yes; --dry-run only counts."""
    _run(app, "cancel", match, opts)


@timers.command()
@action_options
@pass_app
def complete(app: App, /, match: str, **opts: Unpack[ActionArgs]) -> None:
    """Complete every pending timer whose id matches MATCH ('*' for all), within --from
    and --to: each ends as completed, as if its watch keys had been notified. Counts
    them and asks first unless --yes; --dry-run only counts."""
    _run(app, "complete", match, opts)


@timers.command()
@action_options
@pass_app
def notify(app: App, /, match: str, **opts: Unpack[ActionArgs]) -> None:
    """Notify every watch key of the pending timers whose id matches MATCH (as `timers
    cancel`): each timer completes once enough of its keys were notified, and other
    timers watching those keys count them too."""
    _run(app, "notify", match, opts)


@timers.command()
@action_options
@click.option("--in", "delay_ms", type=DURATION, help="New deadline this long from now.")
@click.option(
    "--at",
    "deadline_ms",
    type=INSTANT,
    help="New ISO-8601 deadline (UTC unless it gives an offset, +01:00).",
)
@click.option("--by", "shift_ms", type=DURATION, help="Later by this much, each from its own.")
@pass_app
def reschedule(
    app: App,
    /,
    match: str,
    delay_ms: int | None,
    deadline_ms: int | None,
    shift_ms: int | None,
    **opts: Unpack[ActionArgs],
) -> None:
    """Move every pending timer whose id matches MATCH (as `timers cancel`): to --in from
    now, to --at, or --by later than its own deadline (each timer once)."""
    if sum(v is not None for v in (delay_ms, deadline_ms, shift_ms)) != 1:
        raise click.UsageError("give exactly one of --in DURATION, --at ISO-TIME or --by DURATION")
    if shift_ms == 0:  # each deadline where it was: it said "Rescheduled 30 of 30"
        raise click.UsageError(
            "--by 0s moves no timer: give a shift of more than nothing (--by 5m)"
        )
    _run(
        app,
        "reschedule",
        match,
        opts,
        delay_ms=delay_ms,
        deadline_ms=deadline_ms,
        shift_ms=shift_ms,
    )
    # as `reschedule --at` notes it (trial 35: five timers expired at once unsaid)
    say_past(app, deadline_ms, "the timers moved are")
