"""CLI fixtures: a CliRunner in a private working directory, pointed at the test server."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from timer.cli.main import main
from timer.testing import RedisServer


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Each CLI test runs in its own directory (the embedded server's state lives there)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TICKWHEEL_REDIS_URL", raising=False)
    monkeypatch.delenv("TICKWHEEL_NAMESPACE", raising=False)
    yield tmp_path


Run = Callable[..., Result]


@pytest.fixture
def tw(workdir: Path, redis_server: RedisServer, namespace: str) -> Run:
    """Run ``tickwheel --redis-url <test server> --namespace <fresh> ARGS``."""
    if not redis_server.running:
        redis_server.restart()
    runner = CliRunner()

    def run(*args: str, expect: int | None = 0, base: bool = True) -> Result:
        prefix = ["--redis-url", redis_server.url, "--namespace", namespace] if base else []
        result = runner.invoke(main, [*prefix, *args], catch_exceptions=False)
        if expect is not None:
            assert result.exit_code == expect, (result.exit_code, result.output)
        return result

    return run


def as_json(result: Result) -> Any:
    return json.loads(result.stdout)
