"""The worker's estimate of Redis time: its monotonic clock plus a measured offset.

No worker clock decides a deadline or an expiry (the scripts use Redis TIME, and ``fire``
re-checks the deadline there). The estimate only decides *when to try*: a timer is put
in the wheel ``deadline - estimated_now`` ms ahead. The offset is measured with TIME's
microseconds every 15 s (``Leases.sync_clock``) and, between, with every lease call (each
returns the server's time in whole ms), taking the midpoint of the round trip.
"""

from __future__ import annotations

import math
import threading
import time

from timer.engine.clock import ShiftedClock


class RedisClock:
    PRECISE_FOR_MS = 30_000.0
    ALIGN_MARGIN_NS = 50_000

    def __init__(self, wheel: ShiftedClock | None = None) -> None:
        self._offset_ms: float | None = None
        self._rtt_ms = 0.0
        self._precise_mono_ms: float | None = None  # when the last precise reading came
        self._lock = threading.Lock()
        # the worker's wheel clock, its whole ms aligned to Redis time's (before any timer
        # is in the wheel: the first lease call comes before loading, then as the
        # estimate improves)
        self.wheel = wheel if wheel is not None else ShiftedClock()

    @staticmethod
    def mono_ms() -> float:
        return time.monotonic_ns() / 1_000_000

    def observe(
        self, server_ms: float, sent_mono_ms: float, received_mono_ms: float, *,
        precise: bool = False,
    ) -> None:  # fmt: skip
        """Record that the server said ``server_ms`` during [sent, received] (monotonic):
        a whole ms, as the scripts return TIME (the true time was up to a ms later: taken
        as its middle), or ``precise`` (TIME's microseconds, ``sync``). A precise reading
        is preferred to whole-ms ones for ``PRECISE_FOR_MS``: it puts the wheel's whole ms
        on Redis time's, which a whole-ms reading cannot (±0.5 ms)."""
        rtt = received_mono_ms - sent_mono_ms
        offset = server_ms + (0.0 if precise else 0.5) - (sent_mono_ms + rtt / 2)
        with self._lock:
            last = self._precise_mono_ms
            fresh = last is not None and received_mono_ms - last < self.PRECISE_FOR_MS
            # Prefer the measurement with the tighter round trip; drift is slow.
            tighter = self._offset_ms is None or rtt <= self._rtt_ms * 2 + 1
            if precise and (tighter or not fresh):
                self._offset_ms, self._rtt_ms = offset, rtt
                self._precise_mono_ms = received_mono_ms
            elif not precise and not fresh and tighter:
                self._offset_ms, self._rtt_ms = offset, rtt
            best = self._offset_ms if self._offset_ms is not None else offset
        if precise:
            # the wheel's whole ms just after Redis time's (by the reading's own error), so
            # a timer is released at its deadline's ms, never a little before it (which
            # fire answers "early", retried a ms later)
            margin = self.ALIGN_MARGIN_NS
            self.wheel.align(round((best % 1) * 1_000_000) - margin, ahead_ok_ns=margin)

    def needs_sync(self, mono_ms: float) -> bool:
        """Whether a precise reading is due (none yet, or the last is half its life old)."""
        last = self._precise_mono_ms
        return last is None or mono_ms - last >= self.PRECISE_FOR_MS / 2

    @property
    def ready(self) -> bool:
        return self._offset_ms is not None

    def at_ms(self, mono_ms: float) -> float:
        """Estimated Redis time (epoch ms, fractional) at monotonic instant ``mono_ms``."""
        if self._offset_ms is None:
            raise RuntimeError("RedisClock used before any server time was observed")
        return mono_ms + self._offset_ms

    def wheel_delay_ms(self, deadline_ms: int) -> int:
        """The delay to give the wheel (which counts whole ms of ``self.wheel`` from the
        last whole one) for a task due at Redis time ``deadline_ms``: up to the first
        whole ms of that clock at or after the instant by this estimate, so neither early
        nor a rounded-down reading's ms late; once the wheel is aligned, that is the
        deadline's own instant."""
        mono = self.mono_ms()
        wheel_now = mono + self.wheel.shift_ns / 1e6  # what the wheel's clock reads
        # (less a µs: aligned, the instant is a whole ms, which sums of epoch-ms floats, an
        # ulp ~2e-4 ms, can overshoot; far below the estimate's own error)
        return math.ceil(wheel_now + deadline_ms - self.at_ms(mono) - 1e-3) - int(wheel_now)

    def now_ms(self) -> int:
        """Estimated Redis time now (epoch ms)."""
        if self._offset_ms is None:
            raise RuntimeError("RedisClock used before any server time was observed")
        return int(self.mono_ms() + self._offset_ms)
