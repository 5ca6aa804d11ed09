"""``tickwheel tail``: print outcomes as they come, watching or through a consumer group."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import click

from timer import Outcome
from timer.errors import quoted
from timer.shapes import outcome_json

from .app import App, errors, pass_app
from .durations import format_ms
from .output import against_deadline, plural, to_json


class _Terminated(BaseException):
    """SIGTERM arrived: stop reading, say what was shown, exit 0 (not a crash: 143)."""


@contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise _Terminated

    try:
        before = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread (a test's runner): SIGTERM keeps its default
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


@click.command()
@click.option(
    "--group",
    default=None,
    help="Read through this consumer group, acknowledging each outcome once printed "
    "(each goes to one consumer of the group). The group stays after tail stops.",
)
@click.option("--consumer", default=None, help="Consumer name in the group (default host-pid).")
@click.option(
    "--history",
    is_flag=True,
    help="Without --group: start with every outcome the streams hold, not only new ones.",
)
@click.option(
    "--count",
    type=click.IntRange(min=1),
    default=None,
    help="Stop after this many outcomes.",
)
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
    are read through that consumer group and acknowledged once printed; the group stays
    in Redis when tail stops and keeps each outcome it has not acknowledged from being
    trimmed (`tickwheel groups delete NAME` once nobody reads it). To run code per
    outcome, use `tickwheel handle` instead.

    SIGTERM or Ctrl-C stops it; SIGTERM exits 0.
    """
    if group is None and consumer is not None:
        raise click.UsageError("--consumer goes with --group")
    if group is not None and history:
        raise click.UsageError("--history is for watching without --group")
    seen = 0
    with errors(), _stop_on_sigterm():
        try:
            for o in _outcomes(app, group, consumer, history, idle_exit):
                if app.json:
                    click.echo(to_json(outcome_json(o)))
                else:
                    click.echo(
                        f"{format_ms(o.decided_ms)}  {o.outcome:<9}  {o.id}  "
                        f"{against_deadline(o.lateness_ms)}  "
                        f"payload {to_json(o.payload, for_people=True)}"
                    )
                seen += 1  # shown: counted before its ack (SIGTERM may come meanwhile)
                if group is not None:
                    o.ack()
                if count is not None and seen >= count:
                    break
        except _Terminated:
            click.echo(f"tickwheel tail: stopped by SIGTERM{_after(seen, group)}", err=True)
        except KeyboardInterrupt:  # run() prints "Interrupted (Ctrl-C): " and this
            raise KeyboardInterrupt(_after(seen, group).removeprefix(", ")) from None


def _outcomes(
    app: App, group: str | None, consumer: str | None, history: bool, idle_exit: bool
) -> Iterator[Outcome]:
    if group is None:
        return app.client.follow(history=history, stop_when_idle=idle_exit)
    name = consumer or f"{socket.gethostname()}-{os.getpid()}"
    return app.client.outcomes(group, name, block_ms=1000, stop_when_idle=idle_exit)


def _after(seen: int, group: str | None) -> str:
    shown = f", {plural(seen, 'outcome')} shown"
    if group is None:
        return shown
    return f"{shown}; group {quoted(group)} stays (`tickwheel groups delete {group}` drops it)"
