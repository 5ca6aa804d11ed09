"""Reading what Redis holds: timer records, outcome entries, dead letters and events.

Pure functions from stored bytes to the typed models (no I/O). A record or entry that
cannot be decoded is a :class:`~timer.errors.CorruptRecord` that names it; a reader
never stops on one (``outcome_or_undecodable``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import msgpack

from ...errors import CorruptRecord, InvalidInput, quoted
from .codec import decode_payload, decode_pending, decode_result, text
from .fields import KEPT_OUTCOME, KEPT_PENDING, as_given
from .keys import MAX_NAME_BYTES
from .leader import Event
from .models import UNDECODABLE, AttemptError, DeadLetter, Outcome, TimerInfo


@contextlib.contextmanager
def decoding(what: str, hint: str = "") -> Iterator[None]:
    """Any failure to decode inside the block as the CorruptRecord that names ``what``."""
    try:
        yield
    except Exception as exc:
        raise CorruptRecord(
            f"{what} cannot be decoded ({type(exc).__name__}: {exc}){hint}"
        ) from None


def timer_info(tid: str, shard: int, pending: Any, decided: Any) -> TimerInfo | None:
    """TimerInfo from the pending record or the retained outcome (either may be None);
    CorruptRecord if the one stored cannot be decoded."""
    with decoding(f"the record of timer {quoted(tid)} (shard {shard})", "; cancel it"):
        return _timer_info(tid, shard, pending, decided)


def _timer_info(tid: str, shard: int, pending: Any, decided: Any) -> TimerInfo | None:
    if pending is not None:
        rec = decode_pending(pending)
        return TimerInfo(
            tid,
            shard,
            "pending",
            rec["deadline_ms"],
            decode_payload(rec["payload"]),
            created_ms=rec["created_ms"],
            got=tuple(rec["got"]),
            absorbed=rec["absorbed"],
            **as_given(KEPT_PENDING, rec),
        )
    if decided is not None:
        rec = decode_result(decided)
        return TimerInfo(
            tid,
            shard,
            rec["outcome"],
            rec["deadline_ms"],
            decode_payload(rec["payload"]),
            created_ms=rec["created_ms"],
            decided_ms=rec["decided_ms"],
            got=tuple(rec["got"]),
            absorbed=rec["absorbed"],
            **as_given(KEPT_OUTCOME, rec),
        )
    return None


def outcome_of(info: TimerInfo) -> Outcome:
    """A decided timer's outcome as ``wait`` answers it (read from its retained record:
    no stream entry, so nothing to ack)."""
    assert info.decided_ms is not None, "a pending timer has no outcome"
    return Outcome(
        info.id,
        info.state,
        info.deadline_ms,
        info.decided_ms,
        info.payload,
        info.shard,
        created_ms=info.created_ms,
        absorbed=info.absorbed,
        **{name: getattr(info, name) for name in KEPT_OUTCOME},
    )


def outcome_from_entry(
    shard: int, entry_id: bytes | str, fields: Mapping[bytes, bytes], attempt: int = 1
) -> Outcome:
    """An Outcome from one entry of a shard's outcome stream (or of a dead letter): its
    id and outcome record (``i``, ``r``). CorruptRecord if the entry cannot be decoded."""
    with decoding(f"outcome entry {text(entry_id)} of shard {shard}"):
        return _outcome_from_entry(shard, entry_id, fields, attempt)


def undecodable(
    shard: int, entry_id: bytes | str, fields: Mapping[bytes, bytes], error: CorruptRecord
) -> Outcome:
    """An entry no reader can decode, as the Outcome a reader without a group shows."""
    tid = fields.get(b"i") or b"?"
    eid = text(entry_id)
    decided = eid.split("-", 1)[0]
    return Outcome(
        id=text(tid)[:MAX_NAME_BYTES],
        outcome=UNDECODABLE,
        deadline_ms=0,
        decided_ms=int(decided) if decided.isdigit() else 0,
        payload=None,
        shard=shard,
        entry_id=eid,
        error=str(error),
    )


def outcome_or_undecodable(
    shard: int, entry_id: bytes | str, fields: Mapping[bytes, bytes]
) -> Outcome:
    """``outcome_from_entry``, or ``undecodable`` for an entry it cannot read."""
    try:
        return outcome_from_entry(shard, entry_id, fields)
    except CorruptRecord as exc:
        return undecodable(shard, entry_id, fields, exc)


def _outcome_from_entry(
    shard: int, entry_id: bytes | str, fields: Mapping[bytes, bytes], attempt: int
) -> Outcome:
    origin = fields.get(b"from")
    rec = decode_result(fields[b"r"])
    return Outcome(
        id=text(fields[b"i"]),
        outcome=rec["outcome"],
        deadline_ms=rec["deadline_ms"],
        decided_ms=rec["decided_ms"],
        payload=decode_payload(rec["payload"]),
        shard=shard,
        entry_id=text(entry_id),
        attempt=attempt,
        redelivery_of=None if origin is None else text(origin),
        created_ms=rec["created_ms"],
        absorbed=rec["absorbed"],
        **as_given(KEPT_OUTCOME, rec),
    )


def for_group(fields: Mapping[bytes, bytes], group: str) -> bool:
    """False for a dead letter put back for another group (``redeliver``): this group
    acknowledges it unseen."""
    only = fields.get(b"only")
    return only is None or text(only) == group


def flat_fields(flat: Sequence[Any]) -> dict[bytes, bytes]:
    """A stream entry's fields as a script returns them (a flat array) as a mapping."""
    return {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}


def dead_letter_from_entry(shard: int, entry_id: Any, fields: Mapping[bytes, bytes]) -> DeadLetter:
    """A DeadLetter from one entry of a shard's dead-letter stream (``lua/dead.lua``)."""
    eid = text(entry_id)
    return DeadLetter(
        ref=f"{shard}/{eid}",
        shard=shard,
        group=text(fields[b"group"]),
        entry_id=text(fields[b"entry"]),
        consumer=text(fields[b"consumer"]),
        attempts=int(fields[b"attempts"]),
        error=text(fields[b"error"]),
        failed_ms=int(fields[b"failed"]),
        outcome=dead_outcome(shard, fields),
        # the deaths before a redelivery (redeliver.lua), then this delivery's attempts
        earlier=_earlier(fields.get(b"died")) + _earlier(fields.get(b"earlier")),
    )


def _earlier(raw: bytes | None) -> tuple[AttemptError, ...]:
    """The earlier attempts' errors a dead letter carries (retry.lua); () if none, or
    if they cannot be read (a dead letter is never refused for its history)."""
    if raw is None:
        return ()
    try:
        kept = msgpack.unpackb(raw, raw=False)
        return tuple(AttemptError(int(a), int(ms), str(e)) for a, ms, e in kept)
    except (ValueError, TypeError, msgpack.UnpackException):
        return ()


def dead_outcome(shard: int, fields: Mapping[bytes, bytes]) -> Outcome | None:
    """The outcome a dead letter carries; None if it had been trimmed before it died, or
    if it is an entry no reader could decode (its ``error`` says so)."""
    if b"i" not in fields:
        return None
    try:
        return outcome_from_entry(shard, fields[b"entry"], fields, int(fields[b"attempts"]))
    except CorruptRecord:
        return None


_ASCII_DIGITS = re.compile(r"[0-9]{1,9}")


def _u64(text: str) -> bool:
    return re.fullmatch(r"[0-9]{1,20}", text) is not None and int(text) < 2**64


def parse_ref(ref: object, shards: int, kind: str = "dead letter") -> tuple[int, str]:
    """(shard, entry id) from a ref ``<shard>/<id>`` of a dead letter (or an outcome);
    InvalidInput otherwise."""
    if isinstance(ref, str):
        shard, slash, eid = ref.partition("/")
        ms, _, seq = eid.partition("-")
        # a stream id's two parts are unsigned 64-bit (Redis refuses more: "Invalid
        # stream ID", which is the ref's fault, not Redis failing); ASCII digits only
        if _ASCII_DIGITS.fullmatch(shard) and _u64(ms) and _u64(seq):
            if int(shard) < shards:
                return int(shard), eid
            raise InvalidInput(
                f"{kind} ref {quoted(ref)} names shard {int(shard)}, and the namespace has "
                f"{shards} (0 to {shards - 1}): copy the ref as `tickwheel dead list` shows it"
                if kind == "dead letter"
                else f"{kind} ref {quoted(ref)} names shard {int(shard)}, and the namespace has "
                f"{shards} (0 to {shards - 1})"
            )
    shown = " as `tickwheel dead list` shows it" if kind == "dead letter" else ""
    form = isinstance(ref, str) and _ASCII_DIGITS.fullmatch(shard) and slash
    if form and not re.fullmatch(r"[0-9]+-[0-9]+", eid):  # <shard>/, an id of another form
        raise InvalidInput(
            f"{kind} ref {quoted(ref)}: its id must be <ms>-<seq>{shown} (e.g. 3/1700000000000-0)"
        )
    raise InvalidInput(
        f"{kind} ref must be <shard>/<id>{shown} (e.g. 3/1700000000000-0), got {quoted(ref)}"
    )


_EVENTS = {"S": "scheduled", "R": "rescheduled"}


def parse_events(data: str) -> list[Event]:
    """The events of one shard message as the scripts publish it (``lua/include/records.lua`` and
    ``lua/schedule.lua`` name the forms): one event, ``M`` with a schedule call's batch,
    or ``Q`` with the priorities of the timers it created that have one.

    ``data`` is the message decoded as UTF-8 with surrogatepass (how the listener reads
    it); a batch names each id's length in bytes, so it is parsed as bytes.
    """
    if not data.startswith(("M ", "Q ")):
        return [parse_event(data)]
    ranks = data[0] == "Q"  # " <priority> <id bytes> <id>" each: priorities
    raw = data.encode("utf-8", "surrogatepass")
    events: list[Event] = []
    pos = 1  # at the space before each entry: " <deadline or priority> <id bytes> <id>"
    try:
        while pos < len(raw):
            if raw[pos] != 0x20:
                raise ValueError("expected a space")
            cut = raw.index(b" ", pos + 1)
            number = int(raw[pos + 1 : cut])
            end = raw.index(b" ", cut + 1)
            size = int(raw[cut + 1 : end])
            tid = raw[end + 1 : end + 1 + size]
            if len(tid) != size:
                raise ValueError("an id shorter than its length")
            name = tid.decode("utf-8", "surrogatepass")
            if ranks:
                events.append(Event("prioritized", name, priority=number))
            else:
                events.append(Event("scheduled", name, deadline_ms=number))
            pos = end + 1 + size
    except ValueError as exc:
        raise ValueError(f"not a tickwheel event batch ({exc}): {quoted(data[:200])}") from None
    return events


def parse_event(data: str) -> Event:
    """A single shard event (``S``, ``R`` or ``X``); ``parse_events`` reads batches too."""
    kind, head, tid = data.split(" ", 2)
    if kind == "X":
        return Event("decided", tid, outcome=head)
    if kind in _EVENTS:
        return Event(_EVENTS[kind], tid, deadline_ms=int(head))
    raise ValueError(f"not a tickwheel event: {quoted(data)}")
