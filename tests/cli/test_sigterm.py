"""SIGTERM to a long-running command: exit 0 whether it came while the command was
still starting (before, it was killed: -15) or once it ran (`serve` exited 143: uvicorn
raises the signal it stopped on again)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import wait_for
from timer.cli.starting import SERVES, command_of
from timer.testing import RedisServer, free_port

EARLY = """
import os, signal, sys, time
sys.argv = [sys.argv[1], *sys.argv[2:]]
import timer.cli  # the first line of the package: as the console script does
os.kill(os.getpid(), signal.SIGTERM)
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    time.sleep(0.01)
print("not stopped")
"""


@pytest.mark.parametrize("command", SERVES)
def test_a_sigterm_while_a_long_running_command_starts_exits_0(command: str) -> None:
    ran = subprocess.run(
        [sys.executable, "-c", EARLY, "/venv/bin/tickwheel", "--namespace", "x", command],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, (ran.returncode, ran.stderr)
    assert f"tickwheel {command}: stopped by SIGTERM while starting" in ran.stderr, ran.stderr
    assert "not stopped" not in ran.stdout


@pytest.mark.parametrize("argv", [["tickwheel", "get", "worker"], ["pytest", "worker"]])
def test_any_other_command_or_program_keeps_the_default(argv: list[str]) -> None:
    """`get` (even of a timer named worker) is ended by SIGTERM as any program is: a
    short command stopped half way must not say it succeeded."""
    ran = subprocess.run(
        [sys.executable, "-c", EARLY, *argv], capture_output=True, timeout=60, check=False
    )
    assert ran.returncode == -signal.SIGTERM, ran


def test_the_command_is_read_past_the_global_options() -> None:
    assert command_of(["/x/tickwheel", "--redis-url", "redis://h", "worker"]) == "worker"
    assert command_of(["/x/tickwheel", "--namespace", "serve", "get", "a"]) == "get"
    assert command_of(["/x/tickwheel", "--json"]) is None
    assert command_of(["-m", "handle"]) == "handle"
    assert command_of(["/usr/bin/python3", "handle"]) is None


def test_serve_stopped_by_sigterm_exits_0(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """One process serving (uvicorn's single server): SIGTERM stops it, it says so, and
    exits 0 as `serve --workers 2` does."""
    from timer import TimerClient  # noqa: PLC0415

    with TimerClient.from_url(redis_server.url, namespace) as c:
        c.init(shards=2)
    log = tmp_path / "serve.log"
    for _ in range(3):  # a free port another test's process took meanwhile: another one
        port = free_port()
        with log.open("w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "timer.cli", "--redis-url", redis_server.url,
                 "--namespace", namespace, "serve", "--no-auth", "--port", str(port)],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        started = proc
        wait_for(lambda: "HTTP API at" in log.read_text() or started.poll() is not None,  # noqa: B023
                 60, "serve to start, or to end")  # fmt: skip
        if "HTTP API at" in log.read_text() or "in use" not in log.read_text():
            break
    try:
        assert "HTTP API at" in log.read_text(), log.read_text()
        import urllib.request  # noqa: PLC0415

        def answers() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5):
                    return True
            except OSError:
                return False

        wait_for(answers, 60, "serve to answer")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0, log.read_text()
    assert "HTTP API stopped" in log.read_text()
    assert "while starting" not in log.read_text()


def test_tail_stopped_by_sigterm_exits_0_and_says_its_group_stays(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """`tail --group` ended by SIGTERM (a supervisor, `timeout`): exit 0 and one line
    with what it showed and that its group stays (trial 32: it died without a word,
    143). The outcome printed was acknowledged: the group owes nothing."""
    from timer import TimerClient  # noqa: PLC0415

    with TimerClient.from_url(redis_server.url, namespace) as c:
        c.init(shards=2)
        c.schedule("t:{1}", delay_ms=0, payload={"n": 1})
        c.cancel("t:{1}")
        err = tmp_path / "tail.err"
        out = tmp_path / "tail.out"
        with err.open("w") as e, out.open("w") as o:
            proc = subprocess.Popen(
                [sys.executable, "-m", "timer.cli", "--redis-url", redis_server.url,
                 "--namespace", namespace, "tail", "--group", "watchers"],
                stdout=o, stderr=e,
            )  # fmt: skip
        try:
            wait_for(lambda: "t:{1}" in out.read_text() or proc.poll() is not None, 60,
                     "tail to print the outcome")  # fmt: skip
            wait_for(lambda: all(g.pending == 0 for g in c.groups()), 30, "the ack")
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(30)
        assert code == 0, err.read_text()
        said = err.read_text()
        assert 'stopped by SIGTERM, 1 outcome shown; group "watchers" stays' in said, said
        assert [g.name for g in c.groups()] == ["watchers"]
