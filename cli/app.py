"""The CLI's app context: settings from the global options, a lazily created client,
and the one place where TimerErrors become one-line messages with distinct exit codes."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import click

from timer import TimerClient
from timer.errors import (
    ConfigError,
    CorruptRecord,
    DuplicateTimer,
    Fenced,
    InvalidInput,
    StoreError,
    TimerClosed,
    TimerError,
    TimerFull,
    TimerNotFound,
    WaitTimeout,
)
from timer.store import redact_url

from . import embedded

SERVER_ENV = "TICKWHEEL_SERVER_BINARY"  # which binary the embedded server runs

# 0 ok, 2 usage (click); each TimerError kind its own code, 1 for any other.
EXIT_CODES: dict[type[TimerError], int] = {
    InvalidInput: 3,
    ConfigError: 4,
    StoreError: 5,
    TimerNotFound: 6,
    DuplicateTimer: 7,
    WaitTimeout: 8,
    Fenced: 9,
    TimerFull: 10,
    TimerClosed: 10,
    CorruptRecord: 11,
}


class TimerCommandError(click.ClickException):
    """A TimerError as the CLI shows it: one line (one JSON object with --json) on stderr,
    and the exit code of its kind."""

    def __init__(self, error: TimerError) -> None:
        super().__init__(str(error))
        self.kind = type(error).__name__
        # click declares exit_code on the class; each of these errors has its own
        self.exit_code = next(  # type: ignore[misc]
            (code for kind, code in EXIT_CODES.items() if isinstance(error, kind)), 1
        )
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


@contextlib.contextmanager
def errors() -> Iterator[None]:
    try:
        yield
    except TimerError as exc:
        raise TimerCommandError(exc) from None


@dataclass
class App:
    redis_url: str | None = field(repr=False)  # may hold a password: never shown
    namespace: str
    json: bool
    _client: TimerClient | None = field(default=None, repr=False)
    _url: str | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """The Redis URL: the one given, else the embedded server (started if needed)."""
        if self._url is None:
            if self.redis_url:
                self._url = self.redis_url
            else:
                with errors():
                    state, started = embedded.start(binary=os.environ.get(SERVER_ENV) or None)
                if started and not self.json:
                    click.echo(
                        f"Started the embedded server ({state.binary}) on {state.url}; "
                        f"data in {state.data_dir}. Stop it with: tickwheel server stop",
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


pass_app = click.make_pass_decorator(App)
