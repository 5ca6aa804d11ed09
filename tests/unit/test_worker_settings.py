"""WorkerSettings: the timing rules that bound failover."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timer import TimerClient
from timer.durable.model.durations import TEN_YEARS_MS
from timer.errors import InvalidInput
from timer.worker import WorkerSettings


@given(st.integers(min_value=300, max_value=600_000))
def test_a_dead_worker_stops_counting_before_its_leases_can_expire(lease_ms: int) -> None:
    """A lease outlives its dead holder by at least 2/3 of a TTL (renewed every third);
    the holder must stop counting as live before then, so survivors' fair share has grown
    when its shards come free (else takeovers come late)."""
    s = WorkerSettings(worker_id="w", lease_ms=lease_ms)
    # Dead at t0: last beat at t0 - heartbeat at worst, counted until that + live window,
    # seen by a survivor at its next beat; its last renewal at t0 - renew at worst, so
    # its leases expire from t0 + lease - renew on.
    no_longer_counted = s.live_window_ms + s.heartbeat_every_ms
    earliest_expiry = lease_ms - s.renew_every_ms
    assert no_longer_counted <= earliest_expiry, (no_longer_counted, earliest_expiry)
    assert s.heartbeat_every_ms * 2 <= s.live_window_ms  # a live worker never looks gone


def test_the_horizon_stays_under_the_coarse_buckets_lead() -> None:
    """A far timer reaches the fine buckets an hour ahead; a horizon that long would load
    a fine bucket before the sweep moved its far timers in (they would then fire late)."""
    WorkerSettings(worker_id="w", horizon_ms=3_599_999)
    with pytest.raises(InvalidInput, match="under an hour"):
        WorkerSettings(worker_id="w", horizon_ms=3_600_000)


@pytest.mark.parametrize(("fire_batch", "sweep_limit"), [(0, 1_000), (500, 0), (5_001, 1_000),
                                                         (500, 10_000)])  # fmt: skip
def test_batches_a_script_cannot_unpack_are_refused(fire_batch: int, sweep_limit: int) -> None:
    """fire and sweep unpack their ids at once (Lua's stack holds ~8k): a larger batch
    would fail every call; it is refused when the settings are made, with the range."""
    WorkerSettings(worker_id="w", fire_batch=5_000, sweep_limit=5_000)
    with pytest.raises(InvalidInput, match="1 to 5000"):
        WorkerSettings(worker_id="w", fire_batch=fire_batch, sweep_limit=sweep_limit)


@pytest.mark.parametrize("ttl_ms", [0, 999, -1, TEN_YEARS_MS + 1, True])
def test_a_result_ttl_an_outcome_cannot_have_is_refused(ttl_ms: int) -> None:
    """A retained outcome's expiry is whole epoch seconds in 32 bits: under a second it
    would be gone at once, and past ~80 years the expiry wraps into the past (gone at the
    next trim); both are refused when the settings are made, for worker and client alike."""
    WorkerSettings(worker_id="w", result_ttl_ms=1_000)
    WorkerSettings(worker_id="w", result_ttl_ms=TEN_YEARS_MS)
    with pytest.raises(InvalidInput, match="result_ttl must be from 1 second to 3660 days"):
        WorkerSettings(worker_id="w", result_ttl_ms=ttl_ms)


@pytest.mark.parametrize("ttl_s", [0, 0.5, -1, float("nan"), float("inf"), 1e12, "1h", None])
def test_a_client_refuses_a_result_ttl_it_cannot_keep(ttl_s: object) -> None:
    """Before connecting (the URL's server does not exist), so nothing is written."""
    with pytest.raises(InvalidInput, match="result_ttl"):
        TimerClient.from_url("redis://127.0.0.1:1/0", result_ttl_s=ttl_s)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ttl_ms", "interval_ms", "passes"),
    [
        (86_400_000, 60_000, 720),
        (1_000, 60_000, 1),
        (3_600_000, 1_000, 1_800),
        (121_000, 60_000, 2),
    ],
)
def test_trim_pass_within_is_half_a_result_ttl_of_trims(
    ttl_ms: int, interval_ms: int, passes: int
) -> None:
    """Every retained outcome is looked at within half its ttl (rounded up to whole trims,
    at least one), however large the table."""
    s = WorkerSettings(worker_id="w", result_ttl_ms=ttl_ms, trim_interval_ms=interval_ms)
    assert s.trim_pass_within == passes
