"""A page of the pending timers of every shard by next due, read in the shards' own
order and merged (a k-way merge), never by a scan of the keyspace. Sans-I/O, as
:mod:`timer.durable.timers.ops`; it writes only the shards' heads.

First from each shard's head (``lua/include/head.lua``: its soonest pending timers,
every one due before the head's bound; ``pending_head.lua`` fills it from the buckets
when it has no bound or too few, and drops the stale entries it meets): a few records a
shard, in rounds while a shard may hold more before the page's last timer
(:func:`_from_heads`). A page a head cannot answer (one ends before the page does, or a
filter) reads the buckets, as follows.

A shard keeps no sorted set of all its timers: it keeps sorted sets of its buckets (fine,
``bucket_ms`` wide, and coarse, an hour wide, for far timers), each bucket a lazy list
of ids (:mod:`lua/include/buckets.lua`). So a shard's timers come in due order a bucket
at a time: its next buckets by start (``ZRANGEBYSCORE … LIMIT``, fine and coarse
interleaved by start), then those buckets read on the server (``pending_page.lua``, one
call a shard, its keys all in its slot): each id taken once, while pending, at its
deadline (a decided timer's stale id is skipped; a moved one's is taken where it is
first found, at where it is due now, and not again), and only the shard's soonest
``limit`` sent back (with every one due at the same ms as the last of them, and every
one due at the cursor's own ms: ids are ordered here, as Python orders them). A bucket
holds every timer due in its second, so a page's own few cost the reading of every id
of those buckets; on the server that is a record and a comparison an id, where here it
was a record sent, parsed and unpacked. A glob or a payload field is matched here, so
with one of those every candidate comes back.

Buckets are read in rounds, every shard's in one pipeline a step, until no shard's
unread buckets could hold a timer of the page: once ``limit`` timers are taken over
every shard, a shard whose first unread bucket starts after the ``limit``-th soonest of
them is read no further (nor is one with nothing left). Then the shards' lists are
merged (``heapq.merge``) on ``(deadline, id)``, which orders timers due at the same ms
across shards too. What a page costs grows with the timers in the buckets it touches,
not with how many are pending.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from ...errors import InvalidInput, quoted
from ..model import steps
from ..model.checks import check_int
from ..model.codec import _PENDING, decode_payload, decode_pending, text
from ..model.fields import MAX_ID_BYTES
from ..model.globs import check_glob, redis_glob
from ..model.models import COARSE_MS
from ..model.namespace import Namespace
from ..model.scripts import ScriptName
from ..model.steps import Op
from .search import _MISSING, _as_text, _at, check_payload_filter

PAGE_MOST = 500  # timers one page holds at most
READ_MOST = 200_000  # ids one page reads at most over every shard (a narrow filter)
FIRST_BUCKETS, MOST_BUCKETS = 1, 256  # buckets a shard reads a round: doubled each round
# without a glob or a payload field the server stops a shard's reading by itself once no
# further bucket can hold a timer it sends back, so a first round may name more buckets:
# a bucket of stale ids (cancelled timers) at the head costs no round of its own
FIRST_BUCKETS_KEPT = 4
HEAD_ROUNDS = 3  # rounds a page asks of the shards' heads before it reads their buckets
# namespace -> shard -> how many of the last page's timers it held: how many a first
# round asks of it (a hint only: a page is the same whatever it says)
_LAST_SHARES: dict[str, collections.Counter[int]] = {}
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
            f"cursor must be <deadline ms>:<timer id> as a page gave it, got {quoted(cursor, 80)}"
        )
    due, tid = cursor.split(":", 1)
    if not due.isdigit() or not due.isascii() or int(due) > MAX_DUE:
        raise InvalidInput(f"a cursor's deadline is a whole number of ms, got {quoted(due[:40])}")
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
    filtered = q.match is not None or q.field is not None
    read, size = 0, FIRST_BUCKETS if filtered else FIRST_BUCKETS_KEPT
    if not filtered and q.min_priority is None:
        answered, read = yield from _from_heads(ns, after, limit)
        if answered is not None:
            return answered
    while True:
        last = _kth(shards, limit)
        active = [sh for sh in shards if sh.bound <= last and sh.bound != math.inf]
        if not active or read >= READ_MOST:
            break
        read += yield from _round(ns, q, after, active, size, limit=limit, last=last)
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


@dataclass
class _Head:
    """Where one shard's head is read to: the entries sent (after the page's cursor, in
    order), and ``bound``: every pending timer of the shard before it is among them
    (``(deadline, id + "\0")`` right after the last sent; ``(S, "")`` once the head is read
    to its own bound S), and whether that is the head's end (``ended``: no more to ask)."""

    shard: int
    taken: list[tuple[int, str, bytes]] = field(default_factory=list)
    bound: tuple[float, str] = (-math.inf, "")
    ended: bool = False


def _from_heads(
    ns: Namespace, after: tuple[int, str] | None, limit: int
) -> Op[tuple[PendingPage | None, int]]:
    """The page from the shards' heads (``pending_head.lua``, every shard's in one
    pipelined step a round), or None when a head ends before the page does (then the
    buckets are read); and the ids a fill read. A first round asks each shard for about
    twice its share of the page; a shard whose last sent is before the page's last timer
    is asked again for a page's worth after it."""
    heads = [_Head(s) for s in range(ns.meta.shards)]
    # a first round asks each shard for twice its share of the page, or more of one that
    # held more of the last page (timers are seldom spread evenly: a batch scheduled
    # together falls due shard by shard, a ms or two apart); a second round is a round trip
    share = max(4, -(-2 * limit // len(heads)))
    held: Mapping[int, int] = _LAST_SHARES.get(ns.name, {})
    wants = {h.shard: max(share, held.get(h.shard, 0) * 3 // 2 + 2) for h in heads}
    ask, read = heads, 0
    for _ in range(HEAD_ROUNDS):
        replies = yield steps.Pipeline(
            [
                steps.ScriptCall(
                    ScriptName.PENDING_HEAD,
                    [sk.timers, sk.guard, sk.head, sk.head_bound, sk.buckets, sk.coarse_buckets],
                    [sk.prefix, *(("", "") if cur is None else cur), wants[h.shard]],
                    wait=False,
                )
                for h in ask
                for sk, cur in [(ns.shard(h.shard), h.taken[-1][:2] if h.taken else after)]
            ]
        )
        for h, reply in zip(ask, replies, strict=True):
            read += int(reply[1])
            end = (float(text(reply[0])), "")  # "inf", "-inf" or S
            sent = [
                (int(reply[k]), text(reply[k + 1]), reply[k + 2]) for k in range(3, len(reply), 3)
            ]
            h.taken += sent
            h.bound, h.ended = end, True
            if int(reply[2]) and sent[-1][:2] < end:  # the head may hold more after it
                d, tid = sent[-1][:2]
                h.bound, h.ended = (d, tid + "\0"), False  # right after the last sent
        known = heapq.merge(*([t for t in h.taken if t[:2] < h.bound] for h in heads))
        first = list(itertools.islice(known, limit))
        last = first[-1][:2] if len(first) == limit else (math.inf, "")
        ask = [h for h in heads if h.bound <= last and h.bound != (math.inf, "")]
        if not ask:
            shard_of = {t[1]: h.shard for h in heads for t in h.taken}
            page = [_listed(t, shard_of[t[1]]) for t in first]
            if len(_LAST_SHARES) >= 64:  # namespaces remembered: a few a process
                _LAST_SHARES.clear()
            _LAST_SHARES[ns.name] = collections.Counter(t.shard for t in page)
            cursor = (page[-1].deadline_ms, page[-1].id) if len(page) == limit else None
            return PendingPage(page, cursor, False, read), read
        if any(h.ended for h in ask):
            return None, read
        wants = dict.fromkeys(wants, limit)
    return None, read


def _listed(t: tuple[int, str, bytes], shard: int) -> PendingTimer:
    rec = decode_pending(t[2])  # whole, for the page's own timers only
    return PendingTimer(t[1], shard, t[0], rec["created_ms"], rec["priority"], rec["note"] or None)


def _round(
    ns: Namespace,
    q: PendingQuery,
    after: tuple[int, str] | None,
    active: list[_Shard],
    size: int,
    *,
    limit: int,
    last: float,
) -> Op[int]:
    """Each active shard's next buckets read (at most ``size``, fine and coarse by start):
    which ones, then each shard's read on the server (``pending_page.lua``), two
    pipelined steps for them all. The ids read."""
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
    # each shard's buckets to read, in due order, each with where the shard's reading
    # stands once the script read up to it: (key, bound, fine_from, coarse_from)
    plans: list[tuple[_Shard, list[tuple[str, float, str, str]]]] = []
    for k, sh in enumerate(active):
        sk = ns.shard(sh.shard)
        fine = [(int(m), int(s)) for m, s in heads[2 * k]]
        coarse = [(int(m), int(s)) for m, s in heads[2 * k + 1]]
        first_far = coarse[0][1] if coarse else math.inf
        near = [b for b in fine[:size] if b[1] < first_far]
        plan: list[tuple[str, float, str, str]] = []
        if near:  # the fine buckets that start before the first coarse one
            after_near = fine[len(near)][1] if len(fine) > len(near) else math.inf
            for j, (n, start) in enumerate(near):
                nxt = near[j + 1][1] if j + 1 < len(near) else min(after_near, first_far)
                plan.append((sk.bucket(n), nxt, f"({start}", sh.coarse_from))
        elif coarse:  # a coarse bucket first: read it alone (it may hold an hour's timers)
            m, start = coarse[0]
            nxt = min(
                fine[0][1] if fine else math.inf, coarse[1][1] if len(coarse) > 1 else math.inf
            )
            plan.append((sk.coarse(m), nxt, sh.fine_from, f"({start}"))
        else:
            sh.bound = math.inf
        if plan:
            plans.append((sh, plan))
    if not plans:
        return 0
    # the server keeps each shard's soonest; a glob or a payload field is matched here,
    # so with one of those every candidate comes back (a cut before the match loses some)
    keep = 0 if q.match is not None or q.field is not None else limit
    args = [
        "" if after is None else after[0],
        keep,
        "" if q.min_priority is None else q.min_priority,
        "" if last == math.inf else int(last),
    ]
    replies = yield steps.Pipeline(
        [
            steps.ScriptCall(
                ScriptName.PENDING_PAGE,
                [ns.shard(sh.shard).timers, ns.shard(sh.shard).guard, *(b[0] for b in plan)],
                [*args, *("" if b[1] == math.inf else int(b[1]) for b in plan)],
                wait=False,
            )
            for sh, plan in plans
        ]
    )
    read = 0
    for (sh, plan), reply in zip(plans, replies, strict=True):
        read += int(reply[0])
        _, sh.bound, sh.fine_from, sh.coarse_from = plan[int(reply[1]) - 1]
        for k in range(2, len(reply), 3):
            d, tid, raw = int(reply[k]), text(reply[k + 1]), reply[k + 2]
            # taken once, at its deadline, whichever bucket it was found in first (one
            # it moved out of keeps its id): the server dedups one call's buckets, this
            # every call's
            if tid in sh.seen:
                continue
            sh.seen.add(tid)
            # those due at the cursor's ms all come back: their ids are ordered here
            if (after is None or (d, tid) > after) and (keep or q.wants(tid, _peek(raw))):
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
