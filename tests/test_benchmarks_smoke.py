"""The benchmarks still run: the smallest case of each quick one, checked for its figures.
(Benchmarks are never assertions about speed; this only keeps the scripts working.)"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import engine, recovery, register

pytestmark = pytest.mark.slow


def run(main: Any, args: list[str]) -> dict[str, Any]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(args) == 0
    return dict(json.loads(buf.getvalue()))


def test_engine_smallest_case() -> None:
    """The engine benchmark runs all three timers on both workloads and they agree."""
    out = run(engine.main, ["--n", "3000", "--requests", "3000"])
    for workload in ("expiry", "purgatory"):
        rows = out[workload]
        assert set(rows) == {"system_timer", "heapq", "hashed_wheel"}
        assert len({r["expired"] for r in rows.values()}) == 1
        assert rows["heapq"]["ops_ratio_to_heapq"] == 1.0
    assert out["expiry"]["heapq"]["expired"] == 3000


def test_register_and_recovery_smallest_cases(server_binary: Path) -> None:
    """register and recovery run against a private server and report their figures."""
    reg = run(register.main, ["--n", "600", "--batch", "200", "--server", str(server_binary)])
    assert reg["pending_after"] == 600 and reg["schedule_many_per_s"] > 0
    assert reg["ratio_schedule_many_to_evalsha"] > 0
    rec = run(recovery.main, ["--n", "500", "--server", str(server_binary)])
    assert rec["timers_loaded"] == 500
