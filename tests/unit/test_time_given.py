"""Time is given, not read: every clock read, sleep, blocking wait and thread start of
the library, the worker and the CLI goes through the :class:`timer.clock.Time` its process is
given, so a simulation or a user's test can drive it. Only the modules below may touch the
system's directly, each for the reason it gives."""

from __future__ import annotations

import ast
import threading
import time
from pathlib import Path

import pytest

from timer.clock import SYSTEM_TIME, SkewedTime, VirtualTime

ROOT = Path(__file__).resolve().parents[2]

# module -> why it may read the system's clocks, sleep or start threads itself
ALLOWED = {
    "timer/clock.py": "the seam itself: SYSTEM_TIME is the system's",
    "timer/engine/executor.py": "the in-process engine's executor thread (Kafka's); a worker "
    "runs its wheels inline and a stepped process never starts it",
    "timer/engine/reaper.py": "the in-process engine's reaper thread (Kafka's); a stepped "
    "process advances its wheels itself",
    "timer/engine/purgatory.py": "the purgatory's expiration reaper thread (Kafka's), off "
    "with reaper_enabled=False",
    "timer/redis/connections.py": "Sentinel pools ask real Sentinels over the network",
    "timer/signals.py": "operating-system signals arrive on real time",
    "timer/webhook.py": "signs for real HTTP receivers, whose clocks are real",
    "timer/dashboard/live.py": "the dashboard's live stream to a real browser",
    "timer/httpapi/app.py": "the HTTP API's request latency metric (uvicorn's real time)",
    "timer/celery/claims.py": "a ConfirmedTask's lease renewal, inside a Celery worker's process",
    "worker/metrics.py": "the Prometheus endpoint's HTTP server thread",
    "cli/embedded.py": "waits for a real server process it started to answer",
    "cli/demo/command.py": "the demo drives real processes (workers, kill -9) on real time",
    "cli/demo/handlers.py": "the demo's handler measures real lateness of a real worker",
    "cli/demo/reaction.py": "the demo times a real worker's reaction to a real kill",
    "cli/demo/sentinel.py": "the demo's Sentinel failover on real servers",
    "cli/demo/progress.py": "the demo prints its progress every few seconds of real time",
}
# the packages of a real server's process for tests (ports, processes, real waits)
ALLOWED_DIRS = ("timer/testing/",)

# what a module may not call directly: (module, attribute)
FORBIDDEN = {
    ("time", "time"),
    ("time", "time_ns"),
    ("time", "monotonic"),
    ("time", "monotonic_ns"),
    ("time", "sleep"),
    ("time", "perf_counter"),
    ("threading", "Thread"),
}


def _sources() -> list[Path]:
    out = []
    for top in ("timer", "worker", "cli"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(("timer/worker/", "timer/cli/")):  # links to worker/ and cli/
                continue
            out.append(path)
    return out


def _direct_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of each forbidden attribute used: ``time.sleep(...)``, a default of
    ``time.monotonic``, ``from time import sleep``."""
    found = []
    typed = {  # annotations name threading.Thread as a type: not a thread started
        id(n) for node in ast.walk(tree) for ann in _annotations(node) for n in ast.walk(ann)
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and (node.value.id, node.attr) in FORBIDDEN
            and id(node) not in typed
        ):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and node.module in ("time", "threading"):
            for alias in node.names:
                if (node.module, alias.name) in FORBIDDEN:
                    found.append((node.lineno, f"from {node.module} import {alias.name}"))
    return found


def _annotations(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.AnnAssign):
        return [node.annotation]
    if isinstance(node, ast.arg) and node.annotation is not None:
        return [node.annotation]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
        return [node.returns]
    return []


def test_no_module_reads_the_system_clock_or_starts_threads_itself() -> None:
    """Outside the allowed modules, no direct clock read, sleep or thread start."""
    offences = []
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        if rel in ALLOWED or rel.startswith(ALLOWED_DIRS):
            continue
        for line, name in _direct_uses(ast.parse(path.read_text(), rel)):
            offences.append(f"{rel}:{line}: {name}")
    assert not offences, (
        "read time, sleep, wait and start threads through the process's Time "
        "(timer.clock; a worker's ctx.time, a client's .time):\n" + "\n".join(offences)
    )


def test_the_allowed_list_names_modules_that_exist_and_still_need_it() -> None:
    """An entry whose module is gone, or no longer touches the system's time, is removed."""
    stale = []
    for rel in ALLOWED:
        path = ROOT / rel
        if not path.exists() or not _direct_uses(ast.parse(path.read_text(), rel)):
            stale.append(rel)
    assert not stale, f"no longer needed in ALLOWED: {stale}"


def test_the_check_finds_each_form() -> None:
    """The scanner sees a call, a bare default and an import of each kind."""
    src = (
        "import time, threading\nfrom time import sleep\n"
        "def f(clock=time.monotonic):\n    time.sleep(1)\n    threading.Thread(target=f)\n"
        "x: threading.Thread | None = None\n"
    )
    names = [n for _, n in _direct_uses(ast.parse(src))]
    assert names == ["from time import sleep", "time.monotonic", "time.sleep", "threading.Thread"]


def test_virtual_time_moves_only_when_told() -> None:
    """Virtual clocks stand still until advanced or slept on; a sleep moves them at once."""
    t = VirtualTime(start_wall=1000.0)
    wall, mono = t.wall(), t.monotonic()
    assert (t.wall(), t.monotonic()) == (wall, mono)
    t.advance(3600)
    assert t.wall() == pytest.approx(wall + 3600)
    assert t.monotonic() == pytest.approx(mono + 3600)
    t.sleep(0.25)
    assert t.wall_ms() == 1000_000 + 3_600_250
    with pytest.raises(ValueError, match="forward"):
        t.advance(-1)
    with pytest.raises(ValueError, match="forward"):
        t.advance(float("nan"))


def test_virtual_waits_end_at_their_timeout_and_threads_are_refused() -> None:
    """A wait on an unset event moves the clock by its timeout; one with no timeout, and a
    thread, are refused (nothing else runs while a stepped process waits)."""
    t = VirtualTime()
    ev = threading.Event()
    before = t.monotonic()
    assert t.wait(ev, 2.5) is False
    assert t.monotonic() - before == pytest.approx(2.5)
    ev.set()
    assert t.wait(ev, 10) is True
    assert t.monotonic() - before == pytest.approx(2.5)
    with pytest.raises(RuntimeError, match="never end"):
        t.wait(threading.Event())
    with pytest.raises(RuntimeError, match="stepped"):
        t.thread(lambda: None, name="x")


def test_a_skewed_clock_is_off_and_drifts_against_its_base() -> None:
    """SkewedTime: an offset and a rate over the base; sleeping on it moves the base by the
    base's share."""
    base = VirtualTime(start_wall=0.0)
    fast = SkewedTime(base, offset=5.0, rate=1.5)
    assert fast.wall() == pytest.approx(5.0)
    base.advance(10)
    assert fast.wall() == pytest.approx(5.0 + 15.0)
    fast.sleep(3.0)  # 3 s of its own are 2 s of the base's
    assert base.wall() == pytest.approx(12.0)
    with pytest.raises(ValueError, match="rate"):
        SkewedTime(base, rate=0)


def test_system_time_is_the_systems() -> None:
    """The default Time reads the real clocks (it is what every real process is given)."""
    assert abs(SYSTEM_TIME.wall() - time.time()) < 5
    assert SYSTEM_TIME.virtual is False
    assert VirtualTime().virtual is True


def test_a_skewed_clock_retuned_steps_its_wall_clock_and_never_its_monotonic_back() -> None:
    """retune: the wall clock steps either way, the monotonic one only forward, and the
    new rate applies from the moment it is set (no jump in either reading)."""
    base = VirtualTime(start_wall=100.0)
    t = SkewedTime(base)
    base.advance(10)
    mono = t.monotonic()
    t.retune(step_wall=-30.0, rate=0.5)
    assert t.wall() == pytest.approx(80.0)
    assert t.monotonic() == pytest.approx(mono)
    base.advance(4)
    assert t.wall() == pytest.approx(82.0)
    assert t.monotonic() == pytest.approx(mono + 2)
    t.retune(skip_monotonic=5.0)
    assert t.monotonic() == pytest.approx(mono + 7)
    with pytest.raises(ValueError, match="never steps back"):
        t.retune(skip_monotonic=-1)
