"""What a new user's trial (32) of the CLI found: `acl --user 'x on >pw +@all'` printed
a line that grants what the name says, `trim --yes` without --drop-unread ignored --yes
without a word and named no group that held its entries, `groups` showed lag 1 once
`trim --drop-unread` had emptied the streams, and `timers list` broke its rows at an
id's newline. (`tail` on SIGTERM: tests/cli/test_sigterm.py.)"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from timer import TimerClient
from timer.cli.main import main
from timer.testing import RedisServer

from .conftest import Run, as_json


@pytest.mark.parametrize("user", ["x on >pw +@all", "a b", "tab\tname", "-x", "u@h", ""])
def test_acl_refuses_a_user_name_the_line_would_read_as_rules(user: str) -> None:
    out = CliRunner().invoke(main, ["acl", "client", "--user", user])
    assert out.exit_code == 3, out.output
    assert out.stdout == "" and "ACL SETUSER" not in out.stdout
    assert out.stderr.startswith("Error: user must be 1 to 128 letters, digits, _ . or -")


def test_acl_takes_a_plain_user_name_as_one_word() -> None:
    out = CliRunner().invoke(main, ["acl", "client", "--user", "svc_jobs-1.eu"])
    assert out.exit_code == 0, out.output
    assert out.stdout.split()[:5] == ["ACL", "SETUSER", "svc_jobs-1.eu", "on", ">PASSWORD"]


def _outcomes(client: TimerClient, *ids: str) -> None:
    for timer_id in ids:
        client.schedule(timer_id, 60_000)
        client.cancel(timer_id)


def test_trim_names_the_groups_holding_entries_and_says_yes_alone_is_ignored(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    tw("init", "--shards", "1")
    with TimerClient.from_url(redis_server.url, namespace) as c:
        _outcomes(c, "a")
        read = c.outcomes("slow", "c1", block_ms=100, stop_when_idle=True)
        assert next(read).id == "a"  # read, not acknowledged: pending in "slow"
        del read  # the group stays, its entry pending
        _outcomes(c, "b")  # not read by "slow": its lag
        out = tw("trim", "--older-than", "0s", "--yes")
        assert out.stderr.startswith("Warning: --yes is ignored: without --drop-unread"), out
        assert 'consumer group "slow" kept older entries on shard 0' in out.stdout, out.stdout
        assert "`tickwheel groups delete NAME`" in out.stderr
        got = as_json(tw("--json", "trim", "--older-than", "0s"))
        assert got["held_by"] == ["slow"] and got["held_by_group"] == [0], got
        (slow,) = as_json(tw("--json", "groups"))
        assert (slow["pending"], slow["lag"]) == (1, 1), slow
        tw("trim", "--older-than", "0s", "--drop-unread", "--yes")
        assert c.outcomes_total() == 0
        (slow,) = as_json(tw("--json", "groups"))
        # Redis's own count still said 1: none after the last one delivered is lag 0
        assert slow["lag"] == 0, slow
        assert "Warning" not in tw("trim", "--older-than", "0s").stderr


def test_a_table_quotes_an_id_a_terminal_would_not_show_as_itself(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    tw("init", "--shards", "1")
    odd = "two\nlines\x1b[31m"
    with TimerClient.from_url(redis_server.url, namespace) as c:
        c.schedule(odd, 60_000)
        c.schedule("plain", 60_000)
    rows = tw("timers", "list").stdout.splitlines()
    assert len(rows) == 4, rows  # header, rule, one line per timer
    assert any(r.startswith('"two\\nlines\\u001b[31m"') for r in rows), rows
    assert any(r.startswith("plain ") for r in rows), rows
    assert odd in [t["id"] for t in as_json(tw("--json", "timers", "list"))]  # JSON as stored
