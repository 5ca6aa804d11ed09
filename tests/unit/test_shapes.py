"""One JSON shape per value (timer/shapes.py, #41): each function gives what its
schema says for any value, and every door answers with the same function — the HTTP
API, the dashboard, the CLI's --json and a webhook body agree for one outcome."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from timer.durable.model.models import (
    ConsumerInfo,
    DeadLetter,
    GroupInfo,
    Outcome,
    Timer,
    TimerInfo,
)
from timer.durable.schedules.records import ScheduleInfo, ScheduleSpec
from timer.shapes import (
    SCHEMAS,
    dead_letter_json,
    group_json,
    outcome_json,
    schedule_json,
    timer_info_json,
    timer_json,
)

ROOT = {"components": {"schemas": SCHEMAS}}


def check(name: str, value: dict[str, Any]) -> None:
    """``value`` matches the named component, and survives a round trip through JSON."""
    validator = jsonschema.Draft202012Validator({**ROOT, "$ref": f"#/components/schemas/{name}"})
    problems = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(value)
    ]
    assert not problems, problems
    assert json.loads(json.dumps(value)) == value


ms = st.integers(0, 2**53 - 1)
maybe_ms = st.none() | ms
text = st.text(max_size=12)
payloads = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | text | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
STATES = ["pending", "expired", "cancelled", "completed"]

timers = st.builds(
    Timer, text, st.integers(0, 255), ms, st.sampled_from(STATES), st.booleans(), text
)
infos = st.builds(
    TimerInfo, text, st.integers(0, 255), st.sampled_from(STATES), ms, payloads, maybe_ms, maybe_ms,
    st.lists(text, max_size=3).map(tuple), st.integers(1, 3), st.lists(text, max_size=3).map(tuple),
    st.none() | text,
)  # fmt: skip
outcomes = st.builds(
    Outcome, text, st.sampled_from(STATES[1:]), ms, ms, payloads, st.integers(0, 255),
    entry_id=st.none() | st.just("1700000000000-0"), attempt=st.integers(1, 9),
    traceparent=st.none() | text, created_ms=maybe_ms,
)  # fmt: skip
dead = st.builds(
    DeadLetter, text, st.integers(0, 255), text, text, text, st.integers(1, 9), text, ms,
    st.none() | outcomes,
)  # fmt: skip
groups = st.builds(
    GroupInfo, text, st.lists(st.builds(ConsumerInfo, text, st.integers(0, 9), ms), max_size=2)
    .map(tuple), st.integers(0, 9), st.integers(0, 9), st.none() | st.integers(0, 9), maybe_ms,
    maybe_ms, st.integers(1, 16),
)  # fmt: skip
specs = st.sampled_from(
    [
        ScheduleSpec.of(every="30s"),
        ScheduleSpec.of(cron="0 9 * * 1-5", tz="Europe/Paris"),
        ScheduleSpec.of(every=60_000, overlap="skip", group="g", missed="all", catch_up="2h"),
    ]
)
schedules = st.builds(
    ScheduleInfo, text, specs, st.sampled_from(["active", "paused"]), st.none() | text, maybe_ms,
    st.integers(0, 9), st.integers(0, 9), maybe_ms, ms, st.integers(1, 9), payloads,
    st.lists(text, max_size=2).map(tuple), st.integers(0, 255), st.integers(0, 9),
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(t=timers, i=infos, o=outcomes, d=dead, g=groups, s=schedules)
def test_each_shape_is_its_schema(
    *, t: Timer, i: TimerInfo, o: Outcome, d: DeadLetter, g: GroupInfo, s: ScheduleInfo
) -> None:
    check("Timer", timer_json(t))
    check("TimerInfo", timer_info_json(i))
    check("Outcome", outcome_json(o))
    check("DeadLetter", dead_letter_json(d))
    check("GroupInfo", group_json(g))
    check("ScheduleInfo", schedule_json(s))
    assert ("ref" in outcome_json(o)) == (o.entry_id is not None)


def test_a_schema_refuses_a_field_left_out_or_added() -> None:
    """The check above can fail: the schemas require every field and allow no other."""
    shape = timer_json(Timer("a", 1, 5))
    for broken in ({k: v for k, v in shape.items() if k != "origin"}, {**shape, "extra": 1}):
        validator = jsonschema.Draft202012Validator({**ROOT, "$ref": "#/components/schemas/Timer"})
        assert not validator.is_valid(broken)
