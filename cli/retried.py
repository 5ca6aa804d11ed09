"""What `tickwheel schedule` says of a timer that was pending already: a retry never
fails, so what it does not compare it keeps, and the answer says so (its deadline for
--in, its priority, note and cap), with how to change them."""

from __future__ import annotations

import shlex
from typing import Any

import click

from timer.durable.model.durations import format_duration_ms

from .app import App, errors

# The options a pending timer keeps as it was scheduled (not compared, so a retry with
# others never fails): its field -> the option that sets it.
KEPT = {"priority": "--priority", "note": "--note", "max_total_ms": "--max-total"}


def say_kept(app: App, timer_id: str, delay_ms: int | None, given: dict[str, Any]) -> None:
    """The notes for a schedule of ``timer_id`` that found it pending."""
    if delay_ms is not None:
        # A delay is not compared with the deadline it gave before (a retry comes later,
        # so it always differs): a retried schedule must not fail, and it does not move.
        click.echo(
            f"Note: {timer_id} was pending and kept its deadline; --in is not compared with "
            f"it, so a retry never fails. To move it: tickwheel reschedule "
            f"{shlex.quote(timer_id)} --in {format_duration_ms(delay_ms)}",
            err=True,
        )
    asked = {k: v for k, v in given.items() if k in KEPT}
    if not asked:
        return
    with errors():
        info = app.client.get(timer_id)
    if info is None or info.state != "pending":
        return
    # trial 11: `--priority 50` on a pending id said "Already pending" and dropped it
    differ = [
        f"{KEPT[k]} {_shown(k, getattr(info, k))} (not {_shown(k, v)})"
        for k, v in asked.items()
        if getattr(info, k) != v
    ]
    if differ:
        click.echo(
            f"Note: {timer_id} was pending and keeps its own {', '.join(differ)}: these are "
            "not compared, so a retry never fails. To change them, cancel it and schedule "
            "it again.",
            err=True,
        )


def _shown(option: str, value: Any) -> str:
    if value is None:
        return "none"
    if option == "max_total_ms":
        return format_duration_ms(int(value))
    return repr(value) if isinstance(value, str) else str(value)
