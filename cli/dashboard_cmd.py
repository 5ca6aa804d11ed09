"""``tickwheel dashboard``: the web dashboard of a namespace (Starlette, served by uvicorn)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shlex
import signal
import socket
from pathlib import Path

import click

from timer.errors import ConfigError

from . import embedded
from .app import App, TimerCommandError, errors, pass_app, require_extra, starts_server, warn
from .output import plural
from .service import bind_port, log_level_option, setup_logging
from .starting import running

TOKEN_ENV = "TICKWHEEL_DASHBOARD_TOKEN"
# What a webhook's secret must be at least (timer.webhook): a shared token shorter than
# this starts as it did, with a warning (an existing setup's token keeps working)
SHORT_TOKEN = 16
WILDCARDS = ("0.0.0.0", "::", "")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@starts_server
@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=8080,
    show_default=True,
    help="The port the dashboard listens on.",
)
@click.option(
    "--read-only", is_flag=True, help="Show everything, change nothing (no action buttons)."
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A host name the dashboard answers for (the Host header), besides 127.0.0.1, "
    "localhost, ::1 and --host; repeat for more. Any other is refused (DNS rebinding).",
)
@click.option(
    "--tokens",
    "tokens_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Sign each user in with a token of their own from this file (the HTTP API's: "
    "tickwheel tokens create --scope read|write --namespace NS): a read token sees "
    "everything and changes nothing; every action is logged with the token's name. "
    "Replaces the one shared TICKWHEEL_DASHBOARD_TOKEN.",
)
@log_level_option
@pass_app
def dashboard(
    app: App,
    host: str,
    port: int,
    read_only: bool,
    allowed_hosts: tuple[str, ...],
    tokens_path: Path | None,
    log_level: str,
) -> None:
    """Serve a web dashboard of the namespace: shards, workers, groups, dead letters,
    schedules, timers (find, look up, cancel, complete, reschedule), updated live.

    \b
    On loopback (the default) it needs no token. To listen beyond it, set a token:
      TOKEN=$(python -c 'import secrets; print(secrets.token_urlsafe())')
      export TICKWHEEL_DASHBOARD_TOKEN=$TOKEN
    then open http://HOST:PORT/ and sign in there with the token (a script or a
    bookmark may open /login?token=... instead; a browser keeps that address).

    It answers only requests for its own host names (--allowed-host adds one; on
    0.0.0.0 without it, any name, as the token guards it), and an action only from its
    own page (a same-origin request carrying the page's CSRF
    token) or with the token in an Authorization: Bearer header.

    Each action done prints one INFO line on stderr (logger tickwheel.dashboard): who
    (the token's name), what, on what, and the answer; --log-level warning hides them.
    """
    token = os.environ.get(TOKEN_ENV) or None
    if tokens_path is not None and token:
        raise click.UsageError(
            f"--tokens signs each user in with their own token: unset {TOKEN_ENV} (the one "
            "shared token) or drop --tokens"
        )
    if tokens_path is not None and not tokens_path.is_file():  # a setting missing: exit 4
        raise TimerCommandError(
            ConfigError(
                f"--tokens {tokens_path}: no such file; make a token first: tickwheel tokens "
                f"create --tokens {tokens_path} --scope read --namespace {app.namespace}"
            )
        )
    if not is_loopback(host) and not token and tokens_path is None:
        raise click.UsageError(
            f"--host {host} is beyond loopback: anyone who reaches it could "
            + ("read every timer and payload" if read_only else "cancel timers")
            + ". "
            f"Set a token first: export {TOKEN_ENV}=$(python -c 'import secrets; "
            "print(secrets.token_urlsafe())'), then sign in on the dashboard's page with it"
        )
    if token is not None and len(token) < SHORT_TOKEN:  # never the token itself
        warn(
            f"{TOKEN_ENV} is shorter than {SHORT_TOKEN} characters: anyone who can reach "
            f"port {port} can guess it. Make a longer one with: "
            "python3 -c 'import secrets; print(secrets.token_urlsafe())'"
        )
    require_extra("dashboard", "tickwheel dashboard")
    setup_logging(log_level)
    from timer.dashboard.guard import LOOPBACK_HOSTS  # noqa: PLC0415 - the web stack, only here

    names = [*LOOPBACK_HOSTS, *allowed_hosts]
    if host not in WILDCARDS:
        names.append(host)
    elif not allowed_hosts:  # every address, by any name: the token guards it
        names = ["*"]
    # a server started only to show it is stopped with the dashboard (as `make demo`
    # does): left behind, it ran on in a directory the user had moved on from
    app.stop_hint = "The dashboard stops it when it stops."
    try:
        serve(app, web_args=(read_only, token, names, tokens_path), host=host, port=port,
              log_level=log_level)  # fmt: skip
    finally:
        stop_started_server(app)


def serve(
    app: App,
    *,
    web_args: tuple[bool, str | None, list[str], Path | None],
    host: str,
    port: int,
    log_level: str,
) -> None:
    """Serve the dashboard of ``app``'s namespace until SIGINT or SIGTERM."""
    import uvicorn  # noqa: PLC0415 - only this command needs the web stack

    from timer.dashboard import create_app  # noqa: PLC0415

    read_only, token, names, tokens_path = web_args
    with errors():
        client = app.client
        client.meta  # noqa: B018 - a namespace never initialised fails here, clearly
    from timer.httpapi.tokens import TokenFile  # noqa: PLC0415

    tokens = TokenFile(tokens_path) if tokens_path is not None else None
    web = create_app(client, read_only=read_only, token=token, allowed_hosts=names, tokens=tokens)
    # uvicorn's own lines (its access log among them) stay at warning: the action lines
    # say who did what, which a request line cannot
    quiet = "error" if log_level.upper() == "ERROR" else "warning"
    config = uvicorn.Config(
        web, host=host, port=port, log_level=quiet, timeout_graceful_shutdown=2
    )  # an open page's live stream ends
    server = uvicorn.Server(config)
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]

    def stop(signum: int, frame: object) -> None:  # graceful, then exit 0 (uvicorn's own
        server.should_exit = True  # handler re-raises the signal: exit -15 on SIGTERM)

    with bind_port("serve the dashboard", host, port) as sock:  # before saying it serves
        click.echo(
            f"dashboard of namespace {app.namespace!r} at {app.safe_url}: "
            f"{page_url(host, port)}" + (" (read-only)" if read_only else ""),
            err=True,
        )
        for line in where_and_how(host, port, names, token, tokens_path):
            click.echo(line, err=True)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stop)
        running()  # its own SIGTERM handling from here (cli.starting)
        server.run(sockets=[sock])
    click.echo("dashboard stopped", err=True)


def page_url(host: str, port: int) -> str:
    """The page's address to open on this machine: a wildcard (0.0.0.0, ::) is no address
    to open, so its loopback one; an IPv6 one in brackets."""
    if host in WILDCARDS:
        host = "::1" if host == "::" else "127.0.0.1"
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def where_and_how(
    host: str, port: int, names: list[str], token: str | None, tokens_path: Path | None
) -> list[str]:
    """What the line naming the page's address leaves out: on every interface, how another
    machine opens it; with a token, how to sign in (on the page: the form posts the token,
    so no address the browser keeps holds it)."""
    said = []
    if host in WILDCARDS:
        elsewhere = [n for n in names if n != "*" and not is_loopback(n)]  # --allowed-host
        by = elsewhere[0] if elsewhere else socket.gethostname() or "THIS-MACHINE"
        said.append(
            f"It listens on every interface (--host {host or '0.0.0.0'}): from another "
            f"machine, {page_url(by, port)}" + ("" if elsewhere else " or this machine's address")
        )
    if tokens_path is not None:
        said.append(
            "Sign in on that page with a token `tickwheel tokens create --tokens "
            f"{shlex.quote(str(tokens_path))}` printed."
        )
    elif token:
        said.append(f"Sign in on that page with the token in {TOKEN_ENV}.")
    return said


def stop_started_server(app: App) -> None:
    """Stop the embedded server if this dashboard started it and nothing else uses it now
    (a worker or handler started meanwhile keeps it, and the user is told how to stop it)."""
    started = app.started
    if started is None:
        return
    app.close()
    running = embedded.status()
    if running is None or running.pid != started.pid:
        return  # stopped, or replaced, by someone else meanwhile
    others = embedded.other_clients(running)
    if others:
        click.echo(
            f"The embedded server it started (pid {running.pid}) runs on: "
            f"{plural(others, 'other connection')} to it {'is' if others == 1 else 'are'} "
            "open (a worker or a handler, say, which hold two each). "
            "Stop it with: tickwheel server stop",
            err=True,
        )
        return
    with errors():
        embedded.stop()
    click.echo(
        f"Stopped the embedded server it started (pid {running.pid}); its data stays in "
        f"{running.data_dir}.",
        err=True,
    )
