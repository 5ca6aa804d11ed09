"""A running worker through faults of Redis's disk (tests/faults): a full disk, then
space back; an fsync that stalls for seconds. Timers due meanwhile fire once each, none
early, none lost; /ready says why it is not ready, with Redis's own word."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.chaos.conftest import assert_exactly_once, read_all_outcomes
from tests.chaos.test_worker_health import probe
from tests.conftest import wait_for
from tests.faults import FaultyDisk, build_shim
from timer import TimerClient
from timer.testing import free_port
from timer.worker import Worker, WorkerSettings
from timer.worker.metrics import serve_metrics

pytestmark = [pytest.mark.redis, pytest.mark.chaos]


@dataclass
class Running:
    disk: FaultyDisk
    client: TimerClient
    worker: Worker
    port: int


@pytest.fixture
def running(tmp_path: Path, server_binary: Path, namespace: str) -> Iterator[Running]:
    """A worker (lease 2 s) with its /ready, on a server whose disk the test can fail
    (appendfsync everysec, the embedded default)."""
    disk = FaultyDisk(tmp_path / "s", build_shim(tmp_path / "shim"), binary=server_binary)
    disk.start()
    client = TimerClient.from_url(disk.server.url, namespace, socket_timeout_s=2.0)
    client.init(shards=4)
    w = Worker(client, WorkerSettings(worker_id="dw", lease_ms=2_000))
    port = free_port()
    http = serve_metrics(w, port)
    runner = threading.Thread(target=w.run, daemon=True)
    runner.start()
    try:
        wait_for(lambda: probe(port, "/ready")[0] == 200, 20, "the worker ready")
        yield Running(disk, client, w, port)
    finally:
        w.stop()
        runner.join(15)
        http.shutdown()
        http.server_close()
        client.close()
        disk.close()


def schedule_spread(c: TimerClient, n: int, first_ms: int, spread_ms: int) -> set[str]:
    items = [{"id": f"d{i}", "delay_ms": first_ms + spread_ms * i // n} for i in range(n)]
    replies = c.schedule_many(items)
    assert not [r for r in replies if isinstance(r, Exception)], replies
    return {str(it["id"]) for it in items}


def test_a_full_disk_holds_firing_back_and_loses_nothing(running: Running) -> None:
    """Timers due while the disk is full cannot be decided (every decision is a write):
    the worker is not ready, saying MISCONF; once space returns they all fire, once
    each, none early, and the worker is ready again."""
    c, disk = running.client, running.disk
    ids = schedule_spread(c, 200, 300, 1_500)
    last_deadline = c.server_time_ms() + 1_800
    disk.full()
    wait_for(lambda: probe(running.port, "/ready")[0] == 503, 20, "not ready on a full disk")
    reasons = " ".join(probe(running.port, "/ready")[1]["reasons"])
    assert "MISCONF" in reasons, reasons
    wait_for(lambda: c.server_time_ms() > last_deadline, 10, "every deadline passed")
    decided = {o.id for o in read_all_outcomes(c)}  # reads are answered meanwhile
    assert len(decided) < len(ids), "the disk filled after every timer fired: no test"
    disk.full(False)
    wait_for(lambda: {o.id for o in read_all_outcomes(c)} >= ids, 30, "every timer to fire")
    assert_exactly_once(read_all_outcomes(c), ids)
    wait_for(lambda: probe(running.port, "/ready")[0] == 200, 20, "ready again")


def test_a_stalled_fsync_keeps_the_leases_and_loses_nothing(running: Running) -> None:
    """Each fsync stalls 3 s (longer than the 2 s lease) under appendfsync everysec: the
    server goes on answering from memory, so no lease is lost, and every timer due
    meanwhile fires once, none early."""
    c, disk = running.client, running.disk
    disk.stall_fsync(3_000)
    ids = schedule_spread(c, 200, 200, 3_000)
    wait_for(lambda: {o.id for o in read_all_outcomes(c)} >= ids, 30, "every timer to fire")
    assert_exactly_once(read_all_outcomes(c), ids)
    assert running.worker.stats.leases_lost == 0
    assert running.worker.stats.fence_rejections == 0
    disk.stall_fsync(0)
