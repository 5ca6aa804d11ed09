"""``tickwheel schedules``: recurring schedules (#29). ``preview`` shows when a cron or
interval spec's occurrences fall, in its time zone, before anything is created."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import click

from timer.recurrence import Recurrence

from .app import App, errors, pass_app
from .durations import DURATION, INSTANT
from .output import emit, table


@click.group()
def schedules() -> None:
    """Recurring schedules: cron or intervals, in any time zone."""


@schedules.command()
@click.option("--cron", help="A cron expression: 5 fields, or 6 with the seconds first.")
@click.option("--every", type=DURATION, help="An interval instead, e.g. 30s, 5m, 1h.")
@click.option("--offset", type=DURATION, default=0, help="With --every: shift each occurrence.")
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone of the cron fields.")
@click.option("--start", type=INSTANT, help="No occurrence before this ISO-8601 time.")
@click.option("--end", type=INSTANT, help="No occurrence after this ISO-8601 time.")
@click.option("--jitter", type=DURATION, default=0, help="Delay each occurrence by up to this.")
@click.option("--after", type=INSTANT, help="Preview from this ISO-8601 time (default: now).")
@click.option(
    "--count", type=click.IntRange(1, 10_000), default=10, show_default=True,
    help="How many occurrences.",
)  # fmt: skip
@pass_app
def preview(
    app: App, cron: str | None, every: int | None, offset: int, tz: str, start: int | None,
    end: int | None, jitter: int, after: int | None, count: int,
) -> None:  # fmt: skip
    """Show when the next occurrences of a schedule would fall (nothing is created).

    Cron fields match local wall-clock time in --tz: a time the autumn repeat shows
    twice fires once, at its first instant; a time the spring jump skips fires at the
    first minute after it. Intervals are absolute time (DST does not move them).

    \b
    Examples:
      tickwheel schedules preview --cron '0 8 * * MON-FRI' --tz Europe/Paris
      tickwheel schedules preview --every 30s --offset 5s --count 4
    """
    with errors():
        spec = Recurrence.of(
            cron=cron, every=every, offset=offset, tz=tz, start=start, end=end, jitter=jitter
        )
    since = round(time.time() * 1000) if after is None else after
    when = spec.preview(since, count)
    zone = ZoneInfo(spec.tz)
    rows: list[dict[str, Any]] = []
    for n in when:
        at = datetime.fromtimestamp(n / 1000, UTC)
        rows.append({
            "occurrence_ms": n,
            "utc": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "local": at.astimezone(zone).isoformat(timespec="seconds"),
        })  # fmt: skip
    human = table([(r["local"], r["utc"]) for r in rows], (f"local ({spec.tz})", "UTC"))
    if len(when) < count:
        human += f"\n(the schedule ends after {len(when)} occurrence(s))"
    emit(app.json, rows, human)
