"""One JSON shape per value: what the HTTP API answers, the dashboard's API, the
CLI's ``--json``, a webhook's body and an SSE event all hold for a Timer, a TimerInfo,
an Outcome, a DeadLetter, a GroupInfo or a ScheduleInfo.

Each shape is a function (the value → a JSON-ready dict, payloads through
:func:`~.durable.model.codec.jsonable`) and a JSON Schema of its own (:data:`SCHEMAS`, the OpenAPI
document's components). A door may put a field of its own beside them (the dashboard's
``time_left_ms``), never rename or leave one out. A test holds each function to its
schema for any value. No I/O here.
"""

from __future__ import annotations

from typing import Any

from .durable.model.codec import jsonable
from .durable.model.fields import FIELDS, KEPT_OUTCOME, KEPT_PENDING
from .durable.model.models import DeadLetter, GroupInfo, Outcome, Timer, TimerInfo
from .durable.schedules.advice import advice
from .durable.schedules.records import ScheduleInfo

STATES = ["pending", "expired", "cancelled", "completed"]
_INT = {"type": "integer"}
_MAYBE_INT = {"type": ["integer", "null"]}
_TEXT = {"type": "string"}
_MAYBE_TEXT = {"type": ["string", "null"]}
_TEXTS = {"type": "array", "items": _TEXT}


def _object(properties: dict[str, Any], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every property required but the ``optional`` ones; no others."""
    return {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
        "required": [name for name in properties if name not in optional],
    }


TIMER = _object(
    {
        "id": _TEXT,
        "shard": _INT,
        "deadline_ms": _INT,
        "state": {"enum": STATES},
        "created": {"type": "boolean", "description": "This call created it."},
        "origin": {
            **_TEXT,
            "description": "The origin token of the batch that created it (a batch's origin "
            "field, schedule_many(origin=)), so a batch retried tells the timers it created "
            "from those that existed; not a bearer token. Empty when the call that created "
            "it gave none (a batch without one, or a single schedule).",
        },
        "absorbed": {**_INT, "description": "A debounce call: the calls its window absorbed."},
    }
)
# The declared fields a record keeps and the JSON shows (fields.Field.pending, .outcome,
# .shown), as the shapes of TimerInfo and Outcome hold them.
INFO_FIELDS = tuple(n for n in KEPT_PENDING if FIELDS[n].shown)
OUTCOME_FIELDS = tuple(n for n in KEPT_OUTCOME if FIELDS[n].shown)
# What a pending timer's record keeps and its retained outcome does not (its watch keys,
# need, cap): a decided timer's TimerInfo holds their defaults, not what it had, so its
# JSON leaves them out rather than say it had none ("watch": []). Its keys notified are
# kept (``notified``).
NOT_KEPT_DECIDED = tuple(n for n in INFO_FIELDS if n not in KEPT_OUTCOME)


def _kept(names: tuple[str, ...]) -> dict[str, Any]:
    """Each field's JSON Schema as shown: its type (null too where its default is None),
    its help as the description, which says so where a decided timer's leaves it out
    (its retained outcome does not keep the field)."""
    out: dict[str, Any] = {}
    for name in names:
        f = FIELDS[name]
        kind = f.schema["type"]
        shown: dict[str, Any] = {"type": [kind, "null"] if f.default is None else kind}
        if "items" in f.schema:
            shown["items"] = {"type": f.schema["items"]["type"]}
        about = f.help
        if name not in KEPT_OUTCOME:
            about += " Pending timers only: a decided one's leaves it out (not kept)."
        out[name] = {**shown, "description": about}
    return out


TIMER_INFO = _object(
    {
        "id": _TEXT,
        "shard": _INT,
        "state": {"enum": STATES},
        "deadline_ms": _INT,
        "created_ms": _MAYBE_INT,
        "decided_ms": _MAYBE_INT,
        "payload": {"description": 'Any JSON value (bytes as {"$bytes": base64}).'},
        "notified": {**_TEXTS, "description": "The watch keys notified so far."},
        "absorbed": {**_INT, "description": "Debounce: the later calls its window absorbed."},
        **_kept(INFO_FIELDS),
    },
    optional=NOT_KEPT_DECIDED,
)
OUTCOME = _object(
    {
        "id": _TEXT,
        "outcome": {"enum": [*STATES[1:], "undecodable"]},
        "shard": _INT,
        "deadline_ms": _INT,
        "decided_ms": _INT,
        "created_ms": _MAYBE_INT,
        "lateness_ms": {**_INT, "description": "decided_ms - deadline_ms."},
        "payload": TIMER_INFO["properties"]["payload"],
        "absorbed": TIMER_INFO["properties"]["absorbed"],
        **_kept(OUTCOME_FIELDS),
        "ref": {**_TEXT, "description": "<shard>/<entry id>: what ack, retry and dead take."},
        "attempt": {**_INT, "description": "This delivery's number in its group."},
        "idempotency_key": {**_TEXT, "description": "The same for every delivery of it."},
    },
    optional=("ref", "attempt", "idempotency_key"),
)
DEAD_LETTER = _object(
    {
        "ref": _TEXT,
        "shard": _INT,
        "group": _TEXT,
        "entry_id": _TEXT,
        "consumer": _TEXT,
        "attempts": _INT,
        "error": _TEXT,
        "failed_ms": _INT,
        "outcome": {
            "anyOf": [{"$ref": "#/components/schemas/Outcome"}, {"type": "null"}],
            "description": "null when it was trimmed from its stream first",
        },
        "earlier": {
            "type": "array",
            "description": "The attempts before the last, oldest first (the last ten).",
            "items": _object({"attempt": _INT, "failed_ms": _INT, "error": _TEXT}),
        },
    }
)
GROUP_INFO = _object(
    {
        "name": _TEXT,
        "consumers": {
            "type": "array",
            "items": _object({"name": _TEXT, "pending": _INT, "idle_ms": _INT}),
        },
        "pending": _INT,
        "retrying": _INT,
        "later": _INT,
        "lag": _MAYBE_INT,
        "oldest_pending_age_ms": _MAYBE_INT,
        "owes_since_ms": _MAYBE_INT,
        "shards": _INT,
        "paused_since_ms": _MAYBE_INT,
        "paused_by": _MAYBE_TEXT,
    }
)
SCHEDULE_INFO = _object(
    {
        "name": _TEXT,
        "state": {"enum": ["active", "paused"]},
        "when": {**_TEXT, "description": "The recurrence in words."},
        "cron": _MAYBE_TEXT,
        "every_ms": _MAYBE_INT,
        "offset_ms": _INT,
        "tz": _TEXT,
        "start_ms": _MAYBE_INT,
        "end_ms": _MAYBE_INT,
        "jitter_ms": _INT,
        "missed_policy": {"enum": ["latest", "all", "skip"]},
        "catch_up_ms": _INT,
        "overlap": {"enum": ["allow", "skip", "buffer-one"]},
        "group": _MAYBE_TEXT,
        "armed": _MAYBE_TEXT,
        "next_ms": _MAYBE_INT,
        "last_ms": _MAYBE_INT,
        "fired": _INT,
        "missed": _INT,
        "skipped": _INT,
        "created_ms": _INT,
        "version": _INT,
        "payload": TIMER_INFO["properties"]["payload"],
        "watch": _TEXTS,
        "shard": _INT,
        "warnings": {
            **_TEXTS,
            "description": "A create's or update's: what the spec, taken as given, does not "
            "do as it reads (an end already past: it never fires).",
        },
    },
    optional=("warnings",),
)

# The OpenAPI document's components, by the names its operations refer to.
SCHEMAS: dict[str, dict[str, Any]] = {
    "Timer": TIMER,
    "TimerInfo": TIMER_INFO,
    "Outcome": OUTCOME,
    "DeadLetter": DEAD_LETTER,
    "GroupInfo": GROUP_INFO,
    "ScheduleInfo": SCHEDULE_INFO,
}


def advised(info: ScheduleInfo, now_ms: int) -> dict[str, Any]:
    """A created or updated schedule, with ``warnings`` when its spec does not do what it
    reads as (an end already past: it never fires), as the CLI warns of it."""
    said = advice(info.spec, info.name, now_ms)
    return schedule_json(info) | ({"warnings": [str(w) for w in said]} if said else {})


def timer_json(t: Timer) -> dict[str, Any]:
    return {
        "id": t.id,
        "shard": t.shard,
        "deadline_ms": t.deadline_ms,
        "state": t.state,
        "created": t.created,
        "origin": t.origin,
        "absorbed": t.absorbed,
    }


def _shown(value: object, names: tuple[str, ...]) -> dict[str, Any]:
    return {n: list(v) if type(v := getattr(value, n)) is tuple else v for n in names}


_DECIDED_FIELDS = tuple(n for n in INFO_FIELDS if n not in NOT_KEPT_DECIDED)


def timer_info_json(t: TimerInfo) -> dict[str, Any]:
    """A timer as ``get`` reads it; a decided one without what its outcome does not keep
    (:data:`NOT_KEPT_DECIDED`)."""
    return {
        "id": t.id,
        "shard": t.shard,
        "state": t.state,
        "deadline_ms": t.deadline_ms,
        "created_ms": t.created_ms,
        "decided_ms": t.decided_ms,
        "payload": jsonable(t.payload),
        "notified": list(t.got),
        "absorbed": t.absorbed,
        **_shown(t, INFO_FIELDS if t.state == "pending" else _DECIDED_FIELDS),
    }


def outcome_json(o: Outcome) -> dict[str, Any]:
    """An outcome; read through a consumer group (it has a stream entry), also what
    settles it (``ref``), its delivery's ``attempt`` and its ``idempotency_key``."""
    out = {
        "id": o.id,
        "outcome": o.outcome,
        "shard": o.shard,
        "deadline_ms": o.deadline_ms,
        "decided_ms": o.decided_ms,
        "created_ms": o.created_ms,
        "lateness_ms": o.lateness_ms,
        "payload": jsonable(o.payload),
        "absorbed": o.absorbed,
        **_shown(o, OUTCOME_FIELDS),
    }
    if o.entry_id is not None:
        out.update(
            ref=f"{o.shard}/{o.entry_id}", attempt=o.attempt, idempotency_key=o.idempotency_key
        )
    return out


def dead_letter_json(d: DeadLetter) -> dict[str, Any]:
    return {
        "ref": d.ref,
        "shard": d.shard,
        "group": d.group,
        "entry_id": d.entry_id,
        "consumer": d.consumer,
        "attempts": d.attempts,
        "error": d.error,
        "failed_ms": d.failed_ms,
        "outcome": None if d.outcome is None else outcome_json(d.outcome),
        "earlier": [
            {"attempt": e.attempt, "failed_ms": e.failed_ms, "error": e.error} for e in d.earlier
        ],
    }


def group_json(g: GroupInfo) -> dict[str, Any]:
    return {
        "name": g.name,
        "consumers": [
            {"name": c.name, "pending": c.pending, "idle_ms": c.idle_ms} for c in g.consumers
        ],
        "pending": g.pending,
        "retrying": g.retrying,
        "later": g.later,
        "lag": g.lag,
        "oldest_pending_age_ms": g.oldest_pending_age_ms,
        "owes_since_ms": g.owes_since_ms,
        "shards": g.shards,
        "paused_since_ms": g.paused_since_ms,
        "paused_by": g.paused_by,
    }


def schedule_json(s: ScheduleInfo) -> dict[str, Any]:
    r = s.spec.recurrence
    return {
        "name": s.name,
        "state": s.state,
        "when": s.spec.describe(),
        "cron": r.cron,
        "every_ms": r.every_ms,
        "offset_ms": r.offset_ms,
        "tz": r.tz,
        "start_ms": r.start_ms,
        "end_ms": r.end_ms,
        "jitter_ms": r.jitter_ms,
        "missed_policy": s.spec.missed,
        "catch_up_ms": s.spec.catch_up_ms,
        "overlap": s.spec.overlap,
        "group": s.spec.group,
        "armed": s.armed,
        "next_ms": s.next_ms,
        "last_ms": s.last_ms,
        "fired": s.fired,
        "missed": s.missed,
        "skipped": s.skipped,
        "created_ms": s.created_ms,
        "version": s.version,
        "payload": jsonable(s.payload),
        "watch": list(s.watch),
        "shard": s.shard,
    }
