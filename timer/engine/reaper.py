"""SystemTimerReaper: the thread that drives a timer's clock (Kafka's reaper).

It blocks in ``advance_clock`` until the next bucket is due, so it never spins while
nothing is pending; ``close()`` wakes it, waits for it and closes the timer once.
"""

from __future__ import annotations

import logging
import threading

from ..errors import InvalidInput
from .system_timer import SystemTimer
from .task import TimerTask

log = logging.getLogger("timer.reaper")


class SystemTimerReaper:
    """Drives ``SystemTimer.advance_clock`` on its own daemon thread until ``close()``.

    Thread-safe: ``add`` and ``close`` from any thread; ``close`` is idempotent.
    """

    def __init__(self, timer: SystemTimer, name: str | None = None) -> None:
        if not isinstance(timer, SystemTimer):
            raise InvalidInput(f"SystemTimerReaper needs a SystemTimer, got {timer!r}")
        self.timer = timer
        self._stopping = threading.Event()
        self._close_lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(
            target=self._loop, name=name or f"reaper-{timer.name}", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.timer.advance_clock(None)
            except Exception:  # a bug, never expected: log it and keep time moving
                log.exception("reaper of timer %r: advance_clock failed", self.timer.name)
                self._stopping.wait(0.1)

    def add(self, task: TimerTask) -> None:
        self.timer.add(task)

    def advance_clock(self, timeout_ms: float | None = 0) -> bool:
        return self.timer.advance_clock(timeout_ms)

    @property
    def size(self) -> int:
        return self.timer.size

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    @property
    def is_shutdown(self) -> bool:
        return self._closed and not self._thread.is_alive()

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._stopping.set()
        self.timer.wake()
        if threading.current_thread() is not self._thread:
            self._thread.join()
        self.timer.close()

    def __enter__(self) -> SystemTimerReaper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
