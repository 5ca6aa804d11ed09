"""Dead letters by filter: which ones (:class:`DeadFilter`: a group, text in the error, a
glob on the timer id), read through every shard's dead-letter stream a page at a time
(:func:`scan`: a letter is made whole only to be kept, the rest counted from their
fields), and re-delivered or dropped together (:func:`act`), after a check that the count
the person confirmed still holds. Sans-I/O operations, as in :mod:`.streams`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...errors import InvalidInput, NotFound, SelectionChanged, StoreError, quoted
from ..model import steps
from ..model.checks import too_long
from ..model.codec import text
from ..model.entries import dead_letter_from_entry, dead_outcome, parse_ref
from ..model.globs import check_glob, redis_glob
from ..model.keys import check_name
from ..model.models import DeadBatch, DeadLetter
from ..model.namespace import Namespace
from ..model.steps import Op, error_or
from .calls import parse_redeliver, redeliver_call

PAGE = 1000  # entries of one shard's dead-letter stream read a round
MOST = 100_000  # dead letters one action takes: more must be narrowed first
BATCH = 500  # re-deliveries or drops sent a round trip
MAX_ERROR_TEXT = 256
ACTIONS = ("redeliver", "drop")


@dataclass(frozen=True)
class DeadFilter:
    """Which dead letters: of ``group``, whose error holds ``error`` (any case), whose
    timer id matches ``match`` (a Redis glob, as ``find`` takes); None: any."""

    group: str | None = None
    error: str | None = None
    match: str | None = None

    @classmethod
    def of(cls, group: object = None, error: object = None, match: object = None) -> DeadFilter:
        """A checked filter (empty text is no filter); InvalidInput says what is wrong."""
        if group not in (None, ""):
            check_name("consumer group", group)
        if error not in (None, "") and not isinstance(error, str):
            raise InvalidInput(
                "error must be text to look for in the dead letters' errors, got "
                f"{type(error).__name__}"
            )
        if isinstance(error, str) and len(error) > MAX_ERROR_TEXT:
            raise too_long("error", len(error), MAX_ERROR_TEXT)
        if match not in (None, ""):
            check_glob(match)
        return cls(group or None, error or None, match or None)  # type: ignore[arg-type]

    @property
    def empty(self) -> bool:
        return self.group is None and self.error is None and self.match is None

    def wants(self, shard: int, fields: Mapping[bytes, bytes]) -> bool:
        """Whether it selects the dead letter this entry of a shard's stream is, read from
        its fields: the outcome is decoded only for an id the glob takes (a letter whose
        outcome was trimmed first, or cannot be decoded, has no timer id: only "any id"
        takes it), so only a letter to be kept pays for being made whole."""
        if self.group is not None and text(fields[b"group"]) != self.group:
            return False
        if (
            self.error is not None
            and self.error.casefold() not in text(fields[b"error"]).casefold()
        ):
            return False
        if self.match is None:
            return True
        tid = fields.get(b"i")
        if tid is None or not redis_glob(self.match)(text(tid)):
            return False
        return dead_outcome(shard, fields) is not None


def scan(ns: Namespace, flt: DeadFilter, keep: int, most: int) -> Op[tuple[list[DeadLetter], int]]:
    """One pass over the shards' dead-letter streams, a page of each a round trip: the
    oldest ``keep`` letters ``flt`` selects, made whole, and how many it selects,
    counted up to ``most``. A shard is read until it has given ``keep`` and the count
    has reached ``most``, or it has no more."""
    cursors: dict[int, str] = {s: "-" for s in range(ns.meta.shards)}
    found: list[DeadLetter] = []
    taken = dict.fromkeys(cursors, 0)
    counted = 0
    while cursors:
        shards = list(cursors)
        pages = yield steps.Pipeline(
            [
                steps.Command("xrange", (ns.shard(s).dead, cursors[s], "+"), {"count": PAGE})
                for s in shards
            ]
        )
        for s, entries in zip(shards, pages, strict=True):
            for entry_id, fields in entries:
                if flt.wants(s, fields):
                    counted += 1
                    if taken[s] < keep:
                        found.append(dead_letter_from_entry(s, entry_id, fields))
                        taken[s] += 1
            if len(entries) < PAGE or (taken[s] >= keep and counted >= most):
                del cursors[s]
            else:
                cursors[s] = "(" + text(entries[-1][0])
    found.sort(key=lambda d: (d.failed_ms, d.ref))
    return found[:keep], min(counted, most)


def select(ns: Namespace, flt: DeadFilter, most: int) -> Op[list[DeadLetter]]:
    """The dead letters ``flt`` selects, oldest first, at most ``most``."""
    letters, _ = yield from scan(ns, flt, most, 0)
    return letters


def _named(ns: Namespace, flt: DeadFilter, refs: Sequence[str] | None) -> Op[list[str]]:
    """The refs acted on: those given (each checked before any change), else every one
    the filter selects, at most :data:`MOST`."""
    if refs is not None:
        if not flt.empty:
            raise InvalidInput(
                "name dead letters by their refs or select them by a filter, not both"
            )
        if not isinstance(refs, (list, tuple)) or len(refs) > MOST:
            raise InvalidInput(f"refs must be a list of at most {MOST:,} dead letter refs")
        picked = [parse_ref(r, ns.meta.shards) for r in refs]
        return list(dict.fromkeys(f"{s}/{e}" for s, e in picked))
    letters = yield from select(ns, flt, MOST + 1)
    if len(letters) > MOST:
        raise InvalidInput(
            f"more than {MOST:,} dead letters match: narrow the filter (group, error, "
            "match) and act on each part"
        )
    return [d.ref for d in letters]


def act(
    ns: Namespace,
    action: str,
    flt: DeadFilter,
    refs: Sequence[str] | None = None,
    expect: int | None = None,
) -> Op[DeadBatch]:
    """Re-deliver or drop the dead letters named by ``refs``, or else every one ``flt``
    selects (at most :data:`MOST`). With ``expect``, nothing is done unless that many are
    selected now (:class:`SelectionChanged`): a count a person confirmed is the count
    acted on."""
    if action not in ACTIONS:
        raise InvalidInput(f"unknown action {quoted(action)}: redeliver or drop")
    if expect is not None and (
        isinstance(expect, bool) or not isinstance(expect, int) or expect < 0
    ):
        raise InvalidInput(
            f"expect must be the count you confirmed (a whole number), got {quoted(expect)}"
        )
    named = yield from _named(ns, flt, refs)
    if expect is not None and expect != len(named):
        raise SelectionChanged(
            f"{len(named)} dead letters are selected now, not the {expect} confirmed: "
            "nothing was done; look again and confirm the new count",
            len(named),
        )
    if action == "redeliver":
        yield from check_readers(ns, named)
    done: list[str] = []
    missing: list[str] = []
    for start in range(0, len(named), BATCH):
        part = named[start : start + BATCH]
        where = [parse_ref(r, ns.meta.shards) for r in part]
        calls: list[steps.ScriptCall] | list[steps.Command]
        if action == "redeliver":
            calls = [redeliver_call(ns.shard(s), e) for s, e in where]
        else:
            calls = [steps.Command("xdel", (ns.shard(s).dead, e)) for s, e in where]
        replies = yield steps.Pipeline(calls, errors_in_slots=True)
        for ref, reply in zip(part, replies, strict=True):
            if isinstance(reply, StoreError):
                raise reply  # what was done before it is done; the caller sees the failure
            ok = (
                parse_redeliver(reply) is not None
                if action == "redeliver"
                else int(error_or(reply)) == 1
            )
            (done if ok else missing).append(ref)
    return DeadBatch(action, len(named), done, missing)


def check_readers(ns: Namespace, refs: Sequence[str]) -> Op[None]:
    """NotFound, and nothing redelivered, when a dead letter of ``refs`` belongs to a
    group its shard's stream no longer has: redelivered, it waited for a group nobody
    reads, and `dead redeliver` said it was done (trial 35, after `groups delete`). A
    ref that names no dead letter is left to the action to count as missing."""
    if not refs:
        return
    where = [parse_ref(r, ns.meta.shards) for r in refs]
    shards = sorted({s for s, _ in where})
    listed = yield steps.Pipeline(
        [steps.Command("xinfo_groups", (ns.shard(s).outcomes,)) for s in shards],
        errors_in_slots=True,
    )
    groups = {
        s: set() if isinstance(reply, StoreError) else {text(g["name"]) for g in reply}
        for s, reply in zip(shards, listed, strict=True)
    }
    gone: dict[str, int] = {}
    for start in range(0, len(where), BATCH):
        part = where[start : start + BATCH]
        entries = yield steps.Pipeline(
            [steps.Command("xrange", (ns.shard(s).dead, e, e)) for s, e in part]
        )
        for (s, _), found in zip(part, entries, strict=True):
            if found:
                group = dead_letter_from_entry(s, found[0][0], found[0][1]).group
                if group not in groups[s]:
                    gone[group] = gone.get(group, 0) + 1
    if gone:
        names = ", ".join(quoted(g) for g in sorted(gone))
        count = sum(gone.values())
        raise NotFound(
            f"{count} of these dead letters belong to consumer group"
            f"{'s' * (len(gone) > 1)} {names}, which no longer exist"
            f"{'s' * (len(gone) == 1)} in namespace {quoted(ns.name)}: redelivered, they "
            "would wait for a group nobody reads; nothing was redelivered. Drop them "
            "(dead drop), or create the group again first (a new group reads every outcome "
            "the streams still hold, from the first)"
        )
