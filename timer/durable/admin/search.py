"""Searching the outcomes the shards' streams still hold: by kind, a glob on the
timer id, a time range (a stream entry's id is the ms it was decided, so the range is the
read's own bounds), a payload field's value, and shards; newest first, each shard read
backwards a page a round (every shard's page in one round trip), at most
:data:`SCAN_MOST` entries a search. Sans-I/O, as :mod:`.views`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import InvalidInput, NotFound, StoreError, instant_text, quoted
from ..model import steps
from ..model.checks import check_int
from ..model.codec import text
from ..model.entries import outcome_or_undecodable
from ..model.globs import check_glob, redis_glob
from ..model.keys import check_name
from ..model.models import Outcome
from ..model.namespace import Namespace, check_shards
from ..model.steps import Op

KINDS = ("expired", "cancelled", "completed")
# Where an outcome is for one consumer group: not yet delivered to it, delivered and not
# settled (running, or waiting for a retry), or acknowledged (handled, or dead-lettered)
GROUP_STATES = ("waiting", "in_hand", "settled")
PEL_MOST = 100_000  # a group's outcomes in hand read per shard, to tell in_hand apart
PAGE = 1000  # entries of one shard read a round
SCAN_MOST = 100_000  # entries one search reads at most, over every shard
# An outcome's stream id is never earlier than its decision (decided_ms: the deciding
# script's Redis TIME), but on a server whose scripts see the clock move (Redis 7.0:
# TIME and XADD's '*' both read the clock as they run; Valkey and later Redis freeze it
# for a script) it can be as much later as the script ran. So the ids are read up to
# this far past until_ms, and the range is tested on each outcome's own decided_ms.
ID_LAG_MS = 100
MAX_FIELD = 256


def check_payload_filter(payload: object) -> tuple[str | None, str | None]:
    """(field, value as text) of a payload filter of one field (None: no filter);
    InvalidInput says what is wrong."""
    if payload is None:
        return None, None
    if not isinstance(payload, Mapping) or len(payload) != 1:
        raise InvalidInput(
            f'payload must be one field and its value, e.g. {{"tenant": "acme"}}, '
            f"got {quoted(payload, 80)}"
        )
    ((field, raw),) = payload.items()
    if not isinstance(field, str) or not 0 < len(field) <= MAX_FIELD:
        raise InvalidInput(f"a payload field is text of 1 to {MAX_FIELD} characters")
    return field, raw if isinstance(raw, str) else _as_text(raw)


@dataclass(frozen=True)
class OutcomeQuery:
    """Which outcomes: of ``kind`` (None: any), whose timer id matches ``match``, decided
    in [``since_ms``, ``until_ms``], whose payload's ``field`` (a dotted path into
    nested maps) holds ``value`` (text: a number or true/false is compared as JSON
    writes it), on ``shards`` (None: every shard)."""

    kind: str | None = None
    match: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    field: str | None = None
    value: str | None = None
    shards: tuple[int, ...] | None = None
    group: str | None = None
    state: str | None = None  # GROUP_STATES, with a group

    @classmethod
    def of(
        cls,
        ns: Namespace,
        *,
        kind: object = None,
        match: object = None,
        since_ms: object = None,
        until_ms: object = None,
        payload: object = None,
        shards: object = None,
        group: object = None,
        state: object = None,
    ) -> OutcomeQuery:
        """A checked query; InvalidInput says what is wrong."""
        if kind not in (None, "") and kind not in KINDS:
            raise InvalidInput(f"kind must be one of {', '.join(KINDS)}, got {quoted(kind)}")
        glob = check_glob(match) if match not in (None, "") else None
        lo = None if since_ms is None else check_int("since_ms", since_ms, 0)
        hi = None if until_ms is None else check_int("until_ms", until_ms, 0)
        if lo is not None and hi is not None and lo > hi:
            raise InvalidInput(f"since_ms {instant_text(lo)} is after until_ms {instant_text(hi)}")
        field, value = check_payload_filter(payload)
        picked = None if shards is None else tuple(check_shards(ns, shards))
        grp = check_name("consumer group", group) if group not in (None, "") else None
        where: str | None = None
        if state not in (None, ""):
            if not isinstance(state, str) or state not in GROUP_STATES:
                raise InvalidInput(
                    f"state must be one of {', '.join(GROUP_STATES)}, got {quoted(state, 40)}"
                )
            if grp is None:
                raise InvalidInput("state is a consumer group's: name the group too")
            where = state
        return cls(kind or None, glob, lo, hi, field, value, picked, grp, where)

    def wants(self, o: Outcome) -> bool:
        if o.outcome == "undecodable":  # no decided_ms to trust: its id's time
            when = _id(o.entry_id or "0-0")[0]
            return (
                self.kind is None and self.match is None and self.field is None
                and (self.until_ms is None or when <= self.until_ms)
            )  # fmt: skip
        if self.since_ms is not None and o.decided_ms < self.since_ms:
            return False
        if self.until_ms is not None and o.decided_ms > self.until_ms:
            return False
        if self.kind is not None and o.outcome != self.kind:
            return False
        if self.match is not None and not redis_glob(self.match)(o.id):
            return False
        if self.field is None:
            return True
        held = _at(o.payload, self.field)
        return held is not _MISSING and _as_text(held) == self.value


_MISSING = object()


def _at(payload: Any, path: str) -> Any:
    """The value at a dotted path into nested maps (``customer.id``), or _MISSING."""
    here = payload
    for part in path.split("."):
        if not isinstance(here, Mapping) or part not in here:
            return _MISSING
        here = here[part]
    return here


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):  # bytes or another type msgpack gave: as Python says
        return repr(value)


def search(ns: Namespace, q: OutcomeQuery, limit: int) -> Op[tuple[list[Outcome], bool]]:
    """Up to ``limit`` outcomes ``q`` selects, newest first, and whether the search
    stopped at :data:`SCAN_MOST` entries read before reaching the oldest in range
    (True: there may be older ones; narrow the time range)."""
    check_int("limit", limit, 1, 1000)
    low = "-" if q.since_ms is None else str(q.since_ms)
    ends: dict[int, str] = {
        s: "+" if q.until_ms is None else f"{q.until_ms + ID_LAG_MS}-18446744073709551615"
        for s in (q.shards if q.shards is not None else range(ns.meta.shards))
    }
    found: dict[int, list[Outcome]] = {s: [] for s in ends}
    where: dict[int, tuple[tuple[int, int], set[str]]] = {}
    if q.state is not None and q.group is not None:
        where = yield from _group_places(ns, q.group, list(ends))
    read = 0
    while ends and read < SCAN_MOST:
        shards = list(ends)
        pages = yield steps.Pipeline(
            [
                steps.Command("xrevrange", (ns.shard(s).outcomes, ends[s], low), {"count": PAGE})
                for s in shards
            ]
        )
        for s, entries in zip(shards, pages, strict=True):
            read += len(entries)
            for entry_id, fields in entries:
                if not fields or b"only" in fields:  # a dead letter put back: a copy
                    continue
                if where and _state(text(entry_id), *where[s]) != q.state:
                    continue
                o = outcome_or_undecodable(s, entry_id, fields)
                if q.wants(o) and len(found[s]) < limit:
                    found[s].append(o)
            if len(entries) < PAGE or len(found[s]) >= limit:
                del ends[s]
            else:
                ends[s] = "(" + text(entries[-1][0])
    out = sorted((o for got in found.values() for o in got), key=_newest_first)
    return out[:limit], bool(ends)


def _newest_first(o: Outcome) -> tuple[int, str]:
    return (-o.decided_ms, o.entry_id or "")


def _id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _state(entry_id: str, delivered: tuple[int, int], in_hand: set[str]) -> str:
    if _id(entry_id) > delivered:
        return "waiting"
    return "in_hand" if entry_id in in_hand else "settled"


def _group_places(
    ns: Namespace, group: str, shards: list[int]
) -> Op[dict[int, tuple[tuple[int, int], set[str]]]]:
    """Per shard, the group's last delivered id and the ids it holds unsettled (its
    pending entries list, at most PEL_MOST); NotFound if no shard has the group."""
    streams = [ns.shard(s).outcomes for s in shards]
    infos = yield steps.Pipeline(
        [steps.Command("xinfo_groups", (st,)) for st in streams], errors_in_slots=True
    )
    pels = yield steps.Pipeline(
        [steps.Command("xpending_range", (st, group, "-", "+", PEL_MOST)) for st in streams],
        errors_in_slots=True,
    )
    out: dict[int, tuple[tuple[int, int], set[str]]] = {}
    for s, info, pel in zip(shards, infos, pels, strict=True):
        mine = [] if isinstance(info, StoreError) else [g for g in info if text(g["name"]) == group]
        if not mine:
            out[s] = ((-1, -1), set())  # no group on it (yet): everything waits
            continue
        held = set() if isinstance(pel, StoreError) else {text(p["message_id"]) for p in pel}
        out[s] = (_id(text(mine[0]["last-delivered-id"])), held)
    if all(v == ((-1, -1), set()) for v in out.values()):
        raise NotFound(f"no consumer group {quoted(group)} in namespace {quoted(ns.name)}")
    return out
