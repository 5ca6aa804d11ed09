"""What a worker logs when it takes its shards: one INFO line a round, and a line a shard
only where it says more than that line (a takeover from a lapsed lease, timers overdue)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.conftest import fresh_client
from timer import TimerClient
from timer.testing import RedisServer

from .conftest import server_now_ms
from .test_worker import make_worker

pytestmark = pytest.mark.redis


@pytest.fixture
def c(redis_server: RedisServer, namespace: str) -> Iterator[TimerClient]:
    with fresh_client(redis_server, namespace, 4, bucket_ms=100) as client:
        yield client


def worker_lines(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "worker" and r.levelno == level]


def take_all(c: TimerClient, caplog: pytest.LogCaptureFixture) -> None:
    """A worker takes every shard, logging at DEBUG."""
    caplog.set_level(logging.DEBUG, logger="worker")
    w = make_worker(c, "w2")
    try:
        w.run_once()
        assert len(w.shards) == 4
    finally:
        w.close()


def test_a_first_start_logs_one_info_line_and_each_shard_at_debug(
    c: TimerClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A 64-shard namespace wrote 64 INFO lines `shard 41: leading at epoch 1` and then
    `took 64 shards; …`, which already said it: the shards' lines are DEBUG now."""
    take_all(c, caplog)
    assert [r.getMessage() for r in worker_lines(caplog, logging.INFO)] == [
        "took 4 shards; none has a timer overdue"
    ]
    assert not worker_lines(caplog, logging.WARNING)
    leading = [r for r in worker_lines(caplog, logging.DEBUG) if "leading at" in r.getMessage()]
    assert sorted(r.shard for r in leading) == [0, 1, 2, 3]  # type: ignore[attr-defined]
    assert all(r.getMessage().endswith("at epoch 1 (new; 0 overdue timers)") for r in leading)


def test_shards_handed_over_are_summed_up_not_listed(
    c: TimerClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Shards given back by a worker that stopped: its overdue timers are said in the
    round's line, and no shard has an INFO or WARNING line of its own."""
    for s in range(4):
        store = c.shard_store(s)
        assert store.release("w1", store.acquire("w1", 60_000).epoch)
    past = server_now_ms(c.redis) - 1_000
    c.schedule_many([{"id": f"late{i}", "deadline_ms": past} for i in range(5)])
    take_all(c, caplog)
    assert [r.getMessage() for r in worker_lines(caplog, logging.INFO)] == [
        "took 4 shards (4 handed over); 5 overdue timers fire by priority now"
    ]
    assert not worker_lines(caplog, logging.WARNING)


def test_a_shard_taken_over_from_a_lapsed_lease_with_timers_overdue_is_a_warning(
    c: TimerClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker that died left its leases to expire: each shard it left with timers
    overdue has a WARNING of its own (they fire late, and the round's line names no
    shard); one it left with none is said at DEBUG only."""
    for s in range(4):
        c.shard_store(s).acquire("w1", 60_000)
        c.redis.delete(c.keys.shard(s).lease)  # w1 died: its leases lapsed
    late = next(f"late{i}" for i in range(1_000) if c.shard_of(f"late{i}") == 2)
    c.schedule(late, deadline_ms=server_now_ms(c.redis) - 1_000)
    take_all(c, caplog)
    assert [r.getMessage() for r in worker_lines(caplog, logging.INFO)] == [
        "took 4 shards (4 from a lapsed lease); 1 overdue timer fires by priority now"
    ]
    (warning,) = worker_lines(caplog, logging.WARNING)
    assert warning.shard == 2  # type: ignore[attr-defined]
    assert warning.getMessage() == (
        "shard 2: taken over at epoch 2 from a lapsed lease (its leader died, stalled or "
        "was cut off); 1 overdue timer(s) fire now"
    )
