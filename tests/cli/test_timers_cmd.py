"""`tickwheel timers list|count|cancel|complete|notify|reschedule` as a user runs them."""

from __future__ import annotations

import pytest

from timer.cli.durations import format_ms

from .conftest import Run, as_json

pytestmark = pytest.mark.slow


def seed(tw: Run) -> None:
    tw("init", "--shards", "4")
    for i in range(12):
        tw("schedule", f"job:{{{i}}}", "--in", f"{60 + i}m", "--watch", f"job:{{{i}}}:done")
    tw("schedule", "other", "--in", "1h")


def test_list_and_count_select_by_pattern_state_and_deadline(tw: Run) -> None:
    seed(tw)
    listed = as_json(tw("timers", "list", "job:*", "--json"))
    assert sorted(t["id"] for t in listed) == sorted(f"job:{{{i}}}" for i in range(12))
    assert all(t["state"] == "pending" for t in listed)
    human = tw("timers", "list", "job:*", "--limit", "5")
    assert "the first 5 shown" in human.stderr and human.stdout.count("job:{") == 5
    assert as_json(tw("timers", "count", "--json")) == {"match": "*", "count": 13}
    # the state counted is said: "13 timers match" read as every timer, ended ones too
    assert "13 pending timers match '*'" in tw("timers", "count").output
    tw("cancel", "job:{0}")
    counted = tw("timers", "count", "job:*", "--state", "cancelled").output
    assert "1 cancelled timer matches 'job:*'" in counted, counted
    assert "1 pending timer matches 'other'" in tw("timers", "count", "other").output
    assert "12 timers match 'job:*'" in tw("timers", "count", "job:*", "--state", "any").output
    assert as_json(tw("timers", "count", "job:*", "--state", "any", "--json"))["count"] == 12
    soon = listed[0]["deadline_ms"]
    window = as_json(tw("timers", "list", "job:*", "--to", format_ms(soon), "--json"))
    assert window and all(t["deadline_ms"] <= soon for t in window)
    assert "No pending timers match 'nothing:*'" in tw("timers", "list", "nothing:*").output
    # the state asked for is said: "No timers match" read as if job:{1} (pending) were gone
    none = tw("timers", "list", "job:{1}", "--state", "expired").output
    assert "No expired timers match 'job:{1}'" in none, none
    assert "No timers match 'x:*'" in tw("timers", "list", "x:*", "--state", "any").output
    assert "is not one of" in tw("timers", "list", "--state", "late", expect=2).output


def test_cancel_counts_asks_and_acts(tw: Run) -> None:
    seed(tw)
    dry = as_json(tw("timers", "cancel", "job:*", "--dry-run", "--json"))
    assert dry == {"action": "cancel", "match": "job:*", "selected": 12, "dry_run": True}
    asked = tw("timers", "cancel", "job:*", expect=2)  # no answer: nothing cancelled
    assert "Cancel 12 pending timers matching 'job:*': there is no answer" in asked.output
    assert as_json(tw("timers", "count", "job:*", "--json"))["count"] == 12
    done = as_json(tw("timers", "cancel", "job:{1?}", "--yes", "--json"))
    assert (done["selected"], done["done"], done["errors"]) == (2, 2, [])  # job:{10}, {11}
    said = tw("timers", "cancel", "job:*", "--yes").output
    assert "Cancelled 10 of 10 pending timers matching 'job:*'" in said
    assert "No pending timer matches" in tw("timers", "cancel", "job:*").output
    assert as_json(tw("timers", "count", "--json"))["count"] == 1  # "other" is left
    assert "Missing argument 'MATCH'" in tw("timers", "cancel", expect=2).output


def test_reschedule_complete_and_notify(tw: Run) -> None:
    seed(tw)
    before = {t["id"]: t["deadline_ms"] for t in as_json(tw("timers", "list", "job:*", "--json"))}
    moved = as_json(tw("timers", "reschedule", "job:*", "--by", "10m", "--yes", "--json"))
    assert moved["done"] == 12
    after = {t["id"]: t["deadline_ms"] for t in as_json(tw("timers", "list", "job:*", "--json"))}
    assert after == {k: v + 600_000 for k, v in before.items()}
    assert "exactly one of" in tw("timers", "reschedule", "job:*", "--yes", expect=2).output
    notified = tw("timers", "notify", "job:{1}", "--yes").output
    assert "Notified 1 of 1 pending timer matching 'job:{1}' (1 watch key notified)" in notified
    assert "Completed 11 of 11" in tw("timers", "complete", "job:*", "--yes").output
    assert as_json(tw("timers", "count", "job:*", "--state", "completed", "--json"))["count"] == 12


def test_a_bulk_reschedule_too_far_is_refused_before_any_timer_moves(tw: Run) -> None:
    """One new deadline for every timer, further than a deadline may be: refused at once
    (exit 3, the limit in days), none moved; it was each timer's own error, exit 1 (the
    CLI fuzz found it)."""
    tw("init", "--shards", "2")
    before = [as_json(tw("--json", "schedule", f"f:{i}", "--in", "1h")) for i in range(3)]
    out = tw("timers", "reschedule", "f:*", "--at", "9999-12-31T23:59:59Z", "--yes", expect=3)
    assert "give a nearer one" in out.stderr and "3660d" in out.stderr, out.output
    after = [as_json(tw("--json", "get", f"f:{i}"))["deadline_ms"] for i in range(3)]
    assert after == [t["deadline_ms"] for t in before]


def test_a_pattern_without_a_glob_that_matches_nothing_says_it_is_one_id(tw: Run) -> None:
    """`timers cancel job --dry-run` said "Would cancel 0 pending timers matching 'job'":
    a pattern without * matches that id only; list, count and the actions say so, and
    not when it has a glob character or matched something."""
    seed(tw)
    hint = "(a pattern without * matches that id only: did you mean 'job*'?)"
    for args in (
        ("timers", "list", "job"),
        ("timers", "count", "job"),
        ("timers", "cancel", "job", "--dry-run"),
        ("timers", "cancel", "job"),
        ("timers", "complete", "job", "--yes"),
    ):
        assert hint in tw(*args).output, args
    assert as_json(tw("timers", "count", "job", "--json")) == {"match": "job", "count": 0}
    assert "did you mean" not in tw("timers", "list", "nothing:*").output
    assert "did you mean" not in tw("timers", "count", "no[pq]").output
    assert "did you mean" not in tw("timers", "cancel", "other", "--dry-run").output


def test_list_help_says_its_order_and_what_limit_keeps(tw: Run) -> None:
    """`timers list` lists shard by shard, not by deadline, and its help did not say so:
    which timers --limit kept looked arbitrary. The help says the order (as listed, shard
    0 first), what --limit keeps, and where the pending timers are listed by next due."""
    helped = " ".join(tw("timers", "list", "--help").output.split())
    assert "shard by shard (shard 0 first)" in helped and "not by deadline" in helped
    assert "--limit keeps the first it finds in that order" in helped
    assert "Timers view of `tickwheel dashboard` lists the pending timers by next due" in helped
    seed(tw)
    listed = as_json(tw("timers", "list", "--json"))
    assert [t["shard"] for t in listed] == sorted(t["shard"] for t in listed)
