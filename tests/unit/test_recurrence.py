"""When recurring occurrences fall (#29): DST, month ends, leap days, intervals, jitter.

Every expected instant is written by hand (UTC), from the published transitions:
Europe/Paris springs forward on 2026-03-29 at 01:00Z (02:00 CET -> 03:00 CEST) and falls
back on 2026-10-25 at 01:00Z (03:00 CEST -> 02:00 CET); America/New_York springs on
2026-03-08 at 07:00Z (02:00 EST -> 03:00 EDT) and falls back on 2026-11-01 at 06:00Z
(02:00 EDT -> 01:00 EST).
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timer import InvalidInput
from timer.durable.model.keys import shard_of
from timer.durable.schedules.records import MISSED, Plan, ScheduleSpec, plan_next
from timer.durable.schedules.recurrence import Recurrence, occurrence_id


def ms(text: str) -> int:
    """Epoch ms of an ISO instant written in UTC (``2026-03-29T01:00``)."""
    return round(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def upcoming(r: Recurrence, after: str, count: int) -> list[int]:
    return r.preview(ms(after), count)


def test_a_time_in_the_spring_gap_fires_once_at_the_first_minute_after_the_jump() -> None:
    paris = Recurrence.of(cron="30 2 * * *", tz="Europe/Paris")
    assert upcoming(paris, "2026-03-27T12:00", 3) == [
        ms("2026-03-28T01:30"),  # 02:30 CET
        ms("2026-03-29T01:00"),  # 02:30 does not exist: 03:00 CEST
        ms("2026-03-30T00:30"),  # 02:30 CEST
    ]
    new_york = Recurrence.of(cron="0 2 * * *", tz="America/New_York")
    assert upcoming(new_york, "2026-03-07T12:00", 2) == [
        ms("2026-03-08T07:00"),  # 02:00 does not exist: 03:00 EDT
        ms("2026-03-09T06:00"),  # 02:00 EDT
    ]


def test_a_time_in_the_autumn_repeat_fires_once_at_its_first_instant() -> None:
    paris = Recurrence.of(cron="30 2 * * *", tz="Europe/Paris")
    assert upcoming(paris, "2026-10-24T12:00", 2) == [
        ms("2026-10-25T00:30"),  # the first 02:30 (CEST); not again at 01:30Z (CET)
        ms("2026-10-26T01:30"),  # 02:30 CET
    ]
    new_york = Recurrence.of(cron="30 1 * * *", tz="America/New_York")
    assert upcoming(new_york, "2026-10-31T12:00", 2) == [
        ms("2026-11-01T05:30"),  # the first 01:30 (EDT); not again at 06:30Z (EST)
        ms("2026-11-02T06:30"),  # 01:30 EST
    ]


def test_every_minute_across_both_transitions() -> None:
    paris = Recurrence.of(cron="* * * * *", tz="Europe/Paris")
    # Spring: 01:59 CET, then the whole skipped hour once at 03:00 CEST, then on.
    assert upcoming(paris, "2026-03-29T00:58:30", 3) == [
        ms("2026-03-29T00:59"),
        ms("2026-03-29T01:00"),
        ms("2026-03-29T01:01"),
    ]
    # Autumn: 02:59 CEST, then the repeated wall times are skipped: 03:00 CET is next.
    assert upcoming(paris, "2026-10-25T00:58:30", 2) == [
        ms("2026-10-25T00:59"),
        ms("2026-10-25T02:00"),
    ]
    # Asked from inside the repeat (02:10 CET, the second time), it goes on from 03:00 CET.
    assert upcoming(paris, "2026-10-25T01:10", 1) == [ms("2026-10-25T02:00")]


def test_month_ends_last_days_and_leap_days() -> None:
    assert upcoming(Recurrence.of(cron="0 0 31 * *"), "2026-01-31T00:00", 2) == [
        ms("2026-03-31T00:00"),
        ms("2026-05-31T00:00"),  # no 31st in Feb or April
    ]
    assert upcoming(Recurrence.of(cron="0 12 L * *"), "2026-02-01T00:00", 2) == [
        ms("2026-02-28T12:00"),
        ms("2026-03-31T12:00"),
    ]
    assert upcoming(Recurrence.of(cron="0 9 29 2 *"), "2026-01-01T00:00", 2) == [
        ms("2028-02-29T09:00"),
        ms("2032-02-29T09:00"),
    ]
    weekdays = Recurrence.of(cron="0 8 * * MON-FRI", tz="Europe/Paris")
    assert upcoming(weekdays, "2026-11-27T12:00", 2) == [  # a Friday noon: next is Monday
        ms("2026-11-30T07:00"),
        ms("2026-12-01T07:00"),
    ]
    assert upcoming(Recurrence.of(cron="15 0 0 * * *"), "2026-01-01T00:00", 1) == [
        ms("2026-01-01T00:00:15")  # six fields: the seconds first
    ]


def test_intervals_are_absolute_time_with_an_offset_a_start_and_an_end() -> None:
    every = Recurrence.of(every="30s")
    assert every.preview(1_000, 3) == [30_000, 60_000, 90_000]
    assert every.next_after(30_000) == 60_000  # strictly after
    shifted = Recurrence.of(every="30s", offset="5s")
    assert shifted.preview(1_000, 2) == [5_000, 35_000]
    started = Recurrence.of(every=60_000, start=1_000_500, end=1_120_500)
    assert started.preview(0, 5) == [1_000_500, 1_060_500, 1_120_500]
    assert started.next_after(1_120_500) is None
    hourly = Recurrence.of(every="1h", tz="Europe/Paris")  # DST does not move it
    assert upcoming(hourly, "2026-10-25T00:10", 3) == [
        ms("2026-10-25T01:00"),
        ms("2026-10-25T02:00"),
        ms("2026-10-25T03:00"),
    ]
    assert Recurrence.of(cron="0 * * * *", start=ms("2026-05-01T10:30")).next_after(0) == ms(
        "2026-05-01T11:00"
    )


def test_jitter_delays_within_its_bound_and_is_the_same_every_time() -> None:
    r = Recurrence.of(every="10s", jitter="2s")
    delays = [r.deadline("s", n) - n for n in r.preview(0, 500)]
    assert all(0 <= d <= 2_000 for d in delays)
    assert len(set(delays)) > 100  # spread, not one fixed delay
    assert [r.deadline("s", n) for n in r.preview(0, 50)] == [
        r.deadline("s", n) for n in r.preview(0, 50)
    ]
    assert r.deadline("a", 10_000) != r.deadline("b", 10_000) or r.deadline(
        "a", 20_000
    ) != r.deadline("b", 20_000)
    assert Recurrence.of(every="10s").deadline("s", 10_000) == 10_000


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({}, "exactly one of"),
        ({"cron": "* * * * *", "every": "1m"}, "exactly one of"),
        ({"cron": "61 * * * *"}, "not valid"),
        ({"cron": "* * *"}, "not valid"),
        ({"cron": 5}, "cron must be"),
        ({"every": "soon"}, "not a duration"),
        ({"every": 999}, r"every must be at least 1s \(got 999ms\)"),
        ({"every": True}, 'must be whole milliseconds or a duration such as "30s", got true'),
        ({"every": 1.5}, "must be whole milliseconds .*, got 1.5"),
        ({"every": -5}, r"at least 1s \(got -5ms\)"),
        ({"every": "1m", "offset": "1m"}, "shorter than every"),
        ({"every": "1m", "jitter": "1m"}, "shorter than every"),
        ({"cron": "* * * * *", "offset": "1s"}, "offset is for every"),
        ({"every": "1m", "tz": "Mars/Olympus"}, 'no time zone "Mars/Olympus": give an IANA'),
        ({"cron": "0 8 * * *", "tz": "europe/paris"}, 'did you mean "Europe/Paris"\\?'),
        ({"cron": "0 8 * * *", "tz": "Europe/Pari"}, 'did you mean "Europe/Paris"\\?'),
        ({"every": "1m", "tz": ""}, "IANA"),
        ({"every": "1m", "start": 10, "end": 5}, "end is before start"),
        (
            {"every": "1m", "start": -1},
            r"start must be a time from 1970-01-01T00:00:00\.000Z "
            r"to 9999-12-31T23:59:59\.000Z \(epoch ms 0 to 253402300799000, or an aware "
            r"datetime\), got 1969-12-31T23:59:59\.999Z",
        ),
        ({"every": "1m", "start": datetime(2026, 1, 1)}, "aware datetime"),
        ({"every": "1m", "jitter": "2d"}, r"jitter must be at most 1d \(got 2d\)"),
    ],
)
def test_a_bad_spec_says_what_to_write(options: dict[str, object], says: str) -> None:
    with pytest.raises(InvalidInput, match=says):
        Recurrence.of(**options)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"every": "30s", "foo": 1}, r'unknown field "foo": a schedule takes cron, every'),
        ({"every": "30s", "jiter": "1s"}, r'"jiter": a schedule takes .*; did you mean "jitter"\?'),
        ({"every": "30s", "catchup": "1h"}, r'did you mean "catch_up"\?'),
    ],
)
def test_a_field_a_schedule_does_not_take_is_named(options: dict[str, Any], says: str) -> None:
    """`schedules.create("z", every="30s", foo=1)` was a TypeError naming Recurrence.of()."""
    with pytest.raises(InvalidInput, match=says):
        ScheduleSpec.of(**options)


def test_occurrences_of_a_schedule_share_its_shard() -> None:
    assert occurrence_id("nightly", 5) == "{nightly}@5"
    for name in ("nightly", "billing:nightly", "a b"):
        shards = {shard_of(occurrence_id(name, n), 16) for n in range(0, 10**6, 7919)}
        assert len(shards) == 1


ZONES = st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe"])
CRONS = st.sampled_from(["* * * * *", "30 2 * * *", "*/7 1-3 * * *", "0 0 L * *", "5 4 * * SUN"])


@given(cron=CRONS, tz=ZONES, after=st.integers(ms("2026-01-01T00:00"), ms("2027-01-01T00:00")))
def test_cron_occurrences_only_move_forward(cron: str, tz: str, after: int) -> None:
    """Each occurrence is after the one before, never the same instant twice; and it
    is what ``next_after`` gives from any instant between the two."""
    r = Recurrence.of(cron=cron, tz=tz)
    seen = r.preview(after, 6)
    assert seen == sorted(set(seen)) and seen[0] > after
    for a, b in itertools.pairwise(seen):
        assert r.next_after((a + b) // 2) == b


anything = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=20),
    st.sampled_from(["30s", "1h", "0", "* * * * *", "0 8 * * MON-FRI", "Europe/Paris", "UTC"]),
    st.datetimes(), st.lists(st.integers(), max_size=2),
)  # fmt: skip


@given(
    cron=st.one_of(st.none(), anything), every=st.one_of(st.none(), anything),
    offset=anything, tz=anything, start=anything, end=anything, jitter=anything,
)  # fmt: skip
def test_any_spec_is_built_or_refused_with_invalid_input(  # noqa: PLR0917 - one per field
    cron: object, every: object, offset: object, tz: object, start: object, end: object,
    jitter: object,
) -> None:  # fmt: skip
    """Whatever is passed, Recurrence.of returns a spec that can say its next occurrence,
    or raises InvalidInput: never another error."""
    try:
        r = Recurrence.of(
            cron=cron, every=every, offset=offset, tz=tz, start=start, end=end, jitter=jitter
        )
    except InvalidInput:
        return
    nxt = r.next_after(ms("2026-01-01T00:00"))
    assert nxt is None or nxt > ms("2026-01-01T00:00")


# -- a schedule's spec as stored, and the leader's plans (timer.durable.schedules.records) ---------


@given(
    every=st.integers(1000, 10**9), offset=st.integers(0, 999), jitter=st.integers(0, 999),
    tz=st.sampled_from(["UTC", "Europe/Paris"]), missed=st.sampled_from(MISSED),
    catch_up=st.integers(0, 10**8), start=st.one_of(st.none(), st.integers(0, 10**13)),
)  # fmt: skip
def test_a_spec_reads_back_as_it_was_stored(  # noqa: PLR0917 - one per field
    every: int, offset: int, jitter: int, tz: str, missed: str, catch_up: int, start: int | None
) -> None:
    spec = ScheduleSpec.of(
        every=every, offset=offset, jitter=jitter, tz=tz, missed=missed, catch_up=catch_up,
        start=start,
    )  # fmt: skip
    assert ScheduleSpec.decode(spec.encode()) == spec
    cron = ScheduleSpec.of(cron="0 8 * * MON-FRI", tz=tz, missed=missed)
    assert ScheduleSpec.decode(cron.encode()) == cron
    waits = ScheduleSpec.of(every=every, overlap="buffer-one", group="billing")
    assert ScheduleSpec.decode(waits.encode()) == waits


def test_a_plain_spec_takes_a_few_bytes() -> None:
    assert len(ScheduleSpec.of(every="1s").encode()) == 4  # [1000]
    assert len(ScheduleSpec.of(cron="0 2 * * *", tz="Europe/Paris").encode()) < 30


def test_overlap_needs_a_group() -> None:
    with pytest.raises(InvalidInput, match="waits for a handler group"):
        ScheduleSpec.of(every="1s", overlap="skip")
    with pytest.raises(InvalidInput, match="overlap must be one of"):
        ScheduleSpec.of(every="1s", overlap="queue", group="g")
    with pytest.raises(InvalidInput, match="consumer group"):
        ScheduleSpec.of(every="1s", overlap="skip", group="")


def plan(missed: str, fired: int, now: int) -> Plan:
    return plan_next("s", ScheduleSpec.of(every="1s", missed=missed, catch_up="10s"), fired, now)


def test_plans_follow_the_catch_up_policy() -> None:
    """Fired the occurrence of 5 s at 9.5 s: 6, 7, 8 and 9 s were missed meanwhile."""
    assert plan("latest", 5_000, 5_001) == Plan("{s}@6000", 6_000, 0)  # on time: the next
    assert plan("latest", 5_000, 9_500) == Plan("{s}@9000", 9_000, 3)  # 6, 7, 8 passed over
    assert plan("all", 5_000, 9_500) == Plan("{s}@6000", 6_000, 0)  # each, oldest first
    assert plan("skip", 5_000, 9_500) == Plan("{s}@10000", 10_000, 4)
    # Beyond the catch-up window (10 s): 6..29 s are older than 40 - 10 and never fire.
    assert plan("all", 5_000, 40_000) == Plan("{s}@30000", 30_000, 24)
    assert plan("latest", 5_000, 40_000) == Plan("{s}@40000", 40_000, 34)
    ended = ScheduleSpec.of(every="1s", end=5_500)
    assert plan_next("s", ended, 5_000, 5_001) == Plan("", 0, 0)
    jittered = ScheduleSpec.of(every="1s", jitter="500ms")
    nxt = plan_next("s", jittered, 5_000, 5_001)
    assert nxt.next_id == "{s}@6000" and 6_000 <= nxt.deadline <= 6_500


@pytest.mark.parametrize(
    "given", [{"cron": "every 1m"}, {"cron": " Every 1m "}, {"every": "every 1m"}]
)
def test_an_interval_typed_as_its_list_shows_it_is_that_interval(given: dict[str, str]) -> None:
    """`every 1m`, as a schedule's list reads (`every 10s in UTC`), is the interval 1m
    wherever a spec is taken: the dashboard's one field sends it as the cron, which said
    "cron 'every 1m' is not valid (Wrong number of fields)"."""
    assert Recurrence.of(**given) == Recurrence.of(every="1m")


def test_a_bad_cron_says_an_interval_is_written_as_a_duration() -> None:
    with pytest.raises(InvalidInput) as caught:
        Recurrence.of(cron="every other day")
    assert "write 5 fields" in str(caught.value)
    assert 'for an interval, write "every 30s" (--every 30s on' in str(caught.value)
    # the form it names is taken: the fix it gives works
    assert Recurrence.of(cron="every 30s") == Recurrence.of(every="30s")


@pytest.mark.parametrize(
    ("macro", "fields"), [("@daily", "0 0 * * *"), ("@HOURLY", "0 * * * *"), ("@reboot", None)]
)
def test_a_cron_macro_says_it_is_not_taken_and_gives_its_fields(
    macro: str, fields: str | None
) -> None:
    """`@daily` said only "(Wrong number of fields)"."""
    with pytest.raises(InvalidInput) as caught:
        Recurrence.of(cron=macro)
    said = str(caught.value)
    assert "macros such as @daily are not taken" in said and "Wrong number" not in said, said
    assert fields is None or said.endswith(f'write its 5 fields, "{fields}"'), said
    assert fields is not None or '@hourly "0 * * * *"' in said, said
    if fields is not None:
        assert Recurrence.of(cron=fields).cron == fields
