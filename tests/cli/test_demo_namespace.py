"""`tickwheel demo` without --namespace runs in a namespace of its own, `demo-<time>`,
and drops it at its end (a finished run, SIGTERM); one given with --namespace is kept.
Against the real test server."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from tests.conftest import wait_for
from timer import TimerClient, TimerError
from timer.cli.main import main
from timer.durable.model.keys import NAMESPACES, NamespaceKeys
from timer.testing import RedisServer

from .conftest import Run

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.redis

SMALL = ["--timers", "10", "--workers", "1", "--min-delay", "1s", "--max-delay", "1s",
         "--lease", "1s", "--no-kill", "--seed", "1"]  # fmt: skip


def _left(url: str, ns: str) -> list[bytes]:
    """The namespace's keys on the server, and its entry in the list of namespaces."""
    r = redis.Redis.from_url(url)
    try:
        keys = [k for p in NamespaceKeys(ns).patterns for k in r.scan_iter(match=p, count=1000)]
        return keys + ([NAMESPACES.encode()] if r.sismember(NAMESPACES, ns) else [])
    finally:
        r.close()


def _made(said: str) -> str:
    found = re.search(r"Namespace '(demo-\d+)'", said)
    assert found, said
    return found.group(1)


def test_a_finished_demo_drops_the_namespace_it_made_and_keeps_one_given(
    workdir: Path, redis_server: RedisServer, tw: Run, namespace: str
) -> None:
    """The demo's own namespace is gone when it ends (its keys and its entry in the
    server's list), and it said so; a --namespace given is the user's: kept."""
    if not redis_server.running:
        redis_server.restart()
    out = CliRunner().invoke(
        main, ["--redis-url", redis_server.url, "demo", *SMALL], catch_exceptions=False
    )
    assert out.exit_code == 0, out.output
    ns = _made(out.stderr)
    assert "dropped at the end; give --namespace NAME to keep it" in out.stderr, out.stderr
    assert f"Dropped namespace {ns!r}" in out.stderr, out.stderr
    assert _left(redis_server.url, ns) == []

    given = tw("demo", *SMALL)
    assert "Dropped namespace" not in given.stderr, given.stderr
    with TimerClient.from_url(redis_server.url, namespace) as c:
        assert namespace in c.namespaces() and c.outcomes_total() == 10
    # run again in it: the same ids were each "already decided", and the summary still
    # printed the first run's figures as this run's (trial 29)
    again = tw("demo", *SMALL)
    assert f"Namespace {namespace!r} holds an earlier run's jobs" in again.stderr, again.stderr
    with TimerClient.from_url(redis_server.url, namespace) as c:
        assert c.outcomes_total() == 20


def test_sigterm_to_the_demo_drops_the_namespace_it_made(
    workdir: Path, redis_server: RedisServer
) -> None:
    """SIGTERM mid-run (timers pending, workers and a handler running): the processes
    are stopped, then the demo's own namespace dropped, and it ends as SIGTERM ends a
    process."""
    if not redis_server.running:
        redis_server.restart()
    proc = subprocess.Popen(
        [sys.executable, "-m", "timer.cli", "--redis-url", redis_server.url, "demo",
         "--workers", "1", "--timers", "20", "--min-delay", "1h", "--max-delay", "2h"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        ns = _made(first)
        wait_for(lambda: _scheduled(redis_server.url, ns), 60, "the timers scheduled")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == -signal.SIGTERM
        said = first + proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    assert f"Dropped namespace {ns!r}" in said, said
    assert _left(redis_server.url, ns) == []


def _scheduled(url: str, ns: str) -> bool:
    try:
        with TimerClient.from_url(url, ns) as c:
            return bool(c.stats()["pending"] == 20)
    except TimerError:  # not initialised yet
        return False


def test_a_library_warning_is_one_clean_line_in_every_command(
    workdir: Path, redis_server: RedisServer
) -> None:
    """`tickwheel demo` on a server whose AOF is off says so as `init` does, one
    `Warning: ... AOF is off ...` line: it printed Python's warning, the path of the
    installed demo/command.py and its line number, then that source line
    (`  c.init(shards=16)`). Run as a user runs it: a process of its own."""
    if not redis_server.running:
        redis_server.restart()
    r = redis.Redis.from_url(redis_server.url)
    was = str(r.config_get("appendonly")["appendonly"])
    r.config_set("appendonly", "no")
    try:
        ran = subprocess.run([sys.executable, "-m", "timer.cli", "--redis-url",
                              redis_server.url, "demo", *SMALL],
                             cwd=workdir, capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)  # fmt: skip
    finally:
        r.config_set("appendonly", was)
        r.close()
    assert ran.returncode == 0, ran.stderr
    said = [line for line in ran.stderr.splitlines() if "AOF is off" in line]
    assert len(said) == 1 and said[0].startswith("Warning: "), ran.stderr
    assert "Warning:" not in said[0][len("Warning:") :], ran.stderr
    assert ".py:" not in ran.stderr and "c.init(" not in ran.stderr, ran.stderr


def test_the_demo_says_it_killed_a_worker_before_the_outcomes_after_it(
    workdir: Path, redis_server: RedisServer
) -> None:
    """`tickwheel demo 2>err`: the kill of a worker at 40% is said between the counts
    around it, not after `Waiting for outcomes: N of N` (it read as if the kill came at
    the end)."""
    if not redis_server.running:
        redis_server.restart()
    args = ["--timers", "40", "--workers", "2", "--min-delay", "1s", "--max-delay", "2s",
            "--lease", "1s", "--seed", "1"]  # fmt: skip
    out = CliRunner().invoke(
        main, ["--redis-url", redis_server.url, "demo", *args], catch_exceptions=False
    )
    assert out.exit_code == 0, out.output
    lines = out.stderr.splitlines()
    killed = [i for i, line in enumerate(lines) if line.startswith("Killed worker ")]
    counts = [i for i, line in enumerate(lines) if line.startswith("Waiting for outcomes: ")]
    assert len(killed) == 1 and counts, out.stderr
    assert counts[0] < killed[0] < counts[-1], out.stderr
    assert lines[counts[-1]] == "Waiting for outcomes: 40 of 40", out.stderr
