"""Warnings that repeat (a Redis outage) are logged once, then as a count per interval."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from timer.clock import SYSTEM_TIME, Time
from timer.errors import StoreError

T = TypeVar("T")


class RateLimitedLog:
    """``warning(fmt, *args)`` logs the first time a message format is seen, then at most
    once every ``every_s`` per format, saying how many were held back meanwhile.

    Thread-safe. A 3 s outage that fails every tick writes a handful of lines, not a
    hundred.
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        every_s: float = 10.0,
        clock: Callable[[], float] = SYSTEM_TIME.monotonic,
    ) -> None:
        self._logger = logger
        self._every_s = every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warning(self, fmt: str, *args: object, extra: dict[str, object] | None = None) -> bool:
        """Log now (True) or count it for the next line (False); ``extra``: the record's
        fields (worker, shard) for structured logs."""
        now = self._clock()
        with self._lock:
            last = self._last.get(fmt)
            if last is not None and now - last < self._every_s:
                self._held[fmt] = self._held.get(fmt, 0) + 1
                return False
            held = self._held.pop(fmt, 0)
            self._last[fmt] = now
        if held and last is not None:
            since = now - last
            self._logger.warning(
                fmt + " (and %d more like it in the last %.0fs)",
                *args,
                held,
                since,
                extra=extra,
            )
        else:
            self._logger.warning(fmt, *args, extra=extra)
        return True


def connect_with_retry(
    connect: Callable[[], T],
    *,
    logger: logging.Logger,
    what: str,
    stop: threading.Event | None = None,
    max_backoff_s: float = 2.0,
    clock: Time = SYSTEM_TIME,
) -> T | None:
    """``connect()`` until it stops raising StoreError (Redis unreachable), with backoff
    and rate-limited warnings; None if ``stop`` is set first. Other errors are raised."""
    warn = RateLimitedLog(logger, clock=clock.monotonic)
    stop = stop or threading.Event()
    backoff = 0.05
    while not stop.is_set():
        try:
            return connect()
        except StoreError as exc:
            warn.warning("%s: waiting for Redis: %s", what, exc)
            clock.wait(stop, backoff)
            backoff = min(backoff * 2, max_backoff_s)
    return None
