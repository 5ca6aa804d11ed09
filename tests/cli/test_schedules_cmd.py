"""`tickwheel schedules preview`: a schedule's next occurrences, before creating it (#29)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import wait_for
from timer import TimerClient
from timer.cli.main import main
from timer.durable.schedules.records import ScheduleSpec
from timer.durable.schedules.recurrence import Recurrence
from timer.errors import InvalidInput
from timer.testing import RedisServer
from timer.worker import Worker, WorkerSettings

from .conftest import Run, as_json


def preview(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--json", "schedules", "preview", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def test_preview_shows_the_occurrences_in_utc_and_local_time() -> None:
    code, out = preview(
        "--cron", "30 2 * * *", "--tz", "Europe/Paris", "--from", "2026-03-27T12:00:00Z",
        "--count", "3",
    )  # fmt: skip
    assert code == 0
    rows = json.loads(out)
    assert [r["utc"] for r in rows] == [
        "2026-03-28T01:30:00.000Z",
        "2026-03-29T01:00:00.000Z",
        "2026-03-30T00:30:00.000Z",
    ]
    assert [r["local"] for r in rows] == [  # the spring gap's 02:30 fires at 03:00 CEST
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]
    human = CliRunner().invoke(
        main, ["schedules", "preview", "--every", "30s", "--end", "1970-01-01T00:01:00Z",
               "--after", "1970-01-01T00:00:00Z", "--count", "5"],
    ).output  # fmt: skip
    assert "1970-01-01T00:00:30.000Z" in human and "ends after 2 occurrences" in human


def test_a_bad_spec_is_refused_with_what_to_write() -> None:
    code, out = preview("--cron", "61 * * * *")
    assert code == 3 and "5 fields" in out
    code, out = preview("--every", "1m", "--tz", "Mars/Olympus")
    assert code == 3 and "IANA" in out
    code, out = preview()
    assert code == 2 and "exactly one of" in out  # a usage error, as `schedule`'s
    code, out = preview("--every", "1x")
    assert code == 2 and "not a duration" in out


words = st.one_of(st.text(max_size=12), st.sampled_from(["*", "* * * * *", "0 8 * * MON", "L"]))
options = st.lists(
    st.tuples(
        st.sampled_from(["--cron", "--every", "--offset", "--tz", "--start", "--end",
                         "--jitter", "--after", "--from", "--count", "--bogus"]),
        st.one_of(words, st.sampled_from(["30s", "1h", "0", "-1", "10000", "Europe/Paris",
                                          "2030-01-01T00:00:00Z", "9999-12-31T23:59:59Z"])),
    ),
    max_size=5,
)  # fmt: skip


@settings(max_examples=int(os.environ.get("TICKWHEEL_FUZZ_EXAMPLES", "40")), deadline=None)
@given(opts=options)
def test_any_preview_command_line(opts: list[tuple[str, str]]) -> None:
    """Any options: the occurrences (exit 0) or a usage or input error, never a
    traceback; and it needs no server: none is started (no ./.tickwheel)."""
    runner = CliRunner()
    with tempfile.TemporaryDirectory() as where, contextlib.chdir(where):
        args = [x for pair in opts for x in pair]
        result = runner.invoke(main, ["--json", "schedules", "preview", *args])
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            args,
            result.output,
            result.exception,
        )
        assert result.exit_code in {0, 2, 3}, (args, result.output)
        assert not Path(".tickwheel").exists()
        if result.exit_code == 0:
            rows = json.loads(result.stdout)
            times = [r["occurrence_ms"] for r in rows]
            assert times == sorted(set(times))


def test_preview_agrees_with_the_library() -> None:
    spec = Recurrence.of(cron="*/7 1-3 * * *", tz="America/New_York")
    code, out = preview(
        "--cron", "*/7 1-3 * * *", "--tz", "America/New_York",
        "--after", "2026-11-01T04:00:00Z", "--count", "40",
    )  # fmt: skip
    assert code == 0
    after = round(datetime(2026, 11, 1, 4, tzinfo=UTC).timestamp() * 1000)
    assert [r["occurrence_ms"] for r in json.loads(out)] == spec.preview(after, 40)


@pytest.mark.redis
def test_a_schedule_from_the_command_line(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    """create, get, list, pause, resume, update and delete, as a user types them; a
    worker fires its occurrences."""
    tw("init", "--shards", "2")
    made = as_json(tw(
        "--json", "schedules", "create", "report", "--cron", "0 2 * * *", "--tz",
        "Europe/Paris", "--payload", '{"kind": "daily"}', "--missed", "skip",
    ))  # fmt: skip
    assert made["state"] == "active" and made["armed"].startswith("{report}@")
    assert made["missed_policy"] == "skip" and made["payload"] == {"kind": "daily"}
    assert "Europe/Paris" in tw("schedules", "get", "report").output
    refused = tw("schedules", "create", "report", "--every", "1m", expect=7)
    assert "schedules update report" in refused.stderr  # a different spec: how to change it
    # the same create again (a script, the README tour, run a second time): it goes on,
    # as `schedule` does for a timer pending already; the payload differing is refused
    again = tw("--json", "schedules", "create", "report", "--cron", "0 2 * * *", "--tz",
               "Europe/Paris", "--payload", '{"kind": "daily"}', "--missed", "skip")  # fmt: skip
    assert as_json(again)["armed"] == made["armed"] and "Already there" in again.stderr
    tw("schedules", "create", "report", "--cron", "0 2 * * *", "--tz", "Europe/Paris",
       "--payload", '{"kind": "weekly"}', "--missed", "skip", expect=7)  # fmt: skip
    assert tw("schedules", "create", "x", "--every", "1m", "--cron", "* * * * *", expect=2)
    assert tw("schedules", "get", "nope", expect=6)
    listed = as_json(tw("--json", "schedules", "list"))
    assert [s["name"] for s in listed] == ["report"]
    assert as_json(tw("--json", "schedules", "pause", "report"))["state"] == "paused"
    assert as_json(tw("--json", "schedules", "resume", "report"))["armed"] == made["armed"]
    fast = as_json(tw("--json", "schedules", "update", "report", "--every", "1s"))
    assert fast["every_ms"] == 1000 and fast["armed"] != made["armed"]
    w = Worker(TimerClient.from_url(redis_server.url, namespace), WorkerSettings(worker_id="w"))
    try:
        fired: list[str] = []

        def one_fired() -> bool:
            w.run_once()
            fired.extend(o.id for o in w.client.all_outcomes())
            return any(i.startswith("{report}@") for i in fired)

        wait_for(one_fired, 20, "an occurrence fired")
        assert as_json(tw("--json", "schedules", "get", "report"))["fired"] >= 1
    finally:
        w.close()
        w.client.close()
    shot = as_json(tw("--json", "schedules", "trigger", "report"))
    assert shot["id"].startswith("{report}@") and shot["id"].endswith("-manual")
    assert tw("schedules", "trigger", "nope", expect=6)
    back = as_json(tw(
        "--json", "schedules", "backfill", "report", "--from", "2026-01-01T00:00:00Z",
        "--to", "2026-01-01T00:00:05Z",
    ))  # fmt: skip
    assert len(back["created"]) == 6 and back["already"] == [] and back["errors"] == []
    again = as_json(tw(
        "--json", "schedules", "backfill", "report", "--from", "2026-01-01T00:00:00Z",
        "--to", "2026-01-01T00:00:05Z",
    ))  # fmt: skip
    assert again["created"] == [] and len(again["already"]) == 6  # never twice
    assert "more than 1000" in tw(
        "schedules", "backfill", "report", "--from", "2026-01-01T00:00:00Z", "--to",
        "2026-01-02T00:00:00Z", expect=3,
    ).output  # fmt: skip
    assert tw("schedules", "delete", "report", "--yes").output.startswith("Deleted")
    assert tw("schedules", "delete", "report", "--yes", expect=6)
    assert "No schedules." in tw("schedules", "list").output


@pytest.mark.redis
def test_tz_with_every_is_kept_but_said_to_move_nothing(tw: Run) -> None:
    """`schedules create s6 --every 1d --tz America/New_York` said `when every 1d in
    America/New_York` and fired at UTC midnight: --tz is for --cron. It is still taken
    (a script that gives it works as it did), with one warning that it moves nothing,
    and no output shows the interval as counted in that zone."""
    tw("init", "--shards", "2")
    made = tw("schedules", "create", "s6", "--every", "1d", "--tz", "America/New_York")
    warned = [line for line in made.stderr.splitlines() if line.startswith("Warning:")]
    assert warned == [
        "Warning: --tz America/New_York applies to --cron schedules only: an --every "
        "schedule counts from its --start (else from 1970-01-01T00:00:00Z) in absolute "
        "time, whatever the zone"
    ], made.stderr
    shown = dict(line.split(None, 1) for line in made.stdout.splitlines()[2:] if " " in line)
    assert shown["when"].strip() == "every 1d in UTC", made.stdout
    assert "New_York" not in made.stdout, made.stdout  # nor its next as that zone's
    got = as_json(tw("--json", "schedules", "get", "s6"))
    assert got["next_ms"] % 86_400_000 == 0 and got["when"] == "every 1d in UTC", got
    assert got["tz"] == "America/New_York"  # kept as given: the record is unchanged
    assert "in America/New_York" not in tw("schedules", "list").output
    got_shown = tw("schedules", "get", "s6").output
    assert "every 1d in UTC" in got_shown and "New_York" not in got_shown, got_shown
    updated = tw("schedules", "update", "s6", "--every", "2d", "--tz", "Europe/Paris")
    assert "Warning: --tz Europe/Paris applies to --cron schedules only" in updated.stderr
    for quiet in (["--every", "1d"], ["--cron", "0 0 * * *", "--tz", "America/New_York"]):
        plain = tw("schedules", "create", f"q{len(quiet)}", *quiet)
        assert "Warning" not in plain.stderr, plain.stderr
    assert "in America/New_York" in tw("schedules", "get", "q4").output  # cron: it applies


@pytest.mark.redis
def test_an_end_already_past_is_said_to_never_fire(tw: Run) -> None:
    """`create st --every 1m --start 2020-… --end 2021-…` was taken without a word,
    though it can never fire: a warning says so (it is still taken, as before)."""
    tw("init", "--shards", "2")
    past = ["--every", "1m", "--start", "2020-01-01T00:00:00Z", "--end", "2021-01-01T00:00:00Z"]
    made = tw("schedules", "create", "st", *past)
    assert made.stderr.splitlines() == [
        "Warning: --end 2021-01-01T00:00:00.000Z is in the past, so schedule st never fires"
    ], made.stderr
    updated = tw("schedules", "update", "st", *past)
    assert "is in the past, so schedule st never fires" in updated.stderr, updated.stderr
    got = tw("schedules", "get", "st").stdout  # why it has no next: its end is shown
    assert "until" in got and "2021-01-01T00:00:00.000Z" in got, got
    assert "from" in got and "2020-01-01T00:00:00.000Z" in got, got
    later = tw("schedules", "create", "ok", "--every", "1m", "--end", "2999-01-01T00:00:00Z")
    assert "Warning" not in later.stderr, later.stderr


@pytest.mark.redis
@pytest.mark.parametrize(
    ("args", "says", "python"),
    [
        (["--every", "1h", "--overlap", "skip"],
         "--overlap skip waits for a handler group: give --group NAME",
         'overlap="skip" waits for a handler group: give group="<name>"'),
        (["--cron", "0 8 * * *", "--offset", "5s"],
         "--offset is for --every schedules; shift the cron fields",
         'offset is for every="…" schedules; shift the cron fields'),
    ],
)  # fmt: skip
def test_a_schedule_error_names_the_flags_under_the_cli(
    tw: Run, args: list[str], says: str, python: str
) -> None:
    """`schedules create s --every 1h --overlap skip` said `overlap="skip" waits for a
    handler group: give group='<its name>'` (Python's names); `--cron … --offset 5s`
    `offset is for every='…' schedules`. Under the CLI they name the flags; the library
    keeps its own words for Python; --json says the same, with nothing escaped."""
    tw("init", "--shards", "2")
    refused = tw("schedules", "create", "s", *args, expect=3)
    assert refused.stderr.strip() == f"Error: {says}", refused.stderr
    as_data = tw("--json", "schedules", "create", "s", *args, expect=3)
    assert json.loads(as_data.stderr)["error"] == says and "\\u" not in as_data.stderr
    if "--cron" in args:
        code, out = preview(*args)
        assert code == 3 and says in out, out
    spec = dict(zip(args[::2], args[1::2], strict=True))
    with pytest.raises(InvalidInput) as error:
        ScheduleSpec.of(**{k.removeprefix("--"): v for k, v in spec.items()})
    assert str(error.value) == python


@pytest.mark.redis
def test_a_schedule_refusal_writes_its_times_as_times(tw: Run) -> None:
    """A first occurrence more than ten years ahead, a --start before 1970 and a backfill
    range too long were refused naming the times in epoch ms ("deadline 2208988800000",
    "got -315619200000", "between 1577836800000 and 1796302397706": trial); they are UTC
    times to the millisecond, as --start and --from take them."""
    tw("init", "--shards", "2")
    tw("schedules", "create", "near", "--every", "1s")
    later = ["--every", "1d", "--start", "2040-01-01T00:00:00Z"]
    for command in (["create", "far"], ["update", "near"]):
        far = tw("schedules", *command, *later, expect=3).stderr
        assert far.startswith(
            "Error: the first occurrence: deadline 2040-01-01T00:00:00.000Z is more than"
        ), far
        assert "2208988800000" not in far
    early = ["--every", "1d", "--start", "1960-01-01T00:00:00Z"]
    old = tw("schedules", "create", "old", *early, expect=3).stderr
    assert old.strip() == (
        "Error: --start must be a time from 1970-01-01T00:00:00.000Z to "
        "9999-12-31T23:59:59.000Z (epoch ms 0 to 253402300799000, or an aware datetime), "
        "got 1960-01-01T00:00:00.000Z"
    )
    span = ["--from", "2020-01-01T00:00:00Z", "--to", "2030-01-01T00:00:00Z", "--limit", "5"]
    many = tw("schedules", "backfill", "near", *span, expect=3).stderr
    assert many.startswith(
        "Error: more than 5 occurrences between 2020-01-01T00:00:00.000Z and 20"
    ), many
    assert "1577836800000" not in many and re.search(r"and \d{4}-\d\d-\d\dT[\d:.]+Z:", many)
    span[1] = "1960-01-01T00:00:00Z"
    before = tw("schedules", "backfill", "near", *span, expect=3).stderr
    assert before.strip() == (
        "Error: --from must be 1970-01-01T00:00:00.000Z (epoch ms 0) or later, "
        "got 1960-01-01T00:00:00.000Z"
    )


@pytest.mark.redis
def test_neither_or_both_of_cron_and_every_is_a_usage_error_as_for_schedule(tw: Run) -> None:
    """`schedules create nightly` with neither --cron nor --every exited 3 (the library's
    invalid input), where `schedule x` with neither --in nor --at exits 2 (usage): a
    missing option is the command line's mistake, exit 2 with the usage, in create,
    update and preview alike, writing nothing."""
    tw("init", "--shards", "2")
    for args in ([], ["--cron", "0 2 * * *", "--every", "5s"]):
        for command in (["create", "s"], ["update", "s"]):
            refused = tw("schedules", *command, *args, expect=2)
            assert "give exactly one of --cron EXPR or --every DURATION" in refused.stderr
            assert f"schedules {command[0]} [OPTIONS] NAME" in refused.stderr, refused.stderr
        code, out = preview(*args)
        assert code == 2 and "give exactly one of --cron" in out, out
    assert tw("--json", "schedules", "list").output.strip() == "[]"  # nothing was created
    as_data = json.loads(tw("--json", "schedules", "create", "s", expect=2).stderr)
    assert (as_data["kind"], as_data["exit_code"]) == ("UsageError", 2), as_data
