"""A page of the pending timers of every shard by next due, read in the shards' own
order and merged (a k-way merge), never by a scan of the keyspace. Sans-I/O, as
:mod:`timer.durable.timers.ops`; read-only.

A shard keeps no sorted set of its timers: it keeps sorted sets of its buckets (fine,
``bucket_ms`` wide, and coarse, an hour wide, for far timers), each bucket a lazy list
of ids (:mod:`lua/include/buckets.lua`). So a shard's timers come in due order a bucket
at a time: its next buckets by start (``ZRANGEBYSCORE … LIMIT``, fine and coarse
interleaved by start), each read whole (``LRANGE``) and its ids' records read
(``HMGET``): each id is taken once, while pending, at its deadline (a decided
timer's stale id is skipped; a moved one's is taken where it is first found, at where
it is due now, and not again). Buckets are read in rounds, every shard's in one
pipeline a step, until no shard's unread buckets could hold a timer of the page: once
``limit`` timers are taken over every shard, a shard whose first unread bucket starts
after the ``limit``-th soonest of them is read no further (nor is one with nothing
left). Then the shards' lists are merged (``heapq.merge``) on ``(deadline, id)``,
which orders timers due at the same ms across shards too. What a page costs grows
with the timers in the buckets it touches, not with how many are pending.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any

import msgpack

from ...errors import InvalidInput
from ..model import steps
from ..model.checks import check_int
from ..model.codec import _PENDING, decode_payload, decode_pending, text
from ..model.fields import MAX_ID_BYTES
from ..model.globs import check_glob, redis_glob
from ..model.models import COARSE_MS
from ..model.namespace import Namespace
from ..model.steps import Op
from .search import _MISSING, _as_text, _at, check_payload_filter

PAGE_MOST = 500  # timers one page holds at most
READ_MOST = 200_000  # ids one page reads at most over every shard (a narrow filter)
FIRST_BUCKETS, MOST_BUCKETS = 1, 256  # buckets a shard reads a round: doubled each round
CHUNK = 1000  # ids one HMGET asks for
MAX_DUE = 2**53  # a deadline in a cursor: what JSON carries exactly
PRIORITY_AT = _PENDING.index("priority")  # its place in a pending record (data-model.md)


@dataclass(frozen=True)
class PendingQuery:
    """Which pending timers: whose id matches ``match`` (a Redis glob), whose payload's
    ``field`` (a dotted path) holds ``value`` (compared as text, as the outcome search
    does), of priority at least ``min_priority``."""

    match: str | None = None
    field: str | None = None
    value: str | None = None
    min_priority: int | None = None

    @classmethod
    def of(
        cls,
        *,
        match: object = None,
        payload: object = None,
        min_priority: object = None,
    ) -> PendingQuery:
        """A checked query; InvalidInput says what is wrong."""
        glob = check_glob(match) if match not in (None, "") else None
        fld, value = check_payload_filter(payload)
        low = None if min_priority is None else check_int("min_priority", min_priority, -100, 100)
        return cls(glob, fld, value, low)

    def wants(self, tid: str, rec: list[Any]) -> bool:
        """Whether it selects the timer ``tid`` of the pending record ``rec`` (its msgpack
        array, as :func:`_peek` read it)."""
        if self.min_priority is not None and _priority(rec) < self.min_priority:
            return False
        if self.match is not None and not redis_glob(self.match)(tid):
            return False
        if self.field is None:
            return True
        held = _at(decode_payload(rec[1]), self.field)
        return held is not _MISSING and _as_text(held) == self.value


@dataclass(frozen=True)
class PendingTimer:
    """A pending timer as a page lists it."""

    id: str
    shard: int
    deadline_ms: int
    created_ms: int
    priority: int
    note: str | None


@dataclass(frozen=True)
class PendingPage:
    """A page of pending timers, soonest first; ``after``: where the next page starts
    (None: no more), ``stopped``: the page read its most (``READ_MOST`` ids) before it
    was full, so it ends where the reading stopped and the next goes on from there;
    ``read``: the ids it read."""

    timers: list[PendingTimer]
    after: tuple[int, str] | None
    stopped: bool
    read: int


def cursor_text(after: tuple[int, str]) -> str:
    """A cursor as a query carries it: ``<deadline ms>:<id>``."""
    return f"{after[0]}:{after[1]}"


def parse_cursor(cursor: object) -> tuple[int, str]:
    """``<deadline ms>:<id>`` (the id may hold ``:``; empty: every timer due from then)."""
    if not isinstance(cursor, str) or ":" not in cursor:
        raise InvalidInput(
            f"cursor must be <deadline ms>:<timer id> as a page gave it, got {cursor!r:.80}"
        )
    due, tid = cursor.split(":", 1)
    if not due.isdigit() or not due.isascii() or int(due) > MAX_DUE:
        raise InvalidInput(f"a cursor's deadline is a whole number of ms, got {due[:40]!r}")
    try:
        size = len(tid.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInput("a cursor's timer id has a lone surrogate: no UTF-8 form") from None
    if size > MAX_ID_BYTES:
        raise InvalidInput(f"a cursor's timer id is {size} bytes; an id is at most {MAX_ID_BYTES}")
    return int(due), tid


@dataclass
class _Shard:
    """Where one shard's reading is: the bounds of its unread buckets (ZRANGEBYSCORE's
    min), the timers taken, and ``bound``: every timer of it due before this was read
    (its first unread bucket's start)."""

    shard: int
    fine_from: str
    coarse_from: str
    taken: list[tuple[int, str, bytes]] = field(default_factory=list)  # due, id, record
    seen: set[str] = field(default_factory=set)
    bound: float = -math.inf


def _kth(shards: list[_Shard], limit: int) -> float:
    """The ``limit``-th soonest deadline taken over every shard (inf: fewer taken). A
    shard whose unread buckets start after it holds no timer of the page: each is due
    at its bucket's start or later, after ``limit`` timers already taken."""
    dues = [t[0] for sh in shards for t in sh.taken]
    if len(dues) < limit:
        return math.inf
    return heapq.nsmallest(limit, dues)[-1]


def pending_page(
    ns: Namespace, q: PendingQuery, after: tuple[int, str] | None, limit: int
) -> Op[PendingPage]:
    """Up to ``limit`` pending timers ``q`` selects, soonest first, after ``after``
    (``(deadline_ms, id)``, exclusive: the last of the previous page)."""
    check_int("limit", limit, 1, PAGE_MOST)
    bucket_ms = ns.meta.bucket_ms
    fine_from = coarse_from = "-inf"
    if after is not None:
        fine_from = str(after[0] // bucket_ms * bucket_ms)
        coarse_from = str(after[0] // COARSE_MS * COARSE_MS)
    shards = [_Shard(s, fine_from, coarse_from) for s in range(ns.meta.shards)]
    read, size = 0, FIRST_BUCKETS
    while True:
        last = _kth(shards, limit)
        active = [sh for sh in shards if sh.bound <= last and sh.bound != math.inf]
        if not active or read >= READ_MOST:
            break
        read += yield from _round(ns, q, after, active, size)
        size = min(size * 2, MOST_BUCKETS)
    edge = min(sh.bound for sh in shards)
    ordered = heapq.merge(*(sorted(t[:2] for t in sh.taken) for sh in shards))
    by_id = {t[1]: (sh.shard, t[2]) for sh in shards for t in sh.taken}
    page: list[PendingTimer] = []
    for d, tid in ordered:
        if d >= edge or len(page) == limit:
            break
        shard, raw = by_id[tid]
        rec = decode_pending(raw)  # whole, for the page's own timers only
        page.append(
            PendingTimer(tid, shard, d, rec["created_ms"], rec["priority"], rec["note"] or None)
        )
    if len(page) == limit:
        return PendingPage(page, (page[-1].deadline_ms, page[-1].id), False, read)
    if edge == math.inf:
        return PendingPage(page, None, False, read)
    return PendingPage(page, (int(edge), ""), True, read)  # the reading stopped here


def _round(
    ns: Namespace,
    q: PendingQuery,
    after: tuple[int, str] | None,
    active: list[_Shard],
    size: int,
) -> Op[int]:
    """Each active shard's next buckets read (at most ``size``, fine and coarse by start):
    three pipelined steps for them all. The ids read."""
    heads = yield steps.Pipeline(
        [
            c
            for sh in active
            for c in (
                steps.Command(
                    "zrangebyscore",
                    (ns.shard(sh.shard).buckets, sh.fine_from, "+inf"),
                    {"start": 0, "num": size + 1, "withscores": True},
                ),
                steps.Command(
                    "zrangebyscore",
                    (ns.shard(sh.shard).coarse_buckets, sh.coarse_from, "+inf"),
                    {"start": 0, "num": 2, "withscores": True},
                ),
            )
        ]
    )
    lists: list[tuple[_Shard, str]] = []  # a shard, a bucket to read
    for k, sh in enumerate(active):
        sk = ns.shard(sh.shard)
        fine = [(int(m), int(s)) for m, s in heads[2 * k]]
        coarse = [(int(m), int(s)) for m, s in heads[2 * k + 1]]
        first_far = coarse[0][1] if coarse else math.inf
        near = [b for b in fine[:size] if b[1] < first_far]
        if near:  # the fine buckets that start before the first coarse one
            lists += [(sh, sk.bucket(n)) for n, _ in near]
            sh.fine_from = f"({near[-1][1]}"
            next_fine = fine[len(near)][1] if len(fine) > len(near) else math.inf
            next_far = first_far
        elif coarse:  # a coarse bucket first: read it alone (it may hold an hour's timers)
            m, start = coarse[0]
            lists.append((sh, sk.coarse(m)))
            sh.coarse_from = f"({start}"
            next_fine = fine[0][1] if fine else math.inf
            next_far = coarse[1][1] if len(coarse) > 1 else math.inf
        else:
            next_fine = next_far = math.inf
        sh.bound = min(next_fine, next_far)
    if not lists:
        return 0
    members = yield steps.Pipeline([steps.Command("lrange", (key, 0, -1)) for _, key in lists])
    asked: dict[int, tuple[_Shard, list[str]]] = {}
    read = 0
    for (sh, _), part in zip(lists, members, strict=True):
        read += len(part)
        asked.setdefault(sh.shard, (sh, []))[1].extend(text(m) for m in part)
    calls: list[tuple[_Shard, list[str]]] = []
    commands: list[steps.Command] = []
    for sh, found in asked.values():
        ids = [t for t in dict.fromkeys(found) if t not in sh.seen]
        for i in range(0, len(ids), CHUNK):
            chunk = ids[i : i + CHUNK]
            calls.append((sh, chunk))
            commands.append(steps.Command("hmget", (ns.shard(sh.shard).timers, chunk)))
    records = (yield steps.Pipeline(commands)) if commands else []
    for (sh, chunk), raws in zip(calls, records, strict=True):
        for tid, raw in zip(chunk, raws, strict=True):
            if raw is None:
                continue  # decided: a stale id of a list
            # pending: taken once, at its deadline, whichever bucket it was found in
            # first (one it moved out of keeps its id), so a list is ordered by that alone
            rec = _peek(raw)
            d = rec[0]
            sh.seen.add(tid)
            if (after is None or (d, tid) > after) and q.wants(tid, rec):
                sh.taken.append((d, tid, raw))
    return read


def _peek(raw: bytes) -> list[Any]:
    """A pending record's msgpack array as stored (deadline first, payload second, the
    priority 13th when not 0): a page reads many records to keep a few, so each is
    looked at without decoding its text (:func:`decode_pending` does, for those kept)."""
    rec = msgpack.unpackb(raw, raw=True, strict_map_key=False)
    if not isinstance(rec, list) or not rec or not isinstance(rec[0], int):
        raise ValueError("a pending record is a msgpack array that starts with its deadline")
    return rec


def _priority(rec: list[Any]) -> int:
    return int(rec[PRIORITY_AT]) if len(rec) > PRIORITY_AT else 0
