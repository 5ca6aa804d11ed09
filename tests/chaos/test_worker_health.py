"""Health you can probe: /ready follows Redis and the lease loop, /healthz the process."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for
from timer import TimerClient
from timer.testing import RedisServer, free_port
from timer.worker import Worker, WorkerSettings
from timer.worker.metrics import serve_metrics

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


def probe(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        with exc:  # an error response holds its connection until closed
            return exc.code, json.loads(exc.read())


def test_ready_follows_redis_and_live_stays_up(tmp_path: Path, server_binary: Path) -> None:
    """Not ready before start, ready while ticking, 503 with the reason while Redis is
    down (live all along: an outage is no reason to restart), ready again after."""
    server = RedisServer(tmp_path / "data", binary=server_binary, port=free_port()).start()
    client = TimerClient.from_url(server.url, "h", socket_timeout_s=1.0)
    client.init(shards=2)
    w = Worker(client, WorkerSettings(worker_id="hw", lease_ms=1_000))
    port = free_port()
    http = serve_metrics(w, port)
    runner = threading.Thread(target=w.run, daemon=True)
    try:
        code, body = probe(port, "/ready")
        assert code == 503 and body["reasons"] == ["not started: starting"]
        runner.start()
        wait_for(lambda: probe(port, "/ready")[0] == 200, 20, "ready")
        assert probe(port, "/ready")[1]["reasons"] == []
        server.kill()
        wait_for(lambda: probe(port, "/ready")[0] == 503, 20, "not ready without Redis")
        reasons = " ".join(probe(port, "/ready")[1]["reasons"])
        assert "last successful tick" in reasons and "Redis" in reasons, reasons
        assert probe(port, "/healthz")[0] == 200
        server.restart()
        wait_for(lambda: probe(port, "/ready")[0] == 200, 30, "ready again")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert b"tickwheel_leases_held" in r.read()
    finally:
        w.stop()
        if runner.is_alive():
            runner.join(15)
        http.shutdown()
        http.server_close()
        server.stop()
        client.close()
