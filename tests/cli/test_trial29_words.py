"""What a new user's trial (29) of the CLI found unsaid or said two ways: the help of
--log-format and backfill --limit, durations written one way, why a wait timed out,
--on ignored by a Handlers object, did-you-mean for --on and --tz, --group unused under
--overlap allow, and one "no such group" for groups delete, pause and resume."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from tests.cli.conftest import Run
from tests.conftest import wait_for
from timer import TimerClient
from timer.cli.main import main
from timer.cli.service import FIELDS
from timer.testing import RedisServer


@pytest.mark.parametrize("command", ["worker", "handle"])
def test_log_format_help_names_every_field_a_json_line_carries(command: str) -> None:
    """--log-format's help listed the fields but not ``attempt`` (a handler's lines
    carry it; the configuration reference says so)."""
    out = CliRunner().invoke(main, [command, "--help"], terminal_width=1000).output
    line = next(x for x in out.splitlines() if "--log-format" in x)
    assert "timer_id, attempt where there is one" in line, line
    assert all(name in line for name in FIELDS), line


def test_backfill_limit_help_says_a_longer_range_is_refused() -> None:
    out = CliRunner().invoke(main, ["schedules", "backfill", "--help"], terminal_width=1000).output
    line = next(x for x in out.splitlines() if x.lstrip().startswith("--limit"))
    assert "a range with more is refused" in line and "in parts" in line, line


@pytest.mark.redis
def test_backfill_past_the_limit_names_the_flag_and_raises_it_only_below_its_most(
    tw: Run,
) -> None:
    tw("init", "--shards", "2")
    tw("schedules", "create", "s1", "--every", "1s")
    span = ["--from", "2020-01-01T00:00:00Z", "--to", "2021-01-01T00:00:00Z"]
    most = tw("schedules", "backfill", "s1", *span, expect=3).stderr
    assert most.startswith("Error: more than 1000 occurrences between"), most
    assert "backfill it in parts" in most, most
    assert "raise" not in most, most  # 1,000 is its most: raising it is no way out
    low = tw("schedules", "backfill", "s1", *span, "--limit", "5", expect=3).stderr
    assert low.startswith("Error: more than 5 occurrences between"), low
    assert "(or raise --limit, at most 1,000)" in low, low
    assert "raise limit" not in low, low


@pytest.mark.redis
def test_init_writes_bucket_durations_one_way(tw: Run) -> None:
    tw("init")
    again = tw("init", "--bucket", "2s")
    assert "keeps its 1s buckets" in again.stderr, again.output
    assert "1s buckets, data format" in again.stdout, again.output
    assert "ms buckets" not in again.output, again.output


@pytest.mark.redis
def test_a_wait_that_times_out_writes_its_timeout_as_given(tw: Run) -> None:
    """`wait --timeout 200ms`: "still pending after 200ms", not 0.2s; a deadline not
    yet come needs no hint."""
    tw("init", "--shards", "2")
    tw("schedule", "later", "--in", "1h")
    out = tw("wait", "later", "--timeout", "200ms", expect=8).stderr
    assert out.strip() == 'Error: timer "later" still pending after 200ms', out


@pytest.mark.redis
def test_a_wait_on_an_overdue_timer_no_worker_leads_says_to_start_one(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    tw("init", "--shards", "2")
    tw("schedule", "job", "--in", "1ms")
    c = TimerClient.from_url(redis_server.url, namespace)
    try:
        info = c.get("job")
        assert info is not None
        wait_for(lambda: c.server_time_ms() > info.deadline_ms + 5, 5)
        assert c.leaders()[info.shard] is None
    finally:
        c.close()
    out = tw("wait", "job", "--timeout", "100ms", expect=8).stderr
    assert out.startswith('Error: timer "job" still pending after 100ms; its deadline passed '), out
    assert re.search(r"passed \d+m?s ago and no worker leads shard \d", out), out
    assert f"shard {info.shard}: start one with `tickwheel worker`" in out, out


@pytest.mark.redis
def test_on_with_a_handlers_object_is_said_to_be_ignored(tw: Run) -> None:
    tw("init", "--shards", "2")
    spec = "timer.examples.handlers:app"
    told = tw("handle", spec, "--on", "all", "--idle-exit").stderr
    assert "Warning: --on all is ignored: SPEC is a Handlers object" in told, told
    assert "(expired, cancelled: one function each)" in told, told
    assert "--on" not in tw("handle", spec, "--idle-exit").stderr


@pytest.mark.redis
def test_a_mistyped_on_gets_a_did_you_mean(tw: Run) -> None:
    tw("init", "--shards", "2")
    out = tw("handle", "timer.examples.handlers:on_timeout", "--on", "expird", expect=3)
    assert 'got "expird" (did you mean "expired"?)' in out.stderr, out.output


@pytest.mark.parametrize("command", [["preview"], ["create", "s"]])
def test_a_time_zone_in_the_wrong_case_gets_a_did_you_mean(
    command: list[str], workdir: object
) -> None:
    out = CliRunner().invoke(
        main,
        ["--redis-url", "redis://127.0.0.1:1", "schedules", *command, "--cron", "0 8 * * *",
         "--tz", "europe/paris"],
    )  # fmt: skip
    assert out.exit_code == 3, out.output
    assert 'no time zone "europe/paris": did you mean "Europe/Paris"?' in out.output, out.output
    assert "'" not in out.output, out.output


@pytest.mark.redis
def test_group_under_overlap_allow_is_warned_as_doing_nothing(tw: Run) -> None:
    tw("init", "--shards", "2")
    made = tw("schedules", "create", "s2", "--every", "1m", "--group", "g")
    assert "Warning: --group g does nothing with --overlap allow (the default)" in (made.stderr), (
        made.output
    )
    waits = tw("schedules", "create", "s3", "--every", "1m", "--group", "g", "--overlap", "skip")
    assert "--group" not in waits.stderr, waits.output
    plain = tw("schedules", "create", "s4", "--every", "1m")
    assert "Warning" not in plain.stderr, plain.output


@pytest.mark.redis
def test_no_such_group_is_said_one_way_by_delete_pause_and_resume(tw: Run) -> None:
    tw("init", "--shards", "2")
    said = {
        verb: tw("groups", verb, "nosuch", *extra, expect=6).stderr.strip()
        for verb, extra in (("delete", ["--yes"]), ("pause", []), ("resume", []))
    }
    want = 'no consumer group "nosuch" in namespace "'
    assert all(s.startswith(f"Error: {want}") for s in said.values()), said
    assert all(s.endswith("(groups: none)") for s in said.values()), said
    assert len(set(said.values())) == 1, said
