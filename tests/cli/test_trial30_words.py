"""What a new user's trial (30) of the CLI found: `groups list` was no command while every
other group has one, `dead list` said "No dead letters." when its filters selected none
of those there are, `dead drop` asked about a ref that names no dead letter (and `dead
drop` and `dead redeliver --all` with no terminal did two things without saying why),
and `tokens create --name` made a second token of a name without a word."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import wait_for
from timer import Handlers, TimerClient
from timer.cli.main import main
from timer.testing import RedisServer

from .conftest import Run, as_json


def _dead(url: str, namespace: str, ids: list[str]) -> TimerClient:
    """A client on ``namespace`` with one dead letter of group "g" for each id."""
    c = TimerClient.from_url(url, namespace)
    for tid in ids:
        c.schedule(tid, 60_000)
        c.cancel(tid)
    h = Handlers(c, group="g", max_attempts=1)
    h.add("cancelled", lambda o: 1 / 0)
    assert h.run(stop_when_idle=True)
    return c


# 1. groups list


@pytest.mark.redis
def test_groups_list_is_a_command_and_shows_what_groups_alone_does(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    """`tickwheel groups list` said "No such command 'list'." where `schedules`,
    `timers`, `dead` and `tokens` each have a `list`: it shows what `groups` shows, and
    `groups --help` names it as theirs do."""
    tw("init", "--shards", "2")
    assert tw("groups", "list").stdout == tw("groups").stdout == "No consumer groups.\n"
    with TimerClient.from_url(redis_server.url, namespace) as c:
        c.schedule("a", 60_000)
        c.cancel("a")
        c.consumer("billing", "b1").ensure()  # nothing read: nothing pending, no age
        alone, listed = tw("groups"), tw("groups", "list")
        assert "billing" in alone.stdout and listed.stdout == alone.stdout, listed.output
        assert as_json(tw("--json", "groups", "list")) == as_json(tw("--json", "groups"))
        helped = CliRunner().invoke(main, ["groups", "--help"]).output
        assert any(line.split()[:1] == ["list"] for line in helped.splitlines()), helped


@pytest.mark.redis
def test_groups_list_takes_retention_after_it_or_before_it(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    tw("init", "--shards", "2")
    with TimerClient.from_url(redis_server.url, namespace) as c:
        c.schedule("a", 60_000)
        c.cancel("a")
        g = c.consumer("billing", "b1")
        g.ensure()
        assert g.read(1, None)  # pending, from now on owed
        owed = c.groups()[0].owes_since_ms
        assert owed is not None
        wait_for(lambda: c.server_time_ms() > owed, 5, "an outcome owed for over 0s")
    assert "billing STALE" in tw("groups", "list", "--retention", "0s").stdout
    assert "billing STALE" in tw("groups", "--retention", "0s", "list").stdout
    assert "STALE" not in tw("groups", "list").stdout  # 1h by default
    assert "STALE" not in tw("groups", "--retention", "0s", "list", "--retention", "1h").stdout


# 2. dead list with filters that select none


@pytest.mark.redis
def test_dead_list_says_its_filters_selected_none_of_those_there_are(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    tw("init", "--shards", "4")
    c = _dead(redis_server.url, namespace, ["d:1", "d:2", "d:3"])
    try:
        assert c.dead_letters_total() == 3
        out = tw("dead", "list", "--match", "zzz").stdout
        assert out == "No dead letters match --match zzz (3 in the namespace).\n", out
        out = tw("dead", "list", "--group", "g", "--error", "no such text").stdout
        assert out == (
            "No dead letters match --group g --error 'no such text' (3 in the namespace).\n"
        ), out
        assert as_json(tw("--json", "dead", "list", "--match", "zzz")) == []  # as before
        assert "d:1" in tw("dead", "list", "--match", "d:*").stdout
        tw("dead", "drop", "--all", "--yes")
        assert tw("dead", "list", "--match", "zzz").stdout == "No dead letters.\n"
        assert tw("dead", "list").stdout == "No dead letters.\n"
    finally:
        c.close()


# 3. dead drop of a ref that names no dead letter; no terminal: drop and redeliver


@pytest.mark.redis
def test_dead_drop_refuses_a_ref_of_no_dead_letter_before_any_question(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    """`dead drop 3/1-0` asked "Delete 1 dead letter for good?", and with no terminal
    exited 2 saying to add --yes: the ref is checked first, exit 6, nothing asked."""
    tw("init", "--shards", "4")
    c = _dead(redis_server.url, namespace, ["d:1", "d:2", "d:3"])
    try:
        ref = c.dead_letters()[0].ref
        gone = tw("dead", "drop", "3/1-0", expect=6)  # CliRunner: no terminal
        assert gone.stderr.strip() == (
            "Error: no dead letter 3/1-0 (see `tickwheel dead list`): nothing dropped"
        ), gone.output
        assert "Delete" not in gone.output and "--yes" not in gone.output, gone.output
        mixed = tw("dead", "drop", ref, "3/1-0", expect=6)
        assert "no dead letter 3/1-0 " in mixed.stderr and "Delete" not in mixed.output
        said = json.loads(tw("--json", "dead", "drop", "3/1-0", expect=6).stderr)
        assert (said["kind"], said["exit_code"]) == ("NotFound", 6), said
        assert c.dead_letters_total() == 3  # nothing dropped
        # a ref that names one is still asked about, and dropped on a yes; the same
        # letter named twice (once with a 0 before its shard) is one letter, not exit 14
        shard, eid = ref.split("/")
        runner = CliRunner()
        base = ["--redis-url", redis_server.url, "--namespace", namespace]
        yes = runner.invoke(main, [*base, "dead", "drop", ref, f"0{shard}/{eid}"], input="y\n")
        assert yes.exit_code == 0, yes.output
        assert "Delete 1 dead letter for good? [y/N]: y" in yes.stderr, yes.output
        assert "Dropped 1 dead letter" in yes.stdout and c.dead_letters_total() == 2
        # --yes as before: what it finds is dropped, what it does not is said (exit 6)
        other = c.dead_letters()[0].ref
        both = tw("dead", "drop", other, "3/1-0", "--yes", expect=6)
        assert "Dropped 1 dead letter; not found: 3/1-0" in both.stdout, both.output
        assert c.dead_letters_total() == 1
    finally:
        c.close()


@pytest.mark.redis
def test_drop_and_redeliver_with_no_terminal_each_say_why_they_differ(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    """With no terminal, `dead redeliver --all` goes ahead (warned, as it did before it
    asked: a script relies on it) and `dead drop` refuses (exit 2, as it always did):
    each says why, naming the other."""
    tw("init", "--shards", "4")
    c = _dead(redis_server.url, namespace, ["d:1", "d:2"])
    try:
        ref = c.dead_letters()[0].ref
        for args in (["--all"], [ref]):
            dropped = tw("dead", "drop", *args, expect=2)
            assert "there is no answer to read (no terminal); add --yes" in dropped.stderr
            assert (
                "(a drop is for good: unlike `dead redeliver --all`, which loses nothing, it "
                "does not go ahead unasked)"
            ) in dropped.stderr, dropped.stderr
        said = json.loads(tw("--json", "dead", "drop", "--all", expect=2).stderr)
        assert said["kind"] == "NoAnswer" and "a drop is for good" in said["error"], said
        assert c.dead_letters_total() == 2  # nothing dropped
        redelivered = tw("dead", "redeliver", "--all")
        warned = [x for x in redelivered.stderr.splitlines() if x.startswith("Warning:")]
        assert warned == [
            "Warning: dead redeliver --all (unlike `dead drop`, not for good: a letter that "
            "fails again is dead-lettered again) asks first now; with no terminal to answer "
            "on it goes ahead as it did before. Add --yes to say so (and not see this)"
        ], redelivered.stderr
        assert "Redelivered 2 dead letters" in redelivered.stdout
        assert c.dead_letters_total() == 0
    finally:
        c.close()


# 4. tokens create of a name the file has


def test_tokens_create_of_a_name_made_before_makes_another_and_says_how_to_revoke(
    workdir: Path,
) -> None:
    """The HTTP guide's `tokens create --scope write --namespace default --name curl`, run
    again, made a second token named curl without a word: still made (scripts rely on
    it), with a warning naming the old and the command revoking it."""
    given = workdir / "my tokens.json"
    make = ["tokens", "create", "--scope", "write", "--namespace", "default", "--name", "curl"]
    make += ["--tokens", given.name]
    runner = CliRunner()
    first = runner.invoke(main, ["--json", *make])
    assert first.exit_code == 0 and first.stderr == "", first.output
    old = json.loads(first.stdout)["id"]
    second = runner.invoke(main, make)
    assert second.exit_code == 0 and second.stdout.startswith("tw_"), second.output
    revoke = f"tickwheel tokens revoke {old} --tokens {shlex.quote(str(given))}"
    assert second.stderr.splitlines()[-1] == (
        f'Warning: a token named "curl" existed already (id {old}); this one is another, '
        f"and each works until revoked: revoke the old with `{revoke}`"
    ), second.stderr
    shown = runner.invoke(main, ["--json", "tokens", "list", "--tokens", given.name])
    listed = json.loads(shown.stdout)
    assert [t["name"] for t in listed] == ["curl", "curl"]
    newer = next(t["id"] for t in listed if t["id"] != old)
    third = runner.invoke(main, ["--json", *make])  # --json: stdout as before
    assert set(json.loads(third.stdout)) == {"id", "token", "scope", "namespaces", "file"}
    assert third.stderr.strip() == (
        f'Warning: 2 tokens named "curl" existed already (ids {old}, {newer}); this one is '
        "another, and each works until revoked: revoke an old one with `tickwheel tokens "
        f"revoke ID --tokens {shlex.quote(str(given))}`"
    ), third.stderr
    # the command it names works
    gone = runner.invoke(main, shlex.split(revoke)[1:])
    assert gone.exit_code == 0 and f"Revoked token {old}" in gone.output, gone.output


def test_tokens_create_warns_only_of_the_same_name_and_never_of_none(workdir: Path) -> None:
    runner = CliRunner()
    for _ in range(2):  # no name: nothing to tell apart
        made = runner.invoke(main, ["tokens", "create", "--scope", "read"])
        assert made.exit_code == 0 and "Warning" not in made.stderr, made.output
    made = runner.invoke(main, ["tokens", "create", "--scope", "read", "--name", "ci"])
    assert "Warning" not in made.stderr, made.output
    other = runner.invoke(main, ["tokens", "create", "--scope", "read", "--name", "ci2"])
    assert "Warning" not in other.stderr, other.output
    again = runner.invoke(main, ["tokens", "create", "--scope", "read", "--name", "ci"])
    assert 'Warning: a token named "ci" existed already' in again.stderr, again.output
    assert "revoke the old with `tickwheel tokens revoke " in again.stderr
    assert "--tokens" not in again.stderr.splitlines()[-1]  # the state directory's file
