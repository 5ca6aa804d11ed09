"""A timer's fields, declared once.

:class:`TimerSpec` is the declaration: one key per field, its type, and a
:class:`Field` (default, limits as JSON Schema, place in the record, help) in the
annotation. From it come:

* the typed keyword arguments of ``schedule`` (sync and asyncio: ``**options:
  Unpack[TimerOptions]``, checked by mypy at every call) and the items of
  ``schedule_many`` (a ``TimerSpec`` each);
* the validation gate and the record sent to ``schedule.lua``
  (:func:`timer.durable.timers.items.schedule_item` walks :data:`FIELDS`);
* the HTTP API's JSON Schema of a timer, and so its OpenAPI document
  (:func:`json_schemas`);
* the help of the CLI's ``tickwheel schedule`` options that set a field;
* the field table of https://tickwheel.readthedocs.io/data-model/ (:func:`table`, ``python -m
  timer.durable.model.fields``; a test keeps the page current).

Adding an optional field is one key here, its check in :mod:`timer.durable.timers.items`,
and the Lua that stores it; https://tickwheel.readthedocs.io/design-notes/ walks through one. No I/O
here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Required, TypedDict, get_args, get_origin, get_type_hints

from .durations import TEN_YEARS_MS

MAX_ID_BYTES = 256
# Deadlines are epoch milliseconds. A script's Lua numbers are doubles, and msgpack
# writes 2**63 and above as unsigned integers that Lua's cmsgpack reads back negative
# (due at once: an early fire), so nothing past 2**53 - 1 is ever sent. The server then
# refuses a deadline further ahead than max_delay_ms from its own clock (TOOFAR).
MAX_DEADLINE_MS = 2**53 - 1
# Watch keys a timer may wait on: its record holds every one of them (256 bytes each at
# most), and a notify walks the index of each.
MAX_WATCH_KEYS = 256
MAX_URL_BYTES = 2048
MAX_NOTE_CHARS = 1000
# A timer's priority: a small range, so it is one byte in a record and an order, not a
# number to tune. 0 is the default; higher is first.
MIN_PRIORITY, MAX_PRIORITY = -100, 100

NO_DEFAULT: Any = object()  # a field that must be given (the id)


@dataclass(frozen=True)
class Field:
    """What a :class:`TimerSpec` key declares besides its type.

    ``slot``: its place in the timer's spec as ``schedule.lua`` takes it (0-based; the
    script's ``t[slot + 1]``), None for the fields the gate turns into others (``delay_ms``
    and ``deadline_ms`` become the mode and value of slots 1 and 2). ``stored``: what the
    slot holds for the default; a spec is cut after its last slot that is not (less to
    send and to decode). ``schema``: the JSON Schema of what the HTTP API accepts.
    ``cli``: the ``tickwheel schedule`` option that sets it, if any. ``pending`` and
    ``outcome``: its place (1-based, as Lua counts) in the pending record and in the
    retained outcome (``lua/include/records.lua``), None where that record does not keep
    it; a field the pending record keeps is an attribute of ``TimerInfo`` (shown by
    ``get``), one the outcome keeps also of ``Outcome``, each with ``default`` when the
    record holds ``stored``. ``shown``: whether the JSON shapes (``get --json``, the
    HTTP API) show it too. ``cli_help``: its ``--help`` text where ``help`` speaks of the
    library's names (fields in ms, exception classes) that the command does not use.
    """

    help: str
    schema: Mapping[str, Any]
    default: Any = None
    slot: int | None = None
    stored: Any = None
    cli: str | None = None
    pending: int | None = None
    outcome: int | None = None
    shown: bool = True  # in the JSON shapes (timer/shapes.py) as well
    cli_help: str | None = None


_ID_SCHEMA = {"type": "string", "minLength": 1, "maxLength": MAX_ID_BYTES}
MS_SCHEMA = {"type": "integer", "minimum": 0, "maximum": MAX_DEADLINE_MS}  # a time in ms
# a time from now: at most the longest delay a client takes by default (ten years)
DELAY_SCHEMA = {"type": "integer", "minimum": 0, "maximum": TEN_YEARS_MS}


class TimerOptions(TypedDict, total=False):
    """The optional fields of a timer: ``schedule(id, delay_ms, **options)``."""

    payload: Annotated[
        object,
        Field(
            "Any value (JSON over HTTP), delivered with the outcome.", {}, slot=3, cli="--payload"
        ),
    ]
    need: Annotated[
        int,
        Field(
            "How many distinct watch keys must be notified to complete it.",
            {"type": "integer", "minimum": 1, "maximum": MAX_WATCH_KEYS},
            default=1,
            slot=4,
            stored=1,
            cli="--need",
            pending=5,
        ),
    ]
    rearm: Annotated[
        bool,
        Field(
            "If the id already ended (its outcome retained), schedule it again as a new "
            "arming instead of answering with that outcome.",
            {"type": "boolean"},
            default=False,
            slot=5,
            stored=0,
            cli="--rearm",
        ),
    ]
    watch: Annotated[
        Iterable[str],
        Field(
            "Watch keys (the timer's hash tag): notifying enough of them completes it.",
            {"type": "array", "items": _ID_SCHEMA, "maxItems": MAX_WATCH_KEYS},
            default=(),
            slot=6,
            stored=[],
            cli="--watch",
            pending=6,
        ),
    ]
    traceparent: Annotated[
        str | None,
        Field(
            "A W3C trace context its fire and handler run continue.",
            {"type": "string"},
            slot=7,
            stored="",
            pending=8,
            outcome=8,
        ),
    ]
    callback_url: Annotated[
        str | None,
        Field(
            "POST the outcome here (tickwheel handle --callbacks, for hosts it allows).",
            {"type": "string", "maxLength": MAX_URL_BYTES},
            slot=8,
            stored="",
            pending=9,
            outcome=9,
            shown=False,  # its query may hold the receiver's token: not printed
        ),
    ]
    note: Annotated[
        str | None,
        Field(
            f"A line of text for people: shown by get, the HTTP API and the dashboard, kept "
            f"with its outcome (at most {MAX_NOTE_CHARS} characters).",
            {"type": "string", "maxLength": MAX_NOTE_CHARS},
            slot=9,
            stored="",
            cli="--note",
            pending=10,
            outcome=10,
        ),
    ]
    max_total_ms: Annotated[
        int | None,
        Field(
            "The cap: it never falls due after created + max_total_ms, whoever moves it. A "
            "first deadline past the cap is the cap; a heartbeat past it is refused and moves "
            "the timer to its cap (HeartbeatCapped); a reschedule past it is refused and "
            "moves nothing (Capped); a debounce window ends at it.",
            {"type": "integer", "minimum": 1, "maximum": MAX_DEADLINE_MS},
            slot=10,
            stored=0,
            cli="--max-total-ms",
            pending=11,
            cli_help="The cap: it never falls due later than this after it was first "
            "scheduled, whoever moves it. A first deadline past the cap is the cap; a "
            "heartbeat past it is refused (exit 13) and moves the timer to its cap; a "
            "reschedule past it is refused (exit 13) and moves nothing; a --debounce window "
            "ends at it.",
        ),
    ]
    debounce: Annotated[
        bool,
        Field(
            "Debounce: if the id is pending, this call moves its deadline later (to now + "
            "delay_ms, never past created + max_total_ms) and replaces its payload instead "
            "of answering that it exists; if it ended, a new window starts. One outcome a "
            "window, counting the calls it absorbed.",
            {"type": "boolean"},
            default=False,
            slot=11,
            stored=0,
            cli="--debounce",
            cli_help="Debounce: if the id is pending, this call moves its deadline later (to "
            "--in from now, never past its --max-total cap) and replaces its payload instead "
            "of answering that it exists; if it ended, a new window starts. One outcome a "
            "window, counting the calls it absorbed.",
        ),
    ]
    priority: Annotated[
        int,
        Field(
            f"Its order under a backlog, from {MIN_PRIORITY} to {MAX_PRIORITY}: "
            "when more timers are due than a worker fires at once, higher priorities fire "
            "first, and a handler runner starts the higher priorities it holds first.",
            {"type": "integer", "minimum": MIN_PRIORITY, "maximum": MAX_PRIORITY},
            default=0,
            slot=12,
            stored=0,
            cli="--priority",
            pending=13,
            outcome=12,
        ),
    ]


class TimerSpec(TimerOptions, total=False):
    """One timer as ``schedule_many`` takes it (and ``POST …/timers``): an ``id``, one of
    ``delay_ms`` and ``deadline_ms``, and any :class:`TimerOptions`."""

    id: Required[
        Annotated[
            str,
            Field(
                f"The timer's id (at most {MAX_ID_BYTES} UTF-8 bytes); give a timer and its watch "
                "keys the same {hash tag}.",
                _ID_SCHEMA,
                default=NO_DEFAULT,
                slot=0,
            ),
        ]
    ]
    delay_ms: Annotated[
        int | None,
        Field(
            "Fire this many ms from now (Redis time); at most ten years.", DELAY_SCHEMA, cli="--in"
        ),
    ]
    deadline_ms: Annotated[
        int | None,
        Field(
            "Fire at this epoch ms (Redis time); at most ten years ahead.", MS_SCHEMA, cli="--at"
        ),
    ]


class RecurrenceOptions(TypedDict, total=False):
    """When a schedule's occurrences fall (``Recurrence.of``): exactly one of ``cron``
    and ``every``; ``offset`` 0, ``tz`` UTC and ``jitter`` 0 by default."""

    cron: str | None
    every: int | str | None
    offset: int | str
    tz: str
    start: Any  # epoch ms or an aware datetime
    end: Any
    jitter: int | str


class ScheduleWhen(RecurrenceOptions, total=False):
    """A schedule's spec (``ScheduleSpec.of``): its recurrence and what it does after an
    outage (``missed`` latest, ``catch_up`` 1h, ``overlap`` allow by default)."""

    missed: str  # latest | all | skip
    catch_up: int | str
    overlap: str  # allow | skip | buffer-one
    group: str | None


class ScheduleOptions(ScheduleWhen, total=False):
    """A recurring schedule's spec: the keywords of ``Schedules.create`` and ``update``,
    sync and asyncio alike, with what each occurrence carries."""

    payload: object
    watch: Iterable[str]


def _declared() -> dict[str, Field]:
    hints = get_type_hints(TimerSpec, include_extras=True)
    out: dict[str, Field] = {}
    for name, hint in hints.items():
        annotated = get_args(hint)[0] if get_origin(hint) is Required else hint
        found = [m for m in getattr(annotated, "__metadata__", ()) if isinstance(m, Field)]
        if len(found) != 1:
            raise TypeError(f"TimerSpec.{name} must carry one Field in its Annotated type")
        out[name] = found[0]
    # the order a timer is written in: id, its time, then by record slot
    return dict(sorted(out.items(), key=lambda kv: 1 if kv[1].slot is None else kv[1].slot))


FIELDS: dict[str, Field] = _declared()  # every field, as a timer is written
NAMES = frozenset(FIELDS)
# The optional fields that have a slot of their own after the payload's, by slot.
STORED = sorted(((f.slot, name) for name, f in FIELDS.items() if f.slot is not None and f.slot > 3))
STORED_DEFAULTS = tuple(FIELDS[name].stored for _, name in STORED)
FIRST_STORED = STORED[0][0]  # the first slot after id, mode, value and payload
# The fields a pending record keeps (TimerInfo's attributes), and an outcome (Outcome's).
KEPT_PENDING = tuple(name for name, f in FIELDS.items() if f.pending is not None)
KEPT_OUTCOME = tuple(name for name, f in FIELDS.items() if f.outcome is not None)


def as_given(names: Iterable[str], record: Mapping[str, Any]) -> dict[str, Any]:
    """The declared fields ``names`` of a decoded record as the API shows them: the
    field's default where the record holds its stored default, a list as a tuple."""
    out: dict[str, Any] = {}
    for name in names:
        value, f = record[name], FIELDS[name]
        out[name] = (
            f.default if value == f.stored else tuple(value) if type(value) is list else value
        )
    return out


def json_schemas() -> dict[str, dict[str, Any]]:
    """Each field's JSON Schema with its help as the description (the HTTP API's), and
    its default where it has one. A help never says the default itself: each place that
    shows a field says it its own way (``default`` here, ``[default: 1]`` in ``tickwheel
    schedule --help``, a column of the data model's table), and twice read as a fault."""
    return {
        name: {**f.schema, **_json_default(f.default), "description": f.help}
        for name, f in FIELDS.items()
    }


def _json_default(default: Any) -> dict[str, Any]:
    if default is None or default is NO_DEFAULT:
        return {}
    return {"default": list(default) if isinstance(default, tuple) else default}


def table() -> str:
    """The fields as a Markdown table (https://tickwheel.readthedocs.io/data-model/)."""
    hints = get_type_hints(TimerSpec)
    rows = [
        "| field | type | default | spec slot | kept at (pending, outcome) | CLI | what |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, f in FIELDS.items():
        kind = _type_name(hints[name]).replace("|", "\\|")
        default = "required" if f.default is NO_DEFAULT else repr(f.default)
        slot = "mode, value (1, 2)" if f.slot is None else str(f.slot)
        kept = ", ".join("—" if p is None else str(p) for p in (f.pending, f.outcome))
        kept = "—" if kept == "—, —" else kept
        rows.append(
            f"| `{name}` | `{kind}` | {default} | {slot} | {kept} | {f.cli or '—'} | {f.help} |"
        )
    return "\n".join(rows)


def _type_name(hint: Any) -> str:
    text = getattr(hint, "__name__", None) if isinstance(hint, type) else None
    return text or str(hint).replace("typing.", "").replace("collections.abc.", "")


if __name__ == "__main__":
    print(table())
