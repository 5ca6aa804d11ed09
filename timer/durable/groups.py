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
(``group_infos``, ``delete_group``, dead letters). See docs/design-notes.md, "Handlers".
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import CorruptRecord, StoreError
from . import calls as C
from . import keys as K
from .calls import Op
from .models import ConsumerInfo, DeadLetter, GroupInfo, Outcome

POLL_S = 0.05  # how often a per-stream reader (Redis Cluster) polls while waiting


@dataclass(frozen=True)
class Delivery:
    """An outcome handed to a consumer, with what acknowledging it takes."""

    outcome: Outcome
    keys: K.ShardKeys
    group: str

    @property
    def stream(self) -> str:
        return self.keys.outcomes

    @property
    def entry_id(self) -> str:
        assert self.outcome.entry_id is not None
        return self.outcome.entry_id


def check_group(group: object, consumer: object) -> tuple[str, str]:
    return K.check_name("consumer group", group), K.check_name("consumer", consumer)


def ensure_groups(ns: C.Namespace, group: str, *, start: str = "0") -> Op[None]:
    """Create the group on every shard's stream unless it exists. ``start`` is where a
    new group starts reading: ``0`` everything the streams hold, ``$`` only what comes."""
    create = [
        C.Command("xgroup_create", (stream, group), {"id": start, "mkstream": True})
        for stream in ns.outcome_streams()
    ]
    for reply in (yield C.Pipeline(create, errors_in_slots=True)):
        if isinstance(reply, StoreError) and reply.code == "BUSYGROUP":
            continue  # the group exists already: that is what we want
        C.error_or(reply)


@dataclass
class _Leftovers:
    """Entries a read handed this consumer that are not deliveries: ``foreign`` to ack
    unseen (trimmed while pending, or put back for another group), ``broken`` to
    dead-letter (no reader can decode them: a reader must not stop on one)."""

    foreign: list[tuple[str, str]]
    broken: list[tuple[K.ShardKeys, str, int, str]]  # (shard, entry id, deliveries, why)

    @classmethod
    def none(cls) -> _Leftovers:
        return cls([], [])


def _deliveries(
    ns: C.Namespace,
    group: str,
    shard: int,
    entries: Iterable[tuple[Any, Mapping[bytes, bytes], int]],
    left: _Leftovers,
) -> list[Delivery]:
    sk = ns.shard(shard)
    stream = sk.outcomes
    out: list[Delivery] = []
    for entry_id, fields, deliveries in entries:
        if not fields:  # an entry trimmed while pending comes back empty
            left.foreign.append((stream, C.text(entry_id)))
        elif not C.for_group(fields, group):
            left.foreign.append((stream, C.text(entry_id)))  # put back for another group
        else:
            try:
                outcome = C.outcome_from_entry(shard, entry_id, fields, deliveries)
            except CorruptRecord as exc:
                left.broken.append((sk, C.text(entry_id), deliveries, str(exc)))
                continue
            out.append(Delivery(outcome, sk, group))
    return out


def _settle_leftovers(group: str, consumer: str, left: _Leftovers) -> Op[None]:
    if left.foreign:
        yield C.Pipeline([C.Command("xack", (s, group, eid)) for s, eid in left.foreign])
    if left.broken:
        yield C.Pipeline([
            C.dead_call(sk, group, eid, consumer, attempts=n, error=why)
            for sk, eid, n, why in left.broken
        ])  # fmt: skip


def read_new(
    ns: C.Namespace,
    group: str,
    consumer: str,
    *,
    count: int,
    block_ms: int | None,
    per_stream: bool,
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
    ns: C.Namespace, group: str, consumer: str, *, count: int, block_ms: int | None,
    per_stream: bool,
) -> Op[tuple[list[Delivery], int]]:  # fmt: skip
    """One read: its deliveries, and how many entries it took from the streams."""
    streams = ns.outcome_streams()
    reply: list[Any] = []
    if not per_stream:
        reply = (
            yield C.Command(
                "xreadgroup",
                (group, consumer, dict.fromkeys(streams, ">")),
                {"count": count, "block": block_ms},
            )
        ) or []
    else:  # a Redis Cluster: one read per stream (no multi-slot read), polling
        end = time.monotonic() + (block_ms or 0) / 1000
        while True:
            for stream in streams:
                got = yield C.Command(
                    "xreadgroup", (group, consumer, {stream: ">"}), {"count": count}
                )
                reply.extend(got or [])
            if reply or time.monotonic() >= end:
                break
            yield C.Sleep(min(POLL_S, max(0.0, end - time.monotonic())))
    out: list[Delivery] = []
    left = _Leftovers.none()
    read = 0
    for stream, entries in reply:
        shard = streams[C.text(stream)]
        read += len(entries)
        out += _deliveries(ns, group, shard, ((e, f, 1) for e, f in entries), left)
    yield from _settle_leftovers(group, consumer, left)
    return out, read


def claim(
    ns: C.Namespace,
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
        C.claim_call(
            ns.shard(s), group, consumer, count=count, min_idle_ms=min_idle_ms,
            owner=owner, cursor=cursors[s], retries=retries,
        )
        for s in shards
    ]  # fmt: skip
    if not calls:
        return [], {}
    replies = yield C.Pipeline(calls)
    out: list[Delivery] = []
    left = _Leftovers.none()
    nxt: dict[int, str] = {}
    for s, reply in zip(shards, replies, strict=True):
        nxt[s], taken = C.parse_claim(reply)
        out += _deliveries(ns, group, s, taken, left)
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
        C.touch_call(ds[0].keys, ds[0].group, consumer, [d.entry_id for d in ds])
        for ds in by_shard.values()
    ]
    replies = yield C.Pipeline(calls)
    lost: list[Delivery] = []
    for ds, reply in zip(by_shard.values(), replies, strict=True):
        gone = set(C.parse_touch(reply))
        lost += [d for d in ds if d.entry_id in gone]
    return lost


def ack(delivery: Delivery) -> Op[None]:
    yield C.Command("xack", (delivery.stream, delivery.group, delivery.entry_id))


def ack_many(deliveries: Sequence[Delivery]) -> Op[None]:
    """Acknowledge many deliveries: one XACK per stream (and group), pipelined."""
    by_stream: dict[tuple[str, str], list[str]] = {}
    for d in deliveries:
        by_stream.setdefault((d.stream, d.group), []).append(d.entry_id)
    if by_stream:
        yield C.Pipeline([C.Command("xack", (s, g, *ids)) for (s, g), ids in by_stream.items()])


def retry(delivery: Delivery, delay_ms: int) -> Op[int | None]:
    """Schedule the delivery's next attempt in ``delay_ms``; its retry time (ms) or None
    if it is no longer pending (acknowledged elsewhere)."""
    C.check_int("delay_ms", delay_ms, 0)
    call = C.retry_call(delivery.keys, delivery.group, delivery.entry_id, delay_ms)
    return C.parse_retry((yield call))


def dead_letter(delivery: Delivery, consumer: str, error: str) -> Op[str | None]:
    """Move the delivery to the dead letters with its last error; the dead letter's id,
    or None if it is no longer pending (acknowledged elsewhere)."""
    call = C.dead_call(
        delivery.keys, delivery.group, delivery.entry_id, consumer,
        attempts=delivery.outcome.attempt, error=error,
    )  # fmt: skip
    return C.parse_dead((yield call))


def retrying(ns: C.Namespace, group: str) -> Op[int]:
    """How many of the group's outcomes wait for their retry time, over every shard."""
    shards = range(ns.meta.shards)
    counts = yield C.Pipeline([C.Command("zcard", (ns.shard(s).retries(group),)) for s in shards])
    return sum(int(n) for n in counts)


def leave(ns: C.Namespace, group: str, consumer: str) -> Op[int]:
    """Remove the consumer from the group on every shard where it owes nothing; on how
    many shards it stays (entries still pending for it)."""
    calls = [C.leave_group_call(ns.shard(s), group, consumer) for s in range(ns.meta.shards)]
    replies = yield C.Pipeline(calls, errors_in_slots=True)
    return sum(1 for r in replies if not isinstance(r, Exception) and int(r) == 0)


# -- reading without a group ----------------------------------------------------------------


def follow(
    ns: C.Namespace, *, history: bool, block_ms: int, per_stream: bool, stop_when_idle: bool
) -> Op[None]:
    """Emit each outcome as it lands, with no consumer group (nothing is left behind).

    From now on, or with ``history`` from the oldest outcome the streams hold. Dead
    letters put back for a group are not new outcomes and are not shown.
    """
    streams = ns.outcome_streams()
    if history:
        last = dict.fromkeys(streams, "0-0")
    else:
        tops = yield C.Pipeline(
            [C.Command("xrevrange", (s, "+", "-"), {"count": 1}) for s in streams]
        )
        last = {s: C.text(t[0][0]) if t else "0-0" for s, t in zip(streams, tops, strict=True)}
    while True:
        reply: list[Any] = []
        if not per_stream:
            wait = None if stop_when_idle else block_ms
            reply = (yield C.Command("xread", (dict(last),), {"count": 1000, "block": wait})) or []
        else:
            end = time.monotonic() + (0 if stop_when_idle else block_ms / 1000)
            while True:
                for s in streams:
                    got = yield C.Command("xread", ({s: last[s]},), {"count": 1000})
                    reply.extend(got or [])
                if reply or time.monotonic() >= end:
                    break
                yield C.Sleep(POLL_S)
        if not reply:
            if stop_when_idle:
                return
            continue
        for stream, entries in reply:
            name = C.text(stream)
            for entry_id, fields in entries:
                last[name] = C.text(entry_id)
                if fields and b"only" not in fields:
                    yield C.Emit(C.outcome_or_undecodable(streams[name], entry_id, fields))


# -- admin: groups and dead letters ----------------------------------------------------------


def _id_ms(entry_id: Any) -> int:
    return int(C.text(entry_id).split("-", 1)[0])


def group_infos(ns: C.Namespace, now_ms: int) -> Op[list[GroupInfo]]:
    """Every consumer group of the namespace with its consumers, pending, retrying, lag
    and the age of what it owes, summed over the shards' streams."""
    streams = list(ns.outcome_streams().items())
    listed = yield C.Pipeline(
        [C.Command("xinfo_groups", (s,)) for s, _ in streams], errors_in_slots=True
    )
    found: list[tuple[str, int, dict[str, Any]]] = []
    for (stream, shard), reply in zip(streams, listed, strict=True):
        if isinstance(reply, StoreError):
            continue  # no stream yet on this shard
        for g in C.error_or(reply):
            found.append((stream, shard, g))
    if not found:
        return []
    detail: list[C.Command] = []
    for stream, shard, g in found:
        name = C.text(g["name"])
        last = C.text(g["last-delivered-id"])
        detail += [
            C.Command("xinfo_consumers", (stream, name)),
            C.Command("zcard", (ns.shard(shard).retries(name),)),
            C.Command("xrange", (stream, "(" + last, "+"), {"count": 1}),
            C.Command("xpending", (stream, name)),
        ]
    replies = yield C.Pipeline(detail)
    acc: dict[str, dict[str, Any]] = {}
    for i, (_stream, _shard, g) in enumerate(found):
        consumers, retrying, nxt, pending = replies[4 * i : 4 * i + 4]
        name = C.text(g["name"])
        a = acc.setdefault(
            name,
            {"consumers": {}, "pending": 0, "retrying": 0, "lag": 0, "oldest": None, "owes": None,
             "shards": 0},
        )  # fmt: skip
        a["shards"] += 1
        a["pending"] += int(g["pending"])
        a["retrying"] += int(retrying)
        lag = g.get("lag")
        a["lag"] = None if lag is None or a["lag"] is None else a["lag"] + int(lag)
        owed: list[int] = []
        if int(pending["pending"]) > 0:
            oldest = _id_ms(pending["min"])
            owed.append(oldest)
            a["oldest"] = oldest if a["oldest"] is None else min(a["oldest"], oldest)
        if nxt:
            owed.append(_id_ms(nxt[0][0]))
        if owed:
            a["owes"] = min(owed) if a["owes"] is None else min(a["owes"], *owed)
        for c in consumers:
            cname = C.text(c["name"])
            have = a["consumers"].get(cname)
            idle = int(c["idle"])
            cpending = int(c["pending"])
            a["consumers"][cname] = (
                (cpending, idle) if have is None else (have[0] + cpending, min(have[1], idle))
            )
    return [
        GroupInfo(
            name=name,
            consumers=tuple(
                ConsumerInfo(c, p, idle) for c, (p, idle) in sorted(a["consumers"].items())
            ),
            pending=a["pending"],
            retrying=a["retrying"],
            lag=a["lag"],
            oldest_pending_age_ms=None if a["oldest"] is None else max(0, now_ms - a["oldest"]),
            owes_since_ms=a["owes"],
            shards=a["shards"],
        )
        for name, a in sorted(acc.items())
    ]


def delete_group(ns: C.Namespace, group: str) -> Op[int]:
    """Destroy the group on every shard's stream and drop its retry schedule; on how many
    streams it existed. Its dead letters stay (drop them with ``drop_dead_letters``)."""
    K.check_name("consumer group", group)
    shards = range(ns.meta.shards)
    calls: list[C.Command] = []
    for s in shards:
        sk = ns.shard(s)
        calls += [
            C.Command("xgroup_destroy", (sk.outcomes, group)),
            C.Command("delete", (sk.retries(group),)),
        ]
    replies = yield C.Pipeline(calls, errors_in_slots=True)
    return sum(
        1 for r in replies[0::2] if not isinstance(r, StoreError) and int(C.error_or(r)) == 1
    )


def dead_letters(
    ns: C.Namespace, group: str | None = None, *, limit: int = 1000
) -> Op[list[DeadLetter]]:
    """Dead letters (of ``group``, or all), oldest first per shard, at most ``limit``."""
    C.check_int("limit", limit, 1, 1_000_000)
    if group is not None:
        K.check_name("consumer group", group)
    shards = range(ns.meta.shards)
    replies = yield C.Pipeline(
        [C.Command("xrange", (ns.shard(s).dead, "-", "+"), {"count": limit}) for s in shards]
    )
    out: list[DeadLetter] = []
    for s, entries in zip(shards, replies, strict=True):
        for entry_id, fields in entries:
            letter = C.dead_letter_from_entry(s, entry_id, fields)
            if group is None or letter.group == group:
                out.append(letter)
    out.sort(key=lambda d: (d.failed_ms, d.ref))
    return out[:limit]


def dead_letter_count(ns: C.Namespace) -> Op[int]:
    lengths = yield C.Pipeline(
        [C.Command("xlen", (ns.shard(s).dead,)) for s in range(ns.meta.shards)]
    )
    return sum(int(n) for n in lengths)


def get_dead_letter(ns: C.Namespace, ref: object) -> Op[DeadLetter | None]:
    shard, eid = C.parse_ref(ref, ns.meta.shards)
    entries = yield C.Command("xrange", (ns.shard(shard).dead, eid, eid))
    if not entries:
        return None
    return C.dead_letter_from_entry(shard, entries[0][0], entries[0][1])


def redeliver(ns: C.Namespace, ref: object) -> Op[str | None]:
    """Put a dead letter back in front of its group (a new entry of its shard's stream);
    the new entry id, or None when there is no such dead letter (or it holds no outcome)."""
    shard, eid = C.parse_ref(ref, ns.meta.shards)
    return C.parse_redeliver((yield C.redeliver_call(ns.shard(shard), eid)))


def drop_dead_letter(ns: C.Namespace, ref: object) -> Op[bool]:
    """Delete a dead letter; True if it existed."""
    shard, eid = C.parse_ref(ref, ns.meta.shards)
    return int((yield C.Command("xdel", (ns.shard(shard).dead, eid)))) == 1
