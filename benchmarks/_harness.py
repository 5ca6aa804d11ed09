"""What several benchmarks share: processes, timers scheduled in bulk, percentiles.

No benchmark imports another (a test in tests/unit/test_layers.py checks it), so what
two of them need lives here: starting and stopping processes (a worker, a peer's
process group, a core kept busy), scheduling timers in bulk, waiting until they are
decided, the lateness workload, and the percentile every table reports.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from timer import TimerClient

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # where the peers' commands (arq, rq, celery) are
WEEK_MS = 7 * 24 * 3600 * 1000

N = TypeVar("N", int, float)


def pct(values: Sequence[N], q: float) -> N | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def spawn(
    args: list[str], url: str, log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``args`` in a process group of its own (see :func:`kill_group`), told the server's
    URL in ``PEER_REDIS_URL``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            args,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PEER_REDIS_URL": url, "PYTHONPATH": str(ROOT), **(env or {})},
        )


def kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def start_worker(
    url: str, ns: str, name: str, lease_ms: int, logs: Path, *, core: int | None = None
) -> subprocess.Popen[bytes]:
    """A worker process; ``core``: pinned to that core (set in the child before exec, so
    every thread it starts runs there)."""
    args = ["--redis-url", url, "--namespace", ns, "--id", name, "--lease-ms", str(lease_ms)]
    args += ["--log-level", "WARNING"]
    with (logs / f"{name}.log").open("wb") as log:  # the child keeps its own fd
        return subprocess.Popen(
            [sys.executable, "-m", "timer.worker", *args],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=None if core is None else partial(os.sched_setaffinity, 0, {core}),  # noqa: PLW1509
        )


@contextlib.contextmanager
def busy_loop(core: int | None) -> Iterator[None]:
    """A process spinning on ``core`` for the block (None: none), killed at its end: what
    is pinned there beside it gets the CPU the scheduler leaves it, in slices."""
    if core is None:
        yield
        return
    proc = subprocess.Popen(
        [sys.executable, "-c", "while True: pass"],
        preexec_fn=partial(os.sched_setaffinity, 0, {core}),  # noqa: PLW1509
    )
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


def wait_decided(c: TimerClient, n: int, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while c.outcomes_total() < n:
        if time.monotonic() > end:
            raise TimeoutError(f"only {c.outcomes_total()} of {n} decided after {timeout_s}s")
        time.sleep(0.05)


def outcomes(c: TimerClient) -> list[Any]:
    return list(c.all_outcomes())


def schedule_deadlines(c: TimerClient, deadlines: list[int], prefix: str) -> None:
    """A timer per deadline (ids ``prefix`` and its index), in batches."""
    for start in range(0, len(deadlines), 5_000):
        chunk = [
            {"id": f"{prefix}{start + i}", "deadline_ms": d}
            for i, d in enumerate(deadlines[start : start + 5_000])
        ]
        c.schedule_many(chunk)


def schedule_spread(c: TimerClient, n: int, spread_ms: int, prefix: str) -> None:
    """N timers due an hour from now plus a uniform spread, small payloads, in batches."""
    rng = random.Random(1)
    start = c.server_time_ms() + 3_600_000
    for i in range(0, n, 5_000):
        res = c.schedule_many(
            [{"id": f"{prefix}:{j}", "deadline_ms": start + rng.randrange(spread_ms),
              "payload": {"job": j}} for j in range(i, min(n, i + 5_000))]
        )  # fmt: skip
        if any(isinstance(x, Exception) for x in res):
            raise RuntimeError("schedule_many reported errors")


def schedule_due(
    c: TimerClient, ids: list[str], deadline_ms: int, per_s: int | None = None
) -> None:
    """Schedule ``ids`` (due at ``deadline_ms``, or from it at ``per_s`` a second; small
    payloads) in calls of 5,000."""
    for i in range(0, len(ids), 5_000):
        res = c.schedule_many(
            [
                {"id": t, "deadline_ms": deadline_ms + (j * 1_000 // per_s if per_s else 0),
                 "payload": {"job": j}}
                for j, t in enumerate(ids[i : i + 5_000], i)
            ]
        )  # fmt: skip
        if any(isinstance(x, Exception) for x in res):
            raise RuntimeError("schedule_many reported errors")


def register_pending(url: str, ns: str, timers: int, procs: int = 2) -> float:
    """``timers`` pending an hour out, registered by ``procs`` processes: timers/s."""
    start = time.perf_counter()
    share = -(-timers // procs)
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "benchmarks.register", "--child", url, ns,
             str(k * share), str(max(0, min(share, timers - k * share)))]
        )
        for k in range(procs)
    ]  # fmt: skip
    if any(p.wait() != 0 for p in children):
        raise RuntimeError("a registering process failed")
    return timers / (time.perf_counter() - start)


def lateness_run(
    c: TimerClient, url: str, logs: Path, *, seconds: int, pending_total: int
) -> dict[str, Any]:
    """``pending_total`` timers, of which 1k fall due per second for ``seconds``."""
    rate = 1_000
    due = seconds * rate
    far = [c.server_time_ms() + 3_600_000 + i for i in range(max(0, pending_total - due))]
    schedule_deadlines(c, far, "far")
    proc = start_worker(url, c.namespace, "lat", 5_000, logs)
    # Schedule the due ones while the worker runs; the first falls due once all are in.
    base = c.server_time_ms() + 1_000 + due // 10
    deadlines = [base + (i * 1000) // rate for i in range(due)]
    schedule_deadlines(c, deadlines, "due")
    if c.server_time_ms() > base:
        raise RuntimeError("scheduling took longer than planned; the figures would be skewed")
    try:
        wait_decided(c, due, seconds + 60)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    late = [o.lateness_ms for o in outcomes(c) if o.id.startswith("due")]
    return {
        "pending_total": len(far) + due, "fires_per_s": rate, "seconds": seconds,
        "decided": len(late), "early": sum(1 for x in late if x < 0),
        "lateness_ms": {"p50": pct(late, 0.5), "p90": pct(late, 0.9), "p99": pct(late, 0.99),
                        "p999": pct(late, 0.999), "max": max(late)},
    }  # fmt: skip
