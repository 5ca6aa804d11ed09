"""What the long-running commands (``worker``, ``handle``) share: logging and metrics
options, waiting for Redis at start-up, and serving metrics with a clear error."""

from __future__ import annotations

import datetime
import errno
import gc
import json
import logging
import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from timer import ConfigError, TimerClient, TimerError
from timer.durable.model.models import Durability
from timer.worker.logs import connect_with_retry

from .app import App, errors
from .choice import Choice

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

log_level_option = click.option(
    "--log-level",
    type=Choice(
        ["debug", "info", "warning", "error"], case_sensitive=False, aliases={"warn": "warning"}
    ),
    default="info",  # shown as the choices are listed (either case is taken)
    show_default=True,
    help="The least severe log records printed.",
)


def metrics_options(port_help: str, host_help: str) -> Callable[[F], F]:
    """``--metrics-port`` (off by default) and ``--metrics-host`` (loopback)."""

    def add(fn: F) -> F:
        fn = click.option("--metrics-host", default="127.0.0.1", show_default=True, help=host_help)(
            fn
        )
        return click.option(
            "--metrics-port", type=click.IntRange(0, 65535), default=None, help=port_help
        )(fn)

    return add


def _durability(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """The level as given, checked now (a usage error, before anything starts)."""
    try:
        Durability.parse(value)
    except TimerError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


durability_option = click.option(
    "--durability",
    default="none",
    show_default=True,
    envvar="TICKWHEEL_DURABILITY",
    callback=_durability,
    help="When this process's writes count as done, and (for a handler runner) when what "
    "it reads may be handled: none, aof (the server's appendfsync must be always), "
    "replicas:N (N replicas have it: what a master with replicas, under Sentinel or a "
    "Cluster, needs to lose nothing acknowledged at a failover or a network split), "
    "aof+replicas:N [env TICKWHEEL_DURABILITY].",
)

FIELDS = ("worker", "shard", "group", "consumer", "timer_id", "attempt")

# its help is written from FIELDS, so the two cannot part again (it left out ``attempt``)
log_format_option = click.option(
    "--log-format",
    type=Choice(["text", "json"]),
    default="text",
    show_default=True,
    envvar="TICKWHEEL_LOG_FORMAT",
    help="json: one object a line (time, level, logger, message, and "
    f"{', '.join(FIELDS)} where there is one) [env TICKWHEEL_LOG_FORMAT].",
)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, ISO-8601 with ms), level, logger, message, the
    structured fields a record carries (``extra=``), and the traceback as ``error``."""

    def format(self, record: logging.LogRecord) -> str:
        at = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        line: dict[str, Any] = {
            "time": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


_json_lines = False  # set by setup_logging: what announce() writes


def steady_heap() -> None:
    """Before a long-running command's loop: what start-up made (modules, the client,
    the parsed settings) moves out of the collector's reach (``gc.freeze``), so a full
    collection walks only what the loop itself keeps: a full collection of that heap
    stalls every thread of a `handle --fire` process for ~20 ms, a few times a minute.
    The thresholds stay Python's own."""
    gc.collect()
    gc.freeze()


def announce(message: str, **fields: object) -> None:
    """A line the command itself says on stderr (ready, stopped): plain text, or under
    --log-format json a JSON object like the log lines, whatever the log level."""
    if not _json_lines:
        click.echo(message, err=True)
        return
    record = logging.LogRecord("tickwheel.cli", logging.INFO, "", 0, message, None, None)
    record.__dict__.update(fields)
    click.echo(JsonFormatter().format(record), err=True)


class TextFormatter(logging.Formatter):
    """A log line as the CLI writes every time: ISO 8601 in UTC with a Z (trial 11: a
    handler's log line read `YYYY-MM-DD hh:mm:ss,mmm` beside the tour's `…Thh:mm:ss.mmmZ`)."""

    converter = staticmethod(time.gmtime)
    default_time_format = "%Y-%m-%dT%H:%M:%S"
    default_msec_format = "%s.%03dZ"


def setup_logging(level: str, fmt: str = "text") -> None:
    global _json_lines  # one process, one log format
    _json_lines = fmt == "json"
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter()
        if fmt == "json"
        else TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logging.basicConfig(level=level.upper(), handlers=[handler])


def connect(app: App, what: str, logger: logging.Logger, durability: str = "none") -> TimerClient:
    """A client of the app's namespace, waiting (with backoff) while Redis is not up yet,
    as a deployment's processes may start before it; Ctrl-C meanwhile exits 130."""
    url, namespace = app.url, app.namespace
    with errors():
        try:
            client = connect_with_retry(
                lambda: TimerClient.from_url(url, namespace, durability=durability),
                logger=logger,
                what=what,
            )
        except KeyboardInterrupt:
            raise SystemExit(130) from None
    assert client is not None
    return client


def serve(start: Callable[[], T], host: str, port: int) -> T:
    """Start a metrics server (what ``start`` returns); a port in use (or any OSError) is
    a ConfigError naming --metrics-port and --metrics-host."""
    with errors():
        try:
            return start()
        except OSError as exc:
            raise ConfigError(
                cannot_listen("serve metrics", host, port, exc, "--metrics-port", "--metrics-host")
            ) from None


def cannot_listen(
    what: str, host: str, port: int, exc: OSError, port_flag: str, host_flag: str
) -> str:
    """One line saying why ``what`` cannot listen on host:port, and the option to change."""
    if exc.errno == errno.EADDRINUSE:
        why, change = "the port is in use (another process listens on it)", port_flag
    elif exc.errno == errno.EACCES:
        why, change = "no permission to listen on this port", port_flag
    else:  # an address this machine does not have, a name that does not resolve
        why, change = exc.strerror or str(exc), host_flag
    other = host_flag if change == port_flag else port_flag
    return f"cannot {what} on {host}:{port}: {why}; give another {change} (or {other})"


def bind_port(what: str, host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port as uvicorn binds one (SO_REUSEADDR, so a port a
    stopped server left in TIME_WAIT is taken at once), before anything says it serves;
    one it cannot bind is a ConfigError (exit 4) naming --port and --host."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        with errors():
            raise ConfigError(cannot_listen(what, host, port, exc, "--port", "--host")) from None
    return sock
