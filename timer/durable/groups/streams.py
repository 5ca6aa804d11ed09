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

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import CorruptRecord, StoreError
from ..model import steps
from ..model.checks import check_int
from ..model.codec import text
from ..model.durations import TEN_YEARS_MS
from ..model.entries import for_group, outcome_from_entry
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
    parse_read,
    parse_retry,
    parse_touch,
    read_call,
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
    ns: Namespace,
    group: str,
    consumer: str,
    *,
    count: int,
    block_ms: int | None,
    per_stream: bool,
    first: int = 0,
) -> Op[list[Delivery]]:
    """Outcomes never delivered to the group, at most ``count`` in all (shard by shard
    from shard ``first`` on: the caller rotates it), waiting up to ``block_ms`` (None:
    not at all). Returns a list of :class:`Delivery` (first deliveries); empty only when
    the streams held nothing new. A read that met only entries that are not deliveries
    (broken ones, dead-lettered; foreign ones, acknowledged) reads on at once: a reader
    that stops when idle took such a read for the end and left the outcomes behind them
    unread."""
    while True:
        out, read = yield from _read_once(
            ns, group, consumer, count, block_ms=block_ms, per_stream=per_stream, first=first
        )
        if out or not read:
            return out
        block_ms = None


def _read_once(
    ns: Namespace,
    group: str,
    consumer: str,
    count: int,
    *,
    block_ms: int | None,
    per_stream: bool,
    first: int,
) -> Op[tuple[list[Delivery], int]]:
    """One read: its deliveries, and how many entries it took from the streams.

    XREADGROUP's COUNT applies to each stream, so a read of every stream at once could
    take up to ``count`` from each: each read takes at most what is still missing
    (:func:`_read_server` on one server; on a Cluster, one stream at a time)."""
    shard = ns.outcome_streams()
    streams = list(shard)
    streams = streams[first % len(streams) :] + streams[: first % len(streams)]
    entries: list[tuple[str, str, Any]] = []
    if per_stream:  # a Redis Cluster: one read per stream (no multi-slot read), polling
        clock = yield steps.Clock()
        end = clock.monotonic() + (block_ms or 0) / 1000
        while True:
            for stream in streams:
                if len(entries) >= count:
                    break
                got = yield steps.Command(
                    "xreadgroup",
                    (group, consumer, {stream: ">"}),
                    {"count": count - len(entries)},
                    confirmed=True,
                    key=stream,
                )
                entries += [(stream, e, f) for _, es in got or [] for e, f in es]
            if entries or clock.monotonic() >= end:
                break
            yield steps.Sleep(min(POLL_S, max(0.0, end - clock.monotonic())))
    else:
        entries = yield from _read_server(streams, group, consumer, count, block_ms)
    left = _Leftovers.none()
    received = (yield steps.Clock()).wall()
    by_stream: dict[str, list[tuple[Any, Mapping[bytes, bytes], int]]] = {}
    for stream, entry_id, fields in entries:
        by_stream.setdefault(stream, []).append((entry_id, fields, 1))
    out: list[Delivery] = []
    for stream, taken in by_stream.items():
        out += _deliveries(ns, group, shard[stream], taken, left, received=received)
    yield from _settle_leftovers(group, consumer, left)
    return out, len(entries)


def _read_server(
    streams: list[str], group: str, consumer: str, count: int, block_ms: int | None
) -> Op[list[tuple[str, str, Any]]]:
    """At most ``count`` new entries of one server's ``streams``: (stream, id, fields).

    With ``count`` at least the number of streams, one XREADGROUP of every stream takes
    ``count // streams`` from each (never more than ``count``, and hiredis parses it);
    read.lua then takes the rest stream by stream when a stream had more and the rest is
    at least one a stream. A smaller count is read by read.lua alone. A blocked read's
    wake-up (nothing was there) takes ``count // streams``, at least one, from each
    stream that has an entry: past ``count`` only if a small count meets several shards'
    outcomes in the same instant."""
    n = len(streams)
    per = count // n
    if per:
        entries = yield from _xreadgroup(streams, group, consumer, per, None)
    else:
        entries = yield from _read_lua(streams, group, consumer, count)
        if entries or block_ms is None:
            return entries
        per = 1
    if not entries and block_ms is not None:
        entries = yield from _xreadgroup(streams, group, consumer, per, block_ms)
    left = count - len(entries)
    taken = Counter(s for s, _, _ in entries)
    if left > 0 and per in taken.values() and (count < n or left >= n):  # one has more
        entries += yield from _read_lua(streams, group, consumer, left)
    return entries


def _xreadgroup(
    streams: list[str], group: str, consumer: str, count: int, block_ms: int | None
) -> Op[list[tuple[str, str, Any]]]:
    reply = yield steps.Command(
        "xreadgroup",
        (group, consumer, dict.fromkeys(streams, ">")),
        {"count": count, "block": block_ms},
        confirmed=True,
    )
    return [(text(s), e, f) for s, es in reply or [] for e, f in es]


def _read_lua(
    streams: list[str], group: str, consumer: str, count: int
) -> Op[list[tuple[str, str, Any]]]:
    reply = yield read_call(streams, group, consumer, count)
    return [(streams[k], e, f) for k, e, f in parse_read(reply)]


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


def retry(
    delivery: Delivery, delay_ms: int, error: str = "", *, counted: bool = True
) -> Op[int | None]:
    """Schedule the delivery's next attempt in ``delay_ms``; its retry time (ms) or None
    if it is no longer pending (acknowledged elsewhere). ``error``: the failed
    attempt's, kept for the dead letter it may become ('': not a failure); ``counted``
    False: the delivery was given back unsent, the next one is the same attempt."""
    check_int("delay_ms", delay_ms, 0, TEN_YEARS_MS)  # longer: a unit written wrong
    d = delivery
    call = retry_call(
        d.keys, d.group, d.entry_id, delay_ms, attempt=d.outcome.attempt, error=error,
        counted=counted,
    )  # fmt: skip
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
