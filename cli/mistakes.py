"""What a usage error says when the mistake is a common one: a Redis URL given where the
command goes, or a count option under another command's name for it.

click's own suggestion is a close spelling ("--count" → "--json" for `demo`, whose count
is ``--timers``): right for a typo, wrong for a synonym. Elsewhere click's words stay.
Under ``--json`` a usage error is one JSON object on stderr, as every error then is.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from typing import IO, Any

import click

from timer import TimerClient
from timer.errors import (
    ConfigError,
    InvalidInput,
    StoreError,
    TimerError,
    TimerNotFound,
    quoted,
)
from timer.redis.redaction import redact_url

from .durations import unit_word

# what a user types for "how many": the first word they try, whatever the command calls it
COUNT_WORDS = frozenset({"-n", "--n", "--count", "--number", "--num", "--limit", "--timers"})
# each command's "how many" option, by the command's path under `tickwheel`
COUNT_OPTION: dict[tuple[str, ...], str] = {
    ("demo",): "--timers",
    ("tail",): "--count",
    ("schedules", "preview"): "--count",
    ("schedules", "backfill"): "--limit",
    ("dead", "list"): "--limit",
    ("timers", "list"): "--limit",
}
# the word a user carries over from a sibling command, for a command that names it
# otherwise: `heartbeat` pushes its deadline with --extend where schedule and reschedule
# take --in (click said "Did you mean '--json'?")
SIBLING_WORDS: dict[tuple[str, ...], dict[str, str]] = {
    ("heartbeat",): {"--in": "--extend", "--delay": "--extend", "--by": "--extend"},
    ("schedule",): {"--delay": "--in", "--after": "--in"},
    ("reschedule",): {"--delay": "--in", "--after": "--in", "--extend": "--in"},
    # the library's shift_ms (trial 33: `--shift 10m` was "No such option" alone)
    ("timers", "reschedule"): {"--shift": "--by", "--shift-ms": "--by", "--delay": "--in"},
}
# an option of a sibling command that this one has no use for, or a word for what it does
# otherwise, and why (click suggested a near spelling: `timers cancel --state` → "Did you
# mean '--page'?", `tail --since yesterday` → "Did you mean '--json'?")
NO_USE: dict[tuple[str, ...], dict[str, str]] = {
    **{
        ("timers", verb): {
            "--state": f"timers {verb} acts on pending timers only (an ended one cannot be "
            f"{done}): drop --state"
        }
        for verb, done in (
            ("cancel", "cancelled"),
            ("complete", "completed"),
            ("reschedule", "moved"),
            ("notify", "notified"),
        )
    },
    ("tail",): {
        word: "tail shows outcomes from now on, or with --history from the oldest one "
        "kept: give --history (it takes no time)"
        for word in ("--since", "--from")
    },
}
# a Redis URL of a scheme --redis-url takes, or a bare host:port (127.0.0.1:6379, [::1]:6379,
# user:password@host:6379/0)
URL_LIKE = re.compile(
    r"(?i)(?:redis|rediss|redis\+sentinel|unix)://.*"
    r"|(?:\S*@)?(?:\[[0-9a-f:.]+\]|[\w.-]+):\d{1,5}(?:/\d+)?"
)


def _path(ctx: click.Context) -> tuple[str, ...]:
    """The command's names from the root's first subcommand down (the root's own name
    depends on how it was run: `tickwheel`, `python -m timer.cli`, a test's runner)."""
    names: list[str] = []
    while ctx.parent is not None:
        names.append(ctx.command.name or "")
        ctx = ctx.parent
    return tuple(reversed(names))


def synonym(exc: click.NoSuchOption) -> click.NoSuchOption:
    """``exc``, suggesting the command's own option when a synonym of it was given
    (``demo --count`` → ``--timers``, ``heartbeat --in`` → ``--extend``); ``exc``
    itself otherwise."""
    ctx = exc.ctx
    if ctx is None:
        return exc
    why = NO_USE.get(_path(ctx), {}).get(exc.option_name)
    if why is not None:
        return click.NoSuchOption(
            exc.option_name, message=f"No such option {exc.option_name!r}: {why}.", ctx=ctx
        )
    meant = SIBLING_WORDS.get(_path(ctx), {}).get(exc.option_name)
    if meant is None and exc.option_name in COUNT_WORDS:
        meant = COUNT_OPTION.get(_path(ctx))
    if meant is None or meant == exc.option_name:
        return exc
    said = f"No such option {exc.option_name!r}. Did you mean {meant!r}?"
    return click.NoSuchOption(exc.option_name, message=said, ctx=ctx)


EXTRA = re.compile(r"Got unexpected extra argument \((\S+)\)")


def left_unit(exc: click.UsageError) -> click.UsageError:
    """``exc``, saying what was meant when the one argument left over is a unit (``wait x
    --timeout 5 minutes``: 5 is taken as seconds, "minutes" is left); ``exc`` otherwise."""
    extra = EXTRA.fullmatch(exc.message)
    unit = unit_word(extra.group(1)) if extra else None
    if extra is None or unit is None:
        return exc
    word = extra.group(1)
    argv: list[str] = exc.ctx.meta.get("tickwheel.argv", []) if exc.ctx is not None else []
    before = [argv[i - 1] for i in range(1, len(argv)) if argv[i] == word]
    n = before[-1] if before and before[-1].replace(".", "", 1).isdigit() else "5"
    return click.UsageError(
        f"{exc.message}: write a duration as one word, {n}{unit} (not {n} {word})", exc.ctx
    )


def asks_json(args: list[str]) -> bool:
    """Whether a command line asks for ``--json`` (before or after the command, not as
    what follows ``--``)."""
    return "--json" in (args[: args.index("--")] if "--" in args else args)


class JsonUsageError(click.UsageError):
    """A usage error of a command line that asked for ``--json``: one JSON object on
    stderr, as every other error then is (``error``, ``kind``, ``exit_code``, and
    ``help``, the command to run for the usage), not click's three lines of text."""

    def __init__(self, error: click.UsageError) -> None:
        super().__init__(error.format_message(), error.ctx)

    def show(self, file: IO[Any] | None = None) -> None:
        said: dict[str, object] = {
            "error": self.message,
            "kind": "UsageError",
            "exit_code": self.exit_code,
        }
        if self.ctx is not None:
            said["help"] = f"{self.ctx.command_path} --help"
        click.echo(json.dumps(said), err=True)


# a command a user tries that is an option here: `tickwheel help`, `tickwheel version`
AS_FLAG = {"help": "--help", "version": "--version"}
# a command a user tries for what other commands do, and where that is ({0}: the
# command path, `tickwheel`); it said only "No such command 'history'."
DONE_ELSEWHERE = {
    "history": "the outcomes kept so far are `{0} tail --history --idle-exit` (how one "
    "timer ended: `{0} get ID`), and the counts of each minute are the charts of "
    "`{0} dashboard`",
}


class TickwheelGroup(click.Group):
    """The root group: its usage errors say what was meant, for the mistakes above (as
    one JSON object when the command line asked for ``--json``)."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        asked = asks_json(args)
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise (JsonUsageError(exc) if asked else exc) from None

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # known before any option's callback runs (--version answers in JSON if asked)
        ctx.meta["tickwheel.json_asked"] = asks_json(args)
        ctx.meta["tickwheel.argv"] = list(args)  # what was typed: a duration in two words
        return super().parse_args(ctx, args)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if (
            name
            and self.get_command(ctx, name) is None
            and not ctx.resilient_parsing
            and URL_LIKE.fullmatch(name)
        ):
            url = redact_url(name)
            give = "--redis-url URL" if "://" in name else f"--redis-url redis://{url}"
            if "://" not in name and "@" in name:  # its password masked, as everywhere
                give += " (with the password where *** is)"
            raise click.UsageError(
                f"No such command {url!r}: it looks like a Redis URL. Give it as {give}, "
                "before or after the command (or set TICKWHEEL_REDIS_URL).",
                ctx,
            )
        where = DONE_ELSEWHERE.get(name)
        if where is not None and self.get_command(ctx, name) is None and not ctx.resilient_parsing:
            said = where.format(ctx.command_path)
            raise click.UsageError(f"No such command {name!r}: {said}.", ctx)
        flag = AS_FLAG.get(name)
        if flag is not None and self.get_command(ctx, name) is None and not ctx.resilient_parsing:
            about = args[1] if flag == "--help" and len(args) > 1 else ""
            if self.get_command(ctx, about) is None:  # `help schedule`: its own --help
                about = ""
            run = " ".join(w for w in (ctx.command_path, about, flag) if w)
            raise click.UsageError(f"No such command {name!r}: run `{run}`.", ctx)
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            said = synonym(exc) if isinstance(exc, click.NoSuchOption) else left_unit(exc)
            if ctx.meta.get("tickwheel.json_asked") and not isinstance(said, JsonUsageError):
                said = JsonUsageError(said)
            raise said from None


GLOBALS = {  # a global option: its App attribute and environment variable
    "--redis-url": ("redis_url", "TICKWHEEL_REDIS_URL"),
    "--namespace": ("namespace", "TICKWHEEL_NAMESPACE"),
}
# what marks an error as about an option's value, besides the value itself (quoted): an
# error about a Redis URL does not repeat it (it may hold a password)
ABOUT = {"redis_url": ("Redis URL", "Sentinel URL", "has no scheme")}


def given_as(ctx: click.Context | None, attr: str, flag: str, env: str) -> str | None:
    """How the global option that set ``App.<attr>`` was given: ``flag`` on the command
    line (the innermost use: it wins), ``env`` from the environment, None if not at all."""
    while ctx is not None:
        source = ctx.get_parameter_source(attr)
        if source is click.core.ParameterSource.COMMANDLINE:
            return flag
        if source is click.core.ParameterSource.ENVIRONMENT:
            return env
        ctx = ctx.parent
    return None


def from_environment(
    exc: TimerError, ctx: click.Context | None, values: Mapping[str, object]
) -> TimerError:
    """``exc``, saying that the value it refuses came from the environment when a global
    option's variable gave it (``namespace must be …, got "my ns"`` did not say it was
    $TICKWHEEL_NAMESPACE's); ``values``: the App's, by attribute."""
    if not isinstance(exc, InvalidInput | ConfigError):
        return exc
    text = str(exc)
    for flag, (attr, variable) in GLOBALS.items():
        value = values.get(attr)
        if not value or given_as(ctx, attr, flag, variable) != variable:
            continue
        if any(mark in text for mark in (quoted(value), *ABOUT.get(attr, ()))):
            exc.args = (f"{text} (set by ${variable}: change or unset it, or give {flag})",)
            break
    return exc


# a command of one timer given a pattern: the `timers` command that takes one
PATTERN_COMMAND = {c: f"timers {c}" for c in ("cancel", "complete", "reschedule")}


def pattern_hint(exc: TimerError, command: str, timer_id: object) -> TimerError:
    """``exc``; when it is a missing timer whose id is a pattern (``get 'job:*'``), saying
    which command takes a pattern (it said only: no timer "job:*")."""
    if (
        not isinstance(exc, TimerNotFound)
        or exc.template is None
        or not isinstance(timer_id, str)
        or not any(c in timer_id for c in "*?[")
    ):
        return exc
    other = PATTERN_COMMAND.get(command, "timers list")
    does = "acts on" if command in PATTERN_COMMAND else "lists"
    hint = (
        f"; `{command}` takes one id, not a pattern: `tickwheel {other} "
        f"{shlex.quote(timer_id)}` {does} the timers it matches"
    )
    template = exc.template + hint.replace("{", "{{").replace("}", "}}")
    return TimerNotFound.about(template, *exc.fields, **exc.values)


# the commands only the operator role may run (`tickwheel acl --help` lists each role's)
OPERATOR_COMMANDS = frozenset({"init", "migrate", "stats", "trim", "dashboard"})


def acl_hint(exc: TimerError, ctx: click.Context | None) -> TimerError:
    """``exc``; when Redis refused the command to this user (NOPERM), saying which role's
    rules it needs (it said only Redis's words: "no permissions to run the 'info'
    command", exit 5)."""
    if not isinstance(exc, StoreError) or exc.code != "NOPERM":
        return exc
    path = _path(ctx) if ctx is not None else ()
    if path and path[0] in OPERATOR_COMMANDS:
        hint = (
            f"`tickwheel {path[0]}` is for the operator role (`tickwheel acl operator` "
            "prints its rules)"
        )
    else:
        hint = "see `tickwheel acl --help` for each role's rules"
    return StoreError(
        f"{exc}; this Redis user lacks a permission this command needs: {hint}", code=exc.code
    )


def nothing_notified(client: TimerClient, key: str) -> str:
    """Why ``notify KEY`` completed nothing, to say after it: KEY is a pending timer's id
    (its watch keys are what to notify; with none, ``complete`` ends it), or no pending
    timer watched it."""
    try:
        info = client.get(key)
    except TimerError:  # not an id at all: the general words
        info = None
    if info is not None and info.state == "pending" and info.watch:
        return (
            f" ({key} is a pending timer's id, not a key it watches: notify "
            f"{' or '.join(info.watch)}, or `tickwheel complete {shlex.quote(key)}`)"
        )
    if info is not None and info.state == "pending":  # no notify ends it; complete does
        how = f"tickwheel complete {shlex.quote(key)}"
        return f" ({key} is a pending timer's id and watches no keys; to end it: {how})"
    return " (no pending timer watched it, or too few of its keys are in yet)"
