"""What a new-user trial found at the CLI's root: a $TICKWHEEL_HOME that is no directory
gave a Python traceback, a relative one was taken from the current directory unsaid, a
bad value from the environment was not said to come from there, and `tail --since`,
`tickwheel help` and `tickwheel version` were answered with guesses that lead nowhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from timer.cli import embedded
from timer.cli.main import main
from timer.testing import RedisServer


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def afile(workdir: Path) -> Path:
    path = workdir / "afile"
    path.write_text("")
    return path


@pytest.mark.parametrize(
    "command",
    [
        ["server", "start"],
        ["init"],
        ["schedule", "job:1", "--in", "1m"],
        ["server", "status"],
        ["server", "stop"],
        ["timers", "list"],
        ["tokens", "list"],
        ["tokens", "create", "--scope", "read"],
        ["demo", "--redis-url", "redis://127.0.0.1:1"],
    ],
)
@pytest.mark.parametrize(
    ("under", "why"), [("", "is not a directory"), ("sub", "cannot be created")]
)
def test_a_home_that_is_no_directory_is_a_config_error(
    afile: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], under: str, why: str
) -> None:
    """TICKWHEEL_HOME=<a file> `server start` (or `init`, `schedule`) was a traceback
    (FileExistsError; NotADirectoryError under a file) and exit 1, while `server status`
    said the server was not running: each says what is wrong and what to do, exit 4."""
    home = afile / under if under else afile
    monkeypatch.setenv("TICKWHEEL_HOME", str(home))
    result = run(*command)
    assert result.exit_code == 4, result.output
    assert f'$TICKWHEEL_HOME ("{home}") {why}' in result.stderr, result.stderr
    assert "point $TICKWHEEL_HOME at a directory you can write, or unset it" in result.stderr
    assert not afile.is_dir()


def test_a_home_that_cannot_be_made_says_why_as_json(
    afile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under --json it is one JSON object on stderr, as every error is."""
    monkeypatch.setenv("TICKWHEEL_HOME", str(afile / "sub"))
    result = run("--json", "server", "start")
    said = json.loads(result.stderr)
    assert said["kind"] == "ConfigError" and said["exit_code"] == result.exit_code == 4
    assert f"({afile} is not a directory)" in said["error"]
    assert result.stdout == ""


def test_a_relative_home_is_kept_and_said_once(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative $TICKWHEEL_HOME is taken from the current directory, so a server started
    in one directory was "not running" from another, unsaid: it is still taken so (a
    setup that relies on it keeps working), with one warning naming the directory."""
    monkeypatch.setattr(embedded, "_SAID", set())
    monkeypatch.setenv("TICKWHEEL_HOME", "th")
    (workdir / "th").mkdir()
    result = run("server", "stop")  # looks for the server, then stops none
    assert result.exit_code == 0, result.output
    assert result.stderr.count("Warning:") == 1, result.stderr
    assert result.stderr.startswith('Warning: $TICKWHEEL_HOME ("th") is a relative path')
    assert f"export TICKWHEEL_HOME={workdir / 'th'}" in result.stderr
    monkeypatch.setenv("TICKWHEEL_HOME", str(workdir / "th"))
    monkeypatch.setattr(embedded, "_SAID", set())
    assert "Warning" not in run("server", "status").stderr


def test_a_bad_namespace_from_the_environment_is_said_to_come_from_there(
    workdir: Path, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TICKWHEEL_NAMESPACE='my ns' said `namespace must be …, got "my ns"`, not where the
    value came from; given as --namespace (before or after the command) it says as before."""
    monkeypatch.setenv("TICKWHEEL_NAMESPACE", "my ns")
    url = ["--redis-url", redis_server.url]
    result = run(*url, "timers", "list")
    assert result.exit_code == 3, result.output
    assert result.stderr.rstrip().endswith(
        'got "my ns" (set by $TICKWHEEL_NAMESPACE: change or unset it, or give --namespace)'
    ), result.stderr
    for args in (["--namespace", "my ns", "timers", "list"], ["get", "x", "--namespace", "my ns"]):
        result = run(*url, *args)
        assert result.exit_code == 3 and "TICKWHEEL_NAMESPACE" not in result.stderr, result.stderr


@pytest.mark.parametrize("url", ["redis//localhost", "localhost:6379", "redis://h:99999"])
def test_a_bad_redis_url_from_the_environment_is_said_to_come_from_there(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.setenv("TICKWHEEL_REDIS_URL", url)
    result = run("--json", "timers", "list")
    said = json.loads(result.stderr)
    assert said["exit_code"] == result.exit_code == 4, said
    assert said["error"].endswith(
        "(set by $TICKWHEEL_REDIS_URL: change or unset it, or give --redis-url)"
    ), said
    monkeypatch.delenv("TICKWHEEL_REDIS_URL")
    result = run("--redis-url", url, "timers", "list")
    assert result.exit_code == 4 and "TICKWHEEL_REDIS_URL" not in result.stderr, result.stderr


def test_tail_since_points_at_history(workdir: Path) -> None:
    """`tail --since yesterday` said "Did you mean '--json'?"."""
    for word in ("--since", "--from"):
        result = run("tail", word, "yesterday")
        assert result.exit_code == 2
        assert result.stderr.splitlines()[-1] == (
            f"Error: No such option '{word}': tail shows outcomes from now on, or with "
            "--history from the oldest one kept: give --history (it takes no time)."
        ), result.stderr
    said = json.loads(run("--json", "tail", "--since", "1h").stderr)
    assert "give --history" in said["error"] and said["kind"] == "UsageError"


@pytest.mark.parametrize(
    ("args", "meant"),
    [
        (["help"], "main --help"),
        (["version"], "main --version"),
        (["help", "schedule"], "main schedule --help"),
        (["help", "nosuch"], "main --help"),
    ],
)
def test_help_and_version_as_commands_point_at_the_options(
    workdir: Path, args: list[str], meant: str
) -> None:
    """`tickwheel help` and `tickwheel version` said only "No such command"."""
    result = run(*args)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == (
        f"Error: No such command {args[0]!r}: run `{meant}`."
    ), result.stderr
