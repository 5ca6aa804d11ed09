"""What the long-running commands (``worker``, ``handle``) share: logging and metrics
options, waiting for Redis at start-up, and serving metrics with a clear error."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import click

from timer import ConfigError, TimerClient
from worker.logs import connect_with_retry

from .app import App, errors

F = TypeVar("F", bound=Callable[..., Any])

log_level_option = click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
)


def metrics_options(port_help: str, host_help: str) -> Callable[[F], F]:
    """``--metrics-port`` (off by default) and ``--metrics-host`` (loopback)."""

    def add(fn: F) -> F:
        fn = click.option("--metrics-host", default="127.0.0.1", show_default=True,
                          help=host_help)(fn)  # fmt: skip
        return click.option(
            "--metrics-port", type=click.IntRange(0, 65535), default=None, help=port_help
        )(fn)

    return add


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def connect(app: App, what: str, logger: logging.Logger) -> TimerClient:
    """A client of the app's namespace, waiting (with backoff) while Redis is not up yet,
    as a deployment's processes may start before it; Ctrl-C meanwhile exits 130."""
    url, namespace = app.url, app.namespace
    with errors():
        try:
            client = connect_with_retry(
                lambda: TimerClient.from_url(url, namespace), logger=logger, what=what
            )
        except KeyboardInterrupt:
            raise SystemExit(130) from None
    assert client is not None
    return client


def serve(start: Callable[[], object], host: str, port: int) -> None:
    """Start a metrics server; a port in use (or any OSError) is a ConfigError."""
    with errors():
        try:
            start()
        except OSError as exc:
            raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc}") from None
