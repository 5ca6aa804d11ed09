"""What a new user's trial of `tickwheel schedules` (and `init`) found said too little:
an update resetting what it was not given, a backfill stopping at now, --tz moving
nothing in a preview of an --every schedule, pause and resume of a schedule in that
state already, and `init --json` of a namespace made already. Each keeps what it did
(exit codes, stored data, JSON fields) and says so."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner

from timer import TimerClient
from timer.cli.main import main
from timer.cli.one_timer_cmd import _SCHEDULES_WORDS
from timer.cli.schedules_cmd import schedules
from timer.testing import RedisServer

from .conftest import Run, as_json


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Warning:")]


@pytest.mark.redis
def test_update_names_each_stored_field_it_reset(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    """`schedules update NAME --cron …` takes the whole spec: a --tz, --missed, --payload
    not given went back to their defaults without a word. They still do (a script relying
    on it works as it did), with one warning for each, naming the old value."""
    tw("init", "--shards", "2")
    tw("schedules", "create", "r", "--cron", "0 2 * * *", "--tz", "Europe/Paris",
       "--missed", "skip", "--jitter", "5s", "--payload", '{"kind": "daily"}')  # fmt: skip
    updated = tw("schedules", "update", "r", "--cron", "0 3 * * *", "--jitter", "5s")
    assert warnings_of(updated.stderr) == [
        "Warning: --tz was Europe/Paris, now UTC (update takes the whole spec: give --tz "
        "to keep it)",
        "Warning: --missed was skip, now latest (update takes the whole spec: give "
        "--missed to keep it)",
        'Warning: --payload was {"kind": "daily"}, now null (update takes the whole '
        "spec: give --payload to keep it)",
    ], updated.stderr
    got = as_json(tw("--json", "schedules", "get", "r"))  # reset, as before
    assert (got["tz"], got["missed_policy"], got["payload"]) == ("UTC", "latest", None), got
    assert got["cron"] == "0 3 * * *" and got["jitter_ms"] == 5000, got
    # the whole spec given again, or a field given with its default value: nothing said
    whole = tw("--json", "schedules", "update", "r", "--cron", "0 3 * * *", "--tz", "UTC",
               "--jitter", "5s")  # fmt: skip
    assert warnings_of(whole.stderr) == [], whole.stderr
    assert as_json(whole)["cron"] == "0 3 * * *"  # stdout is the JSON document, as before
    # --cron to --every: its --tz moves nothing in an --every schedule, so it is not named
    tw("schedules", "update", "r", "--cron", "0 3 * * *", "--tz", "Asia/Tokyo")
    every = tw("schedules", "update", "r", "--every", "1h")
    assert warnings_of(every.stderr) == [], every.stderr
    assert tw("schedules", "update", "nope", "--every", "1h", expect=6)
    # watch keys: dropped by an update without --watch, as before, and said; kept with it
    with TimerClient.from_url(redis_server.url, namespace) as c:
        c.schedules.create("w", every="1h", watch=["{w}:done"])
    kept = tw("schedules", "update", "w", "--every", "1h", "--watch", "{w}:done")
    assert warnings_of(kept.stderr) == [], kept.stderr
    assert as_json(tw("--json", "schedules", "get", "w"))["watch"] == ["{w}:done"]
    watched = tw("schedules", "update", "w", "--every", "1h")
    assert warnings_of(watched.stderr) == [
        "Warning: its watch keys ({w}:done) were dropped: update takes the whole spec "
        "(give --watch KEY for each to keep them)"
    ], watched.stderr
    assert as_json(tw("--json", "schedules", "get", "w"))["watch"] == []


@pytest.mark.redis
def test_a_schedule_takes_watch_keys_on_the_command_line(tw: Run) -> None:
    """`schedules create z1 --every 30s --watch …` was "No such option" while Python, the
    HTTP API and the dashboard take watch keys (trial 30); one outside the schedule's
    shard is refused, naming the hash tag; a create again with the same keys is as asked."""
    tw("init", "--shards", "4")
    made = as_json(tw("--json", "schedules", "create", "z1", "--every", "30s",
                      "--watch", "{z1}:done", "--watch", "{z1}:stop"))  # fmt: skip
    assert made["watch"] == ["{z1}:done", "{z1}:stop"], made
    again = tw("schedules", "create", "z1", "--every", "30s", "--watch", "{z1}:done",
               "--watch", "{z1}:stop")  # fmt: skip
    assert "Already there: schedule z1, as asked" in again.stderr, again.output
    other = tw("schedules", "create", "z1", "--every", "30s", expect=7)  # no keys: another
    assert "schedule z1 exists" in other.stderr, other.output
    far = [arg for n in range(8) for arg in ("--watch", f"other:{n}")]  # one elsewhere
    out = tw("schedules", "create", "z2", "--every", "30s", *far, expect=3)
    assert 'is not in schedule "z2"\'s shard' in out.stderr, out.stderr
    assert "give it the hash tag {z2}" in out.stderr, out.stderr


@pytest.mark.redis
def test_backfill_to_a_future_time_says_it_stopped_at_now(tw: Run) -> None:
    """`schedules backfill NAME --to <later than now>` backfilled up to now without a
    word: it still does, and says so on stderr (one line); a --to past says nothing."""
    tw("init", "--shards", "2")
    tw("schedules", "create", "b", "--every", "1d")
    since = (datetime.now(UTC) - timedelta(days=3)).isoformat()
    future = tw("--json", "schedules", "backfill", "b", "--from", since,
                "--to", "2999-01-01T00:00:00Z")  # fmt: skip
    said = warnings_of(future.stderr)
    assert len(said) == 1 and said[0].startswith(
        "Warning: --to 2999-01-01T00:00:00.000Z is in the future: backfilled up to now ("
    ), future.stderr
    done = as_json(future)
    assert done["errors"] == [] and len(done["created"]) >= 2, done  # the last 3 days
    # the warning before the result it explains (trial 33: it came after it)
    again = tw("schedules", "backfill", "b", "--from", since, "--to", "2999-01-01T00:00:00Z")
    assert again.output.index("Warning: --to") < again.output.index("Backfilled 'b'"), again
    past = tw("schedules", "backfill", "b", "--from", "2026-01-01T00:00:00Z",
              "--to", "2026-01-03T00:00:00Z")  # fmt: skip
    assert warnings_of(past.stderr) == [], past.stderr


def test_preview_of_an_every_spec_says_tz_moves_nothing() -> None:
    """create and update say --tz moves nothing in an --every schedule (it is stored
    as given, the data model unchanged); preview, showing the occurrences in that zone,
    said nothing. It says so too, its occurrences as before."""
    args = ["--every", "1d", "--after", "2026-01-01T00:00:00Z", "--count", "2"]
    runner = CliRunner()
    zoned = runner.invoke(main, ["--json", "schedules", "preview", *args, "--tz", "Asia/Tokyo"])
    assert zoned.exit_code == 0, zoned.output
    assert warnings_of(zoned.stderr) == [
        "Warning: --tz Asia/Tokyo applies to --cron schedules only: an --every schedule "
        "counts from its --start (else from 1970-01-01T00:00:00Z) in absolute time, "
        "whatever the zone"
    ], zoned.stderr
    rows = json.loads(zoned.stdout)
    assert [r["utc"] for r in rows] == ["2026-01-02T00:00:00.000Z", "2026-01-03T00:00:00.000Z"]
    plain = runner.invoke(main, ["--json", "schedules", "preview", *args])
    assert plain.exit_code == 0 and warnings_of(plain.stderr) == [], plain.output
    cron = runner.invoke(
        main, ["schedules", "preview", "--cron", "0 8 * * *", "--tz", "Asia/Tokyo"]
    )
    assert cron.exit_code == 0 and warnings_of(cron.stderr) == [], cron.output


@pytest.mark.redis
def test_pause_and_resume_say_when_it_was_so_already(tw: Run) -> None:
    """Pausing a paused schedule, resuming a running one: exit 0 as before, said on
    stderr, and "already" in --json (false when it changed); nothing is written (its
    version stays)."""
    tw("init", "--shards", "2")
    tw("schedules", "create", "p", "--every", "1h")
    first = tw("--json", "schedules", "pause", "p")
    assert as_json(first)["already"] is False and "already" not in first.stderr, first.output
    again = tw("--json", "schedules", "pause", "p")
    shown = as_json(again)
    assert shown["already"] is True and shown["state"] == "paused", shown
    assert shown["version"] == as_json(first)["version"], shown  # nothing written (trial 30)
    assert "Schedule p is already paused" in again.stderr, again.stderr
    text = tw("schedules", "pause", "p")
    assert "already paused" in text.stderr and "paused" in text.stdout, text.output
    resumed = tw("--json", "schedules", "resume", "p")
    assert as_json(resumed)["already"] is False and "already" not in resumed.stderr
    running = tw("--json", "schedules", "resume", "p")
    shown = as_json(running)
    assert shown["already"] is True and shown["state"] == "active", shown
    assert shown["armed"] == as_json(resumed)["armed"], shown  # its occurrence as before
    assert shown["version"] == as_json(resumed)["version"], shown  # nothing written
    assert "Schedule p is already active (nothing changed)" in running.stderr, running.stderr
    assert "already active" in tw("schedules", "resume", "p").stderr
    assert tw("schedules", "pause", "nope", expect=6)
    assert tw("schedules", "resume", "nope", expect=6)


@pytest.mark.redis
def test_init_of_a_namespace_made_already_says_already(tw: Run) -> None:
    """`tickwheel --json init` again: exit 0 with the same fields, and "already" true
    (false when it made the namespace); the text says it with its shards."""
    made = as_json(tw("--json", "init", "--shards", "3"))
    assert made["already"] is False and made["shards"] == 3, made
    again = as_json(tw("--json", "init"))
    assert again["already"] is True, again
    assert {k: v for k, v in again.items() if k != "already"} == {
        k: v for k, v in made.items() if k != "already"
    }
    text = tw("init").stdout
    assert "(initialised already): 3 shards" in text, text


def test_schedule_with_a_schedules_word_and_no_time_names_schedules() -> None:
    """`tickwheel schedule list` said only to give --in or --at (trial 30)."""
    out = CliRunner().invoke(main, ["schedule", "list"])
    assert out.exit_code == 2, out.output
    assert "did you mean `tickwheel schedules list`" in out.output, out.output
    assert set(_SCHEDULES_WORDS) <= set(schedules.commands)  # each word is a command
    plain = CliRunner().invoke(main, ["schedule", "job:1"])
    assert plain.exit_code == 2 and "did you mean" not in plain.output, plain.output
