"""Searching the outcomes the shards' streams still hold (#57): by kind, a glob on the
timer id, a time range (a stream entry's id is the ms it was decided, so the range is the
read's own bounds), a payload field's value, and shards; newest first, each shard read
backwards a page a round (every shard's page in one round trip), at most
:data:`SCAN_MOST` entries a search. Sans-I/O, as :mod:`.views`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput
from . import steps
from .calls import text
from .checks import check_int
from .entries import outcome_or_undecodable
from .finding import check_glob
from .globs import redis_glob
from .models import Outcome
from .namespace import Namespace, check_shards
from .steps import Op

KINDS = ("expired", "cancelled", "completed")
PAGE = 1000  # entries of one shard read a round
SCAN_MOST = 100_000  # entries one search reads at most, over every shard
MAX_FIELD = 256


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
    ) -> OutcomeQuery:
        """A checked query; InvalidInput says what is wrong."""
        if kind not in (None, "") and kind not in KINDS:
            raise InvalidInput(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        glob = check_glob(match) if match not in (None, "") else None
        lo = None if since_ms is None else check_int("since_ms", since_ms, 0)
        hi = None if until_ms is None else check_int("until_ms", until_ms, 0)
        if lo is not None and hi is not None and lo > hi:
            raise InvalidInput(f"since_ms {lo} is after until_ms {hi}")
        field = value = None
        if payload is not None:
            if not isinstance(payload, Mapping) or len(payload) != 1:
                raise InvalidInput(
                    f"payload must be one field and its value, e.g. {{'tenant': 'acme'}}, "
                    f"got {payload!r:.80}"
                )
            ((field, raw),) = payload.items()
            if not isinstance(field, str) or not 0 < len(field) <= MAX_FIELD:
                raise InvalidInput(f"a payload field is text of 1 to {MAX_FIELD} characters")
            value = raw if isinstance(raw, str) else _as_text(raw)
        picked = None if shards is None else tuple(check_shards(ns, shards))
        return cls(kind or None, glob, lo, hi, field, value, picked)

    def wants(self, o: Outcome) -> bool:
        if o.outcome == "undecodable":
            return self.kind is None and self.match is None and self.field is None
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
        s: "+" if q.until_ms is None else f"{q.until_ms}-18446744073709551615"
        for s in (q.shards if q.shards is not None else range(ns.meta.shards))
    }
    found: dict[int, list[Outcome]] = {s: [] for s in ends}
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
