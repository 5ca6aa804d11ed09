"""The HTTP API's endpoints as data: method, path, scope, and the JSON Schemas of what
each takes and answers (the schemas themselves in :mod:`timer.httpapi.schemas`). The
server validates every request against these schemas (``jsonschema``, draft 2020-12) and
the OpenAPI 3.1 document is built from the same objects (:mod:`timer.httpapi.openapi`),
so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .schemas import (
    ACK,
    BACKFILL,
    BACKFILLED,
    BATCH,
    CONSUME_QUERY,
    DEAD,
    DEAD_BATCH,
    DEAD_BATCH_DONE,
    DEAD_EMPTY,
    DELETED,
    EMPTY,
    HEARTBEAT,
    HEARTBEAT_DONE,
    INFO,
    NOTIFY,
    OUTCOME,
    RESCHEDULE,
    RETRY,
    SCHEDULE,
    SCHEDULE_CREATE,
    SCHEDULE_DELETE,
    SCHEDULE_INFO,
    SCHEDULE_SPEC,
    SCHEDULES,
    TIMER,
    TRIGGERED,
    ref,
)

MAX_BODY_BYTES = 4 * 1024 * 1024  # a batch of timers with their payloads
MAX_WAIT_S = 60.0


@dataclass(frozen=True)
class Endpoint:
    """One route: ``path`` as OpenAPI writes it; ``scope`` the token scope it needs
    (``read``, ``write``, ``admin``; ``none`` for health and the document)."""

    name: str
    method: str
    path: str
    summary: str
    scope: str
    body: Mapping[str, Any] | None = None
    query: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    responses: Mapping[int, tuple[str, Mapping[str, Any] | None]] = field(default_factory=dict)
    # error statuses of this endpoint's own (the gate's are added by timer.httpapi.openapi)
    errors: Mapping[int, str] = field(default_factory=dict)
    empty: str | None = None  # a body is required: what a request sent without one is told

    @property
    def namespaced(self) -> bool:
        return "{namespace}" in self.path


NS = "/v1/namespaces/{namespace}"
GROUP = "/v1/namespaces/{namespace}/groups/{group}"
SCHED = f"{NS}/schedules/{{schedule}}"
NO_SCHEDULE = {404: "no such schedule"}


def _on_schedule(name: str, verb: str, summary: str, body: Any, reply: Any) -> Endpoint:
    """A change to one schedule: ``POST …/schedules/{schedule}/<verb>`` (write)."""
    done = {200: (verb.rstrip("e") + "ed", reply)}
    return Endpoint(name, "POST", f"{SCHED}/{verb}", summary, "write", body, {}, done, NO_SCHEDULE)


ENDPOINTS = (
    Endpoint(
        "scheduleTimer",
        "POST",
        f"{NS}/timers",
        "Schedule one timer (idempotent per id)",
        "write",
        SCHEDULE,
        responses={201: ("created", TIMER), 200: ("it existed: as it is", TIMER)},
        errors={409: "the id exists with other fields (rearm, or another id)"},
    ),
    Endpoint(
        "scheduleTimers",
        "POST",
        f"{NS}/timers/batch",
        "Schedule many timers; one result or error per item, in order",
        "write",
        BATCH,
        responses={200: ("one result per item", {"type": "object"})},
    ),
    Endpoint(
        "getTimer",
        "GET",
        f"{NS}/timers/{{timer_id}}",
        "A timer: pending, or how it ended (kept for result_ttl)",
        "read",
        responses={200: ("the timer", INFO)},
        errors={
            404: "no such timer (or its outcome was trimmed)",
            422: "its record cannot be decoded",
        },
    ),
    Endpoint(
        "waitTimer",
        "GET",
        f"{NS}/timers/{{timer_id}}/outcome",
        "Wait (long poll) until the timer is decided",
        "read",
        query={"timeout_s": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_S, "default": 10}},
        responses={200: ("its outcome", OUTCOME)},
        errors={
            408: "still pending after timeout_s",
            404: "no such timer",
            422: "its record cannot be decoded",
        },
    ),
    Endpoint(
        "cancelTimer",
        "POST",
        f"{NS}/timers/{{timer_id}}/cancel",
        "Cancel a pending timer (safe to repeat)",
        "write",
        EMPTY,
        responses={200: ("whether this call decided it", {"type": "object"})},
        errors={404: "no such timer (or its outcome was trimmed)"},
    ),
    Endpoint(
        "completeTimer",
        "POST",
        f"{NS}/timers/{{timer_id}}/complete",
        "Decide a pending timer as completed (safe to repeat)",
        "write",
        EMPTY,
        responses={200: ("whether this call decided it", {"type": "object"})},
        errors={404: "no such timer (or its outcome was trimmed)"},
    ),
    Endpoint(
        "rescheduleTimer",
        "POST",
        f"{NS}/timers/{{timer_id}}/reschedule",
        "Move a pending timer's deadline",
        "write",
        RESCHEDULE,
        responses={200: ("moved, or it had already ended", {"type": "object"})},
        errors={
            404: "no such timer",
            409: "past its cap (created + max_total_ms): refused, nothing moved",
        },
    ),
    Endpoint(
        "heartbeatTimer",
        "POST",
        f"{NS}/timers/{{timer_id}}/heartbeat",
        "Extend a running job's timeout (a heartbeat): later only, within its cap",
        "write",
        HEARTBEAT,
        responses={
            200: (
                "taken (extended), its deadline moved or not (moved); or it had already ended",
                HEARTBEAT_DONE,
            )
        },
        errors={
            404: "no such timer",
            409: "past its max_total_ms: refused; it falls due at its cap",
        },
    ),
    Endpoint(
        "notifyKeys",
        "POST",
        f"{NS}/notify",
        "Notify watch keys: completes the timers that now have enough",
        "write",
        NOTIFY,
        responses={200: ("timers completed, per key", {"type": "object"})},
    ),
    Endpoint(
        "consumeOutcomes",
        "GET",
        f"{GROUP}/outcomes",
        "A batch of outcomes for this consumer of the group (long poll); settle each "
        "by its ref with ack, retry or dead: at least once",
        "write",
        query=CONSUME_QUERY,
        responses={
            200: (
                "the batch, maybe empty",
                {"type": "object", "properties": {"outcomes": {"type": "array", "items": OUTCOME}}},
            )
        },
    ),
    Endpoint(
        "streamOutcomes",
        "GET",
        f"{GROUP}/events",
        "The group's outcomes for this consumer as Server-Sent Events (event "
        "'outcome', id the ref); settle each with ack, retry or dead",
        "write",
        query={k: v for k, v in CONSUME_QUERY.items() if k != "wait_ms"},
        responses={200: ("text/event-stream", None)},
    ),
    Endpoint(
        "ackOutcomes",
        "POST",
        f"{GROUP}/ack",
        "Acknowledge outcomes: handled",
        "write",
        ACK,
        responses={
            200: (
                "how many were pending and are acknowledged now (one acknowledged already "
                "counts 0: safe to repeat)",
                {
                    "type": "object",
                    "properties": {"acked": {"type": "integer", "minimum": 0}},
                    "required": ["acked"],
                },
            )
        },
        errors={404: "the group has read nothing yet"},
    ),
    Endpoint(
        "retryOutcome",
        "POST",
        f"{GROUP}/retry",
        "Deliver an outcome again after delay_ms (its attempt counts)",
        "write",
        RETRY,
        responses={200: ("whether it was still pending", {"type": "object"})},
        errors={404: "the group has read nothing yet"},
    ),
    Endpoint(
        "deadLetterOutcome",
        "POST",
        f"{GROUP}/dead",
        "Move an outcome to the dead letters with its error",
        "write",
        DEAD,
        responses={200: ("its dead letter ref, or null", {"type": "object"})},
        errors={404: "the group has read nothing yet"},
    ),
    Endpoint(
        "listSchedules",
        "GET",
        f"{NS}/schedules",
        "Every recurring schedule of the namespace, by name",
        "read",
        responses={200: ("the schedules", SCHEDULES)},
    ),
    Endpoint(
        "createSchedule",
        "POST",
        f"{NS}/schedules",
        "Create a recurring schedule and arm its first occurrence (idempotent per name)",
        "write",
        SCHEDULE_CREATE,
        responses={201: ("created", SCHEDULE_INFO), 200: ("it existed: as it is", SCHEDULE_INFO)},
        errors={409: "the name exists with another spec (update it, or delete it first)"},
    ),
    Endpoint(
        "getSchedule",
        "GET",
        SCHED,
        "A schedule: its spec, state, next occurrence and counts",
        "read",
        responses={200: ("the schedule", SCHEDULE_INFO)},
        errors=NO_SCHEDULE,
    ),
    _on_schedule(
        "updateSchedule",
        "update",
        "Replace a schedule's spec (a whole one), from its next occurrence on",
        SCHEDULE_SPEC,
        SCHEDULE_INFO,
    ),
    _on_schedule("pauseSchedule", "pause", "Stop firing (safe to repeat)", EMPTY, SCHEDULE_INFO),
    _on_schedule(
        "resumeSchedule",
        "resume",
        "Fire again from the next occurrence after now",
        EMPTY,
        SCHEDULE_INFO,
    ),
    _on_schedule(
        "triggerSchedule",
        "trigger",
        "Fire it once now, beside its series (a timer {name}@<now>-manual)",
        EMPTY,
        TRIGGERED,
    ),
    _on_schedule(
        "backfillSchedule",
        "backfill",
        "Fire now, once each, its occurrences from start_ms to end_ms (up to now)",
        BACKFILL,
        BACKFILLED,
    ),
    _on_schedule(
        "deleteSchedule",
        "delete",
        "Delete a schedule and its armed occurrence",
        SCHEDULE_DELETE,
        DELETED,
    ),
    Endpoint(
        "stats",
        "GET",
        f"{NS}/stats",
        "Totals per shard: pending, leader, epoch, outcomes, lag",
        "admin",
        responses={200: ("the stats", {"type": "object"})},
    ),
    Endpoint(
        "groups",
        "GET",
        f"{NS}/groups",
        "Consumer groups: consumers, pending, retrying, lag, oldest",
        "admin",
        responses={
            200: (
                "the groups",
                {
                    "type": "object",
                    "properties": {"groups": {"type": "array", "items": ref("GroupInfo")}},
                },
            )
        },
    ),
    Endpoint(
        "deadLetters",
        "GET",
        f"{NS}/dead",
        "Dead letters, oldest first (at most limit)",
        "admin",
        query={
            "group": {"type": "string", "maxLength": 256, "default": ""},
            "error": {"type": "string", "maxLength": 256, "default": ""},
            "match": {"type": "string", "maxLength": 1024, "default": ""},
            "limit": {"type": "integer", "minimum": 1, "maximum": 10_000, "default": 100},
        },
        responses={
            200: (
                "the dead letters",
                {
                    "type": "object",
                    "properties": {"dead_letters": {"type": "array", "items": ref("DeadLetter")}},
                },
            )
        },
    ),
    Endpoint(
        "redeliverDeadLetters",
        "POST",
        f"{NS}/dead/redeliver",
        "Put many dead letters back: those named, or all a filter selects, at a count",
        "admin",
        DEAD_BATCH,
        responses={200: ("what was done", DEAD_BATCH_DONE)},
        errors={409: "another count is selected now than expect: nothing was done"},
        empty=DEAD_EMPTY,
    ),
    Endpoint(
        "dropDeadLetters",
        "POST",
        f"{NS}/dead/drop",
        "Delete many dead letters: those named, or all a filter selects, at a count",
        "admin",
        DEAD_BATCH,
        responses={200: ("what was done", DEAD_BATCH_DONE)},
        errors={409: "another count is selected now than expect: nothing was done"},
        empty=DEAD_EMPTY,
    ),
    Endpoint(
        "deadLetter",
        "GET",
        f"{NS}/dead/{{shard}}/{{entry}}",
        "One dead letter in full: its outcome and the last error",
        "admin",
        responses={200: ("the dead letter", ref("DeadLetter"))},
        errors={404: "no such dead letter"},
    ),
    Endpoint(
        "redeliverDeadLetter",
        "POST",
        f"{NS}/dead/{{shard}}/{{entry}}/redeliver",
        "Put a dead letter back in front of its group (attempts start again)",
        "admin",
        EMPTY,
        responses={200: ("its new outcome ref", {"type": "object"})},
        errors={404: "no such dead letter"},
    ),
    Endpoint(
        "dropDeadLetter",
        "POST",
        f"{NS}/dead/{{shard}}/{{entry}}/drop",
        "Delete a dead letter for good",
        "admin",
        EMPTY,
        responses={200: ("dropped", {"type": "object"})},
        errors={404: "no such dead letter"},
    ),
    Endpoint(
        "metrics",
        "GET",
        "/metrics",
        "Prometheus metrics of every worker process",
        "none",
        responses={200: ("text/plain; version=0.0.4", None)},
    ),
    Endpoint(
        "health",
        "GET",
        "/healthz",
        "The server process is up",
        "none",
        responses={200: ("up", {"type": "object"})},
    ),
    Endpoint(
        "ready",
        "GET",
        "/readyz",
        "Redis answers",
        "none",
        responses={200: ("ready", {"type": "object"})},
        errors={503: "Redis does not"},
    ),
    Endpoint(
        "openapi",
        "GET",
        "/v1/openapi.json",
        "This document",
        "none",
        responses={200: ("OpenAPI 3.1", {"type": "object"})},
    ),
)
