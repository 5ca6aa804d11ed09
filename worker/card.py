"""What a worker says of itself, for its page in the dashboard: its version, host,
pid and start, its lease, the shards it leads with their pending counts, its counters,
its lateness and the last error it met. Put up as it adds to the history (every
``history_every_ms``; every 10 s when that is off), kept ten minutes after the last
(``timer/durable/shards/ops.py``: ``put_card``)."""

from __future__ import annotations

import math
import platform
from typing import Any

from timer import __version__

from .context import WorkerContext

CARD_EVERY_MS = 10_000  # when the history is off


def _ms(value: float | None) -> float | None:
    """A lateness bound as JSON can hold it (None past the last bucket)."""
    return None if value is None or math.isinf(value) else value


class CardWriter:
    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.started_ms = ctx.time.wall_ms()
        self.host = ctx.time.host()
        self.last_mono_ms: float | None = None

    def due(self, mono_ms: float) -> bool:
        every = self.ctx.settings.history_every_ms or CARD_EVERY_MS
        return self.last_mono_ms is None or mono_ms - self.last_mono_ms >= every

    def card(self) -> dict[str, Any]:
        ctx, s = self.ctx, self.ctx.stats
        with ctx.lock:
            led = {str(n): st.pending for n, st in sorted(ctx.shards.items())}
        return {
            "id": ctx.id,
            "version": __version__,
            "host": self.host,
            "pid": ctx.time.pid(),
            "python": platform.python_version(),
            "started_ms": self.started_ms,
            "at_ms": ctx.time.wall_ms(),
            "lease_ms": ctx.settings.lease_ms,
            "led": led,  # shard -> its pending timers (None: not read yet)
            "fired": s.fired,
            "swept": s.swept,
            "takeovers": s.takeovers,
            "leases_lost": s.leases_lost,
            "fence_rejections": s.fence_rejections,
            "redis_errors": s.redis_errors,
            "lateness_p50_ms": _ms(ctx.lateness.quantile(0.5)),
            "lateness_p99_ms": _ms(ctx.lateness.quantile(0.99)),
            "last_error": ctx.last_error,
            "last_error_ms": ctx.last_error_ms,
        }

    def put(self, mono_ms: float) -> None:
        self.last_mono_ms = mono_ms  # a failed put waits its turn, as the history does
        self.ctx.client.membership.describe(self.ctx.id, self.card())
