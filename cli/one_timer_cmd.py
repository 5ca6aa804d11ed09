"""Timer commands: schedule, cancel, reschedule, notify, complete, get, wait, tail. Each
is thin: parse, call the library, print. The namespace's own (init, migrate, trim,
stats, shards) are in ``namespace_cmd``."""

from __future__ import annotations

import json
import shlex
from typing import Any, Unpack, cast

import click

from timer import DuplicateTimer, TimerNotFound
from timer.durable.model.durations import format_duration_ms
from timer.durable.model.fields import TimerOptions
from timer.errors import TimerError, WaitTimeout, conflict_todo, quoted
from timer.shapes import outcome_json, timer_info_json, timer_json

from .app import App, errors, pass_app, starts_server
from .declared import DeclaredArgs, declared_options
from .durations import DURATION, INSTANT, SECONDS, format_ms
from .mistakes import nothing_notified
from .output import against_deadline, emit, pairs, plural, to_json
from .retried import say_kept


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


@starts_server
@click.command()
@click.argument("timer_id")
@click.option(  # eager: read before --max-total, which is checked against it
    "--in",
    "delay_ms",
    type=DURATION,
    is_eager=True,
    help="Fire after this long, e.g. 30s, 500ms, 2m.",
)
@click.option(
    "--at",
    "deadline_ms",
    type=INSTANT,
    help="Fire at this ISO-8601 time (Redis clock; UTC unless it gives an offset, +01:00).",
)
@click.option("--payload", help="JSON payload delivered with the outcome.")
@click.option(
    "--watch",
    multiple=True,
    metavar="KEY",
    help="Watch key; notifying it completes the timer early (repeatable).",
)
@declared_options
@pass_app
def schedule(
    app: App,
    /,
    timer_id: str,
    delay_ms: int | None,
    deadline_ms: int | None,
    payload: str | None,
    watch: tuple[str, ...],
    **options: Unpack[DeclaredArgs],
) -> None:
    """Schedule timer TIMER_ID (idempotent: the same id and parameters again return the
    existing timer; other parameters for a pending id are refused, exit 7).

    \b
    Example: tickwheel schedule 'job:{42}' --in 30s --watch 'job:{42}:done'
    """
    if (delay_ms is None) == (deadline_ms is None):
        meant = _a_schedules_command(timer_id) if delay_ms is None else ""
        raise click.UsageError(f"give exactly one of --in DURATION or --at ISO-TIME{meant}")
    cap = options.get("max_total_ms")
    data = _payload(payload)
    given = {k: v for k, v in options.items() if v is not None}
    fields = cast(TimerOptions, {**given, "payload": data, "watch": list(watch)})
    with errors():
        try:
            t = app.client.schedule(timer_id, delay_ms, deadline_ms=deadline_ms, **fields)
        except DuplicateTimer as exc:
            raise _conflict(exc, deadline_ms) from None
    if t.created:
        what = "Scheduled"
    elif t.absorbed:
        what = f"Debounced (call {t.absorbed + 1} of this window)"
    else:
        what = "Already pending" if t.state == "pending" else f"Already decided ({t.state})"
    emit(
        app.json,
        timer_json(t),
        f"{what}: {t.id} on shard {t.shard}, deadline {format_ms(t.deadline_ms)}",
    )
    if not t.created and t.state != "pending" and not app.json:
        click.echo(f"Note: {t.id} ended as {t.state}; --rearm schedules it again.", err=True)
    if not t.created and not t.absorbed and t.state == "pending" and not app.json:
        say_kept(app, t.id, delay_ms, given)
    # a first deadline past the cap is the cap: say so, as a past --at is said (on
    # stderr, --json too: what was asked is not what was scheduled)
    if (
        t.created
        and cap is not None
        and ((delay_ms or 0) > cap or (deadline_ms is not None and t.deadline_ms < deadline_ms))
    ):
        click.echo(
            f"Note: capped by --max-total {format_duration_ms(cap)}: due at "
            f"{format_ms(t.deadline_ms)}, not later as asked.",
            err=True,
        )
    if t.created:
        say_past(app, deadline_ms)


# `schedules`' own commands: `tickwheel schedule list` is most likely one of them
_SCHEDULES_WORDS = ("list", "get", "create", "update", "pause", "resume", "delete", "preview")


def _a_schedules_command(timer_id: str) -> str:
    """`schedule list` with no time: a timer named "list" is less likely than `schedules
    list` (trial 30: it said only to give --in or --at)."""
    if timer_id not in _SCHEDULES_WORDS:
        return ""
    return f" (or did you mean `tickwheel schedules {timer_id}`, of recurring schedules?)"


def say_past(app: App, deadline_ms: int | None, what: str = "the timer is") -> None:
    """A --at in the past (schedule, reschedule, timers reschedule: ``what`` falls due),
    noted on stderr, --json too: allowed on purpose (a catch-up after downtime), but
    rarely what a person meant."""
    if deadline_ms is not None and deadline_ms < app.client.time.wall_ms() - 1_000:
        click.echo(f"Note: {format_ms(deadline_ms)} is in the past: {what} due at once.", err=True)


def _conflict(exc: DuplicateTimer, deadline_ms: int | None) -> DuplicateTimer:
    """A conflicting schedule's error with what to do as commands to type."""
    if exc.timer_id is None or not exc.differ:
        return exc
    tid = shlex.quote(exc.timer_id)
    at = f" --at {format_ms(deadline_ms)}" if deadline_ms is not None else " --at TIME"
    todo = conflict_todo(
        exc.differ,
        reschedule=f"tickwheel reschedule {tid}{at}",
        cancel=f"tickwheel cancel {tid}, then schedule it again",
        debounce="add --debounce",
    )
    return DuplicateTimer.of(exc.timer_id, exc.differ, todo)


def _ended(app: App, timer_id: str, verb: str) -> tuple[dict[str, Any], str]:
    """What a call that found the timer ended says: how it ended, as heartbeat does; its
    JSON with ``verb`` false and the ``state`` it ended in (null: no longer kept), as
    heartbeat's carries it (trial 32: reschedule's said only that it did nothing)."""
    with errors():
        info = app.client.get(timer_id)
    state = info.state if info is not None else None
    how = state or "its outcome no longer kept"
    said = {"id": timer_id, verb: False, "state": state}
    return said, f"{timer_id} already ended ({how}); nothing changed"


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
    if not decided:
        emit(app.json, *_ended(app, timer_id, "cancelled"))
        return
    emit(app.json, {"id": timer_id, "cancelled": True}, f"Cancelled {timer_id}")


@click.command()
@click.argument("timer_id")
@click.option("--in", "delay_ms", type=DURATION, help="New delay from now.")
@click.option(
    "--at",
    "deadline_ms",
    type=INSTANT,
    help="New ISO-8601 deadline (UTC unless it gives an offset, +01:00).",
)
@pass_app
def reschedule(app: App, timer_id: str, delay_ms: int | None, deadline_ms: int | None) -> None:
    """Move a pending timer's deadline.

    Give the new deadline with --in (from now, by the Redis clock) or --at. A timer that
    has already ended is left as it is. A timer scheduled with --max-total never
    falls due after its cap (created + max total): a move past it is refused, nothing
    changes, and the exit code is 13.
    """
    if (delay_ms is None) == (deadline_ms is None):
        raise click.UsageError("give exactly one of --in DURATION or --at ISO-TIME")
    with errors():
        t = app.client.reschedule(timer_id, delay_ms, deadline_ms=deadline_ms)
    if t is None:
        emit(app.json, *_ended(app, timer_id, "rescheduled"))
        return
    said = f"Rescheduled {timer_id} to {format_ms(t.deadline_ms)}"
    emit(app.json, {**timer_json(t), "rescheduled": True}, said)
    say_past(app, deadline_ms)


@click.command()
@click.argument("timer_id")
@click.option(
    "--extend",
    "extend_ms",
    type=DURATION,
    required=True,
    help="Push the deadline this long from now (Redis clock), e.g. 30s.",
)
@click.option(
    "--earlier",
    is_flag=True,
    help="Set the deadline to --extend from now even if that is earlier: a job "
    "that started trades its queue-wait deadline for its run deadline.",
)
@pass_app
def heartbeat(app: App, timer_id: str, extend_ms: int, earlier: bool) -> None:
    """Extend a running job's timeout: its deadline becomes --extend from now, never
    earlier than it is (unless --earlier).

    A timer scheduled with --max-total never falls due after its creation plus that:
    a heartbeat past it exits 13, and the timer falls due at its cap. A timer that has
    already ended is left as it is. With --json, "extended" says it was taken (false: the
    timer ended) and "moved" whether the deadline moved (false: it was due later already).

    \b
    Example: tickwheel heartbeat 'job:{42}' --extend 30s
    """
    with errors():
        t = app.client.heartbeat(timer_id, extend_ms, earlier=earlier)
    if t.state != "pending":
        said = f"{timer_id} already ended ({t.state}); nothing changed"
    elif t.moved:
        said = f"{timer_id} now falls due {format_ms(t.deadline_ms)}"
    else:  # taken, but due later than --extend from now already: it stayed
        said = f"{timer_id} stays due {format_ms(t.deadline_ms)}: " + (
            "already --extend from now"
            if earlier
            else "later than --extend from now (a heartbeat moves a deadline only later; "
            "--earlier moves it sooner)"
        )
    # extended: the heartbeat was taken (pending; false: it ended, stop the job);
    # moved: it moved the deadline (false: it stayed where it was)
    emit(app.json, {**timer_json(t), "extended": t.state == "pending", "moved": t.moved}, said)


@click.command()
@click.argument("key")
@pass_app
def notify(app: App, key: str) -> None:
    """Notify watch key KEY: completes the timers that now have enough keys.

    A timer completes once as many of its watch keys were notified as it was scheduled
    to need (`schedule --need`, 1 by default); notifying the same key twice counts once.
    Only timers watching KEY now are affected.
    """
    with errors():
        n = app.client.notify(key)
        hint = "" if n else nothing_notified(app.client, key)
    emit(app.json, {"key": key, "completed": n}, f"Notified {key}: {plural(n, 'timer')} "
         f"completed{hint}")  # fmt: skip


@click.command()
@click.argument("timer_id")
@pass_app
def complete(app: App, timer_id: str) -> None:
    """Decide a pending timer as completed now.

    Like notifying its watch keys, for a timer you know by id. Safe to repeat.
    """
    with errors():
        decided = app.client.complete(timer_id)
    if not decided:
        emit(app.json, *_ended(app, timer_id, "completed"))
        return
    emit(app.json, {"id": timer_id, "completed": True}, f"Completed {timer_id}")


INSTANT_FIELDS = ("deadline_ms", "created_ms", "decided_ms")


@click.command()
@click.argument("timer_id")
@pass_app
def get(app: App, timer_id: str) -> None:
    """Show a timer: pending with its deadline, or how it ended.

    Ended timers are remembered for the result TTL (24 h by default); after that, and
    for ids never scheduled, it exits 6. An ended timer shows the watch keys notified;
    its watch keys, need and cap are not kept once it ends, so they are left out.
    """
    with errors():
        info = app.client.get(timer_id)
        if info is None:
            raise TimerNotFound.of(timer_id, app.namespace)
    d = timer_info_json(info)
    # every instant with its time, as deadline_ms: created_ms and decided_ms were epoch ms only
    shown = {
        **d,
        **{k: f"{d[k]} ({format_ms(d[k])})" for k in INSTANT_FIELDS if d.get(k) is not None},
    }
    # the payload as JSON, always: a string "-" and no payload (null) read apart
    json_ = {
        k: to_json(v, for_people=True)
        for k, v in d.items()
        if k == "payload" or isinstance(v, dict | list)
    }
    emit(app.json, d, pairs({**shown, **json_}))


@click.command()
@click.argument("timer_id")
@click.option(
    "--timeout",
    type=SECONDS,
    default="30s",
    show_default=True,
    help="How long to wait, e.g. 10s (a bare number is seconds).",
)
@pass_app
def wait(app: App, timer_id: str, timeout: float) -> None:
    """Block until the timer is decided and print how it ended.

    Exits 8 if it is still pending after --timeout, 6 if there is no such timer.
    """
    with errors():
        try:
            o = app.client.wait(timer_id, timeout=timeout)
        except WaitTimeout:
            raise WaitTimeout(
                f"timer {quoted(timer_id)} still pending after "
                f"{format_duration_ms(round(timeout * 1000))}{_why_pending(app, timer_id)}"
            ) from None
        except KeyboardInterrupt:  # what the line run() prints says: waiting only reads it
            said = f"stopped waiting for timer {quoted(timer_id)}; the timer is unchanged"
            raise KeyboardInterrupt(said) from None
    emit(
        app.json,
        outcome_json(o),
        f"{o.id}: {o.outcome} at {format_ms(o.decided_ms)}, decided "
        f"{against_deadline(o.lateness_ms)}",
    )


def _why_pending(app: App, timer_id: str) -> str:
    """Why a timer outlived a wait, where it is plain: its deadline passed and no worker
    leads its shard, so nothing fires it (``""`` otherwise, or if it cannot be read)."""
    try:
        info = app.client.get(timer_id)
        if info is None or info.state != "pending":
            return ""
        ago = app.client.server_time_ms() - info.deadline_ms
        if ago <= 0 or app.client.leaders().get(info.shard) is not None:
            return ""
    except TimerError:  # e.g. a role that may wait but not read the leases: no hint
        return ""
    passed = format_duration_ms(ago - ago % 1000 if ago >= 1000 else ago)
    return (
        f"; its deadline passed {passed} ago and no worker leads shard {info.shard}: "
        "start one with `tickwheel worker`"
    )
