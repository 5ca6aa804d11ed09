"""``tickwheel schedules``: recurring schedules: create, list, get, pause, resume,
update, delete; ``preview`` shows when a spec's occurrences fall before anything is
created."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Unpack
from zoneinfo import ZoneInfo

import click

from timer import DuplicateTimer, ScheduleNotFound
from timer.clock import SYSTEM_TIME
from timer.durable.model.fields import ScheduleWhen
from timer.durable.schedules.records import MISSED, OVERLAP, ScheduleInfo, ScheduleSpec
from timer.durable.schedules.recurrence import Recurrence
from timer.shapes import schedule_json

from .app import App, TimerCommandError, confirm, errors, pass_app, starts_server, warn
from .choice import Choice
from .durations import DURATION, INSTANT, format_ms
from .one_timer_cmd import _payload
from .output import emit, plural, table
from .schedule_shown import show, warn_reset, warn_spec, warn_tz

SPEC_HELP = """Cron fields match local wall-clock time in --tz: a time the autumn repeat shows twice
fires once, at its first instant; a time the spring jump skips fires at the first
minute after it. Intervals (--every) are absolute time: DST does not move them."""


def with_spec_help(command: click.Command) -> None:
    """Append SPEC_HELP to ``command``'s help. Its docstring is dedented first: click
    dedents the help as a whole, and the appended paragraph (not indented) would leave
    the docstring's own lines indented as they are in the source."""
    command.help = inspect.cleandoc(command.help or "") + "\n\n" + SPEC_HELP


@click.group()
def schedules() -> None:
    """Recurring schedules: cron or intervals, in any time zone.

    Each occurrence is an ordinary durable timer, id {NAME}@<epoch ms>: fired once by
    the workers (never early), handled, retried and dead-lettered like any other; the
    next is armed in the same step that fires it.
    """


def _one_way(cron: str | None, every: object) -> None:
    """Neither or both of --cron and --every: a usage error (exit 2), as `schedule`'s
    --in/--at; the library's own refusal (InvalidInput, exit 3) is for Python and JSON."""
    if (cron is None) == (every is None):
        raise click.UsageError("give exactly one of --cron EXPR or --every DURATION")


def spec_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options that say when a schedule fires (create, update, preview)."""
    for option in reversed(
        [
            click.option(
                "--cron", help="A cron expression: 5 fields, or 6 with the seconds first."
            ),
            click.option("--every", type=DURATION, help="An interval instead, e.g. 30s, 5m, 1h."),
            click.option(
                "--offset", type=DURATION, default=0, help="With --every: shift each one."
            ),
            click.option(
                "--tz",
                default="UTC",
                show_default=True,
                help="IANA time zone of --cron.",
            ),
            click.option(
                "--start",
                type=INSTANT,
                help="No occurrence before this ISO-8601 time (UTC unless it gives an offset).",
            ),
            click.option(
                "--end",
                type=INSTANT,
                help="No occurrence after this ISO-8601 time (UTC unless it gives an offset).",
            ),
            click.option("--jitter", type=DURATION, default=0, help="Delay each by up to this."),
        ]
    ):
        fn = option(fn)
    return fn


def action_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """What an occurrence carries and what happens after an outage (create, update)."""
    for option in reversed(
        [
            click.option("--payload", help="JSON payload every occurrence carries."),
            click.option(
                "--watch",
                multiple=True,
                metavar="KEY",
                help="Watch key every occurrence carries: notifying it completes the "
                "occurrence early (repeatable; with the hash tag {NAME}, e.g. '{NAME}:done').",
            ),
            click.option(
                "--missed",
                type=Choice(MISSED),
                default="latest",
                show_default=True,
                help="After an outage: fire the latest missed occurrence, all (oldest first, at "
                "most 1,000), or skip them.",
            ),
            click.option(
                "--catch-up",
                "catch_up",
                type=DURATION,
                default="1h",
                show_default=True,
                help="Missed occurrences older than this are never fired.",
            ),
            click.option(
                "--overlap",
                type=Choice(OVERLAP),
                default="allow",
                show_default=True,
                help="An occurrence due while --group has not handled the previous one: fire it "
                "anyway (allow), pass it over (skip) or hold it until then (buffer-one).",
            ),
            click.option("--group", help="The handler group --overlap waits for."),
        ]
    ):
        fn = option(fn)
    return fn


@starts_server
@schedules.command()
@click.argument("name")
@spec_options
@action_options
@pass_app
def create(
    app: App,
    /,
    name: str,
    payload: str | None,
    watch: tuple[str, ...],
    **spec: Unpack[ScheduleWhen],
) -> None:
    """Create schedule NAME and arm its first occurrence.

    \b
    Examples:
      tickwheel schedules create nightly --cron '0 2 * * *' --tz Europe/Paris
      tickwheel schedules create heartbeat --every 30s --missed skip
    """
    _one_way(spec.get("cron"), spec.get("every"))
    data = _payload(payload)
    with errors():
        ScheduleSpec.of(**spec)  # a bad spec is said before Redis is reached
        try:
            made = app.client.schedules.create(name, payload=data, watch=watch, **spec)
        except DuplicateTimer:
            made = _same_as_asked(app, name, data, watch, spec)
    show(app, made)
    warn_spec(made)


def _same_as_asked(
    app: App, name: str, payload: Any, watch: tuple[str, ...], spec: ScheduleWhen
) -> ScheduleInfo:
    """The schedule NAME that exists, when it is what `create` asked for (the same spec
    and payload): a second run of a script that creates it goes on, as `schedule` does
    for a timer pending or decided already (a paused one stays paused: an operator's
    choice, said with how to resume it); otherwise the refusal, saying how to change it."""
    found = app.client.schedules.get(name)
    if (
        found is not None
        and found.spec == ScheduleSpec.of(**spec)
        and found.payload == payload
        and tuple(found.watch) == watch
    ):
        paused = f"; it is paused: `tickwheel schedules resume {name}`" * (found.state == "paused")
        click.echo(f"Already there: schedule {name}, as asked (unchanged){paused}.", err=True)
        return found
    raise TimerCommandError(
        DuplicateTimer(
            f"schedule {name} exists"
            + ("" if found is None else f" ({found.state}, {found.spec.describe()})")
            + f": `tickwheel schedules update {name} …` changes it (give its whole spec), "
            f"`schedules resume {name}` starts a paused one again, "
            f"`schedules delete {name}` deletes it"
        )
    )


with_spec_help(create)


@schedules.command()
@click.argument("name")
@spec_options
@action_options
@pass_app
def update(
    app: App,
    /,
    name: str,
    payload: str | None,
    watch: tuple[str, ...],
    **spec: Unpack[ScheduleWhen],
) -> None:
    """Change schedule NAME (give its whole spec) from its next occurrence on."""
    _one_way(spec.get("cron"), spec.get("every"))
    data = _payload(payload)
    with errors():
        ScheduleSpec.of(**spec)  # a bad spec is said before Redis is reached
        before = app.client.schedules.get(name)
        made = app.client.schedules.update(name, payload=data, watch=watch, **spec)
    show(app, made)
    warn_spec(made)
    if before is not None:
        warn_reset(before, made)


@schedules.command("list")
@pass_app
def list_(app: App) -> None:
    """Every schedule: when it fires next, and its counts."""
    with errors():
        found = app.client.schedules.list()
    rows = [
        (s.name, s.spec.describe(), s.state, format_ms(s.next_ms), s.fired, s.missed) for s in found
    ]
    human = table(rows, ("schedule", "when", "state", "next", "fired", "missed"))
    emit(app.json, [schedule_json(s) for s in found], human if found else "No schedules.")


@schedules.command()
@click.argument("name")
@pass_app
def get(app: App, name: str) -> None:
    """Schedule NAME: its spec, state, next occurrence and counts (exit 6 if none)."""
    with errors():
        found = app.client.schedules.get(name)
    if found is None:
        raise _missing(app, name)
    show(app, found)


@schedules.command()
@click.argument("name")
@pass_app
def pause(app: App, name: str) -> None:
    """Stop firing NAME: its armed occurrence is taken out with no outcome, unless its
    time has come (then it fires, once). `resume` starts again after now."""
    with errors():
        before = app.client.schedules.get(name)
        if not app.client.schedules.pause(name):
            raise _missing(app, name)
        found = app.client.schedules.get(name)
    if found is None:  # deleted meanwhile
        raise _missing(app, name)
    already = before is not None and before.state == "paused"
    if already:
        click.echo(f"Schedule {name} is already paused (nothing changed).", err=True)
    show(app, found, already=already)


@schedules.command()
@click.argument("name")
@pass_app
def resume(app: App, name: str) -> None:
    """Fire NAME again, from its next occurrence after now."""
    with errors():
        before = app.client.schedules.get(name)
        found = app.client.schedules.resume(name)
    if found is None:
        raise _missing(app, name)
    already = before is not None and before.state == "active"
    if already:  # resumed as before (its next occurrence armed again), said
        click.echo(f"Schedule {name} is already active (nothing changed).", err=True)
    show(app, found, already=already)


@schedules.command()
@click.argument("name")
@click.option("--keep-armed", is_flag=True, help="Its armed occurrence still fires, once.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_app
def delete(app: App, name: str, keep_armed: bool, yes: bool) -> None:
    """Delete schedule NAME and its armed occurrence (unless --keep-armed, or its time
    has come: then it fires, once)."""
    if not yes:  # under --json too (it did not ask: with no terminal it goes ahead, warned)
        with errors():  # no question about a schedule that is not there
            if app.client.schedules.get(name) is None:
                raise _missing(app, name)
        confirm(
            f"Delete schedule {name!r}?",
            unasked_before="schedules delete --json" if app.json else None,
        )
    with errors():
        if not app.client.schedules.delete(name, keep_armed=keep_armed):
            raise _missing(app, name)
    emit(app.json, {"deleted": name}, f"Deleted schedule {name!r}.")


@schedules.command()
@click.argument("name")
@pass_app
def trigger(app: App, name: str) -> None:
    """Fire NAME once now, beside its series (timer {NAME}@<now>-manual)."""
    with errors():
        timer = app.client.schedules.trigger(name)
    emit(
        app.json,
        {"id": timer.id, "deadline_ms": timer.deadline_ms},
        f"Triggered {name!r}: timer {timer.id}",
    )


@schedules.command()
@click.argument("name")
@click.option(
    "--from",
    "start",
    type=INSTANT,
    required=True,
    help="First ISO-8601 time (UTC unless it gives an offset).",
)
@click.option(
    "--to",
    "end",
    type=INSTANT,
    required=True,
    help="Last ISO-8601 time, up to now (UTC unless it gives an offset).",
)
@click.option(
    "--limit",
    type=click.IntRange(1, 1000),
    default=1000,
    show_default=True,
    help="The most occurrences this call fires: a range with more is refused, not cut "
    "short (backfill it in parts).",
)
@pass_app
def backfill(app: App, name: str, start: int, end: int, limit: int) -> None:
    """Fire now, once each, the occurrences of NAME from --from to --to.

    Each under its own id: one that fired and whose outcome is still retained is not
    fired again. A range with more than --limit (1,000) occurrences is refused:
    backfill it in parts.
    """
    with errors():
        done = app.client.schedules.backfill(name, start, end, limit=limit)
        now = app.client.server_time_ms()  # the clock backfill took "now" on, after it
    created = [t.id for t in done if not isinstance(t, Exception) and t.created]
    skipped = [t.id for t in done if not isinstance(t, Exception) and not t.created]
    failed = [str(t) for t in done if isinstance(t, Exception)]
    if end > now:  # the library stops at now without a word: said, before what it did
        warn(f"--to {format_ms(end)} is in the future: backfilled up to now ({format_ms(now)})")
    emit(
        app.json,
        {"created": created, "already": skipped, "errors": failed},
        f"Backfilled {name!r}: {len(created)} created, {len(skipped)} already fired or "
        f"pending, {len(failed)} refused",
    )
    if failed:
        raise SystemExit(1)


def _missing(app: App, name: str) -> TimerCommandError:
    return TimerCommandError(ScheduleNotFound.of(name, app.namespace))


@schedules.command()
@spec_options
@click.option(
    "--from",
    "--after",
    "after",
    type=INSTANT,
    metavar="ISO-TIME",
    help="Preview from this ISO-8601 time (default: now; UTC unless it gives an offset), "
    "as backfill's --from.",
)
@click.option(
    "--count",
    type=click.IntRange(1, 10_000),
    default=10,
    show_default=True,
    help="How many occurrences.",
)
@pass_app
def preview(
    app: App,
    cron: str | None,
    every: int | None,
    offset: int,
    tz: str,
    start: int | None,
    end: int | None,
    jitter: int,
    after: int | None,
    count: int,
) -> None:
    """Show when the next occurrences of a schedule would fall (nothing is created).

    \b
    Examples:
      tickwheel schedules preview --cron '0 8 * * MON-FRI' --tz Europe/Paris
      tickwheel schedules preview --every 30s --offset 5s --count 4
    """
    _one_way(cron, every)
    with errors():
        spec = Recurrence.of(
            cron=cron, every=every, offset=offset, tz=tz, start=start, end=end, jitter=jitter
        )
    warn_tz(spec)  # its local column shows the times there, counted in absolute time
    since = SYSTEM_TIME.wall_ms() if after is None else after
    when = spec.preview(since, count)
    zone = ZoneInfo(spec.tz)
    rows: list[dict[str, Any]] = []
    for n in when:
        at = datetime.fromtimestamp(n / 1000, UTC)
        rows.append(
            {
                "occurrence_ms": n,
                "utc": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "local": at.astimezone(zone).isoformat(timespec="seconds"),
            }
        )
    human = table([(r["local"], r["utc"]) for r in rows], (f"local ({spec.tz})", "UTC"))
    if len(when) < count:
        human += f"\n(the schedule ends after {plural(len(when), 'occurrence')})"
    emit(app.json, rows, human)


with_spec_help(preview)
