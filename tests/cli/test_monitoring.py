"""Dashboards and alerts (#42): the Grafana board and the Prometheus rules in deploy/
name only metrics that a real worker, handler runner and `tickwheel serve` export;
promtool accepts the rules, the board's queries and the compose profile's config."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import wait_for
from timer import TimerClient
from timer.testing import RedisServer

ROOT = Path(__file__).resolve().parents[2]
BOARD = ROOT / "deploy" / "grafana" / "tickwheel.json"
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
METRICS_PAGE = ROOT / "docs" / "reference" / "metrics.md"
NAME = re.compile(r"\btickwheel_[a-z_]+\b")
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None and not os.environ.get("TICKWHEEL_REQUIRE_PROMTOOL"),
    reason="promtool not installed (apt-get install prometheus; CI requires it)",
)


def board_queries() -> list[str]:
    board = json.loads(BOARD.read_text())
    return [t["expr"] for panel in board["panels"] for t in panel["targets"]]


def rule_queries() -> list[str]:
    rules = yaml.safe_load(RULES.read_text())
    return [str(r["expr"]) for g in rules["groups"] for r in g["rules"]]


def free_port() -> int:
    import socket  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def request(url: str) -> None:
    """GET ``url``, whatever it answers (its metrics count it)."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            pass
    except urllib.error.HTTPError as answered:  # a 404 is an answer too
        answered.close()
    except OSError:
        pass


def scrape(url: str) -> set[str]:
    """The sample names a /metrics page holds (empty while it does not answer)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            text = r.read().decode()
    except (OSError, urllib.error.URLError):
        return set()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def families(url: str) -> dict[str, str]:
    """The tickwheel_* metric families a /metrics page holds, with their types (a
    counter's ``_created`` companion, which the parser gives as a gauge, left out)."""
    with urllib.request.urlopen(url, timeout=2) as r:
        text = r.read().decode()
    return {
        f.name: f.type
        for f in text_string_to_metric_families(text)
        if f.name.startswith("tickwheel_") and not f.name.endswith("_created")
    }


def page_families() -> list[dict[str, str]]:
    """The metrics reference page's tables, one per process, in the page's order
    (workers, handler runners, the HTTP API): name to type."""
    sections = METRICS_PAGE.read_text().split("\n## ")[1:]
    row = re.compile(r"^\| `(tickwheel_[a-z_]+)` \| (\w+) \|", re.M)
    return [dict(row.findall(s)) for s in sections]


@pytest.fixture
def processes(redis_server: RedisServer, namespace: str, tmp_path: Path) -> Iterator[list[str]]:
    """A worker, a handler runner and `tickwheel serve`, each a real process with its
    metrics on: their /metrics URLs."""
    base = [
        sys.executable,
        "-m",
        "timer.cli",
        "--redis-url",
        redis_server.url,
        "--namespace",
        namespace,
    ]
    TimerClient.from_url(redis_server.url, namespace).init(shards=2)
    ports = [free_port() for _ in range(3)]
    commands = [
        ["worker", "--lease", "1s", "--metrics-port", str(ports[0])],
        ["handle", "timer.examples.handlers:on_timeout", "--metrics-port", str(ports[1])],
        ["serve", "--no-auth", "--port", str(ports[2])],
    ]
    procs = []
    for i, command in enumerate(commands):
        with (tmp_path / f"{i}.log").open("wb") as log:
            procs.append(subprocess.Popen([*base, *command], stdout=log, stderr=log))
    try:
        yield [
            f"http://127.0.0.1:{ports[0]}/metrics",
            f"http://127.0.0.1:{ports[1]}/metrics",
            f"http://127.0.0.1:{ports[2]}/metrics",
        ]
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(20)


def test_the_board_and_the_rules_name_exported_metrics(
    processes: list[str], redis_server: RedisServer, namespace: str
) -> None:
    """Every tickwheel_* name the board's queries and the alerting rules use is a sample
    name a real worker, handler runner or HTTP API process exports (once each has work:
    a timer fired and handled, a request answered)."""
    wanted = {n for q in board_queries() + rule_queries() for n in NAME.findall(q)}
    assert {"tickwheel_lateness_seconds_bucket", "tickwheel_shards"} <= wanted
    c = TimerClient.from_url(redis_server.url, namespace)
    c.schedule("mon:{1}", 100)
    c.close()
    api = processes[2].rsplit("/", 1)[0]

    def exported() -> set[str]:
        request(f"{api}/v1/namespaces/{namespace}/timers/mon:%7B1%7D")  # for the API's own
        return set().union(*(scrape(url) for url in processes))

    seen: dict[str, Any] = {}

    def all_there() -> bool:
        names = exported()
        seen["names"] = names
        return wanted <= names

    try:
        wait_for(all_there, 60, "every metric the board and the rules use")
    except AssertionError:
        missing = sorted(wanted - seen.get("names", set()))
        raise AssertionError(f"not exported by any process: {missing}") from None
    # the metrics reference page names exactly what each process exports, typed
    assert page_families() == [families(url) for url in processes], (
        "docs/reference/metrics.md differs from what the processes export"
    )


@needs_promtool
def test_promtool_accepts_the_rules_the_board_and_the_compose_config(tmp_path: Path) -> None:
    """`promtool check rules` on the alerts; the board's queries, checked the same way as
    recording rules (so a typo in a panel fails here, not on a screen); and `promtool
    check config` on the compose profile's prometheus.yml, which loads the alerts."""
    assert PROMTOOL is not None, "TICKWHEEL_REQUIRE_PROMTOOL is set: apt-get install prometheus"
    done = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True,
                          text=True, check=False, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = {"groups": [{"name": "board", "rules": [
        {"record": f"tickwheel:board:{i}", "expr": q} for i, q in enumerate(board_queries())
    ]}]}  # fmt: skip
    (tmp_path / "board.yml").write_text(yaml.safe_dump(recorded))
    done = subprocess.run([PROMTOOL, "check", "rules", str(tmp_path / "board.yml")],
                          capture_output=True, text=True, check=False, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("prometheus.yml", "alerts.yml"):  # as the compose profile mounts them
        shutil.copy(ROOT / "deploy" / "prometheus" / name, tmp_path / name)
    done = subprocess.run([PROMTOOL, "check", "config", str(tmp_path / "prometheus.yml")],
                          capture_output=True, text=True, check=False, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_compose_monitoring_profile_mounts_what_exists() -> None:
    """The optional Prometheus + Grafana profile mounts files of deploy/ that exist, and
    Grafana's provisioning loads the board from where the profile puts it."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"]
        for volume in services[name]["volumes"]:
            source = volume.split(":", 1)[0]
            assert (ROOT / source).exists(), volume
    provider = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/dashboards/tickwheel.yml").read_text()
    )
    path = provider["providers"][0]["options"]["path"]
    assert any(v.endswith(f"{path}/tickwheel.json:ro") for v in services["grafana"]["volumes"])
    board = json.loads(BOARD.read_text())
    assert board["uid"] == "tickwheel" and len(board["panels"]) >= 10


def test_prometheus_scrapes_every_worker_service_of_the_compose_file() -> None:
    """Every compose service that runs `worker` with a metrics port is a name Prometheus
    resolves: the sentinel profile runs its workers instead of `worker` (--scale
    worker=0), and Prometheus scraped nothing then (trial 13)."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    workers = {
        name
        for name, s in services.items()
        if s.get("command", [None])[0] == "worker" and "--metrics-port" in s["command"]
    }
    assert {"worker", "sentinel-worker"} <= workers, workers
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    [job] = [j for j in config["scrape_configs"] if j["job_name"] == "tickwheel-worker"]
    names = {n for sd in job["dns_sd_configs"] for n in sd["names"]}
    assert workers <= names, (workers, names)
