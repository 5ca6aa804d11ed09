"""Worker configuration: one frozen dataclass, passed explicitly."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field

from timer.durable.model.durations import format_duration_ms, ms_text
from timer.durable.model.models import COARSE_MS, check_result_ttl_ms
from timer.errors import InvalidInput


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class WorkerSettings:
    """How a worker holds shards and fires timers. Times are milliseconds."""

    worker_id: str = field(default_factory=default_worker_id)
    lease_ms: int = 5_000
    horizon_ms: int = 10_000
    fire_batch: int = 500
    sweep_limit: int = 1_000
    sweep_interval_ms: int = 500
    max_load: int = 200_000  # timers read into the wheel per load pass (backlogs in slices)
    max_sweeps_per_tick: int = 10  # sweep calls per shard per tick, so leases get renewed
    # How long each outcome this worker decides stays retained: it answers get, wait and a
    # retried schedule of its id (which returns it rather than arming a new timer).
    result_ttl_ms: int = 24 * 3600 * 1000
    # Outcomes older than this leave the led shards' streams (never one a consumer group
    # has not acked: the stream is a delivery log, what was delivered and acked goes);
    # 0 keeps them forever. Checked every trim_interval_ms per shard.
    outcome_retention_ms: int = 3600 * 1000
    trim_interval_ms: int = 60_000

    @property
    def trim_pass_within(self) -> int:
        """In how many trims every retained outcome is looked at, at least: half a
        result_ttl of trim intervals (so an outcome outlives its ttl by at most half of it,
        and costs ~2 looks, however large a shard's results table grows)."""
        return max(1, -(-self.result_ttl_ms // (2 * self.trim_interval_ms)))

    # Start even if a server's maxmemory-policy may evict timers (they can then be lost).
    allow_eviction: bool = False
    # How often it adds what it saw to the namespace's per-minute history (the
    # dashboard's charts, timer/durable/admin/history.py); 0: never.
    history_every_ms: int = 10_000

    def __post_init__(self) -> None:
        if not self.worker_id or " " in self.worker_id:
            raise InvalidInput(f"worker id must be non-empty with no spaces: {self.worker_id!r}")
        for name, least in (("lease_ms", 300), ("horizon_ms", 100)):
            got = getattr(self, name)
            if got < least:
                raise InvalidInput.about(
                    "{0} must be at least {least} (got {got})",
                    name,
                    least=format_duration_ms(least),
                    got=ms_text(got),
                )
        if self.horizon_ms >= COARSE_MS:  # far timers reach the fine buckets an hour ahead
            raise InvalidInput.about(
                "{0} must be under an hour (1h), got {got}",
                "horizon_ms",
                got=format_duration_ms(self.horizon_ms),
            )
        if not (1 <= self.fire_batch <= 5_000 and 1 <= self.sweep_limit <= 5_000):
            raise InvalidInput(  # a script unpacks that many ids at once (Lua's stack: ~8k)
                f"fire_batch and sweep_limit must be 1 to 5000, got {self.fire_batch} and "
                f"{self.sweep_limit}"
            )
        check_result_ttl_ms(self.result_ttl_ms)
        if self.outcome_retention_ms < 0:
            raise InvalidInput(
                f"outcome retention must be >= 0 (0 keeps outcomes forever), "
                f"got {self.outcome_retention_ms} ms"
            )
        if self.trim_interval_ms < 1:
            raise InvalidInput(f"trim_interval_ms must be at least 1, got {self.trim_interval_ms}")
        if self.history_every_ms != 0 and not 100 <= self.history_every_ms <= 60_000:
            raise InvalidInput.about(
                "{0} must be 100ms to 1m (0s: no history), got {got}",
                "history_every_ms",
                got=ms_text(self.history_every_ms),
            )

    @property
    def renew_every_ms(self) -> int:
        """Leases are renewed every third of their TTL."""
        return self.lease_ms // 3

    @property
    def live_window_ms(self) -> int:
        """A worker whose heartbeat is older than this is counted as gone: half a lease.

        Workers beat every tick (~100 ms), so a live one is never near it. A dead one
        stops being counted before its last lease can expire (renewed every third of a
        TTL, a lease outlives its holder by 2/3 to 1 TTL), so when its shards come free
        the survivors' fair share has already grown and they take them at once. With a
        whole TTL here, takeovers came up to a third of a lease late.
        """
        return self.lease_ms // 2

    @property
    def heartbeat_every_ms(self) -> int:
        """How often a worker announces itself and recounts the live ones."""
        return min(100, self.lease_ms // 10)
