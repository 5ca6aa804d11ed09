"""Where a client finds Redis when given no URL (#56): the environment's, else the
running embedded server's, else a ConfigError that says what to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from timer import ConfigError, TimerClient
from timer.redis.local_server import default_url, embedded_url


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TICKWHEEL_HOME", str(tmp_path))
    monkeypatch.delenv("TICKWHEEL_REDIS_URL", raising=False)
    return tmp_path


def test_no_url_and_no_server_is_a_clear_error_before_any_connection(home: Path) -> None:
    with pytest.raises(ConfigError, match="tickwheel server start"):
        default_url()
    with pytest.raises(ConfigError, match=r"TICKWHEEL_REDIS_URL is not set"):
        TimerClient.from_url()


def test_the_environment_wins_then_a_live_embedded_server(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (home / "server.json").write_text(json.dumps({"pid": os.getpid(), "port": 6390}))
    assert default_url() == embedded_url() == "redis://127.0.0.1:6390/0"
    monkeypatch.setenv("TICKWHEEL_REDIS_URL", "redis://elsewhere:6379/2")
    assert default_url() == "redis://elsewhere:6379/2"


def test_a_state_file_of_a_dead_server_or_garbage_names_none(home: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    (home / "server.json").write_text(json.dumps({"pid": int(gone.stdout), "port": 6390}))
    assert embedded_url() is None
    for garbage in ("", "{", "[]", '{"pid": "x", "port": 1}', '{"port": 1}'):
        (home / "server.json").write_text(garbage)
        assert embedded_url() is None
