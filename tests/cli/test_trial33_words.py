"""What a new user's trial (33) of the CLI found: `timers reschedule --shift` (the
library's shift_ms) got no suggestion, `dead drop --match X --yes` did not say --match
narrows --all, `dead list` cut an error without a mark, and `groups delete` asked with
`lag None`. (The backfill warning's
order: test_schedule_words.py; the kit's wait: tests/unit/test_time_skipping_turns.py.)"""

from __future__ import annotations

import pytest
import redis
from click.testing import CliRunner

from timer import TimerClient
from timer.cli.dead_cmd import _first_line
from timer.cli.main import main
from timer.testing import RedisServer

from .conftest import Run, as_json


@pytest.mark.parametrize("word", ["--shift", "--shift-ms"])
def test_timers_reschedule_points_the_librarys_word_at_by(word: str) -> None:
    out = CliRunner().invoke(main, ["timers", "reschedule", "b:*", word, "10m"])
    assert out.exit_code == 2, out.output
    assert f"No such option '{word}'. Did you mean '--by'?" in out.stderr, out.stderr


def test_a_filter_without_all_says_it_narrows_all() -> None:
    out = CliRunner().invoke(main, ["dead", "drop", "--match", "dl:*", "--yes"])
    assert out.exit_code == 2, out.output
    assert out.stderr.rstrip().endswith("or --all (--match narrows --all)"), out.stderr
    both = CliRunner().invoke(main, ["dead", "redeliver", "--group", "g", "--error", "E"])
    assert "(--group and --error narrow --all)" in both.stderr, both.stderr
    bare = CliRunner().invoke(main, ["dead", "drop"])
    assert bare.stderr.rstrip().endswith("or --all"), bare.stderr


def test_a_cut_error_is_marked_where_it_was_cut() -> None:
    long = "RuntimeError: downstream down for {tick}@1796362594909-manual"
    assert _first_line(long, 60) == long[:59] + "…"
    assert _first_line("short", 60) == "short"
    assert _first_line("first\nTraceback …", 60) == "first …"
    assert _first_line("", 60) == ""


def test_groups_delete_asks_with_lag_unknown_where_redis_cannot_tell(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    """An entry deleted from the middle of a stream leaves Redis unable to count a
    group's lag (XINFO says nil): the table shows `?`, and `groups delete` asked with
    `lag None` (trial 33); it says `lag unknown`, and deletes nothing unasked."""
    tw("init", "--shards", "1")
    with TimerClient.from_url(redis_server.url, namespace) as c:
        assert list(c.outcomes("g", "c1", block_ms=100, stop_when_idle=True)) == []
        for i in range(3):  # after the group's last delivered: its lag, unread
            c.schedule(f"x:{i}", 60_000)
            c.cancel(f"x:{i}")
        stream = c.keys.shard(0).outcomes
        raw = redis.Redis.from_url(redis_server.url)
        try:
            entries = raw.xrange(stream)
            assert entries is not None and len(entries) == 3, entries
            middle = entries[1][0]
            assert middle is not None
            raw.xdel(stream, middle)
        finally:
            raw.close()
        (g,) = as_json(tw("--json", "groups"))
        assert g["lag"] is None, g
        asked = tw("groups", "delete", "g", expect=2)
        assert "(0 pending, lag unknown)" in asked.output, asked.output
        assert [x.name for x in c.groups()] == ["g"]
