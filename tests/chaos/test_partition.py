"""A master partitioned from its replicas and its Sentinels while clients still reach it
(tests/faults/split.py), and a Cluster's master partitioned from its replica and the
cluster bus (tests/faults/cluster_split.py): a replica is promoted, the old master is
demoted on healing and what it alone acknowledged is gone. With durability replicas:1
nothing acknowledged is lost and no timer is handled twice; `benchmarks.redis_faults`
measures the default (`none`) beside it: it loses some on both."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.conftest import Workers
from tests.faults.cluster_split import cluster_split_set
from tests.faults.split import SplitResult, Splittable, run_split, split_set
from timer import TimerClient

# It counts, never times: it runs in the parallel part of make test.
pytestmark = [pytest.mark.redis]


def test_replicas_1_loses_nothing_and_handles_nothing_twice_across_a_split(
    tmp_path: Path, server_binary: Path, namespace: str, workers_factory: list[Workers]
) -> None:
    with split_set(tmp_path / "set", binary=server_binary) as s:
        result, acked = _split_with_a_worker(s, namespace, tmp_path, workers_factory, shards=4)
    _assert_kept(result, acked)


def test_replicas_1_loses_nothing_and_handles_nothing_twice_across_a_cluster_split(
    tmp_path: Path, server_binary: Path, namespace: str, workers_factory: list[Workers]
) -> None:
    with cluster_split_set(tmp_path / "cluster", binary=server_binary) as s:
        # 12 shards: every master leads some
        result, acked = _split_with_a_worker(s, namespace, tmp_path, workers_factory, shards=12)
    _assert_kept(result, acked)


def _split_with_a_worker(
    s: Splittable, namespace: str, logs: Path, workers_factory: list[Workers], *, shards: int
) -> tuple[SplitResult, set[str]]:
    """``run_split`` under replicas:1 with one worker process on the set's URL."""
    with TimerClient.from_url(s.url, namespace, durability="replicas:1") as c:
        c.init(shards=shards)
    workers = Workers(
        s.url, namespace, logs, lease_ms=2000, horizon_ms=60_000,
        extra=("--durability", "replicas:1"),
    )  # fmt: skip
    workers_factory.append(workers)
    workers.start("w1")
    try:
        return run_split(s, namespace, "replicas:1")
    finally:
        workers.stop_all()


def _assert_kept(result: SplitResult, acked: set[str]) -> None:
    assert result.acknowledged_during_cut > 0, "the clients never wrote during the split"
    assert result.lost == [], f"{len(result.lost)} acknowledged timers lost"
    assert result.decided_twice == [], f"handled twice: {result.decided_twice[:5]}"
    assert len(acked) == result.acknowledged
