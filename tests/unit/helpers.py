"""Small task types shared by the engine's unit tests."""

from __future__ import annotations

import threading
from collections.abc import Callable

from timer import TimerTask


class RecordingTask(TimerTask):
    """Appends its ``ident`` (and the time it ran, if a clock is given) to ``out`` once."""

    def __init__(
        self,
        delay_ms: int,
        ident: object,
        out: list[object],
        now: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(delay_ms)
        self.ident = ident
        self.out = out
        self.now = now
        self.done = threading.Event()
        self.runs = 0
        self._lock = threading.Lock()

    def run(self) -> None:
        with self._lock:
            self.runs += 1
            self.out.append(self.ident if self.now is None else (self.ident, self.now()))
        self.done.set()


class NoopTask(TimerTask):
    def run(self) -> None:
        pass


class Marker(TimerTask):
    """An already-expired task: when it has run, everything submitted before it has run."""

    def __init__(self) -> None:
        super().__init__(-1)
        self.done = threading.Event()

    def run(self) -> None:
        self.done.set()
