"""A worker whose monotonic clock runs at another rate than Redis's does not spin: a fire
refused as early waits for the server's own remaining time (#39)."""

from __future__ import annotations

import time

import pytest

from tests.conftest import wait_for
from timer import TimerClient
from timer.clock import SystemTime
from timer.testing import RedisServer
from timer.worker import WorkerSettings

from .test_worker import OwnedWorker, running

pytestmark = pytest.mark.redis


class FastTime(SystemTime):
    """The system's time, but its monotonic clock runs ``rate`` times as fast (its waits,
    sleeps and wall clock are the system's): the Time a worker is given."""

    __slots__ = ("base", "rate")

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.base = time.monotonic_ns()

    def monotonic_ns(self) -> int:
        return self.base + int((time.monotonic_ns() - self.base) * self.rate)

    def monotonic(self) -> float:
        return self.monotonic_ns() / 1e9


@pytest.mark.slow
def test_a_fast_clock_costs_at_most_three_refused_fires_a_timer(
    redis_server: RedisServer, namespace: str
) -> None:
    """The worker's wheel and Redis-time estimate on a clock running x1.5: the clock's
    rate is measured from the server's readings, and each timer is tried at most three
    times before Redis says it is due (the issue measured ~1,100 refused tries a timer)."""
    c = TimerClient.from_url(redis_server.url, namespace)
    try:
        c.init(shards=2, bucket_ms=100)
        w = OwnedWorker(
            TimerClient.from_url(c.where, c.namespace),
            WorkerSettings(worker_id="fast", lease_ms=1_500),
            time=FastTime(1.5),
        )
        with running(w):
            wait_for(
                lambda: len(w.shards) == 2 and abs(w.clock.skew - 1.5) < 0.05,
                30,
                "the worker to lead and to measure its clock's rate",
            )
            n = 40
            now = c.server_time_ms()
            c.schedule_many(
                [{"id": f"f{i}", "deadline_ms": now + 2_000 + 50 * i} for i in range(n)]
            )
            for i in range(n):
                assert c.wait(f"f{i}", timeout=20).outcome == "expired"
            refused = w.stats.early_reinserted
        print(f"refused as early: {refused} for {n} timers")
        assert refused <= 3 * n, f"{refused} fires refused as early for {n} timers"
    finally:
        c.close()
