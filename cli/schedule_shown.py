"""What the ``tickwheel schedules`` commands show of a schedule and warn of: a spec taken
as given that does not do what it reads as, and what ``update`` reset to its default;
and the refusals they word for the CLI (a --tz near a zone, a backfill past --limit)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import click

from timer.clock import SYSTEM_TIME
from timer.durable.model.durations import format_duration_ms
from timer.durable.schedules.advice import advice
from timer.durable.schedules.records import ScheduleInfo, ScheduleSpec
from timer.durable.schedules.recurrence import Recurrence
from timer.shapes import schedule_json

from .app import App, warn, warn_of
from .durations import format_ms
from .output import emit, pairs, to_json


def show(app: App, s: ScheduleInfo, *, already: bool | None = None) -> None:
    """The schedule; ``already`` (pause, resume): whether it was in that state before,
    a field of --json then (said on stderr in words)."""
    d = schedule_json(s)
    if already is not None:
        d["already"] = already
    r = s.spec.recurrence
    bounds = {"from": r.start_ms, "until": r.end_ms}  # shown when set: an end past is why
    human = pairs(  # no next occurrence
        {
            "schedule": s.name,
            "when": s.spec.describe(),
            **{k: format_ms(v) for k, v in bounds.items() if v is not None},
            "state": s.state,
            "next": _local(s.next_ms, s.spec.recurrence.tz if s.spec.recurrence.cron else "UTC"),
            "armed": s.armed or "-",
            "fired": s.fired,
            "missed": s.missed,
            "last": format_ms(s.last_ms),
            "after an outage": _after_an_outage(s),
        }
    )
    emit(app.json, d, human)


def warn_spec(s: ScheduleInfo) -> None:
    """What create and update say of a spec taken as given that does not do what it reads
    as: the library's advice (an end already past, a zero catch-up, a group unused, a
    zone given to an interval), in the command's flags."""
    for said in advice(s.spec, s.name, SYSTEM_TIME.wall_ms()):
        warn_of(said)


def warn_tz(r: Recurrence) -> None:
    """--tz given with --every, for preview: the library's advice of it, in its flags."""
    for said in advice(ScheduleSpec(r), "", SYSTEM_TIME.wall_ms()):
        if said.fields[0] == "tz":
            warn_of(said)


def _fires_no_missed(s: ScheduleInfo) -> bool:
    return s.spec.catch_up_ms == 0 and s.spec.missed != "skip"


def _after_an_outage(s: ScheduleInfo) -> str:
    if _fires_no_missed(s):
        return f"{s.spec.missed}, but none is fired (--catch-up 0s)"
    return f"{s.spec.missed} (within {format_duration_ms(s.spec.catch_up_ms)})"


def _local(epoch_ms: int | None, tz: str) -> str:
    """UTC, and the schedule's own wall-clock time beside it when its zone is another."""
    if epoch_ms is None or tz in ("UTC", "Etc/UTC"):
        return format_ms(epoch_ms)
    wall = datetime.fromtimestamp(epoch_ms / 1000, tz=ZoneInfo(tz))
    return f"{format_ms(epoch_ms)} ({wall.strftime('%Y-%m-%d %H:%M:%S %Z')} in {tz})"


def warn_reset(before: ScheduleInfo, made: ScheduleInfo) -> None:
    """What `update` put back to its default, not given, from what was stored: update
    takes the whole spec (a script relying on that keeps it), but a field reset without a
    word read as kept (trial). One warning per field whose stored value changed; a field
    that does nothing in the new spec (--tz of an --every schedule, --offset of a
    --cron one) is not named."""
    ctx = click.get_current_context()
    r, was = made.spec.recurrence, before.spec.recurrence
    now, then = made.spec, before.spec
    fields: list[tuple[str, str, Any, Any, Callable[[Any], str]]] = [
        ("tz", "tz", was.tz, r.tz, str),
        ("offset", "offset", was.offset_ms, r.offset_ms, format_duration_ms),
        ("start", "start", was.start_ms, r.start_ms, _instant),
        ("end", "end", was.end_ms, r.end_ms, _instant),
        ("jitter", "jitter", was.jitter_ms, r.jitter_ms, format_duration_ms),
        ("missed", "missed", then.missed, now.missed, str),
        ("catch_up", "catch-up", then.catch_up_ms, now.catch_up_ms, format_duration_ms),
        ("overlap", "overlap", then.overlap, now.overlap, str),
        ("group", "group", then.group, now.group, _named),
        ("payload", "payload", before.payload, made.payload, _shown_payload),
    ]
    for param, flag, old, new, text in fields:
        if old == new or ctx.get_parameter_source(param) is not click.core.ParameterSource.DEFAULT:
            continue
        if (param == "tz" and r.every_ms is not None) or (param == "offset" and r.cron):
            continue  # it does nothing in the new spec (and is refused or warned if given)
        warn(
            f"--{flag} was {text(old)}, now {text(new)} (update takes the whole spec: "
            f"give --{flag} to keep it)"
        )
    if before.watch and before.watch != made.watch and not made.watch:
        warn(
            f"its watch keys ({', '.join(before.watch)}) were dropped: update takes the "
            "whole spec (give --watch KEY for each to keep them)"
        )


def _instant(epoch_ms: int | None) -> str:
    return "none" if epoch_ms is None else format_ms(epoch_ms)


def _named(group: str | None) -> str:
    return "none" if group is None else group


def _shown_payload(payload: Any, most: int = 60) -> str:
    """A payload as --payload takes it (JSON), cut to ``most`` characters."""
    said = to_json(payload, for_people=True)
    return said if len(said) <= most else said[: most - 1] + "…"
