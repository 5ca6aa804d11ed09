"""The per-minute history as real processes leave it: a worker and a handler runner
stopped by SIGTERM write every count they gathered; a worker killed with kill -9 loses
at most what it counted since its last flush (one ``history_every_ms``)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import wait_for
from timer import TimerClient
from timer.testing import RedisServer

from .conftest import ROOT, Workers, read_all_outcomes

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

# Its only flush in a test is the one at its first tick: every count after it is written
# on stop, or lost to a kill -9.
ONCE_A_MINUTE = ("--history-every-ms", "60000")

RUNNER = textwrap.dedent(
    """
    import sys
    import timer.handlers.history as runner_history
    from timer import Handlers, TimerClient
    runner_history.HISTORY_EVERY_S = 3600.0  # only its stop writes what it handled
    url, namespace, seen = sys.argv[1:4]
    handlers = Handlers(group="hist")

    @handlers.on("expired")
    def handle(outcome):
        with open(seen, "a") as f:
            f.write(outcome.id + "\\n")

    print("runner ready", flush=True)
    handlers.run(TimerClient.from_url(url, namespace), handle_signals=True)
    """
)


def totals(c: TimerClient) -> dict[str, int]:
    minutes = c.history(5)
    return {k: sum(getattr(m, k) for m in minutes) for k in ("scheduled", "expired", "handled")}


def start_runner(url: str, namespace: str, tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    seen, log = tmp_path / "handled.txt", tmp_path / "runner.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", RUNNER, url, namespace, str(seen)],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    wait_for(lambda: "ready" in log.read_text() or proc.poll() is not None, 30, "the runner")
    assert proc.poll() is None, log.read_text()
    return proc, seen


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_sigterm_writes_every_expiry_and_every_handled_outcome(
    redis_server: RedisServer, namespace: str, workers_factory: list[Workers], tmp_path: Path
) -> None:
    """7 timers expire and are handled; the worker and the runner get SIGTERM long before
    their next periodic flush: the history says 7 expired and 7 handled, exactly."""
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=2, bucket_ms=100)
    pool = Workers(redis_server.url, namespace, tmp_path, 2_000, 3_000, extra=ONCE_A_MINUTE)
    workers_factory.append(pool)
    worker = pool.start("hist-w")
    runner, seen = start_runner(redis_server.url, namespace, tmp_path)
    try:
        c.schedule_many([{"id": f"t{i}", "delay_ms": 300} for i in range(7)])
        wait_for(lambda: len(read_all_outcomes(c)) == 7, 30, "the 7 to expire")
        wait_for(lambda: lines(seen) == 7, 30, "the 7 to be handled")
        for proc in (worker.proc, runner):
            proc.send_signal(signal.SIGTERM)
        assert (worker.proc.wait(30), runner.wait(60)) == (0, 0), worker.log_text()
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    got = totals(c)
    assert (got["expired"], got["handled"]) == (7, 7), got
    assert got["scheduled"] <= 7  # heard over pub/sub: marked as such, never more
    # exact here, but no reader can tell no process was killed: all marked
    every = {"scheduled", "expired", "cancelled", "completed", "handled", "failed", "dead"}
    assert all(set(m.approximate) == every for m in c.history(5))
    c.close()


def test_a_kill_9_loses_at_most_what_was_counted_since_the_last_flush(
    redis_server: RedisServer, namespace: str, workers_factory: list[Workers], tmp_path: Path
) -> None:
    """A worker flushing every second expires 5 timers, and its history shows them; it
    expires 6 more and is killed with kill -9 at once. What the history lost is at most
    those 6 (what it counted since the flush that landed), never the first 5, and it
    never counts more than expired."""
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=2, bucket_ms=100)
    every = ("--history-every-ms", "1000")
    pool = Workers(redis_server.url, namespace, tmp_path, 2_000, 3_000, extra=every)
    workers_factory.append(pool)
    worker = pool.start("hist-k")
    c.schedule_many([{"id": f"a{i}", "delay_ms": 300} for i in range(5)])
    wait_for(lambda: totals(c)["expired"] == 5, 30, "a flush with the first 5")
    c.schedule_many([{"id": f"b{i}", "delay_ms": 300} for i in range(6)])
    wait_for(lambda: len(read_all_outcomes(c)) == 11, 30, "the next 6 to expire")
    worker.kill9()
    lost = 11 - totals(c)["expired"]
    assert 0 <= lost <= 6, lost
    c.close()
