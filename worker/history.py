"""What a worker adds to its namespace's per-minute history (#57), every
``history_every_ms``: the timers its led shards' events announced as scheduled,
cancelled and completed, the timers it expired and their lateness, and each led shard's
pending count (``timer/durable/history.py`` says how a minute is kept)."""

from __future__ import annotations

from timer.durable.history import late_field, pending_field

from .context import WorkerContext


class HistoryWriter:
    """Sends the difference since its last successful send: a failed one is sent with
    the next (counted once, in the minute it reaches Redis)."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.sent: dict[str, int] = {}
        self.last_mono_ms: float | None = None

    def due(self, mono_ms: float) -> bool:
        every = self.ctx.settings.history_every_ms
        last = self.last_mono_ms
        return every > 0 and (last is None or mono_ms - last >= every)

    def totals(self) -> dict[str, int]:
        """Everything counted since the worker started, by history field."""
        s = self.ctx.stats
        totals = {
            "scheduled": s.scheduled_seen,
            "expired": s.fired + s.swept,
            "cancelled": s.cancelled_seen,
            "completed": s.completed_seen,
        }
        for bound, n in self.ctx.lateness.bucket_counts():
            totals[late_field(bound)] = n
        return totals

    def flush(self, mono_ms: float) -> None:
        """Add what was counted since the last flush; set the led shards' pending."""
        self.last_mono_ms = mono_ms
        totals = self.totals()
        counts = {k: n - self.sent.get(k, 0) for k, n in totals.items()}
        with self.ctx.lock:
            gauges = {
                pending_field(shard): st.pending
                for shard, st in self.ctx.shards.items()
                if st.pending is not None
            }
        self.ctx.client.add_history(counts, gauges)
        self.sent = totals
