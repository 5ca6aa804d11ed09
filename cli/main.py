"""Entry point of the ``tickwheel`` console script (also ``python -m timer.cli``)."""

from __future__ import annotations

import json
import sys
import warnings
from typing import TextIO

import click

from timer import __version__

from .acl_cmd import acl
from .app import App, accept_global_options, errors
from .bench_cmd import bench
from .dashboard_cmd import dashboard
from .dead_cmd import dead
from .demo import demo
from .groups_cmd import groups
from .handle_cmd import handle
from .helpformat import wrap_whole_words
from .mistakes import TickwheelGroup, asks_json
from .namespace_cmd import init, migrate, shards, stats, trim
from .one_timer_cmd import (
    cancel,
    complete,
    get,
    heartbeat,
    notify,
    reschedule,
    schedule,
    wait,
)
from .probe_cmd import probe
from .schedules_cmd import schedules
from .serve_cmd import serve, tokens
from .server_cmd import server
from .tail_cmd import tail
from .timers_cmd import timers
from .worker_cmd import worker

EPILOG = """Without --redis-url the CLI uses your embedded server (one per user, data in
$TICKWHEEL_HOME if set, else ~/.local/state/tickwheel; see `tickwheel server --help`),
started by the commands that create or serve. --redis-url, --namespace and --json go
before or after the command.

Exit codes: 0 ok, 2 usage (also a question with no terminal to answer it: give --yes),
3 invalid input, 4 configuration, 5 Redis unreachable,
failing or not running, 6 no such timer, schedule, group, dead letter or token, 7 conflicting
timer, 8 wait timed out, 9 fenced, 10 full or closed, 11 a stored record that cannot
be decoded, 12 written but not confirmed at the durability asked (safe to retry), 13
a move past the timer's --max-total (a heartbeat: it fires at its cap; a reschedule:
nothing moved), 14 a filter now selects another count than the one confirmed (nothing
done), 1 a question answered no (nothing done) or other errors.
"""


class Root(TickwheelGroup):
    """The root group: a TimerError no command turned into its message and exit code
    (``server status`` finding $TICKWHEEL_HOME unusable) is shown as every other is, not
    as a Python traceback."""

    def invoke(self, ctx: click.Context) -> object:
        with errors():
            return super().invoke(ctx)


@click.group(
    cls=Root,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=EPILOG,
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, _param, value: show_version(ctx) if value else None,
    help="Show the version and exit (as JSON with --json).",
)
@click.option(
    "--redis-url",
    envvar="TICKWHEEL_REDIS_URL",
    default=None,
    metavar="URL",
    help="redis://[user:pass@]host:port/db, rediss:// for TLS, unix:///path, or "
    "redis+sentinel://host:port[,host:port…]/<service>[/db] for the master of <service>, "
    "asked of the Sentinels at those addresses [env TICKWHEEL_REDIS_URL; default: the "
    "embedded server].",
)
@click.option(
    "--namespace",
    envvar="TICKWHEEL_NAMESPACE",
    default="default",
    show_default=True,
    help="Namespace of timers [env TICKWHEEL_NAMESPACE].",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Machine-readable JSON on stdout; an error is one JSON object on stderr.",
)
@click.pass_context
def main(ctx: click.Context, redis_url: str | None, namespace: str, as_json: bool) -> None:
    """tickwheel: a crash-tolerant, Redis-persisted distributed timer.

    Timers survive crashes of clients, workers and (per its fsync policy) Redis; each ends
    exactly once as expired, completed (a watched key was notified) or cancelled.
    """
    app = App(redis_url or None, namespace, as_json)
    ctx.obj = app
    ctx.call_on_close(app.close)
    # a library warning (an AOF that is off, a cap it will not honour) is for the user,
    # not a Python traceback: one "Warning: ..." line on stderr, as `init` prints it, not
    # Python's "path/to/site-packages/...py:252: DurabilityWarning: ..." and the source
    # line that warned. Undone when the command ends (a test runs many in one process).
    ctx.with_resource(warnings.catch_warnings())
    warnings.showwarning = show_warning


def show_version(ctx: click.Context) -> None:
    """``tickwheel, version X``; ``{"name": "tickwheel", "version": "X"}`` under --json."""
    if ctx.meta.get("tickwheel.json_asked"):
        click.echo(json.dumps({"name": "tickwheel", "version": __version__}))
    else:
        click.echo(f"tickwheel, version {__version__}")
    ctx.exit()


def show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A warning as the CLI says one: ``Warning: <message>`` on stderr, nothing else."""
    click.echo(f"Warning: {message}", err=True)


for command in (
    server,
    init,
    migrate,
    worker,
    schedule,
    cancel,
    reschedule,
    heartbeat,
    notify,
    complete,
    get,
    wait,
    tail,
    handle,
    groups,
    dead,
    schedules,
    timers,
    trim,
    stats,
    shards,
    probe,
    dashboard,
    serve,
    tokens,
    demo,
    bench,
    acl,
):
    main.add_command(command)
accept_global_options(main)
wrap_whole_words(main)


def run() -> None:
    """The console script: ``main`` as click runs it, except that Ctrl-C ends a command
    with 130 (the shell's code for SIGINT) and one line, ``Interrupted (Ctrl-C)`` and
    what it left as it was if the command said (a KeyboardInterrupt's text), where click
    says "Aborted!" and 1."""
    try:
        code = main.main(prog_name="tickwheel", standalone_mode=False)
    except click.Abort as exc:
        interrupted = isinstance(exc.__cause__, KeyboardInterrupt)
        if asks_json(sys.argv[1:]):  # as every error under --json: one object on stderr
            said = {"error": "interrupted (Ctrl-C)", "kind": "Interrupted", "exit_code": 130}
            if not interrupted:
                said = {"error": "aborted", "kind": "Aborted", "exit_code": 1}
            click.echo(json.dumps(said), err=True)
        elif not interrupted:
            click.echo("Aborted!", err=True)
        else:  # after the newline click ends the ^C line with
            left = str(exc.__cause__)
            click.echo(f"Interrupted (Ctrl-C){': ' if left else ''}{left}", err=True)
        raise SystemExit(130 if interrupted else 1) from None
    except click.ClickException as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None
    raise SystemExit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    run()
