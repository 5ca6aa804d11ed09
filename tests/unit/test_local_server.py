"""Where a client finds Redis when given no URL (#56): the environment's, else the
running embedded server's, else a ConfigError that says what to do."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import timer
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


def test_default_url_is_public_and_what_the_examples_use() -> None:
    """An app finds the server a client given no URL would through `timer.default_url`, in
    the Python reference; the examples, which apps copy, use it (they imported it from
    timer.redis.local_server, and started the server through timer.cli.embedded)."""
    root = Path(__file__).resolve().parents[2]
    assert timer.default_url is default_url and "default_url" in timer.__all__
    assert "::: timer.default_url" in (root / "docs" / "reference" / "python.md").read_text()
    internal = ("timer.cli", "timer.redis")
    for path in sorted((root / "examples").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            hits = [n for n in names if n.startswith(internal)]
            assert not hits, f"{path.relative_to(root)} imports {hits}: not a public module"
