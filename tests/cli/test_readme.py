"""Every command of the README's CLI tour runs, in order, as written."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from timer.cli import embedded
from timer.cli.main import main

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


def test_readme_tour_runs(
    workdir: Path, server_binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tour works on the embedded server: each line exits 0 (the worker in the
    background), and it stops what it started before it stops the server (the worker it
    left running printed "cannot reach Redis" every 10 s after `server stop`). Before
    the stop, the README's Python snippet runs as written and finds that server by
    itself (no $TICKWHEEL_REDIS_URL: before #56 it tried localhost:6379 and failed)."""
    monkeypatch.setenv(
        "PATH", f"{server_binary.parent}:{Path(sys.executable).parent}:/usr/bin:/bin"
    )
    assert not (workdir / "examples").exists()  # outside the checkout: handle imports
    # the installed timer.examples, not a copy of the source tree
    lines = tour()
    assert lines[0] == "tickwheel server start" and lines[-1] == "tickwheel server stop"
    runner = CliRunner()
    background: list[subprocess.Popen[bytes]] = []
    try:
        for line in lines:
            job = re.fullmatch(r"kill %(\d+)", line)
            if job:  # the shell's job N: the Nth started in the background
                proc = background[int(job.group(1)) - 1]
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(15) == 0, line
                continue
            assert line.startswith("tickwheel "), line
            if line.endswith("&"):
                args = shlex.split(line[:-1])[1:]
                background.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "timer.cli", *args],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
                continue
            if line == "tickwheel server stop":  # the tour stopped what it started first
                assert [p.args for p in background if p.poll() is None] == []
                # then the README's Python, as written, with no URL given or copied: the
                # client finds the embedded server the tour started (#56)
                ran = subprocess.run([sys.executable, "-c", python_snippet()],
                                     capture_output=True, text=True, timeout=60,
                                     check=False)  # fmt: skip
                assert (ran.returncode, ran.stdout.strip()) == (0, "completed"), ran.stderr
            result = runner.invoke(main, shlex.split(line)[1:], catch_exceptions=False)
            assert result.exit_code == 0, (line, result.output)
            if re.match(r"tickwheel wait 'job:\{43\}'", line):
                assert "expired" in result.output
    finally:
        for proc in background:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        embedded.stop()
