"""The worker's estimate of Redis time: its monotonic clock plus a measured offset.

No worker clock decides a deadline or an expiry (the scripts use Redis TIME, and ``fire``
re-checks the deadline there). The estimate only decides *when to try*: a timer is put
in the wheel ``deadline - estimated_now`` ms ahead. The offset is measured with TIME's
microseconds every 15 s (``Leases.sync_clock``) and, between, with every lease call (each
returns the server's time in whole ms), taking the midpoint of the round trip.

A monotonic clock that runs at another rate than Redis's (a broken host clock, a VM
whose clock source drifts) would make every estimate wrong by more the longer since the
last reading, and a fire refused as early would be tried again and again as the wheel
releases it early each time (a clock at x1.5: about a thousand attempts a timer).
So the rate is measured too (:attr:`skew`, local ms per Redis ms, over readings at least
``SKEW_WINDOW_MS`` apart), and used when it is off by more than ``SKEW_IGNORE``; and a
fire refused as early brings the server's time with it (``observe(..., refused=True)``),
which is taken as the estimate's new anchor whatever the other readings.
"""

from __future__ import annotations

import math
import threading

from timer.clock import SYSTEM_TIME, Time
from timer.engine.clock import ShiftedClock


class RedisClock:
    PRECISE_FOR_MS = 30_000.0
    ALIGN_MARGIN_NS = 50_000
    SKEW_WINDOW_MS = 2_000.0  # readings this far apart (local ms) measure the rate
    SKEW_IGNORE = 0.01  # a rate within 1 % of Redis's is taken as equal (reading noise)

    def __init__(self, wheel: ShiftedClock | None = None, *, time: Time = SYSTEM_TIME) -> None:
        self.time = time  # the process's: its monotonic clock is what the offset is to
        self._offset_ms: float | None = None  # Redis ms - local ms at the anchor
        self._anchor_mono_ms = 0.0  # the local instant the offset was measured at
        self.skew = 1.0  # local ms per Redis ms (1.0 unless measured off by > SKEW_IGNORE)
        self._rate_from: tuple[float, float] | None = None  # (local, Redis) ms of a reading
        self._rtt_ms = 0.0
        self._precise_mono_ms: float | None = None  # when the last precise reading came
        self._lock = threading.Lock()
        # the worker's wheel clock, its whole ms aligned to Redis time's (before any timer
        # is in the wheel: the first lease call comes before loading, then as the
        # estimate improves)
        self.wheel = wheel if wheel is not None else ShiftedClock(time)

    def mono_ms(self) -> float:
        return self.time.monotonic_ns() / 1_000_000

    def observe(
        self,
        server_ms: float,
        sent_mono_ms: float,
        received_mono_ms: float,
        *,
        precise: bool = False,
        refused: bool = False,
    ) -> None:
        """Record that the server said ``server_ms`` during [sent, received] (monotonic):
        a whole ms, as the scripts return TIME (the true time was up to a ms later: taken
        as its middle), or ``precise`` (TIME's microseconds, ``sync``). A precise reading
        is preferred to whole-ms ones for ``PRECISE_FOR_MS``: it puts the wheel's whole ms
        on Redis time's, which a whole-ms reading cannot (±0.5 ms). ``refused``: the
        server's time of a fire it refused as early: the estimate was wrong, and this
        reading is its new anchor (at a measured rate, see the module's docstring)."""
        rtt = received_mono_ms - sent_mono_ms
        mid = sent_mono_ms + rtt / 2
        at = server_ms + (0.0 if precise else 0.5)
        offset = at - mid
        with self._lock:
            self._measure_rate(mid, at)
            last = self._precise_mono_ms
            fresh = last is not None and received_mono_ms - last < self.PRECISE_FOR_MS
            # Prefer the measurement with the tighter round trip; drift is slow (unless
            # the rate is off: then the newest reading is the best).
            tighter = self._offset_ms is None or rtt <= self._rtt_ms * 2 + 1 or self.skew != 1.0
            if refused or (precise and (tighter or not fresh)):
                self._offset_ms, self._rtt_ms, self._anchor_mono_ms = offset, rtt, mid
                if precise:
                    self._precise_mono_ms = received_mono_ms
            elif not precise and not fresh and tighter:
                self._offset_ms, self._rtt_ms, self._anchor_mono_ms = offset, rtt, mid
            best = self._offset_ms if self._offset_ms is not None else offset
        if precise:
            # the wheel's whole ms just after Redis time's (by the reading's own error), so
            # a timer is released at its deadline's ms, never a little before it (which
            # fire answers "early", retried a ms later)
            margin = self.ALIGN_MARGIN_NS
            self.wheel.align(round((best % 1) * 1_000_000) - margin, ahead_ok_ns=margin)

    def _measure_rate(self, mono_ms: float, server_ms: float) -> None:
        """The clock's rate from this reading and one at least SKEW_WINDOW_MS before it;
        under the lock."""
        start = self._rate_from
        if start is None:
            self._rate_from = (mono_ms, server_ms)
            return
        local, redis_ms = mono_ms - start[0], server_ms - start[1]
        if local < self.SKEW_WINDOW_MS or redis_ms <= 0:
            return
        rate = local / redis_ms
        self.skew = rate if abs(rate - 1.0) > self.SKEW_IGNORE else 1.0
        self._rate_from = (mono_ms, server_ms)

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
        anchor = self._anchor_mono_ms
        return anchor + self._offset_ms + (mono_ms - anchor) / self.skew

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
        ahead = (deadline_ms - self.at_ms(mono)) * self.skew  # in the wheel's (local) ms
        return math.ceil(wheel_now + ahead - 1e-3) - int(wheel_now)

    def now_ms(self) -> int:
        """Estimated Redis time now (epoch ms)."""
        return int(self.at_ms(self.mono_ms()))
