"""What a worker adds to its namespace's per-minute history: the timers its led
shards' events announced as scheduled, cancelled and completed, the timers it expired
and their lateness, and each led shard's pending count (``timer/durable/admin/history.py``
says how a minute is kept).

It adds them every ``history_every_ms``, and also when it stops, releases a shard or
loses a lease: a worker stopped by SIGTERM, or one that lost its shards and may be
about to be killed, leaves nothing it counted unwritten. A kill -9 loses what it
counted since its last flush: at most one ``history_every_ms`` of expirations."""

from __future__ import annotations

import logging
import threading

from timer.durable.admin.history import late_field, pending_field
from timer.errors import TimerError

from .context import WorkerContext

log = logging.getLogger("worker")


class HistoryWriter:
    """Sends the difference since its last successful send: a failed one is sent with
    the next (counted once, in the minute it reaches Redis).

    Thread-safe: the tick's thread flushes, and so does the firer's when a fenced fire
    drops a shard; one lock keeps two flushes from sending the same difference twice.
    """

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.sent: dict[str, int] = {}
        self.last_mono_ms: float | None = None
        self.failed = False  # the last send failed (none since succeeded)
        self._lock = threading.Lock()

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

    def flush(self, mono_ms: float, *, counts_only: bool = False) -> None:
        """Add what was counted since the last flush; set the led shards' pending.
        ``counts_only``: send nothing when nothing new was counted (a shard dropped:
        its pending reading is the last one sent). StoreError when Redis refused it."""
        with self._lock:
            totals = self.totals()
            counts = {k: n - self.sent.get(k, 0) for k, n in totals.items()}
            if counts_only and not any(counts.values()):
                return
            self.last_mono_ms = mono_ms
            with self.ctx.lock:
                gauges = {
                    pending_field(shard): st.pending
                    for shard, st in self.ctx.shards.items()
                    if st.pending is not None
                }
            self.failed = True
            self.ctx.client.add_history(counts, gauges)
            self.sent, self.failed = totals, False

    def flush_now(self, why: str, *, last: bool = False) -> None:
        """Flush what is new, out of turn (``why``: stopping, a shard released or lost);
        a failure is logged, never raised (sent with the next flush, if there is one).

        After a failed send only the ``last`` (the stop's) and the periodic flush try
        again: leases are lost by the dozen when Redis is unreachable, and one call each,
        maybe waiting out a timeout, would hold up the loop trying to get them back."""
        if self.ctx.settings.history_every_ms <= 0:
            return
        if self.failed and not last:
            return
        try:
            self.flush(self.ctx.clock.mono_ms(), counts_only=True)
        except TimerError as exc:
            self.ctx.warn.warning(
                "adding to the history on %s failed (%s); sent with the next flush, if any",
                why,
                exc,
                extra=self.ctx.fields(),
            )
