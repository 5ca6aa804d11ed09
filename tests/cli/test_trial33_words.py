"""What a new user's trial (33) of the CLI found: `timers reschedule --shift` (the
library's shift_ms) got no suggestion, `dead drop --match X --yes` did not say --match
narrows --all, and `dead list` cut an error without a mark. (The backfill warning's
order: test_schedule_words.py; the kit's wait: tests/unit/test_time_skipping_turns.py.)"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from timer.cli.dead_cmd import _first_line
from timer.cli.main import main


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
