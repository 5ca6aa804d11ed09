"""A timer's fields are declared once (timer/durable/model/fields.py, #41): every door that
takes a timer is checked against the declaration here, so a field added there and
missed at a door fails a test."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_type_hints

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from timer import TimerClient
from timer.aio import AsyncTimerClient
from timer.cli.declared import DeclaredArgs
from timer.cli.main import main
from timer.cli.one_timer_cmd import schedule as schedule_command
from timer.durable.model import codec
from timer.durable.model.fields import (
    FIELDS,
    FIRST_STORED,
    KEPT_OUTCOME,
    KEPT_PENDING,
    NO_DEFAULT,
    STORED,
    ScheduleOptions,
    TimerOptions,
    TimerSpec,
    json_schemas,
    table,
)
from timer.durable.model.keys import NamespaceKeys
from timer.durable.model.models import ClientSettings, Meta, Outcome, TimerInfo
from timer.durable.model.namespace import Namespace
from timer.durable.schedules.ops import put
from timer.durable.schedules.records import ScheduleSpec
from timer.durable.schedules.recurrence import Recurrence
from timer.durable.timers.items import CHECKS, schedule_item
from timer.httpapi.spec import ENDPOINTS
from timer.schedules import AsyncSchedules, Schedules

ROOT = Path(__file__).resolve().parents[2]
NS = Namespace(NamespaceKeys("t"), Meta(4, 100, 5), ClientSettings())


@pytest.mark.parametrize("client", [TimerClient, AsyncTimerClient])
def test_schedule_takes_the_declared_options(client: type[Any]) -> None:
    """Both clients' ``schedule`` take the id and the time by name and every other field
    as ``**options: Unpack[TimerOptions]`` (so mypy checks each call against it)."""
    params = inspect.signature(client.schedule).parameters
    assert list(params) == ["self", "timer_id", "delay_ms", "deadline_ms", "options"]
    assert params["options"].kind is inspect.Parameter.VAR_KEYWORD
    hints = get_type_hints(client.schedule)
    assert hints["options"].__origin__ is not None  # Unpack[...]
    assert hints["options"].__args__ == (TimerOptions,)
    assert set(get_type_hints(TimerOptions)) | {"id", "delay_ms", "deadline_ms"} == set(FIELDS)


def test_every_stored_field_has_a_check_and_a_slot_of_its_own() -> None:
    slots = [slot for slot, _ in STORED]
    assert slots == list(range(FIRST_STORED, FIRST_STORED + len(slots)))
    assert set(CHECKS) == {name for _, name in STORED}
    assert {f.slot for f in FIELDS.values() if f.slot is not None} == {0, 3, *slots}


def test_the_http_schema_is_the_declaration() -> None:
    schedule = next(e for e in ENDPOINTS if e.name == "scheduleTimer")
    assert schedule.body is not None
    assert dict(schedule.body["properties"]) == json_schemas()
    required = [n for n, f in FIELDS.items() if f.default is NO_DEFAULT]
    assert schedule.body["required"] == required


def test_the_cli_options_are_the_declared_ones() -> None:
    """``tickwheel schedule`` has an option for each field that names one, and each of its
    options (but the output's) sets a declared field."""
    options = {opt: p.name for p in schedule_command.params for opt in getattr(p, "opts", ())}
    declared = {f.cli: name for name, f in FIELDS.items() if f.cli}
    for flag, name in declared.items():
        assert flag in options, f"tickwheel schedule has no {flag} for field {name}"
        assert options[flag] == name
    everywhere = {o for p in main.params for o in p.opts}  # global options, after any command
    own = {p.name for p in schedule_command.params if not set(p.opts) & everywhere}
    assert own == {"timer_id", *declared.values()}
    # the callback's typed options are the declared fields given by declared_options
    by_hand = {"timer_id", "delay_ms", "deadline_ms", "payload", "watch"}
    assert set(DeclaredArgs.__annotations__) == own - by_hand


def test_the_docs_table_is_the_declarations_own() -> None:
    page = (ROOT / "docs" / "data-model.md").read_text()
    found = re.search(r"<!-- fields:begin -->\n(.*?)\n<!-- fields:end -->", page, re.S)
    assert found is not None, "docs/data-model.md lost its fields table markers"
    assert found.group(1) == table(), "run python -m timer.durable.model.fields and paste its table"


def _full(spec: dict[str, Any]) -> list[Any]:
    """A spec's slots with every default the script assumes filled in."""
    packed = list(schedule_item(NS, spec).spec)
    stored = [FIELDS[name].stored for _, name in STORED]
    return [*packed, *stored[len(packed) - FIRST_STORED :]]


OPTIONAL = {
    "payload": st.none() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=5),
    "need": st.just(1),
    "rearm": st.booleans(),
    "watch": st.lists(st.sampled_from(["job:{7}:a", "job:{7}:b"]), max_size=2),
    "traceparent": st.none() | st.just("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    "callback_url": st.none() | st.just("https://example.com/hook"),
    "note": st.none() | st.text(max_size=5),
    "max_total_ms": st.none() | st.integers(1, 10**9),
    "debounce": st.booleans(),
    "priority": st.integers(-100, 100),
}
options = st.fixed_dictionaries(
    {"id": st.just("job:{7}"), "delay_ms": st.integers(0, 10**6)}, optional=OPTIONAL
)


@settings(max_examples=200, deadline=None)
@given(options)
def test_a_spec_holds_each_field_in_its_declared_slot(spec: dict[str, Any]) -> None:
    """Each field given lands in its slot, a field left out (or at its default) reads as
    its stored default, and the spec ends at its last slot that is not a default."""
    full = _full(spec)
    assert full[0] == spec["id"] and full[1:3] == ["in", spec["delay_ms"]]
    assert {name for _, name in STORED} <= set(OPTIONAL)
    made: dict[str, Callable[[Any], Any]] = {
        "rearm": int,
        "debounce": int,
        "watch": lambda w: sorted(set(w)),
    }  # what the gate makes of them
    for slot, name in STORED:
        given = spec.get(name)
        stored = FIELDS[name].stored if given is None else made.get(name, lambda v: v)(given)
        assert full[slot] == stored, name
    sent = schedule_item(NS, spec).spec
    if len(sent) > FIRST_STORED:
        last = STORED[len(sent) - 1 - FIRST_STORED][1]
        assert sent[-1] != FIELDS[last].stored, f"the spec ends with {last}'s default"


def test_the_spec_type_is_what_schedule_many_takes() -> None:
    """``schedule_many``'s items are typed as the declaration (``TimerSpec``)."""
    for client in (TimerClient, AsyncTimerClient):
        assert "TimerSpec" in str(get_type_hints(client.schedule_many)["items"])
    assert set(get_type_hints(TimerSpec)) == set(FIELDS)


def _keywords(function: Any) -> set[str]:
    return {
        n for n, p in inspect.signature(function).parameters.items() if p.kind is p.KEYWORD_ONLY
    }


def test_a_schedules_spec_is_declared_once() -> None:
    """``create``/``update``, sync and asyncio, take ``**spec: Unpack[ScheduleOptions]``,
    and the declaration names exactly what the gate checks (``put``'s own keywords, the
    spec's and the recurrence's)."""
    for method in (
        Schedules.create,
        Schedules.update,
        AsyncSchedules.create,
        AsyncSchedules.update,
    ):
        assert get_type_hints(method)["spec"].__args__ == (ScheduleOptions,), method
    checked = (
        _keywords(put) - {"mode"} | _keywords(ScheduleSpec.of) - {"when"} | _keywords(Recurrence.of)
    )
    assert set(get_type_hints(ScheduleOptions)) == checked


def _lua_names(lua: str, first: str) -> tuple[dict[str, int], int]:
    """The named places ``local FIRST, ... = 1, ...`` (over lines) of a script: name ->
    number, and where the declaration ends."""
    found = re.search(rf"^local ({first}, [A-Z_,\s]+?) =\s*([0-9,\s]+)$", lua, re.M)
    assert found is not None, f"no named places starting {first}"
    names = [n.strip() for n in found.group(1).split(",")]
    places = [int(v) for v in found.group(2).split(",")]
    return dict(zip(names, places, strict=True)), found.end()


def test_schedule_lua_names_the_declared_slots() -> None:
    """``schedule.lua`` reads a timer's spec by name, each field as its name in capitals,
    and its names sit at the slots the declaration gives (Lua's index is the slot + 1)."""
    lua = (ROOT / "timer" / "durable" / "model" / "lua" / "schedule.lua").read_text()
    lua_slot, end = _lua_names(lua, "ID")
    slotted = {n.upper(): f.slot + 1 for n, f in FIELDS.items() if f.slot is not None}
    assert {k: v for k, v in lua_slot.items() if k not in ("MODE", "VALUE")} == slotted
    assert {lua_slot["MODE"], lua_slot["VALUE"]} == {2, 3}  # delay_ms/deadline_ms, as mode, value
    assert not re.search(r"\bt\[\d\]", lua[end:]), "a timer's slot read by number"


@pytest.mark.parametrize("record, prefix", [("pending", "R"), ("outcome", "O")])
def test_records_lua_names_the_declared_places(record: str, prefix: str) -> None:
    """``include/records.lua`` names each place of a pending record (``R_``) and of a
    retained outcome (``O_``) as ``codec`` reads it, and a declared field's place is the
    one its ``Field`` gives; nothing there reads a record by number."""
    lua = (ROOT / "timer" / "durable" / "model" / "lua" / "include" / "records.lua").read_text()
    first = {"R": "R_DEADLINE_MS", "O": "O_OUTCOME"}[prefix]
    places, end = _lua_names(lua, first)
    names = codec._PENDING if record == "pending" else codec._OUTCOME
    assert places == {f"{prefix}_{n.upper()}": i for i, n in enumerate(names, 1)}
    for name, f in FIELDS.items():
        place = getattr(f, record)
        if place is not None:
            assert places[f"{prefix}_{name.upper()}"] == place, name
    body = lua[end:]
    assert not re.search(r"\b[ra]\[\d+\]", body), "a record's place read by number"


@pytest.mark.parametrize("model, kept", [(TimerInfo, KEPT_PENDING), (Outcome, KEPT_OUTCOME)])
def test_the_models_carry_the_kept_fields(model: type[Any], kept: tuple[str, ...]) -> None:
    """Each declared field a record keeps is an attribute of the model read from it
    (``TimerInfo`` from a pending record, ``Outcome`` from an outcome), with the field's
    default: adding one is a line there, and this test says which."""
    attrs = {f.name: f.default for f in dataclasses.fields(model)}
    for name in kept:
        assert name in attrs, f"{model.__name__} has no attribute {name} (declared as kept)"
        assert attrs[name] == FIELDS[name].default or (
            attrs[name] is dataclasses.MISSING and FIELDS[name].default == ()
        ), name
    assert set(KEPT_OUTCOME) <= set(KEPT_PENDING)  # an outcome keeps what its timer had


def test_schedule_records_are_read_by_name_in_lua() -> None:
    """Every script that touches a schedule record reads its places by name (#41), the
    names numbered 1 to 14 in the record's order (``decode_schedule``'s
    ``v, on, armed, fired, missed, last, spec, payload, watch, created``, then the
    overlap's four)."""
    lua = ROOT / "timer" / "durable" / "model" / "lua"
    include = (lua / "include" / "schedules.lua").read_text()
    found = re.findall(r"^local (S_[A-Z_, ]+) =\s*([0-9, \n]+)$", include, re.M)
    names = [n.strip() for group, _ in found for n in group.split(",") if n.strip()]
    places = [int(v) for _, numbers in found for v in numbers.replace("\n", " ").split(",")]
    assert places == list(range(1, 15)), places
    assert names[:10] == ["S_VERSION", "S_ON", "S_ARMED", "S_FIRED", "S_MISSED", "S_LAST",
                          "S_SPEC", "S_PAYLOAD", "S_WATCH", "S_CREATED"]  # fmt: skip
    for script in ("include/schedules.lua", "arm.lua", "put_schedule.lua", "stop_schedule.lua"):
        text = (lua / script).read_text()
        assert not re.search(r"\bs\[\d+\]", text), f"{script} reads a schedule's place by number"
