"""What a handler runner adds to its namespace's per-minute history, every
``HISTORY_EVERY_S`` and when it stops: its group's outcomes handled, failed attempts and
dead letters since it last did (``timer/durable/admin/history.py`` says how a minute is kept)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from ..durable.admin.history import group_field
from ..errors import TimerError
from .policy import HandlerStats

log = logging.getLogger("tickwheel.handlers")
HISTORY_EVERY_S = 10.0


class RunnerHistory:
    """Sends the difference since its last successful send: a failed one is sent with
    the next (counted once, in the minute it reaches Redis)."""

    def __init__(
        self, stats: HandlerStats, group: str, add: Callable[[Mapping[str, int]], None]
    ) -> None:
        self.stats, self.group, self.add = stats, group, add
        self.sent: dict[str, int] = {}

    def flush(self) -> None:
        s = self.stats
        totals = {
            group_field("handled", self.group): s.handled,
            group_field("failed", self.group): s.failed,
            group_field("dead", self.group): s.dead_lettered,
        }
        counts = {k: n - self.sent.get(k, 0) for k, n in totals.items()}
        if not any(counts.values()):
            return
        try:
            self.add(counts)
        except TimerError as exc:  # sent with the next flush
            log.warning("group %s: could not add to the history: %s", self.group, exc)
            return
        self.sent = totals
