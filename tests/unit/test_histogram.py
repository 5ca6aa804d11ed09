"""The millisecond histograms behind the worker's and the runner's metrics."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from timer.histogram import MsHistogram, StageHistogram, Stages

ms = st.floats(0, 100_000, allow_nan=False)


@given(values=st.lists(ms, max_size=50), times=st.integers(1, 5))
def test_observe_all_counts_as_observing_each(values: list[float], times: int) -> None:
    one, batch = StageHistogram(), StageHistogram()
    for v in values:
        for _ in range(times):
            one.observe(v)
    batch.observe_all(values, times)
    assert one.counts == batch.counts
    assert abs(one.total - batch.total) <= 1e-6 * max(1.0, one.total)


def test_buckets_are_cumulative_in_seconds_with_sub_ms_bounds() -> None:
    h = StageHistogram()
    h.observe_all([0.04, 0.3, 0.3, 2.5, 20_000])
    buckets, total, count = h.snapshot()
    assert count == 5 and abs(total - 20_003.14 / 1000) < 1e-9
    got = dict(buckets)
    assert got["5e-05"] == 1  # 0.05 ms
    assert got["0.0003"] == 3  # 0.3 ms: a value on a bound is in that bucket
    assert got["0.003"] == 4
    assert got["10"] == 4 and got["+Inf"] == 5  # past the last bound (10 s)
    assert MsHistogram().quantile(0.5) is None
    assert h.quantile(0.5) == 0.3


def test_stages_clamp_a_negative_reading_to_zero() -> None:
    """A stage measured across two clocks (Redis time, wall clock) can read below zero by
    their skew; it counts as 0, not as a bucket below the first."""
    stages = Stages(("a", "b"))
    stages.observe("a", -0.4)
    stages.observe_all("b", [-1.0, 0.2])
    assert stages.by_name["a"].counts[0] == 1 and stages.by_name["a"].total == 0
    assert stages.by_name["b"].counts[0] == 1 and stages.by_name["b"].total == 0.2
