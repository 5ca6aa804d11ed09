"""Consumer groups on the outcome streams, written once for both clients (sans-I/O).

Every shard's outcome stream carries the same consumer groups. An outcome delivered to a
consumer stays *pending* in its group until acknowledged; this module adds what Redis
streams leave to their users, each in one atomic script per shard:

- ``claim``: hand a consumer the entries it should (re)handle now: those whose retry time
  has come (``P:retry:<group>``), then pending entries idle for ``min_idle_ms`` (their
  consumer is presumed dead) or, at a restart, its own. An entry waiting for its retry
  time is never taken early, so a backoff survives the death of its consumer.
- ``touch``: a consumer still working on entries resets their idle time, so a long
  handler is not presumed dead.
- ``retry``: a failed handler's entry waits (still pending, so never trimmed) until a
  retry time; the delivery count Redis keeps is the attempt number.
- ``dead_letter``: the last failed attempt moves the outcome to the shard's dead-letter
  stream, atomically with its acknowledgement.

Plus reading new entries, reading with no group at all (``follow``), and the admin side
(``group_infos``, ``delete_group``, dead letters). See
https://tickwheel.readthedocs.io/design-notes/, "Handlers".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import CorruptRecord, StoreError
from ..model import steps
from ..model.checks import check_int
from ..model.codec import text
from ..model.durations import TEN_YEARS_MS
from ..model.entries import for_group, outcome_from_entry, outcome_or_undecodable
from ..model.keys import ShardKeys, check_name
from ..model.models import Outcome
from ..model.namespace import Namespace
from ..model.steps import Op
from .calls import (
    ack_call,
    claim_call,
    dead_call,
    leave_group_call,
    parse_claim,
    parse_dead,
    parse_retry,
    parse_touch,
    retry_call,
    touch_call,
)

POLL_S = 0.05  # how often a per-stream reader (Redis Cluster) polls while waiting


@dataclass(frozen=True)
class Delivery:
    """An outcome handed to a consumer, with what acknowledging it takes."""

    outcome: Outcome
    keys: ShardKeys
    group: str
    received: float = field(default=0.0, compare=False)  # when read (wall clock, s)

    @property
    def stream(self) -> str:
        return self.keys.outcomes

    @property
    def entry_id(self) -> str:
        assert self.outcome.entry_id is not None
        return self.outcome.entry_id


def check_group(group: object, consumer: object) -> tuple[str, str]:
    return check_name("consumer group", group), check_name("consumer", consumer)


def ensure_groups(ns: Namespace, group: str, *, start: str = "0") -> Op[None]:
    """Create the group on every shard's stream unless it exists. ``start`` is where a
    new group starts reading: ``0`` everything the streams hold, ``$`` only what comes."""
    create = [
        steps.Command("xgroup_create", (stream, group), {"id": start, "mkstream": True})
        for stream in ns.outcome_streams()
    ]
    for reply in (yield steps.Pipeline(create, errors_in_slots=True)):
        if isinstance(reply, StoreError) and reply.code == "BUSYGROUP":
            continue  # the group exists already: that is what we want
        steps.error_or(reply)


@dataclass
class _Leftovers:
    """Entries a read handed this consumer that are not deliveries: ``foreign`` to ack
    unseen (trimmed while pending, or put back for another group), ``broken`` to
    dead-letter (no reader can decode them: a reader must not stop on one)."""

    foreign: list[tuple[str, str]]
    broken: list[tuple[ShardKeys, str, int, str]]  # (shard, entry id, deliveries, why)

    @classmethod
    def none(cls) -> _Leftovers:
        return cls([], [])


def _deliveries(
    ns: Namespace,
    group: str,
    shard: int,
    entries: Iterable[tuple[Any, Mapping[bytes, bytes], int]],
    left: _Leftovers,
    *,
    received: float,
) -> list[Delivery]:
    sk = ns.shard(shard)
    stream = sk.outcomes
    out: list[Delivery] = []
    for entry_id, fields, deliveries in entries:
        if not fields:  # an entry trimmed while pending comes back empty
            left.foreign.append((stream, text(entry_id)))
        elif not for_group(fields, group):
            left.foreign.append((stream, text(entry_id)))  # put back for another group
        else:
            try:
                outcome = outcome_from_entry(shard, entry_id, fields, deliveries)
            except CorruptRecord as exc:
                left.broken.append((sk, text(entry_id), deliveries, str(exc)))
                continue
            out.append(Delivery(outcome, sk, group, received))
    return out


def _settle_leftovers(group: str, consumer: str, left: _Leftovers) -> Op[None]:
    if left.foreign:
        yield steps.Pipeline([steps.Command("xack", (s, group, eid)) for s, eid in left.foreign])
    if left.broken:
        yield steps.Pipeline(
            [
                dead_call(sk, group, eid, consumer, attempts=n, error=why)
                for sk, eid, n, why in left.broken
            ]
        )


def handed(
    ns: Namespace,
    group: str,
    consumer: str,
    shard: int,
    entries: Iterable[tuple[str, Mapping[bytes, bytes]]],
) -> Op[list[Delivery]]:
    """The deliveries among entries a fire call read for this consumer (``fire.lua``'s
    hand: first deliveries, as ``read_new``'s); the others settled as a read's are."""
    left = _Leftovers.none()
    received = (yield steps.Clock()).wall()
    out = _deliveries(ns, group, shard, ((e, f, 1) for e, f in entries), left, received=received)
    yield from _settle_leftovers(group, consumer, left)
    return out


def read_new(
    ns: Namespace, group: str, consumer: str, *, count: int, block_ms: int | None, per_stream: bool
) -> Op[list[Delivery]]:
    """Outcomes never delivered to the group, up to ``count`` from each shard's stream
    (XREADGROUP counts per stream), waiting up to ``block_ms`` (None: not at all).
    Returns a list of :class:`Delivery` (first deliveries); empty only when the streams
    held nothing new. A read that met only entries that are not deliveries (broken ones,
    dead-lettered; foreign ones, acknowledged) reads on at once: a reader that stops
    when idle took such a read for the end and left the outcomes behind them unread."""
    while True:
        out, read = yield from _read_once(
            ns, group, consumer, count=count, block_ms=block_ms, per_stream=per_stream
        )
        if out or not read:
            return out
        block_ms = None


def _read_once(
    ns: Namespace, group: str, consumer: str, *, count: int, block_ms: int | None, per_stream: bool
) -> Op[tuple[list[Delivery], int]]:
    """One read: its deliveries, and how many entries it took from the streams."""
    streams = ns.outcome_streams()
    reply: list[Any] = []
    if not per_stream:
        reply = (
            yield steps.Command(
                "xreadgroup",
                (group, consumer, dict.fromkeys(streams, ">")),
                {"count": count, "block": block_ms},
                confirmed=True,
            )
        ) or []
    else:  # a Redis Cluster: one read per stream (no multi-slot read), polling
        clock = yield steps.Clock()
        end = clock.monotonic() + (block_ms or 0) / 1000
        while True:
            for stream in streams:
                got = yield steps.Command(
                    "xreadgroup",
                    (group, consumer, {stream: ">"}),
                    {"count": count},
                    confirmed=True,
                    key=stream,
                )
                reply.extend(got or [])
            if reply or clock.monotonic() >= end:
                break
            yield steps.Sleep(min(POLL_S, max(0.0, end - clock.monotonic())))
    out: list[Delivery] = []
    left = _Leftovers.none()
    read = 0
    received = (yield steps.Clock()).wall()
    for stream, entries in reply:
        shard = streams[text(stream)]
        read += len(entries)
        out += _deliveries(
            ns, group, shard, ((e, f, 1) for e, f in entries), left, received=received
        )
    yield from _settle_leftovers(group, consumer, left)
    return out, read


def claim(
    ns: Namespace,
    group: str,
    consumer: str,
    cursors: Mapping[int, str],
    *,
    count: int,
    min_idle_ms: int,
    owner: str = "",
    retries: bool = True,
) -> Op[tuple[list[Delivery], dict[int, str]]]:
    """Run ``claim`` on the shards of ``cursors`` (shard -> scan cursor; '' no scan) in one
    pipeline. Returns (deliveries, the next cursor of each shard)."""
    shards = list(cursors)
    calls = [
        claim_call(
            ns.shard(s),
            group,
            consumer,
            count=count,
            min_idle_ms=min_idle_ms,
            owner=owner,
            cursor=cursors[s],
            retries=retries,
        )
        for s in shards
    ]
    if not calls:
        return [], {}
    replies = yield steps.Pipeline(calls)
    received = (yield steps.Clock()).wall()
    out: list[Delivery] = []
    left = _Leftovers.none()
    nxt: dict[int, str] = {}
    for s, reply in zip(shards, replies, strict=True):
        nxt[s], taken = parse_claim(reply)
        out += _deliveries(ns, group, s, taken, left, received=received)
    yield from _settle_leftovers(group, consumer, left)
    return out, nxt


def touch(consumer: str, deliveries: Sequence[Delivery]) -> Op[list[Delivery]]:
    """Reset the idle time of entries the consumer is still handling (one script per
    shard, pipelined). Returns those another consumer has taken over meanwhile."""
    by_shard: dict[int, list[Delivery]] = {}
    for d in deliveries:
        by_shard.setdefault(d.outcome.shard, []).append(d)
    if not by_shard:
        return []
    calls = [
        touch_call(ds[0].keys, ds[0].group, consumer, [d.entry_id for d in ds])
        for ds in by_shard.values()
    ]
    replies = yield steps.Pipeline(calls)
    lost: list[Delivery] = []
    for ds, reply in zip(by_shard.values(), replies, strict=True):
        gone = set(parse_touch(reply))
        lost += [d for d in ds if d.entry_id in gone]
    return lost


def ack(delivery: Delivery) -> Op[None]:
    yield from ack_many([delivery])


def ack_many(deliveries: Sequence[Delivery]) -> Op[int]:
    """Acknowledge many deliveries, pipelined, one call per stream (and group); with
    it, the errors kept of those that had failed before (an attempt after the first).
    A client that waits for durability waits on them: one script a stream
    (``lua/ack.lua``), so an acknowledgement a failover could lose raises NotDurable,
    and one sent again is confirmed (the script writes even when it finds the entries
    acknowledged already). Any other sends XACK and HDEL (a script costs the server
    ~10 us more a call). Returns how many found nothing pending to acknowledge:
    acknowledged already (another consumer took it over, or this is a retry), or the
    stream is not that server's (a master being replaced)."""
    by_stream: dict[tuple[str, str], tuple[Delivery, list[str], list[str]]] = {}
    for d in deliveries:
        _, ids, failed = by_stream.setdefault((d.stream, d.group), (d, [], []))
        ids.append(d.entry_id)
        if d.outcome.attempt > 1:
            failed.append(d.entry_id)
    if not by_stream:
        return 0
    asked = sum(len(ids) for _, ids, _ in by_stream.values())
    if (yield steps.Waits()):
        calls = [ack_call(d.keys, d.group, ids, failed) for d, ids, failed in by_stream.values()]
        return asked - sum(int(r) for r in (yield steps.Pipeline(calls)))
    plain = [steps.Command("xack", (d.stream, d.group, *ids)) for d, ids, _ in by_stream.values()]
    plain += [
        steps.Command("hdel", (d.keys.errors(d.group), *failed))
        for d, _, failed in by_stream.values()
        if failed
    ]
    replies = yield steps.Pipeline(plain)
    return asked - sum(int(r) for r in replies[: len(by_stream)])


def retry(delivery: Delivery, delay_ms: int, error: str = "") -> Op[int | None]:
    """Schedule the delivery's next attempt in ``delay_ms``; its retry time (ms) or None
    if it is no longer pending (acknowledged elsewhere). ``error``: the failed
    attempt's, kept for the dead letter it may become ('': not a failure)."""
    check_int("delay_ms", delay_ms, 0, TEN_YEARS_MS)  # longer: a unit written wrong
    d = delivery
    call = retry_call(d.keys, d.group, d.entry_id, delay_ms, attempt=d.outcome.attempt, error=error)
    return parse_retry((yield call))


def dead_letter(delivery: Delivery, consumer: str, error: str) -> Op[str | None]:
    """Move the delivery to the dead letters with its last error; the dead letter's id,
    or None if it is no longer pending (acknowledged elsewhere)."""
    call = dead_call(
        delivery.keys,
        delivery.group,
        delivery.entry_id,
        consumer,
        attempts=delivery.outcome.attempt,
        error=error,
    )
    return parse_dead((yield call))


def retrying(ns: Namespace, group: str) -> Op[int]:
    """How many of the group's outcomes wait for their retry time, over every shard."""
    shards = range(ns.meta.shards)
    counts = yield steps.Pipeline(
        [steps.Command("zcard", (ns.shard(s).retries(group),)) for s in shards]
    )
    return sum(int(n) for n in counts)


def leave(ns: Namespace, group: str, consumer: str) -> Op[int]:
    """Remove the consumer from the group on every shard where it owes nothing; on how
    many shards it stays (entries still pending for it)."""
    calls = [leave_group_call(ns.shard(s), group, consumer) for s in range(ns.meta.shards)]
    replies = yield steps.Pipeline(calls, errors_in_slots=True)
    return sum(1 for r in replies if not isinstance(r, Exception) and int(r) == 0)


# -- reading without a group ----------------------------------------------------------------


def follow(
    ns: Namespace, *, history: bool, block_ms: int, per_stream: bool, stop_when_idle: bool
) -> Op[None]:
    """Emit each outcome as it lands, with no consumer group (nothing is left behind).

    From now on, or with ``history`` from the oldest outcome the streams hold, in the
    order they were decided across the shards (each stream is in order; a read's
    entries are merged by their ids' time, and one past the newest entry of a stream
    that may hold more waits for that stream's next read). Dead letters put back for a
    group are not new outcomes and are not shown.
    """
    streams = ns.outcome_streams()
    held: list[tuple[tuple[int, int], str, Any, Any]] = []  # read, not yet in order
    if history:
        last = dict.fromkeys(streams, "0-0")
    else:
        tops = yield steps.Pipeline(
            [steps.Command("xrevrange", (s, "+", "-"), {"count": 1}) for s in streams]
        )
        last = {s: text(t[0][0]) if t else "0-0" for s, t in zip(streams, tops, strict=True)}
    while True:
        reply = yield from _follow_read(streams, last, block_ms, per_stream, stop_when_idle)
        if not reply and not held:
            if stop_when_idle:
                return
            continue
        limit: tuple[int, int] | None = None  # the newest a stream with more to read gave
        for stream, entries in reply:
            name = text(stream)
            for entry_id, fields in entries:
                last[name] = text(entry_id)
                if fields and b"only" not in fields:
                    held.append((_entry_time(last[name]), name, entry_id, fields))
            if len(entries) >= FOLLOW_COUNT:
                newest = _entry_time(last[name])
                limit = newest if limit is None else min(limit, newest)
        held.sort(key=lambda h: h[0])
        ready = held if limit is None else [h for h in held if h[0] <= limit]
        held = held[len(ready) :]
        for _, name, entry_id, fields in ready:
            yield steps.Emit(outcome_or_undecodable(streams[name], entry_id, fields))


FOLLOW_COUNT = 1000  # entries a follow reads from a stream at once


def _follow_read(
    streams: dict[str, Any],
    last: dict[str, str],
    block_ms: int,
    per_stream: bool,
    stop_when_idle: bool,
) -> Op[list[Any]]:
    """One read of every stream after ``last``: one XREAD that blocks, or (``per_stream``,
    where one command may not name keys of several nodes) one a stream, polled until
    something comes or the block's time is up."""
    if not per_stream:
        wait = None if stop_when_idle else block_ms
        got = yield steps.Command("xread", (dict(last),), {"count": FOLLOW_COUNT, "block": wait})
        return list(got or [])
    reply: list[Any] = []
    clock = yield steps.Clock()
    end = clock.monotonic() + (0 if stop_when_idle else block_ms / 1000)
    while True:
        for s in streams:
            got = yield steps.Command("xread", ({s: last[s]},), {"count": FOLLOW_COUNT})
            reply.extend(got or [])
        if reply or clock.monotonic() >= end:
            return reply
        yield steps.Sleep(POLL_S)


def _entry_time(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)
