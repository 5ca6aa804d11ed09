"""docker-compose.yml and the Dockerfile: checked as far as a machine without Docker can."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_redis_service_has_aof_healthcheck_and_volume() -> None:
    """Redis runs with AOF (appendfsync everysec), a healthcheck, and a named data volume."""
    redis = compose()["services"]["redis"]
    cmd = " ".join(redis["command"])
    assert "--appendonly yes" in cmd and "--appendfsync everysec" in cmd
    assert redis["healthcheck"]["test"][-2:] == ["redis-cli", "ping"]
    assert any(v.startswith("redis-data:") for v in redis["volumes"])
    assert "redis-data" in compose()["volumes"]


def test_init_is_a_one_shot_after_redis_is_healthy() -> None:
    """The namespace is initialised once, by a service that runs `tickwheel init`."""
    init = compose()["services"]["init"]
    assert init["command"][0] == "init" and "--shards" in init["command"]
    assert init["restart"] == "no"
    assert init["depends_on"]["redis"]["condition"] == "service_healthy"


def test_workers_scale_serve_metrics_and_wait_for_init() -> None:
    """N workers (replicas) run `tickwheel worker` with metrics, after init succeeded."""
    worker = compose()["services"]["worker"]
    assert worker["command"][0] == "worker" and "--metrics-port" in worker["command"]
    assert worker["deploy"]["replicas"] >= 2
    assert worker["depends_on"]["init"]["condition"] == "service_completed_successfully"
    port = worker["command"][worker["command"].index("--metrics-port") + 1]
    assert port in worker["expose"]
    assert worker["environment"]["TICKWHEEL_REDIS_URL"] == "redis://redis:6379/0"


def test_image_runs_the_tickwheel_cli() -> None:
    """The image installs this package and its entry point is the tickwheel command."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["tickwheel"]' in dockerfile
    for part in ("timer", "worker", "cli", "pyproject.toml"):
        assert f"COPY {part}" in dockerfile
    assert compose()["services"]["worker"]["build"] == "."
