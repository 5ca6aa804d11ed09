"""A master partitioned from its replicas and its Sentinels while clients still reach it
(tests/faults/split.py), and a Cluster's master partitioned from its replica and the
cluster bus (tests/faults/cluster_split.py): a replica is promoted, the old master is
demoted on healing and what it alone acknowledged is gone. With durability replicas:1
nothing acknowledged is lost and no timer is handled twice; `benchmarks.redis_faults`
measures the default (`none`) beside it: it loses some on both."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from tests.chaos.conftest import Workers
from tests.conftest import wait_for
from tests.faults.cluster_split import cluster_split_set
from tests.faults.split import SplitResult, Splittable, run_split, split_set
from timer import Handlers, Outcome, TimerClient

# It counts, never times. Beside three other test processes on a loaded 2-core machine,
# the Sentinel set's split lost 260 timers acknowledged under replicas:1 once (CI's
# oldest-redis-py pass, 2026-12-02); reproduced under two busy loops (1 run in 10, 320
# lost) and explained by the Sentinels' logs: the harness's, not tickwheel's (see
# tests/faults/split.py's docstring). The split tests run one at a time all the same
# (marked chaos): a Sentinel set's timing is the machine's.
pytestmark = [pytest.mark.redis, pytest.mark.chaos]


def test_replicas_1_loses_nothing_and_handles_nothing_twice_across_a_split(
    tmp_path: Path, server_binary: Path, namespace: str, workers_factory: list[Workers]
) -> None:
    with split_set(tmp_path / "set", binary=server_binary) as s:
        result, acked = _split_with_a_worker(s, namespace, tmp_path, workers_factory, shards=4)
        logs = s.sentinel_set.log_tail(60)
    _assert_kept(result, acked, logs)


# redis-py 5.3's cluster client (CI's oldest pass) once left a node's socket unclosed
# after the failover under load (not reproduced alone, twice); redis-py 6 and later are
# held to every socket closed, as everywhere else
def old_cluster_client(test: Callable[..., None]) -> Callable[..., None]:
    if redis.VERSION >= (6,):
        return test
    mark = pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")
    return mark(test)  # type: ignore[no-any-return]


@old_cluster_client
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


def _assert_kept(result: SplitResult, acked: set[str], logs: str = "") -> None:
    assert result.acknowledged_during_cut > 0, "the clients never wrote during the split"
    # what a loss looks like says where it happened: handled, then gone (an outcome lost
    # with a master), or never handled (a timer lost before it fired); the Sentinels'
    # logs say how many failovers there were
    assert result.lost == [], (
        f"{len(result.lost)} acknowledged timers lost, {len(result.handled_lost)} of them "
        f"handled first: {result.lost[:10]}\n{result.figures()}\n{logs}"
    )
    assert result.decided_twice == [], f"handled twice: {result.decided_twice[:5]}"
    assert len(acked) == result.acknowledged


def test_replicas_1_holds_an_acknowledgement_the_master_alone_has_and_sends_it_again(
    tmp_path: Path, server_binary: Path, namespace: str
) -> None:
    """Under replicas:1 a handler runner's acknowledgement waits for a replica too. The
    replicas' link is cut while handlers run, so their acks reach the master alone; then
    the master is killed and a replica promoted, without them. The runner holds the
    outcomes (in hand, so not taken back) and sends the acks again to the promoted
    replica: each outcome is handled once. Before, the master alone answered the acks and
    lost them, the runner took its own entries back after reclaim_idle_ms, and every one
    ran twice."""
    with split_set(tmp_path / "set", binary=server_binary) as s:
        with TimerClient.from_url(s.url, namespace, durability="replicas:1") as c:
            c.init(shards=2)
            for i in range(20):
                c.schedule(f"j{i}", 60_000)
                c.cancel(f"j{i}")
        runs: Counter[str] = Counter()
        release = threading.Event()

        def handler(o: Outcome) -> None:
            runs[o.id] += 1
            release.wait(60)

        runner = TimerClient.from_url(
            s.url, namespace, durability="replicas:1", socket_timeout_s=2.0
        )
        h = Handlers(runner, group="g", reclaim_idle_ms=2000)
        h.add("cancelled", handler)
        thread = threading.Thread(target=h.run, kwargs={"concurrency": 20}, daemon=True)
        thread.start()
        try:
            wait_for(lambda: len(runs) == 20, 30, "every outcome read (confirmed) and started")
            s.front.cut("replicas")  # the replicas' links only: the Sentinels still see it
            release.set()  # the handlers return; their acks reach the master alone
            old = s.master
            with redis.Redis(host=old.host, port=old.port) as r:
                wait_for(lambda: _pending(r, c, 2) == 0, 30, "the acks applied on the master")
            old.kill()
            wait_for(s.promoted, 60, "a replica promoted")
            new = s.sentinel_set.master()
            with redis.Redis(host=new.host, port=new.port) as r:
                wait_for(
                    lambda: _pending(r, c, 2) == 0 and h.stats.handled >= 20,
                    60,
                    "every outcome acknowledged on the promoted replica",
                )
        finally:
            release.set()
            h.stop()
            thread.join(30)
            runner.close()
    twice = [i for i, n in runs.items() if n > 1]
    assert sorted(runs.values()) == [1] * 20, f"handled twice: {twice}"
    assert h.stats.handled == 20


def _pending(r: redis.Redis, c: TimerClient, shards: int) -> int:
    """Group g's pending entries over the namespace's shards, on this server."""
    return sum(
        int(r.xpending(c.keys.shard(shard).outcomes, "g")["pending"]) for shard in range(shards)
    )
