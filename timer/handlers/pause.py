"""Whether an operator has paused a runner's group (``TimerClient.pause_group``): asked
of Redis at most each ``PAUSE_CHECK_S`` (one ``HEXISTS``); a paused runner reads and
claims nothing new, and what it holds goes on (``loop.py``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..errors import TimerError
from .policy import HandlerStats

log = logging.getLogger("tickwheel.handlers")
PAUSE_CHECK_S = 1.0


class PauseWatch:
    def __init__(
        self, stats: HandlerStats, group: str, ask: Callable[[], bool], fields: dict[str, object]
    ) -> None:
        self.stats, self.group, self.ask, self.fields = stats, group, ask, fields
        self.next_check = 0.0  # monotonic: the first round asks

    @property
    def paused(self) -> bool:
        return self.stats.paused

    def look(self, now: float) -> bool:
        """Paused now? (Redis asked if it is time; a Redis error keeps what was known.)"""
        if now < self.next_check:
            return self.paused
        self.next_check = now + PAUSE_CHECK_S
        self.stats.pause_checks += 1
        try:
            paused = self.ask()
        except TimerError as exc:
            log.warning("group %s: could not ask whether it is paused: %s", self.group, exc)
            return self.paused
        if paused != self.paused:
            said = "paused: reading nothing new until it is resumed" if paused else "resumed"
            log.info("group %s %s", self.group, said, extra=self.fields)
        self.stats.paused = paused
        return paused
