"""``tickwheel groups``: see and manage consumer groups (their dead letters: ``dead_cmd``)."""

from __future__ import annotations

from typing import Any

import click

from timer.durable.groups.admin import no_group
from timer.durable.model.models import GroupInfo
from timer.shapes import group_json

from .app import App, TimerCommandError, confirm, errors, pass_app
from .durations import DURATION
from .output import age_text, emit, plural, table


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
    _show_groups(app, retention_ms)


@groups.command("list")
@click.option(
    "--retention",
    "retention_ms",
    type=DURATION,
    default="1h",
    show_default=True,
    help="Flag a group owing outcomes older than this (it keeps them from being trimmed).",
)
@click.pass_context
def groups_list(ctx: click.Context, retention_ms: int) -> None:
    """The consumer groups, as `tickwheel groups` alone shows them.

    Each with its consumers, pending, retrying, later, lag and oldest pending age; a
    group owing outcomes older than --retention is flagged STALE.
    """
    if ctx.get_parameter_source("retention_ms") is click.core.ParameterSource.DEFAULT:
        # `groups --retention 2h list`: the one given before `list`
        assert ctx.parent is not None
        retention_ms = ctx.parent.params["retention_ms"]
    app = ctx.find_object(App)
    assert app is not None
    _show_groups(app, retention_ms)


def _show_groups(app: App, retention_ms: int) -> None:
    """The table `groups` and `groups list` show (a list under --json)."""
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
    trimmed past them; its dead letters stay (they cannot be redelivered to a group
    that is gone: `tickwheel dead drop --group NAME --all` drops them). Asks first
    unless --yes.
    """
    with errors():
        known = {g.name: g for g in app.client.groups()}
    if name not in known:
        raise TimerCommandError(no_group(app.namespace, name, known))
    g = known[name]
    with errors():
        dead = app.client.count_dead_letters(name)
    # its dead letters stay, and no redeliver reaches a group that is gone (trial 35)
    kept = f"; its {plural(dead, 'dead letter')} stay{'s' * (dead == 1)}" if dead else ""
    if not yes:
        lag = "unknown" if g.lag is None else g.lag  # as the table's "?": not None
        confirm(f"Delete group {name!r} ({g.pending} pending, lag {lag}{kept})?")
    with errors():
        removed = app.client.delete_group(name)
    hint = f" (`tickwheel dead drop --group {name} --all` drops them)" if dead else ""
    emit(
        app.json,
        {"deleted": name, "shards": removed, "dead_letters": dead},
        f"Deleted group {name!r} on {plural(removed, 'shard')}{kept}{hint}",
    )
