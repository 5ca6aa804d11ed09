"""What the fourteenth first-hour trial found in the CLI (#75): mistakes an operator
makes get one line in their own words, the right exit code, and write nothing; bulk
actions ask alike; what the CLI does on its own accord it says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from timer import Handlers, TimerClient
from timer.cli.main import main
from timer.testing import RedisServer

from .conftest import Run, as_json


def _dead(url: str, namespace: str, n: int) -> TimerClient:
    c = TimerClient.from_url(url, namespace)
    for i in range(n):
        c.schedule(f"d:{i}", 60_000)
        c.cancel(f"d:{i}")
    h = Handlers(c, group="g", max_attempts=1)
    h.add("cancelled", lambda o: 1 / 0)
    assert h.run(stop_when_idle=True)
    return c


def test_dead_redeliver_all_asks_as_every_bulk_action_does(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    """It redelivered every dead letter at once, unasked, and took no --yes (a script
    passing --yes to every bulk action broke on it)."""
    tw("init", "--shards", "2")
    c = _dead(redis_server.url, namespace, 2)
    base = ["--redis-url", redis_server.url, "--namespace", namespace]
    no = CliRunner().invoke(main, [*base, "dead", "redeliver", "--all"], input="n\n")
    assert no.exit_code == 1 and "Redeliver 2 dead letters to their groups' handlers?" in no.output
    assert c.dead_letters_total() == 2  # nothing was done, and said so (not "Aborted!")
    assert no.stderr.splitlines()[-1] == "Nothing done: the answer was no.", no.stderr
    assert "Aborted" not in no.output and "Error" not in no.output, no.output
    as_data = CliRunner().invoke(main, [*base, "--json", "dead", "redeliver", "--all"], input="n")
    said = json.loads(as_data.stderr.splitlines()[-1])
    assert (as_data.exit_code, said["kind"], said["exit_code"]) == (1, "Declined", 1), said
    assert "Redelivered 2" in tw("dead", "redeliver", "--all", "--yes").output
    assert c.dead_letters_total() == 0
    c.close()


def test_dead_redeliver_all_with_no_terminal_goes_ahead_as_before_and_warns(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    """A script written before `dead redeliver --all` asked (cron, CI: no terminal, no
    --yes) keeps working: it redelivers, as it did, with one warning naming --yes. Every
    other bulk action asked before, and still refuses with no answer (exit 2)."""
    tw("init", "--shards", "2")
    c = _dead(redis_server.url, namespace, 2)
    base = ["--redis-url", redis_server.url, "--namespace", namespace]
    unanswered = CliRunner().invoke(main, [*base, "dead", "redeliver", "--all"], input="")
    assert unanswered.exit_code == 0, unanswered.output
    assert "Redelivered 2" in unanswered.output
    assert unanswered.output.count("Warning:") == 1 and "--yes" in unanswered.output
    assert "[y/N]" not in unanswered.output  # no prompt nobody could answer
    assert c.dead_letters_total() == 0
    _dead(redis_server.url, namespace, 1).close()  # (and the redelivered fail again)
    before = c.dead_letters_total()
    assert before > 0
    dropped = CliRunner().invoke(main, [*base, "dead", "drop", "--all"], input="")
    assert dropped.exit_code == 2 and "add --yes" in dropped.output
    assert c.dead_letters_total() == before  # nothing dropped
    c.close()


def test_groups_resume_of_no_group_is_exit_6_as_pause_is(tw: Run) -> None:
    tw("init", "--shards", "2")
    paused = tw("groups", "pause", "nosuch", expect=6).output
    resumed = tw("groups", "resume", "nosuch", expect=6).output
    assert 'no consumer group "nosuch"' in paused and 'no consumer group "nosuch"' in resumed


def test_a_deadline_capped_by_max_total_says_so(tw: Run) -> None:
    """`--in 5s --max-total 1s` is due in 1 s: said, as a past --at is."""
    tw("init", "--shards", "2")
    capped = tw("schedule", "cap:{1}", "--in", "5s", "--max-total", "1s")
    assert "Note: capped by --max-total 1s" in capped.stderr, capped.output
    plain = tw("schedule", "cap:{2}", "--in", "500ms", "--max-total", "1s")
    assert "Note" not in plain.stderr, plain.output
    as_json = tw("--json", "schedule", "cap:{3}", "--in", "5s", "--max-total", "1s")
    assert json.loads(as_json.stdout)["id"] == "cap:{3}"  # stdout stays JSON alone
    assert "Note: capped by --max-total 1s" in as_json.stderr, as_json.stderr


def test_a_bare_cap_shorter_than_the_delay_is_refused_as_a_unit_left_out(
    tw: Run, redis_client: redis.Redis, namespace: str
) -> None:
    """`schedule --in 1h --max-total 5` took 5 ms and made a one-hour timeout due at
    once, with a warning and exit 0 (trial 16): a bare cap shorter than --in is refused,
    writing nothing. One written with its unit (`5ms`) is meant, and capped as before; a
    bare one longer than --in (as scripts wrote it) is taken as before."""
    tw("init", "--shards", "2")
    before = sorted(redis_client.scan_iter(match=f"{{tw:{namespace}*"))
    refused = tw("schedule", "mt:{1}", "--in", "1h", "--max-total", "5", expect=2)
    said = refused.stderr.splitlines()[-1]
    assert said == (
        "Error: Invalid value for --max-total: 5 is 5 milliseconds, shorter than --in 1h, so "
        "the timer would be due at once; write the cap with its unit (e.g. 5m or 5h), or "
        "5ms if you mean it"
    ), refused.stderr
    assert sorted(redis_client.scan_iter(match=f"{{tw:{namespace}*")) == before
    # one mistake, one message (trial 19: the bare-number warning came first), in
    # either order of the options
    assert "Warning" not in refused.stderr, refused.stderr
    flipped = tw("schedule", "mt:{1}", "--max-total", "5", "--in", "1h", expect=2)
    assert flipped.stderr.splitlines()[-1] == said and "Warning" not in flipped.stderr
    tw("get", "mt:{1}", expect=6)
    meant = tw("schedule", "mt:{2}", "--in", "1h", "--max-total", "5ms")
    assert "Note: capped by --max-total 5ms" in meant.stderr, meant.output
    tw("schedule", "mt:{3}", "--in", "1s", "--max-total-ms", "5000")
    assert as_json(tw("--json", "get", "mt:{3}"))["max_total_ms"] == 5000


def test_tokens_refuse_a_bad_namespace_and_a_directory_that_is_not_there(
    workdir: Path,
) -> None:
    runner = CliRunner()
    bad = runner.invoke(main, ["tokens", "create", "--scope", "write", "--namespace", "bad ns"])
    assert bad.exit_code == 3 and "namespace must be 1-64 characters" in bad.output, bad.output
    for name in ("a\nb", "tab\there", "x" * 101):  # it broke `tokens list`'s table (trial 20)
        file = str(workdir / "n.json")
        args = ["--scope", "read", "--namespace", "a", "--name", name]
        named = runner.invoke(main, ["tokens", "create", "--tokens", file, *args])
        assert named.exit_code == 3 and "printable text of at most 100" in named.output
        assert not (workdir / "n.json").exists()  # nothing written
    nowhere = workdir / "no" / "such" / "dir" / "t.json"
    made = runner.invoke(main, ["tokens", "create", "--scope", "write", "--tokens", str(nowhere)])
    assert made.exit_code == 4 and "create it first" in made.output, made.output
    assert not (workdir / "no").exists()  # a typo made directories
    listed = runner.invoke(main, ["tokens", "list", "--tokens", str(nowhere)])
    assert listed.exit_code == 0 and f"No token file at {nowhere}" in listed.output


def test_redis_url_mistakes_are_said_in_the_users_words(tw: Run, redis_server: RedisServer) -> None:
    runner = CliRunner()
    bare = runner.invoke(main, ["--redis-url", "localhost:6379", "get", "x"])
    assert bare.exit_code == 4 and "did you mean redis://localhost:6379?" in bare.output
    db = runner.invoke(
        main, ["--redis-url", f"{redis_server.url.rsplit('/', 1)[0]}/99", "get", "x"]
    )
    assert db.exit_code == 4 and "has no such database" in db.output, db.output
    assert "ERR" not in db.output


def test_a_handler_module_that_raises_on_import_says_where(workdir: Path) -> None:
    (workdir / "raising.py").write_text('x = 1\nraise RuntimeError("config missing")\n')
    ran = CliRunner().invoke(main, ["handle", "raising:f"])
    assert ran.exit_code == 2
    assert "RuntimeError: config missing (at raising.py:2)" in ran.output, ran.output


def test_serve_refused_stops_the_server_it_started(
    workdir: Path, server_binary: Path, tmp_path: Path
) -> None:
    """`serve` on a fresh home with no namespace: it started the embedded server, was
    refused, and left it running."""
    env = {
        "PATH": f"{server_binary.parent}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "TICKWHEEL_HOME": str(tmp_path / "home"),
    }
    ran = subprocess.run(
        [sys.executable, "-m", "timer.cli", "serve", "--no-auth", "--port", "1"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 4, ran.stderr
    assert "Stopped the embedded server it started" in ran.stderr, ran.stderr
    status = subprocess.run(
        [sys.executable, "-m", "timer.cli", "server", "status"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert status.returncode == 5, status.stdout


@pytest.mark.parametrize("command", [["timers", "cancel", "x:*"], ["dead", "drop", "--all"]])
def test_a_question_with_no_answer_prints_no_prompt(tw: Run, command: list[str]) -> None:
    tw("init", "--shards", "2")
    tw("schedule", "x:1", "--in", "1h")
    said = tw(*command, expect=None)
    assert "[y/N]" not in said.output, said.output


def test_a_command_redis_refuses_this_user_says_which_role_it_needs(
    tw: Run, redis_server: RedisServer, redis_client: redis.Redis, namespace: str
) -> None:
    """A client-role user running `stats` got only Redis's words: "NOPERM this user has
    no permissions to run the 'info' command" (exit 5); it says the role to use."""
    from timer.acl import acl_rules  # noqa: PLC0415

    tw("init", "--shards", "2")
    tw("schedule", "job:{1}", "--in", "1h")
    user = f"client-{namespace}"
    redis_client.execute_command(  # type: ignore[no-untyped-call]
        "ACL", "SETUSER", user, "on", ">clientpw", *acl_rules("client", namespace)
    )
    try:
        url = redis_server.url.replace("redis://", f"redis://{user}:clientpw@", 1)
        said = tw("--redis-url", url, "--namespace", namespace, "stats", base=False, expect=5)
        assert "NOPERM" in said.output, said.output
        assert "`tickwheel stats` is for the operator role (`tickwheel acl operator`" in (
            said.output
        ), said.output
        # any other command Redis refuses: pointed at every role's rules
        dead = tw("--redis-url", url, "--namespace", namespace, "dead", "list", base=False,
                  expect=5)  # fmt: skip
        assert "this Redis user lacks a permission this command needs: see `tickwheel acl " in (
            dead.output
        ), dead.output
    finally:
        redis_client.execute_command("ACL", "DELUSER", user)  # type: ignore[no-untyped-call]
