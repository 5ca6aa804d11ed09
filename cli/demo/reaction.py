"""``tickwheel demo``'s reaction to each timeout: ``tickwheel handle`` in its own
process (``timer.cli.demo.handlers``), started, waited for and summarised here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from timer import TimerClient

from .. import embedded


def log_dir() -> Path:
    """The demo's worker and handler logs: beside the embedded server's data."""
    return embedded.home() / "demo-logs"


def pct(values: list[int], q: float) -> int | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def child_env(url: str, **more: str) -> dict[str, str]:
    """The environment of a process the demo starts: the Redis URL goes in it, never on
    the command line, which every user of the machine sees (`ps`) with its password."""
    return {**os.environ, "TICKWHEEL_REDIS_URL": url, **more}


class Reaction:
    """The service's reaction to each timeout: ``tickwheel handle`` in its own process,
    running ``timer.cli.demo.handlers:on_timeout`` (one flaky downstream, one poison job)."""

    GROUP = "demo-handlers"

    def __init__(self, url: str, c: TimerClient, poison: str, durability: str = "none") -> None:
        self.url, self.c, self.durability = url, c, durability
        logs = log_dir()
        logs.mkdir(parents=True, exist_ok=True)
        self.starts = logs / f"{c.namespace}-handler-starts.log"
        self.handled = logs / f"{c.namespace}-handled.log"
        self.out = logs / f"{c.namespace}-handler.json"
        self.env = child_env(  # the URL with its password: not on the command line
            url,
            TICKWHEEL_DEMO_HANDLER_LOG=str(self.starts),
            TICKWHEEL_DEMO_HANDLED_LOG=str(self.handled),
            TICKWHEEL_DEMO_POISON=poison,
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.figures: dict[str, Any] = {}

    def start(self) -> None:
        for log in (self.starts, self.handled):  # a namespace given again: this run's alone
            log.unlink(missing_ok=True)
        args = ["--namespace", self.c.namespace, "--json", "handle"]
        args += ["timer.cli.demo.handlers:on_timeout", "--group", self.GROUP]
        args += ["--consumer", "demo-h1", "--max-attempts", "3", "--backoff", "200ms"]
        args += ["--max-backoff", "1s", "--log-level", "WARNING", "--durability", self.durability]
        with self.out.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "timer.cli", *args],
                stdout=out,
                stderr=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Until the handler process has made its consumer group (it is reading)."""
        end = time.monotonic() + timeout_s
        while not any(g.name == self.GROUP for g in self.c.groups()):
            if time.monotonic() > end or (self.proc is not None and self.proc.poll() is not None):
                raise click.ClickException(
                    f"the handler process did not start; see {self.out} and rerun"
                )
            time.sleep(0.05)

    def finish(self, timeout_s: float = 60.0) -> None:
        """Wait until the group owes nothing (every expired outcome handled or dead),
        then stop the handler process (SIGTERM: it drains) and read its summary."""
        assert self.proc is not None
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and self.proc.poll() is None:
            g = next((g for g in self.c.groups() if g.name == self.GROUP), None)
            if g is not None and g.pending == 0 and g.lag == 0:
                break
            time.sleep(0.1)
        self.stop()
        text = self.out.read_text().strip()
        self.figures = json.loads(text.splitlines()[-1]) if text else {}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def summary(self, jobs: set[str]) -> dict[str, Any]:
        """The reaction's figures for this run's ``jobs`` (a kept namespace may hold an
        earlier run's dead letters)."""
        late = (
            [int(line.split()[-1]) for line in self.starts.read_text().splitlines() if line.strip()]
            if self.starts.exists()
            else []
        )
        # outcomes handled, each once however often it ran (at least once: an
        # acknowledgement a failover lost brings its outcome again); the runner's own
        # count is of acknowledgements
        ids = self.handled.read_text().split() if self.handled.exists() else None
        # and the outcomes in the dead letters, each once, as Redis keeps them (one
        # dead-lettered again after a failover lost the first is one)
        dead = {
            d.outcome.id
            for d in self.c.dead_letters(self.GROUP)
            if d.outcome is not None and d.outcome.id in jobs
        }
        return {
            "handled": len(set(ids)) if ids is not None else self.figures.get("handled"),
            "handler_retries": self.figures.get("retried"),
            "dead_letters": len(dead),
            "handler_start_p50_ms": pct(late, 0.5),
            "handler_start_p99_ms": pct(late, 0.99),
        }
