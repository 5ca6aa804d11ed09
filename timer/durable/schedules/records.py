"""Recurring schedules in Redis: the record and the leader's plans, and its call
arming them. The clients' operations on schedules are in :mod:`.ops`.

A schedule is a record in its shard's ``P:S`` (``lua/include/schedules.lua`` has the
layout) and, while active, one armed occurrence: an ordinary timer with id
``{<name>}@<nominal ms>`` (:func:`~.recurrence.occurrence_id`). Whoever decides the
armed occurrence arms the next in the same script call, from a :class:`Plan` the leader
computes here (``plan_next``); a schedule whose occurrence was decided without one waits
in ``P:Sq`` until its leader plans it (``arm.lua``).

Catch-up after an outage (``missed``, within ``catch_up`` of now): the armed occurrence
fires late, as any timer; of those missed after it, ``latest`` fires the newest one,
``all`` fires each, oldest first, at most ``MAX_CATCH_UP`` of them, and ``skip`` none.
The others are counted as missed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Unpack

import msgpack

from ...errors import InvalidInput, quoted, unknown_field
from ..model.checks import too_long
from ..model.codec import decode_payload, text
from ..model.durations import format_duration_ms
from ..model.entries import decoding
from ..model.fields import RecurrenceOptions
from ..model.keys import ShardKeys, check_name
from ..model.scripts import ScriptName
from ..model.steps import ScriptCall
from .recurrence import Recurrence, duration_ms, occurrence_id

MISSED = ("latest", "all", "skip")  # stored as its index
OVERLAP = ("allow", "skip", "buffer-one")  # likewise
DEFAULT_CATCH_UP_MS = 3_600_000
MAX_CATCH_UP = 1000  # occurrences ``all`` fires after an outage, at most
MAX_NAME_BYTES = 200  # the occurrence id adds '{', '}@' and up to 16 digits
_COUNT_CAP = 100_000  # missed occurrences counted one by one, at most (cron)


_SPEC_DEFAULTS: tuple[Any, ...] = (None, 0, "UTC", None, None, 0, 0, DEFAULT_CATCH_UP_MS, 0, None)


def check_schedule_name(name: object) -> str:
    """A schedule name: text of at most 200 bytes, without ``{``, ``}`` or ``@`` (its
    occurrences' ids are ``{<name>}@<ms>``: the braces put them all in its shard)."""
    name = check_name("schedule name", name)
    if any(c in name for c in "{}@"):
        raise InvalidInput(f"schedule name {quoted(name)} may not contain '{{', '}}' or '@'")
    if len(name.encode()) > MAX_NAME_BYTES:
        raise too_long("schedule name", len(name.encode()), MAX_NAME_BYTES, "bytes in UTF-8")
    return name


@dataclass(frozen=True)
class ScheduleSpec:
    """When a schedule fires (its :class:`Recurrence`) and what it does after an outage."""

    recurrence: Recurrence
    missed: str = "latest"
    catch_up_ms: int = DEFAULT_CATCH_UP_MS
    overlap: str = "allow"
    group: str | None = None  # the handler group whose handling ``overlap`` waits for

    @classmethod
    def of(
        cls,
        *,
        missed: object = "latest",
        catch_up: object = "1h",
        overlap: object = "allow",
        group: object = None,
        **when: Unpack[RecurrenceOptions],
    ) -> ScheduleSpec:
        """Check and build (``when``: the arguments of :meth:`Recurrence.of`)."""
        _known(when)
        recurrence = Recurrence.of(**when)
        if missed not in MISSED:
            raise InvalidInput(f"missed must be one of {', '.join(MISSED)}, got {quoted(missed)}")
        catch_up_ms = duration_ms("catch_up", catch_up, minimum=0)
        if overlap not in OVERLAP:
            raise InvalidInput(
                f"overlap must be one of {', '.join(OVERLAP)}, got {quoted(overlap)}"
            )
        if overlap != "allow" and group is None:
            raise InvalidInput.about(  # its fields named: the CLI says --overlap, --group
                "{0:{overlap}} waits for a handler group: give {1:*NAME}",
                "overlap",
                "group",
                overlap=overlap,
            )
        waits_for = None if group is None else check_name("consumer group", group)
        assert isinstance(missed, str) and isinstance(overlap, str)
        return cls(recurrence, missed, catch_up_ms, overlap, waits_for)

    def encode(self) -> bytes:
        """A msgpack array, its trailing defaults left out (a schedule of ``every="1s"``
        is 4 bytes): [cron text or every ms, offset, tz, start, end, jitter, missed,
        catch_up]."""
        r = self.recurrence
        fields: list[Any] = [
            r.cron if r.cron is not None else r.every_ms,
            r.offset_ms,
            r.tz,
            r.start_ms,
            r.end_ms,
            r.jitter_ms,
            MISSED.index(self.missed),
            self.catch_up_ms,
            OVERLAP.index(self.overlap),
            self.group,
        ]
        while len(fields) > 1 and fields[-1] == _SPEC_DEFAULTS[len(fields) - 1]:
            fields.pop()
        return bytes(msgpack.packb(fields))

    @classmethod
    def decode(cls, data: bytes) -> ScheduleSpec:
        got: list[Any] = list(msgpack.unpackb(data, raw=False))
        when, offset, tz, start, end, jitter, missed, catch_up, overlap, group = [
            *got,
            *_SPEC_DEFAULTS[len(got) :],
        ]
        recurrence = Recurrence(
            cron=when if isinstance(when, str) else None,
            every_ms=None if isinstance(when, str) else when,
            offset_ms=offset,
            tz=tz,
            start_ms=start,
            end_ms=end,
            jitter_ms=jitter,
        )
        return cls(recurrence, MISSED[missed], catch_up, OVERLAP[overlap], group)

    def describe(self) -> str:
        """``cron "0 8 * * *" in Europe/Paris``, ``every 1d in UTC``: an interval is
        absolute time (from its start, else the Unix epoch), whatever ``tz`` it was given
        (the zone is for cron): said in UTC, not in a zone that does not move it."""
        r = self.recurrence
        if r.cron:
            return f"cron {quoted(r.cron)} in {r.tz}"
        return f"every {format_duration_ms(r.every_ms or 0)} in UTC"


@dataclass(frozen=True)
class Plan:
    """What follows a fired occurrence: the next one's id and deadline ('' and 0 when
    the schedule has ended) and how many occurrences were passed over."""

    next_id: str
    deadline: int
    missed: int = 0

    @classmethod
    def at(cls, name: str, spec: ScheduleSpec, nominal: int | None, missed: int = 0) -> Plan:
        if nominal is None:
            return cls("", 0, missed)
        return cls(occurrence_id(name, nominal), spec.recurrence.deadline(name, nominal), missed)


def plan_next(name: str, spec: ScheduleSpec, fired_ms: int, now_ms: int) -> Plan:
    """The occurrence to arm after the one of nominal time ``fired_ms``, at ``now_ms``
    (Redis time): the next one, or after an outage the one the catch-up policy says."""
    r = spec.recurrence
    nxt = r.next_after(fired_ms)
    if nxt is None or nxt > now_ms:
        return Plan.at(name, spec, nxt)
    window = now_ms - spec.catch_up_ms  # occurrences before it are missed whatever the policy
    if spec.missed == "skip":
        target = r.next_after(now_ms)
    elif spec.missed == "latest":
        latest = _last_at_or_before(r, max(fired_ms, window - 1), now_ms)
        target = latest if latest is not None else r.next_after(now_ms)
    else:
        first = r.next_after(max(fired_ms, window - 1))
        newest = _newest(r, first, now_ms, MAX_CATCH_UP)
        target = newest[0] if newest else r.next_after(now_ms)
    return Plan.at(name, spec, target, _count_between(r, fired_ms, target))


def _last_at_or_before(r: Recurrence, after_ms: int, until_ms: int) -> int | None:
    """The newest occurrence in (after_ms, until_ms], or None."""
    last = None
    t = after_ms
    for _ in range(_COUNT_CAP):
        nxt = r.next_after(t)
        if nxt is None or nxt > until_ms:
            return last
        last = t = nxt
    return last


def _newest(r: Recurrence, first: int | None, until_ms: int, keep: int) -> list[int]:
    """The newest ``keep`` occurrences from ``first`` up to ``until_ms``, oldest first."""
    out: list[int] = []
    t = first
    while t is not None and t <= until_ms and len(out) < _COUNT_CAP:
        out.append(t)
        t = r.next_after(t)
    return out[-keep:]


def _count_between(r: Recurrence, after_ms: int, before_ms: int | None) -> int:
    """How many occurrences fall strictly between the two (capped for cron)."""
    if before_ms is None:
        return 0
    if r.every_ms:
        first = r.next_after(after_ms)
        return 0 if first is None or first >= before_ms else -(-(before_ms - first) // r.every_ms)
    n, t = 0, after_ms
    while n < _COUNT_CAP:
        nxt = r.next_after(t)
        if nxt is None or nxt >= before_ms:
            break
        n, t = n + 1, nxt
    return n


# -- the record ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduleInfo:
    """A schedule as stored: its spec, state, armed occurrence and counts."""

    name: str
    spec: ScheduleSpec
    state: str  # "active" or "paused"
    armed: str | None  # the id of its armed occurrence
    next_ms: int | None  # when that one fires (its deadline)
    fired: int
    missed: int
    last_ms: int | None  # nominal time of the last occurrence fired
    created_ms: int
    version: int
    payload: Any = None
    watch: tuple[str, ...] = field(default=())
    shard: int = 0
    skipped: int = 0  # occurrences skipped while the previous one was unhandled (overlap)


def decode_schedule(name: str, raw: bytes, shard: int, next_ms: int | None) -> ScheduleInfo:
    """A schedule record (``P:S``) as a ScheduleInfo; CorruptRecord if unreadable."""
    with decoding(f"schedule {quoted(name)} (shard {shard})"):
        record = [*msgpack.unpackb(raw, raw=True), 0, b"", b"", 0][:14]
        v, on, armed, fired, missed, last, spec, payload, watch, created = record[:10]
        return ScheduleInfo(
            name=name,
            spec=ScheduleSpec.decode(spec),
            state="active" if on else "paused",
            armed=occurrence_id(name, int(armed)) if armed else None,
            next_ms=next_ms,
            fired=int(fired),
            missed=int(missed),
            last_ms=int(last) or None,
            created_ms=int(created),
            version=int(v),
            payload=decode_payload(payload),
            watch=tuple(w.decode() for w in watch or ()),
            shard=shard,
            skipped=int(record[13] or 0),
        )


# -- the calls ------------------------------------------------------------------------------


def arm_call(
    sk: ShardKeys, worker: str, epoch: int, bucket_ms: int, plans: Sequence[tuple[str, int, Plan]]
) -> ScriptCall:
    """Arm the next occurrence of schedules waiting in ``P:Sq``: (name, version, plan)."""
    keys = [sk.timers, sk.buckets, sk.lease, sk.epoch, sk.schedules, sk.schedule_queue]
    packed = msgpack.packb([[n, v, p.next_id, p.deadline, p.missed] for n, v, p in plans])
    return ScriptCall(ScriptName.ARM, keys, [sk.prefix, worker, epoch, bucket_ms, packed])


def parse_armed(flat: Sequence[Any]) -> dict[str, int]:
    return {text(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}


def pack_fire_plans(plans: Mapping[str, tuple[int, Plan]]) -> bytes | str:
    """``fire``'s plans (occurrence id -> (version, plan)), or '' for none."""
    if not plans:
        return ""
    return bytes(
        msgpack.packb([[i, v, p.next_id, p.deadline, p.missed] for i, (v, p) in plans.items()])
    )


def occurrence_name(timer_id: str) -> tuple[str, int] | None:
    """(schedule name, nominal ms) of an occurrence id; None for any other id."""
    if not timer_id.startswith("{") or "}@" not in timer_id:
        return None
    name, _, at = timer_id[1:].rpartition("}@")
    if not at.isdigit() or not name:
        return None
    return name, int(at)


# -- the operations ------------------------------------------------------------------------


_SPEC_FIELDS = (*RecurrenceOptions.__annotations__, "missed", "catch_up", "overlap", "group")


def _known(when: Mapping[str, Any]) -> None:
    """An InvalidInput naming a field a schedule does not take (it was a TypeError
    naming ``Recurrence.of()``, an internal name), with the one meant when close."""
    said = unknown_field(when, (*_SPEC_FIELDS, "payload", "watch"), "a schedule")
    if said:
        raise InvalidInput(said)
