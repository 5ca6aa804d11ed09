"""What a new user's trial (33) of the CLI found: `timers reschedule --shift` (the
library's shift_ms) got no suggestion, `dead drop --match X --yes` did not say --match
narrows --all, `dead list` cut an error without a mark, and `groups delete` asked with
`lag None`. (The backfill warning's
order: test_schedule_words.py; the kit's wait: tests/unit/test_time_skipping_turns.py.)"""

from __future__ import annotations

import uuid
from pathlib import Path

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


def test_a_dead_letter_of_a_deleted_group_is_not_redelivered_to_nobody(
    tw: Run, workdir: Path, redis_server: RedisServer, namespace: str
) -> None:
    """Trial 35: after `groups delete gx`, `dead redeliver REF` of one of gx's dead
    letters said `Redelivered 1 dead letter` (exit 0), and the outcome waited for a
    group nobody reads. It is refused now (exit 6, by REF and with --all), naming the
    group, and the dead letter stays; a drop still works."""
    tw("init", "--shards", "2")
    name = f"trial35_{uuid.uuid4().hex[:8]}"
    (workdir / f"{name}.py").write_text("def boom(outcome):\n    raise RuntimeError('no')\n")
    with TimerClient.from_url(redis_server.url, namespace) as c:
        c.schedule("d:{1}", 60_000)
        c.cancel("d:{1}")
        tw("handle", f"{name}:boom", "--on", "cancelled", "--group", "gx",
           "--max-attempts", "1", "--idle-exit")  # fmt: skip
        (letter,) = c.dead_letters()
        asked = tw("groups", "delete", "gx", expect=2).output  # no terminal: it asks
        assert "(0 pending, lag 0; its 1 dead letter stays)" in asked, asked
        deleted = tw("groups", "delete", "gx", "--yes").output
        assert "its 1 dead letter stays (`tickwheel dead drop --group gx --all`" in deleted
        for args in (["dead", "redeliver", letter.ref], ["dead", "redeliver", "--all", "--yes"]):
            out = tw(*args, expect=6)
            assert 'belong to consumer group "gx", which no longer exists' in out.stderr, out
            assert "nothing was redelivered" in out.stderr
        assert [d.ref for d in c.dead_letters()] == [letter.ref]
        assert c.outcomes_total() == 1  # no entry added for a group nobody reads
        assert "Dropped 1 dead letter" in tw("dead", "drop", letter.ref, "--yes").output


def test_timers_reschedule_to_a_past_time_says_they_are_due_at_once(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    """As `reschedule --at <past>` notes it; the bulk form said only `Rescheduled 5 of
    5` and five timers expired at once (trial 35)."""
    tw("init", "--shards", "2")
    for i in range(2):
        tw("schedule", f"k:{i}", "--in", "1h")
    out = tw("timers", "reschedule", "k:*", "--at", "2020-01-01T00:00:00Z", "--yes")
    assert out.stderr.strip().endswith("is in the past: the timers moved are due at once."), (
        out.stderr
    )
    later = tw("timers", "reschedule", "k:*", "--in", "1h", "--yes")
    assert "in the past" not in later.stderr
