"""A worker's start and stop as a deployment sees them: Redis not up yet, SIGINT from Python."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import wait_for
from timer import TimerClient
from timer.testing import RedisServer, free_port

from .conftest import ROOT

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """A Python process whose every thread's stack SIGUSR1 prints (the test's diagnosis)."""
    if args[:2] == ["-m", "timer.worker"]:  # the worker's entry point, with the dump on SIGUSR1
        args = ["-c", f"{DUMPS}\nimport sys, runpy\nsys.argv = {['worker', *args[2:]]!r}\n"
                "runpy.run_module('timer.worker', run_name='__main__')"]  # fmt: skip
    elif args[0] == "-c":
        args = ["-c", f"{DUMPS}\n{args[1]}"]
    with log.open("wb") as handle:
        return subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


DUMPS = "import faulthandler, signal; faulthandler.register(signal.SIGUSR1, all_threads=True)"


def stopped(proc: subprocess.Popen[bytes], log: Path, sig: signal.Signals) -> int:
    """Send ``sig`` and wait for the exit; if there is none, fail with every thread's stack."""
    proc.send_signal(sig)
    try:
        return proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        wait_for(lambda: "most recent call first" in log.read_text(), 10, "a stack dump")
        pytest.fail(f"still running 20 s after {sig.name}; its threads:\n{log.read_text()}")


def ended(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_worker_started_before_redis_waits_for_it(tmp_path: Path, server_binary: Path) -> None:
    """A worker whose Redis is down at start-up waits (a few log lines, not one per try),
    then leads every shard once Redis is up, and stops cleanly on SIGTERM."""
    server = RedisServer(tmp_path / "data", binary=server_binary, port=free_port())
    with server:
        TimerClient.from_url(server.url, "up").init(shards=4)
    assert not server.running
    log = tmp_path / "worker.log"
    args = ["--redis-url", server.url, "--namespace", "up", "--id", "early", "--lease-ms", "1000"]
    proc = start(["-m", "timer.worker", *args], log)
    try:
        wait_for(lambda: "waiting for Redis" in log.read_text(), 20, "the worker to wait")
        assert proc.poll() is None, log.read_text()
        with server.restart():
            client = TimerClient.from_url(server.url, "up")
            wait_for(lambda: set(client.leaders().values()) == {"early"}, 30, "leadership")
            assert stopped(proc, log, signal.SIGTERM) == 0, log.read_text()
            assert set(client.leaders().values()) == {None}
            client.close()
    finally:
        ended(proc)
    waiting = log.read_text().count("waiting for Redis")
    assert 1 <= waiting <= 3, log.read_text()  # rate-limited: not one line per retry


def test_worker_run_from_python_stops_gracefully_on_sigint(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """`Worker(...).run()` in a user's script releases its leases on Ctrl-C (SIGINT) and
    exits without a traceback, so its shards move at once, not after a lease."""
    client = TimerClient.from_url(redis_server.url, namespace)
    client.init(shards=4)
    script = textwrap.dedent(f"""
        from timer import TimerClient
        from timer.worker import Worker, WorkerSettings
        c = TimerClient.from_url({redis_server.url!r}, {namespace!r})
        Worker(c, WorkerSettings(worker_id="py", lease_ms=30_000)).run()
        print("run returned")
    """)
    log = tmp_path / "py.log"
    proc = start(["-c", script], log)
    try:
        wait_for(lambda: set(client.leaders().values()) == {"py"}, 30, "leadership")
        assert stopped(proc, log, signal.SIGINT) == 0, log.read_text()
    finally:
        ended(proc)
    text = log.read_text()
    assert "run returned" in text and "Traceback" not in text, text
    assert set(client.leaders().values()) == {None}  # released, not left to expire (30 s)
    client.close()


def test_a_sigterm_while_the_worker_holds_its_stop_lock_still_stops_it(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """CI once saw a worker ignore SIGTERM for good: the handler called ``Event.set`` while
    the main thread, inside ``Event.wait``, held that event's lock. Here the signal lands
    at exactly that moment, every time; the worker still stops and releases its shards."""
    client = TimerClient.from_url(redis_server.url, namespace)
    client.init(shards=4)
    script = textwrap.dedent(f"""
        import signal, threading
        from timer import TimerClient
        from timer.worker import Worker, WorkerSettings

        class SignalInsideWait(threading.Event):
            armed = False
            def wait(self, timeout=None):
                if self.armed:
                    self.armed = False
                    with self._cond:  # held, as between two bytecodes of Event.wait
                        signal.raise_signal(signal.SIGTERM)
                    print("signalled inside wait")
                return super().wait(timeout)

        c = TimerClient.from_url({redis_server.url!r}, {namespace!r})
        w = Worker(c, WorkerSettings(worker_id="py", lease_ms=30_000))
        w.ctx.stopping.__class__ = SignalInsideWait
        def arm():
            while len(w.shards) < 4:
                threading.Event().wait(0.01)
            w.ctx.stopping.armed = True
        threading.Thread(target=arm, daemon=True).start()
        w.run()
        print("run returned")
    """)
    log = tmp_path / "py.log"
    proc = start(["-c", script], log)
    try:
        code = proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        wait_for(lambda: "most recent call first" in log.read_text(), 10, "a stack dump")
        pytest.fail(f"still running 30 s after the SIGTERM; its threads:\n{log.read_text()}")
    finally:
        ended(proc)
    text = log.read_text()
    assert code == 0 and "signalled inside wait" in text and "run returned" in text, text
    assert "Traceback" not in text, text
    assert set(client.leaders().values()) == {None}
    client.close()
