"""The worker's estimate of Redis time: its monotonic clock plus a measured offset.

No worker clock decides a deadline or an expiry (the scripts use Redis TIME, and ``fire``
re-checks the deadline there). The estimate only decides *when to try*: a timer is put
in the wheel ``deadline - estimated_now`` ms ahead. The offset is re-measured with every
lease call (each returns the server's TIME), taking the midpoint of the round trip.
"""

from __future__ import annotations

import math
import threading
import time


class RedisClock:
    def __init__(self) -> None:
        self._offset_ms: float | None = None
        self._rtt_ms = 0.0
        self._lock = threading.Lock()

    @staticmethod
    def mono_ms() -> float:
        return time.monotonic_ns() / 1_000_000

    def observe(self, server_ms: int, sent_mono_ms: float, received_mono_ms: float) -> None:
        """Record that the server said ``server_ms`` during [sent, received] (monotonic)."""
        rtt = received_mono_ms - sent_mono_ms
        offset = server_ms - (sent_mono_ms + rtt / 2)
        with self._lock:
            # Prefer the measurement with the tighter round trip; drift is slow.
            if self._offset_ms is None or rtt <= self._rtt_ms * 2 + 1:
                self._offset_ms = offset
                self._rtt_ms = rtt

    @property
    def ready(self) -> bool:
        return self._offset_ms is not None

    def at_ms(self, mono_ms: float) -> float:
        """Estimated Redis time (epoch ms, fractional) at monotonic instant ``mono_ms``."""
        if self._offset_ms is None:
            raise RuntimeError("RedisClock used before any server time was observed")
        return mono_ms + self._offset_ms

    def wheel_delay_ms(self, deadline_ms: int) -> int:
        """The delay to give the wheel (which counts whole monotonic ms from the last
        whole one) for a task due at Redis time ``deadline_ms``: up to the first whole
        monotonic ms at or after that instant by this estimate, so neither early nor a
        rounded-down reading's ms late."""
        mono = self.mono_ms()
        return math.ceil(mono + deadline_ms - self.at_ms(mono)) - int(mono)

    def now_ms(self) -> int:
        """Estimated Redis time now (epoch ms)."""
        if self._offset_ms is None:
            raise RuntimeError("RedisClock used before any server time was observed")
        return int(self.mono_ms() + self._offset_ms)
