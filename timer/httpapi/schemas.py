"""The JSON Schemas of what the HTTP API's endpoints take and answer (bodies, queries,
errors), each a plain dict; :mod:`timer.httpapi.spec` names them per endpoint. A timer's
own fields come from their one declaration (timer.durable.model.fields)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from timer.durable.model.fields import DELAY_SCHEMA, MS_SCHEMA, json_schemas

MAX_BATCH = 10_000

# a timer's fields as its declaration gives them (timer.durable.model.fields: one per field)
TIMER_FIELDS: dict[str, Any] = json_schemas()
ID = TIMER_FIELDS["id"]
MS = MS_SCHEMA
SCHEDULE = {
    "type": "object",
    "properties": TIMER_FIELDS,
    "required": ["id"],
    "additionalProperties": False,
    "oneOf": [{"required": ["delay_ms"]}, {"required": ["deadline_ms"]}],
}
BATCH = {
    "type": "object",
    "properties": {
        # each item is checked by the library, its error in its own slot: no "items"
        # keyword here (checking a thousand objects costs the schema check milliseconds)
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_BATCH,
            "description": "Timers, each as POST …/timers takes one (its shape: the "
            "TimerRequest schema of this document's components); a bad one gets its error "
            "in its slot of the results, the others go on (so an item's shape is not a "
            "constraint of the request).",
        },
        "origin": {
            "type": "string",
            "maxLength": 256,
            "description": "A token stored with each timer this batch creates and reported "
            "back as its origin (by this call and any later one that finds it), so a client "
            "retrying the batch under the same token tells the timers it created from those "
            "that existed. Not the bearer token; left out, origin is empty.",
        },
    },
    "required": ["items"],
    "additionalProperties": False,
}
RESCHEDULE = {
    "type": "object",
    "properties": {k: TIMER_FIELDS[k] for k in ("delay_ms", "deadline_ms")},
    "additionalProperties": False,
    "oneOf": [{"required": ["delay_ms"]}, {"required": ["deadline_ms"]}],
}
HEARTBEAT = {
    "type": "object",
    "properties": {
        "extend_ms": {
            **DELAY_SCHEMA,
            "description": "Push the deadline this long from now (Redis time); "
            "never earlier than it is (unless earlier), never past the timer's max_total_ms.",
        },
        "earlier": {
            "type": "boolean",
            "default": False,
            "description": "Set the deadline to extend_ms from now even if that is earlier "
            "(a job that started: its run deadline replaces its queue-wait one).",
        },
    },
    "additionalProperties": False,
    "required": ["extend_ms"],
}
NOTIFY = {
    "type": "object",
    "properties": {
        "keys": {
            "type": "array",
            # a watch key's limits are an id's; its description is not
            "items": {k: v for k, v in ID.items() if k != "description"},
            "minItems": 1,
            "maxItems": 1000,
            "description": "Watch keys to notify (each at most 256 UTF-8 bytes).",
        }
    },
    "required": ["keys"],
    "additionalProperties": False,
}
EMPTY = {"type": "object", "additionalProperties": False}


def ref(name: str) -> dict[str, str]:
    """One value's shape (timer.shapes.SCHEMAS: the document's components)."""
    return {"$ref": f"#/components/schemas/{name}"}


TIMER, INFO, OUTCOME = ref("Timer"), ref("TimerInfo"), ref("Outcome")
ERROR = {
    "type": "object",
    "properties": {
        "error": {"type": "string", "description": "What is wrong and what to do."},
        "kind": {"type": "string", "description": "The library's error class."},
        "exit_code": {"type": "integer", "description": "The CLI's exit code for it."},
    },
    "required": ["error", "kind", "exit_code"],
}
HEARTBEAT_DONE = {
    "type": "object",
    "description": "The timer as the heartbeat left it (timer.deadline_ms: its deadline "
    "now), or as it ended; whether the heartbeat was taken and whether it moved the deadline.",
    "properties": {
        "id": {"type": "string"},
        "extended": {
            "type": "boolean",
            "description": "The heartbeat was taken: the timer is pending, so the job may go "
            "on. False: the timer had already ended (timer.state says how); stop the job. "
            "True also when the deadline stayed where it was: see moved.",
        },
        "moved": {
            "type": "boolean",
            "description": "This heartbeat moved the timer's deadline (later; with earlier, "
            "sooner too), to timer.deadline_ms. False when it stayed: it was due later than "
            "extend_ms from now already (a heartbeat moves a deadline only later), or the "
            "timer had ended.",
        },
        "timer": TIMER,
    },
    "required": ["id", "extended", "moved", "timer"],
    "additionalProperties": False,
}


DEAD_BATCH = {
    "type": "object",
    "additionalProperties": False,
    "description": "refs, or a filter (group, error, match; none selects every dead "
    "letter) with expect, the count confirmed: another count selected now is a 409, "
    "nothing done. A filter without expect is acted on as in earlier releases, with a "
    "warning in the reply",
    "properties": {
        "refs": {"type": "array", "maxItems": 100_000, "items": {"type": "string"}},
        "group": {"type": "string", "maxLength": 256},
        "error": {"type": "string", "maxLength": 256},
        "match": {"type": "string", "maxLength": 1024},
        "expect": {"type": "integer", "minimum": 0, "maximum": 100_000},
    },
}
# A batch of dead letters is asked for in a body: one forgotten is no selection of all
# (``{}`` is, said so), since a drop is for good (trial 30: a bare POST dropped every one)
DEAD_EMPTY = (
    'send {"refs": [...]}, or a filter (group, error, match) with expect, the count '
    "GET …/dead with it lists; {} selects every dead letter"
)
DEAD_BATCH_DONE = {
    "type": "object",
    "properties": {
        "matched": {"type": "integer"},
        "done": {"type": "array", "items": {"type": "string"}},
        "missing": {"type": "array", "items": {"type": "string"}},
        "warning": {
            "type": "string",
            "description": "Present when a filter was acted on without expect: send it.",
        },
    },
}
CONSUMER = {
    "type": "string",
    "minLength": 1,
    "maxLength": 256,
    "description": "This consumer's name in the group (keep it stable).",
}
CONSUME_QUERY: dict[str, Any] = {
    "consumer": CONSUMER,
    "count": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
    "wait_ms": {"type": "integer", "minimum": 0, "maximum": 60_000, "default": 1000},
    "reclaim_idle_ms": {
        "type": "integer",
        "minimum": 1000,
        "maximum": 2**53,
        "default": 60_000,
        "description": "Deliver an outcome again when unsettled this long.",
    },
}
REFS = {
    "type": "array",
    "items": {"type": "string", "maxLength": 64},
    "minItems": 1,
    "maxItems": 1000,
}
ACK = {
    "type": "object",
    "properties": {"refs": REFS},
    "required": ["refs"],
    "additionalProperties": False,
}
RETRY = {
    "type": "object",
    "additionalProperties": False,
    "required": ["ref", "delay_ms"],
    "properties": {"ref": {"type": "string", "maxLength": 64}, "delay_ms": DELAY_SCHEMA},
}
DEAD = {
    "type": "object",
    "additionalProperties": False,
    "required": ["ref", "error"],
    "properties": {
        "ref": {"type": "string", "maxLength": 64},
        "error": {"type": "string", "maxLength": 4000},
        "consumer": CONSUMER,
    },
}


def whole_numbers(value: Any, schema: Mapping[str, Any]) -> Any:
    """``value``, which ``schema`` accepts, with each integer it holds given as a whole
    float (1e3, 1000.0: an integer to JSON Schema) made an int, in place: the library
    takes ints only, and would refuse what the schema let through. Walks ``properties``
    and ``items`` (a payload, whose schema says nothing, is left as it was sent)."""
    kind = type(value)
    if kind is float:
        return int(value) if schema.get("type") == "integer" and value.is_integer() else value
    if kind is dict:
        fields = schema.get("properties")
        if fields:
            for name, v in value.items():  # a batch's thousands: only a float or a nest costs
                if type(v) in _WALKED and name in fields:
                    value[name] = whole_numbers(v, fields[name])  # a key's value: no resize
    elif kind is list:
        each = schema.get("items")
        if each:
            value[:] = [whole_numbers(v, each) for v in value]
    return value


_WALKED = {float, dict, list}


# A recurring schedule's spec as JSON: the keywords of client.schedules.create (the
# library checks each and says what is wrong in their names); a time as epoch ms.
_DURATION = {"type": ["integer", "string"], "maxLength": 64}
SCHEDULE_FIELDS: dict[str, Any] = {
    "cron": {
        "type": "string",
        "maxLength": 256,
        "description": 'A cron of 5 fields ("0 2 * * *"), or 6 with the seconds first, '
        'matched in tz; or an interval as a list shows it ("every 30s").',
    },
    "every": {**_DURATION, "description": 'An interval: ms, or a duration ("30s", "1h").'},
    "offset": {**_DURATION, "description": "Shifts an interval's occurrences (every only)."},
    "tz": {"type": "string", "maxLength": 64, "description": 'An IANA time zone ("UTC").'},
    "start": {**MS_SCHEMA, "description": "No occurrence before this (epoch ms)."},
    "end": {**MS_SCHEMA, "description": "No occurrence after this (epoch ms)."},
    "jitter": {**_DURATION, "description": "Delays each occurrence by up to this much."},
    "missed": {"enum": ["latest", "all", "skip"], "description": "After an outage."},
    "catch_up": {**_DURATION, "description": "No missed occurrence older than this (1h)."},
    "overlap": {"enum": ["allow", "skip", "buffer-one"]},
    "group": {
        "type": "string",
        "maxLength": 256,
        "description": "The handler group whose handling overlap waits for.",
    },
    "payload": {"description": "Any value: each occurrence's payload."},
    "watch": {
        **TIMER_FIELDS["watch"],
        "description": "Watch keys of each occurrence, in the schedule's hash tag {name}.",
    },
}
_ONE_RECURRENCE = [{"required": ["cron"]}, {"required": ["every"]}]
SCHEDULE_SPEC = {
    "type": "object",
    "description": "A whole spec (what it leaves out takes its default).",
    "properties": SCHEDULE_FIELDS,
    "additionalProperties": False,
    "oneOf": _ONE_RECURRENCE,
}
SCHEDULE_CREATE = {
    **SCHEDULE_SPEC,
    "description": "A schedule: its name and spec.",
    "properties": {
        "name": {
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
            "description": "At most 200 UTF-8 bytes, without '{', '}' or '@'.",
        },
        **SCHEDULE_FIELDS,
    },
    "required": ["name"],
}
BACKFILL = {
    "type": "object",
    "properties": {
        "start_ms": MS,
        "end_ms": MS,
        "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 1000},
    },
    "required": ["start_ms", "end_ms"],
    "additionalProperties": False,
}
SCHEDULE_DELETE = {
    "type": "object",
    "properties": {
        "keep_armed": {
            "type": "boolean",
            "default": False,
            "description": "Leave its armed occurrence to fire, once, as a timer.",
        }
    },
    "additionalProperties": False,
}
SCHEDULE_INFO = ref("ScheduleInfo")
SCHEDULES = {
    "type": "object",
    "properties": {"schedules": {"type": "array", "items": SCHEDULE_INFO}},
    "required": ["schedules"],
}
TRIGGERED = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "timer": TIMER},
    "required": ["name", "timer"],
}
BACKFILLED = {
    "type": "object",
    "description": "One result per occurrence, oldest first: the timer (status 201 "
    "created, 200 fired already and still retained) or its error.",
    "properties": {"name": {"type": "string"}, "results": {"type": "array"}},
    "required": ["name", "results"],
}
DELETED = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "deleted": {"type": "boolean"}},
    "required": ["name", "deleted"],
}
