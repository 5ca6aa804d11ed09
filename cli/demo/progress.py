"""How far the demo has got, for a person watching its stderr.

On a terminal it is click's bar with the count beside it (``12034/20000``). Elsewhere
(``make demo`` under a pipe, a CI log) click's bar prints its label once and nothing
more, so a run of twenty seconds looked stuck: there it is a line now and then,
``Waiting for outcomes: 12034 of 20000``, at the start, when the count changed and a
few seconds went by since the last line, and at the end. Under ``--json`` it prints
nothing (stdout is the summary; stderr stays quiet as before).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TextIO

import click


class Progress:
    """A count towards ``total``, shown on ``file`` (stderr) unless ``hidden``."""

    def __init__(
        self,
        label: str,
        total: int,
        *,
        hidden: bool,
        file: TextIO | None = None,
        every_s: float = 3.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.total, self.hidden = label, total, hidden
        self.file = sys.stderr if file is None else file
        self.every_s, self.clock = every_s, clock
        self.done = 0
        self.said: int | None = None  # the count of the last line printed
        self.said_at = 0.0
        self.bar: Any = None  # click's bar, on a terminal

    def __enter__(self) -> Progress:
        if self.hidden:
            return self
        if self.file.isatty():
            self.bar = click.progressbar(
                length=self.total, label=self.label, file=self.file, show_pos=True
            ).__enter__()
        else:
            self._say()
        return self

    def update(self, done: int) -> None:
        """The count is ``done`` now (a total so far, not a step)."""
        step, self.done = done - self.done, done
        if self.hidden:
            return
        if self.bar is not None:
            self.bar.update(step)
        elif done != self.said and self.clock() - self.said_at >= self.every_s:
            self._say()

    def note(self, message: str) -> None:
        """Say ``message`` where the run is now, between the count before it and the
        count after it: off a terminal after a line with the count it happened at (unless
        that was the last line); on a terminal the bar's line is cleared, the message
        printed, and the bar drawn again under it. Hidden: nothing."""
        if self.hidden:
            return
        if self.bar is not None:
            self.file.write("\r\x1b[K")  # the bar's line, without the bar
            click.echo(message, file=self.file)
            self.bar.render_progress()
            return
        if self.done != self.said:
            self._say()
        click.echo(message, file=self.file)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.bar is not None:
            self.bar.__exit__(kind, exc, tb)
        elif not self.hidden and self.done != self.said:
            self._say()

    def _say(self) -> None:
        click.echo(f"{self.label}: {self.done} of {self.total}", file=self.file)
        self.said, self.said_at = self.done, self.clock()
