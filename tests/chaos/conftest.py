"""Real worker processes (``python -m timer.worker``) for the chaos tier: kill -9,
SIGSTOP, SIGCONT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import wait_for
from timer import Outcome, TimerClient

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class WorkerProcess:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc.poll() is None


class Workers:
    def __init__(
        self,
        url: str,
        namespace: str,
        logs: Path,
        lease_ms: int,
        horizon_ms: int,
        *,
        extra: tuple[str, ...] = (),
    ):
        self.url, self.namespace, self.logs = url, namespace, logs
        self.lease_ms, self.horizon_ms = lease_ms, horizon_ms
        self.extra = extra  # more options of python -m timer.worker (--durability …)
        self.all: list[WorkerProcess] = []

    def start(self, name: str) -> WorkerProcess:
        log = self.logs / f"{name}.log"
        handle = log.open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "timer.worker", "--redis-url", self.url,
             "--namespace", self.namespace, "--id", name,
             "--lease-ms", str(self.lease_ms), "--horizon-ms", str(self.horizon_ms),
             *self.extra],
            cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        handle.close()
        wp = WorkerProcess(name, proc, log)
        self.all.append(wp)
        wait_for(lambda: "ready" in wp.log_text() or not wp.alive(), 30, f"{name} to start")
        assert wp.alive(), wp.log_text()
        return wp

    def stop_all(self) -> None:
        for wp in self.all:
            if wp.alive():
                wp.proc.send_signal(signal.SIGCONT)
                wp.proc.terminate()
        for wp in self.all:
            try:
                wp.proc.wait(15)
            except subprocess.TimeoutExpired:
                wp.proc.kill()
                wp.proc.wait()


@pytest.fixture
def workers_factory(tmp_path: Path) -> Iterator[list[Workers]]:
    made: list[Workers] = []
    yield made
    for w in made:
        w.stop_all()


def read_all_outcomes(c: TimerClient) -> list[Outcome]:
    """Every entry of every shard's outcome stream (not a consumer group: all of them)."""
    return list(c.all_outcomes())


def assert_exactly_once(outcomes: list[Outcome], expected_ids: set[str]) -> None:
    counts = Counter(o.id for o in outcomes)
    doubled = {i: n for i, n in counts.items() if n > 1}
    assert not doubled, f"decided more than once: {list(doubled.items())[:5]}"
    lost = expected_ids - set(counts)
    assert not lost, f"{len(lost)} timers lost, e.g. {sorted(lost)[:5]}"
    early = [o for o in outcomes if o.outcome == "expired" and o.decided_ms < o.deadline_ms]
    assert not early, f"{len(early)} fired early, e.g. {early[:2]}"
