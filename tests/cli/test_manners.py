"""The CLI's manners (#40's smaller points): durations shown as they are written, errors
in the CLI's own words, a confirmation with no one to ask, a hint where one is due, and
Ctrl-C ending a waiting command quietly. Against the real test server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import wait_for
from timer import TimerClient
from timer.durable.model.durations import MAX_DURATION_MS, format_duration_ms, parse_duration_ms
from timer.testing import RedisServer

from .conftest import Run, as_json

pytestmark = pytest.mark.redis


@pytest.mark.parametrize(
    ("ms", "text"),
    [(10_000, "10s"), (5_400_000, "1h30m"), (93_600_000, "1d2h"), (1_500, "1s500ms"), (0, "0ms")],
)
def test_durations_are_shown_as_they_are_written(ms: int, text: str) -> None:
    assert format_duration_ms(ms) == text
    assert ms == 0 or parse_duration_ms(text) == ms


@settings(max_examples=200, deadline=None)
@given(st.integers(0, MAX_DURATION_MS))
def test_any_duration_reads_back_as_it_is_shown(ms: int) -> None:
    assert parse_duration_ms(format_duration_ms(ms)) == ms


@pytest.mark.parametrize("text", ["-1s", "-1h30m", "-5", "-1.5", " -2m "])
def test_a_negative_duration_is_said_to_be_negative(text: str) -> None:
    """`--in -1s` said "-1s" is not a duration (write numbers with units…), which it
    was written as (trial 19): a duration is never negative, and the error says so."""
    with pytest.raises(ValueError, match=r"is negative: a duration is 0 or more") as said:
        parse_duration_ms(text)
    assert "not a duration" not in str(said.value)
    for other in ("-", "-x", "--1s", "-1s-"):  # not a negative duration: as before
        with pytest.raises(ValueError, match="is not a duration"):
            parse_duration_ms(other)


def test_a_schedule_reads_in_durations_and_its_own_time_zone(tw: Run) -> None:
    """`every 10s`, not `every 10000 ms`; catch-up `1h30m`, not `5400s`; the next time in
    UTC and in the schedule's zone."""
    tw("init", "--shards", "2")
    shown = tw("schedules", "create", "tick", "--every", "10s", "--catch-up", "90m").output
    assert "every 10s in UTC" in shown and "within 1h30m" in shown, shown
    paris = tw("schedules", "create", "paris", "--cron", "0 8 * * *", "--tz", "Europe/Paris")
    local = [line for line in paris.output.splitlines() if line.startswith("next")]
    assert local and local[0].endswith(" in Europe/Paris)") and " 08:00:00 CE" in local[0], local
    assert "every 10s" in tw("schedules", "list").output


def test_schedule_errors_name_the_options(tw: Run) -> None:
    tw("init", "--shards", "2")
    both = tw("schedules", "create", "x", "--cron", "* * * * *", "--every", "10s", expect=2)
    assert "--cron EXPR or --every" in both.output and "cron='" not in both.output, both.output
    shown = as_json(tw("--json", "schedules", "preview", "--every", "1m", "--count", "2",
                       "--from", "2026-01-01T00:00:00Z"))  # fmt: skip
    assert [r["utc"] for r in shown] == ["2026-01-01T00:01:00.000Z", "2026-01-01T00:02:00.000Z"]


def test_a_confirmation_with_no_answer_says_to_add_yes_and_changes_nothing(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    """No terminal (a script, CI): exit 2 naming --yes, where it said only "Aborted!";
    a "no" still aborts (1); neither deletes."""
    tw("init", "--shards", "2")
    tw("schedules", "create", "keep", "--every", "1h")
    asked = tw("schedules", "delete", "keep", expect=2)
    assert "add --yes" in asked.output and "Aborted" not in asked.output, asked.output
    with TimerClient.from_url(redis_server.url, namespace) as c:
        assert c.schedules.get("keep") is not None
    tw("groups", "delete", "nope", expect=6)  # no such group: said before any question
    # under --json the refusal is one JSON object on stderr, as every error then is
    tw("schedule", "job:{1}", "--in", "1h")
    quiet = tw("--json", "timers", "cancel", "job:*", expect=2)
    error = json.loads(quiet.stderr)
    assert error["kind"] == "NoAnswer" and error["exit_code"] == 2, quiet.stderr
    assert "add --yes" in error["error"] and quiet.stdout == ""
    # schedules delete under --json asks too (it deleted without asking, trial 28); a
    # script of the release before, with no terminal, goes ahead as it did, warned
    quiet = tw("--json", "schedules", "delete", "keep")
    assert json.loads(quiet.stdout) == {"deleted": "keep"}, quiet.stdout
    assert "schedules delete --json asks first now" in quiet.stderr, quiet.stderr


def test_scheduling_an_ended_id_hints_at_rearm(tw: Run) -> None:
    tw("init", "--shards", "2")
    tw("schedule", "job:{9}", "--in", "1h")
    tw("cancel", "job:{9}")
    again = tw("schedule", "job:{9}", "--in", "1h")
    assert "Already decided (cancelled)" in again.output
    assert "--rearm schedules it again" in again.output, again.output


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_ends_a_waiting_command_quietly_with_130(
    redis_server: RedisServer, namespace: str, as_json: bool
) -> None:
    """SIGINT to `tickwheel wait` (the console script): exit 130 and no "Aborted!" (it
    exited 1 with "Aborted!"); one line says it was interrupted and that the timer is
    unchanged (it said nothing: a blank line, trial 26); under --json one JSON object on
    stderr says so, as every error then does (it said nothing)."""
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=2)
    c.schedule("w", 600_000)
    r = redis.Redis.from_url(redis_server.url)
    before = max(int(cl["id"]) for cl in r.client_list())
    exe = Path(sys.executable).with_name("tickwheel")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWHEEL_")}
    proc = subprocess.Popen(
        [str(exe), "--redis-url", redis_server.url, "--namespace", namespace, "wait", "w",
         "--timeout", "60", *(["--json"] if as_json else [])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        wait_for(
            lambda: any(
                int(cl["id"]) > before and cl["cmd"] == "evalsha" for cl in r.client_list()
            ),
            30,
            "the wait to be waiting on the server",
        )
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        left = c.get("w")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()  # reaped and its pipes closed: no warning in a later test
        r.close()
        c.close()
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Aborted" not in err and "Traceback" not in err and out == "", err
    if as_json:
        said = json.loads(err)
        assert said == {"error": "interrupted (Ctrl-C)", "kind": "Interrupted", "exit_code": 130}
    else:
        assert err == (  # after the newline click ends the ^C line with
            '\nInterrupted (Ctrl-C): stopped waiting for timer "w"; the timer is unchanged\n'
        ), err
    assert left is not None and left.state == "pending"


def test_a_worker_on_a_namespace_never_initialised_is_not_ready(tw: Run) -> None:
    """It said "ready" and then that the namespace is not initialised."""
    out = tw("worker", expect=4).output
    assert "not initialised" in out and "ready" not in out, out


def test_stats_memory_says_when_its_sample_is_too_small_to_mean_much(tw: Run) -> None:
    """On a few timers the per-timer bytes are mostly each key's overhead (1,090 B a
    decided timer was shown bare): a figure shown is noted as such; one left out (too few
    to estimate) says why in its row, and the note says nothing of it (trial 19: "-" and
    then a note about the figures it did not show)."""
    tw("init", "--shards", "2")
    tw("schedule", "a", "--in", "1h")
    out = tw("stats", "--memory").output
    rows = dict(line.split(None, 1) for line in out.splitlines()[2:] if "  " in line)
    assert rows["bytes_per_pending_timer"].strip() == "- (too few pending: under 100)", out
    assert rows["bytes_per_decided_timer"].strip() == "- (too few decided: under 100)", out
    assert "Note:" not in out, out
    for n in range(150):
        tw("schedule", f"b{n}", "--in", "1h")
    out = tw("stats", "--memory").output
    assert "Note: fewer than 2,000 pending timers (1,000 a shard)" in out, out
    assert "decided timers" not in out, out
    rows = dict(line.split(None, 1) for line in out.splitlines()[2:] if "  " in line)
    assert float(rows["bytes_per_pending_timer"]) > 0, out
    as_data = json.loads(tw("--json", "stats", "--memory").stdout)
    assert "Note:" not in tw("--json", "stats", "--memory").stdout
    assert as_data["bytes_per_decided_timer"] is None  # --json: null, as before


def test_every_option_of_every_command_says_what_it_is() -> None:
    """`--help` explains every option (#56: `demo --workers`, `--min-delay`, `serve
    --port`, `--log-level` and more had none)."""
    import click  # noqa: PLC0415

    from timer.cli.main import main  # noqa: PLC0415

    def commands(cmd: click.Command, path: str) -> list[tuple[str, click.Command]]:
        found = [(path, cmd)]
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                found += commands(sub, f"{path} {name}")
        return found

    bare = [
        f"{path} {'/'.join(p.opts)}"
        for path, cmd in commands(main, "tickwheel")
        for p in cmd.params
        if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip()
    ]
    assert bare == []


def test_a_worker_history_period_out_of_bounds_is_refused_before_it_starts(tw: Run) -> None:
    """--history-every below 100 ms (or above a minute) is bad input, said before the
    worker connects or says it is ready."""
    for bad in ("50ms", "2m"):  # named by its flag, in durations (trial 20: history_every_ms)
        out = tw("worker", "--history-every", bad, expect=3).output
        said = f"--history-every must be 100ms to 1m (0s: no history), got {bad}"
        assert said in out and "ready" not in out, out
    out = tw("worker", "--horizon", "100d", expect=3).output
    assert "Error: --horizon must be under an hour (1h), got 100d" in out, out


def test_ctrl_c_at_a_question_ends_quietly_with_130_and_changes_nothing(
    redis_server: RedisServer, namespace: str
) -> None:
    """Ctrl-C at a confirmation said "Aborted!" and exited 1 (trial 20), where Ctrl-C
    anywhere else ends a command quietly with 130: the same at a question, on a real
    terminal (a pseudo-terminal), and nothing is cancelled."""
    import pty  # noqa: PLC0415
    import select  # noqa: PLC0415

    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=2)
    c.schedule("q:{1}", 600_000)
    exe = Path(sys.executable).with_name("tickwheel")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWHEEL_")}
    pid, fd = pty.fork()
    if pid == 0:  # the child: the console script on the terminal (SIGINT as a shell's)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.execve(str(exe), [str(exe), "--redis-url", redis_server.url, "--namespace",
                             namespace, "timers", "cancel", "q:*"], env)  # fmt: skip
    said = b""

    def read() -> bytes:  # what the terminal shows next ("" once it closed), in 30 s
        if not select.select([fd], [], [], 30)[0]:
            os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"nothing more on the terminal in 30 s: {said!r}")
        try:
            return os.read(fd, 1024)
        except OSError:  # the terminal closed: the command ended
            return b""

    try:
        while b"[y/N]" not in said:
            chunk = read()
            assert chunk, f"it ended before asking: {said!r}"
            said += chunk
        # a user's Ctrl-C comes while the prompt waits for a key: sent before the
        # command is blocked reading the terminal, readline's wait could start after the
        # signal (and wait on); so once it waits (read, poll or select, by the kernel)
        waiting = {"0", "7", "23", "270", "271"}  # x86-64's read, poll, select, pselect6, ppoll
        syscall = Path(f"/proc/{pid}/syscall")
        wait_for(lambda: syscall.read_text().split()[0] in waiting, 30, "the prompt to wait")
        os.write(fd, b"\x03")  # Ctrl-C, as the terminal sends it: SIGINT to the command
        while chunk := read():
            said += chunk
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 130, said
    assert b"Aborted" not in said and b"Traceback" not in said, said
    assert said.rstrip().endswith(b"\nInterrupted (Ctrl-C): nothing done"), said
    assert c.get("q:{1}").state == "pending"  # type: ignore[union-attr]
    c.close()
