"""Finding timers: by id pattern, state and deadline range, a bounded scan at a time; and
acting on what was found (cancel, complete, reschedule, notify) in bulk.

Nothing here reads the whole keyspace: a page is one or a few ``HSCAN`` calls over one
shard's pending timers (``P:t``) or over some of its results-table hashes (``P:R:<b>``,
the retained outcomes), with the id pattern applied by Redis (``MATCH``), and about
``count`` entries examined in all. The cursor says where the next page starts, as Redis
SCAN's does: a page may hold nothing while the cursor is not done, and a timer that
moves while the scan runs (decided, rescheduled) may be seen twice or not at all; one
that stays put is seen once. Order: the pending timers shard by shard, then the retained
outcomes shard by shard.

Acting on a selection acts on the pending timers each page found, pipelined, with the
same scripts (and guarantees) as one call each: a timer decided in between is skipped
and counted as such, never decided twice.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

from ...errors import CorruptRecord, InvalidInput, TimerError, TimerNotFound, quoted
from ..model import steps
from ..model.checks import check_instant, check_int
from ..model.codec import text
from ..model.entries import timer_info
from ..model.fields import MAX_DEADLINE_MS
from ..model.globs import check_glob
from ..model.keys import check_name, results_parts
from ..model.models import TimerInfo
from ..model.namespace import Namespace
from ..model.scripts import ScriptName, too_far
from ..model.steps import Op, error_or
from .calls import (
    Prepared,
    decide_call,
    get_call,
    notify_call,
    parse_decide,
    parse_notify,
    parse_reschedule,
    reschedule_call,
)

STATES = ("pending", "expired", "cancelled", "completed")
DECIDED = frozenset(STATES[1:])
ALIASES = {"decided": DECIDED, "any": frozenset(STATES)}
MAX_COUNT = 100_000
PARTS_PER_CALL = 256  # results-table hashes scanned in one pipeline at most
PART_SIZE = 32  # about how many outcomes a results-table hash holds (RX_LOAD)
ACTIONS = ("cancel", "complete", "reschedule", "notify")


class Deadlines(TypedDict, total=False):
    """Which timers a selection takes by deadline (ms, both ends included)."""

    deadline_from_ms: int | None
    deadline_to_ms: int | None


class FindOptions(Deadlines, total=False):
    """A find's selection besides the id pattern (``Selection.of``)."""

    state: str | list[str]


class BulkOptions(Deadlines, total=False):
    """A bulk action's selection and how it runs: ``dry_run`` only counts, ``progress``
    is called with the running totals after each page of ``count`` entries scanned."""

    dry_run: bool
    progress: Callable[[Bulk], None] | None
    count: int


class MoveOptions(TypedDict, total=False):
    """Where ``reschedule`` moves a timer: one of ``delay_ms`` from now, ``deadline_ms``
    or ``shift_ms`` from its own deadline."""

    delay_ms: int | None
    deadline_ms: int | None
    shift_ms: int | None


class ActOptions(Deadlines, MoveOptions, total=False):
    """``AsyncTimers.act``'s keywords: a selection by deadline and, for reschedule, a move."""


@dataclass(frozen=True)
class Selection:
    """Which timers: ids matching ``match`` (a Redis glob: ``*``, ``?``, ``[abc]``, ``\\``
    escapes), in one of ``states``, with a deadline in [``deadline_from_ms``,
    ``deadline_to_ms``] (either bound may be None)."""

    match: str = "*"
    states: frozenset[str] = frozenset({"pending"})
    deadline_from_ms: int | None = None
    deadline_to_ms: int | None = None

    @classmethod
    def of(
        cls,
        match: object = "*",
        state: object = "pending",
        deadline_from_ms: object = None,
        deadline_to_ms: object = None,
    ) -> Selection:
        """A checked selection; ``state`` is one state, ``decided``, ``any``, or several
        of them. InvalidInput says what is wrong."""
        glob = check_glob(match)
        lo = _bound("deadline_from_ms", deadline_from_ms)
        hi = _bound("deadline_to_ms", deadline_to_ms)
        if lo is not None and hi is not None and lo > hi:
            raise InvalidInput(f"deadline_from_ms {lo} is after deadline_to_ms {hi}")
        return cls(glob, _states(state), lo, hi)

    @property
    def pending(self) -> bool:
        return "pending" in self.states

    @property
    def decided(self) -> bool:
        return bool(self.states & DECIDED)

    def wants(self, info: TimerInfo) -> bool:
        if info.state not in self.states and info.state != "undecodable":
            return False
        if info.state == "undecodable":  # its deadline is unknown: only in an unbounded search
            return self.deadline_from_ms is None and self.deadline_to_ms is None
        lo, hi = self.deadline_from_ms, self.deadline_to_ms
        return (lo is None or info.deadline_ms >= lo) and (hi is None or info.deadline_ms <= hi)


def _bound(name: str, value: object) -> int | None:
    return None if value is None else check_instant(name, value, MAX_DEADLINE_MS)


def _states(state: object) -> frozenset[str]:
    names = [state] if isinstance(state, str) else state
    if not isinstance(names, (list, tuple, set, frozenset)):
        raise InvalidInput(f"state must be a state name or a list of them, got {quoted(state)}")
    out: set[str] = set()
    for name in names:
        if isinstance(name, str) and name in ALIASES:
            out |= ALIASES[name]
        elif isinstance(name, str) and name in STATES:
            out.add(name)
        else:
            raise InvalidInput(
                f"unknown state {quoted(name)}: one of {', '.join(STATES)}, decided or any"
            )
    if not out:
        raise InvalidInput("state names no state: give at least one")
    return frozenset(out)


@dataclass(frozen=True)
class Page:
    """What one bounded scan found: the timers it matched, how many entries it examined,
    and the cursor of the next page (None: the whole namespace was scanned)."""

    timers: list[TimerInfo]
    cursor: str | None
    examined: int


@dataclass
class Bulk:
    """What an action over a selection did: ``selected`` pending timers matched, ``done``
    of them acted on by this call, ``skipped`` no longer pending when it came to them
    (decided meanwhile); for notify, ``keys`` notified."""

    action: str
    selected: int = 0
    done: int = 0
    skipped: int = 0
    keys: int = 0
    errors: list[str] = field(default_factory=list)


# -- the cursor: where the scan is -------------------------------------------------------

CURSOR = re.compile(r"^(p|d):(\d{1,6}):(\d{1,12}):(\d{1,20})$")


@dataclass(frozen=True)
class _At:
    phase: str  # "p" pending timers, "d" retained outcomes
    shard: int
    part: int  # results-table hash (phase "d")
    scan: int  # the HSCAN cursor within it


def _start(sel: Selection) -> _At | None:
    if sel.pending:
        return _At("p", 0, 0, 0)
    return _At("d", 0, 0, 0)


def _parse_cursor(ns: Namespace, sel: Selection, cursor: object) -> _At | None:
    if cursor is None or cursor == "":
        return _start(sel)
    m = CURSOR.match(cursor) if isinstance(cursor, str) else None
    if m is None or int(m.group(2)) >= ns.meta.shards:
        raise InvalidInput(
            f"cursor {quoted(cursor)} is not one a page of this namespace returned; start with none"
        )
    return _At(m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)))


def _format(at: _At | None) -> str | None:
    return None if at is None else f"{at.phase}:{at.shard}:{at.part}:{at.scan}"


def _next_shard(ns: Namespace, sel: Selection, at: _At) -> _At | None:
    if at.shard + 1 < ns.meta.shards:
        return _At(at.phase, at.shard + 1, 0, 0)
    if at.phase == "p" and sel.decided:
        return _At("d", 0, 0, 0)
    return None


# -- finding ----------------------------------------------------------------------------


def find(ns: Namespace, sel: Selection, cursor: object = None, count: object = 1000) -> Op[Page]:
    """One page: about ``count`` entries examined from ``cursor`` on (see the module)."""
    budget = check_int("count", count, 1, MAX_COUNT)
    at = _parse_cursor(ns, sel, cursor)
    found: list[TimerInfo] = []
    examined = 0
    while at is not None and examined < budget:
        if at.phase == "p":
            at, seen = yield from _scan_pending(ns, sel, at, budget - examined, found)
        else:
            at, seen = yield from _scan_outcomes(ns, sel, at, budget - examined, found)
        examined += seen
    return Page(found, _format(at), examined)


def _scan_pending(
    ns: Namespace, sel: Selection, at: _At, budget: int, found: list[TimerInfo]
) -> Op[tuple[_At | None, int]]:
    sk = ns.shard(at.shard)
    reply = yield steps.Command(
        "hscan", (sk.timers, at.scan), {"match": sel.match, "count": budget}
    )
    scan, entries = int(reply[0]), reply[1]
    for tid, raw in entries.items():
        _keep(sel, found, text(tid), at.shard, pending=raw, decided=None)
    if scan:
        return _At("p", at.shard, 0, scan), max(1, len(entries))
    return _next_shard(ns, sel, at), max(1, len(entries))


def _scan_outcomes(
    ns: Namespace, sel: Selection, at: _At, budget: int, found: list[TimerInfo]
) -> Op[tuple[_At | None, int]]:
    sk = ns.shard(at.shard)
    level, split = yield steps.Command("hmget", (sk.results_table, "L", "S"))
    parts = results_parts(level, split)
    if at.part >= parts:
        return _next_shard(ns, sel, at), 1
    wanted = max(1, min(PARTS_PER_CALL, parts - at.part, budget // PART_SIZE))
    scans = [
        steps.Command(
            "hscan",
            (sk.results_part(b), at.scan if b == at.part else 0),
            {"match": sel.match, "count": max(budget, 100)},
        )
        for b in range(at.part, at.part + wanted)
    ]
    replies = yield steps.Pipeline(scans)
    seen = 0
    for b, (scan, entries) in zip(range(at.part, at.part + wanted), replies, strict=True):
        for tid, value in entries.items():
            _keep(sel, found, text(tid), at.shard, pending=None, decided=bytes(value)[4:])
        seen += max(1, len(entries))
        if int(scan):  # a hash too big to scan at once: go on with it next time
            return _At("d", at.shard, b, int(scan)), seen
    following = at.part + wanted
    if following < parts:
        return _At("d", at.shard, following, 0), seen
    return _next_shard(ns, sel, at), seen


def _keep(
    sel: Selection, found: list[TimerInfo], tid: str, shard: int, *, pending: Any, decided: Any
) -> None:
    try:
        info = timer_info(tid, shard, pending, decided)
    except CorruptRecord:  # stored by something else: shown, so it can be found and cancelled
        info = TimerInfo(tid, shard, "undecodable", 0, None)
    if info is not None and sel.wants(info):
        found.append(info)


MAX_IDS = 10_000  # ids one act_on call takes


def infos(ns: Namespace, ids: object) -> Op[list[TimerInfo]]:
    """The timers of ``ids`` as they are now (pending or retained; unknown ones left out),
    read in one pipeline. InvalidInput before any I/O for a bad id or too many."""
    if not isinstance(ids, (list, tuple)):
        raise InvalidInput(f"ids must be a list of timer ids, got {type(ids).__name__}")
    if len(ids) > MAX_IDS:
        raise InvalidInput(f"{len(ids)} ids in one call; the limit is {MAX_IDS}")
    tids = list(dict.fromkeys(check_name("timer id", t) for t in ids))
    if not tids:
        return []
    shards = [ns.shard_of(t) for t in tids]
    replies = yield steps.Pipeline(
        [get_call(ns.shard(s), t) for s, t in zip(shards, tids, strict=True)]
    )
    found: list[TimerInfo] = []
    for tid, shard, (pending, decided) in zip(tids, shards, replies, strict=True):
        _keep(
            Selection(states=frozenset(STATES)),
            found,
            tid,
            shard,
            pending=pending or None,
            decided=decided or None,
        )
    return found


# -- acting on a page --------------------------------------------------------------------


def act(
    ns: Namespace,
    action: str,
    timers: Sequence[TimerInfo],
    *,
    delay_ms: int | None = None,
    deadline_ms: int | None = None,
    shift_ms: int | None = None,
) -> Op[Bulk]:
    """``action`` on the pending ones of ``timers`` (one page), pipelined. reschedule takes
    one of ``delay_ms`` (from now), ``deadline_ms`` or ``shift_ms`` (added to each's)."""
    pending = [t for t in timers if t.state in ("pending", "undecodable")]
    report = Bulk(action, selected=len(pending))
    if action == "notify":
        keys = sorted({k for t in pending for k in t.watch})
        report.keys = len(keys)
        report.done = yield from _notify_keys(ns, keys)
        return report
    if action == "reschedule" and pending:  # one too far is refused before any moves
        yield from _within_reach(ns, delay_ms, deadline_ms)
    prepared = _prepare(
        ns, action, pending, delay_ms=delay_ms, deadline_ms=deadline_ms, shift_ms=shift_ms
    )
    if not prepared:
        return report
    replies = yield steps.Pipeline([call for call, _ in prepared], errors_in_slots=True)
    for (_, parse), reply in zip(prepared, replies, strict=True):
        try:
            done = parse(error_or(reply))
        except TimerNotFound:
            done = False
        except TimerError as exc:
            report.errors.append(str(exc))
            continue
        if done:
            report.done += 1
        else:
            report.skipped += 1
    return report


def _within_reach(ns: Namespace, delay_ms: int | None, deadline_ms: int | None) -> Op[None]:
    """InvalidInput if the one new deadline for every timer is further ahead than the
    client allows (it was each timer's TOOFAR, every one an error, and exit 1)."""
    most = ns.settings.max_delay_ms
    if isinstance(delay_ms, int) and delay_ms > most:
        raise InvalidInput(f"delay_ms {delay_ms} is more than {most} ms: give a nearer one")
    if isinstance(deadline_ms, int) and deadline_ms > (yield from steps.server_time_ms()) + most:
        raise InvalidInput(too_far(deadline_ms, most))


def _prepare(
    ns: Namespace, action: str, pending: Sequence[TimerInfo], **move: Unpack[MoveOptions]
) -> list[tuple[steps.ScriptCall, Any]]:
    if action in ("cancel", "complete"):
        script = ScriptName.CANCEL if action == "cancel" else ScriptName.COMPLETE
        outcome = "cancelled" if action == "cancel" else "completed"
        out = []
        for t in pending:
            call, tid = decide_call(ns, script, t.id)
            out.append((call, _decided(ns, tid, outcome)))
        return out
    if action == "reschedule":
        moves = _moves(ns, pending, move["delay_ms"], move["deadline_ms"], move["shift_ms"])
        return [(p.call, _moved(ns, p)) for p in moves]
    raise InvalidInput(f"unknown action {quoted(action)}: one of {', '.join(ACTIONS)}")


def check_move(delay_ms: object, deadline_ms: object, shift_ms: object) -> None:
    """Exactly one way to say a bulk reschedule's new deadlines; InvalidInput otherwise."""
    given = [v for v in (delay_ms, deadline_ms, shift_ms) if v is not None]
    if len(given) != 1:
        raise InvalidInput("reschedule takes exactly one of delay_ms, deadline_ms or shift_ms")
    if shift_ms is not None:
        check_int("shift_ms", shift_ms, -MAX_DEADLINE_MS, MAX_DEADLINE_MS)


def _moves(
    ns: Namespace,
    pending: Sequence[TimerInfo],
    delay_ms: object,
    deadline_ms: object,
    shift_ms: object,
) -> list[Prepared]:
    check_move(delay_ms, deadline_ms, shift_ms)
    if shift_ms is None:
        return [reschedule_call(ns, t.id, delay_ms, deadline_ms) for t in pending]
    shift = int(shift_ms)  # type: ignore[call-overload]
    out = []
    for t in pending:
        if t.state == "pending":  # an undecodable record has no deadline to shift
            out.append(reschedule_call(ns, t.id, None, max(0, t.deadline_ms + shift)))
    return out


def _decided(ns: Namespace, tid: str, outcome: str) -> Any:
    return lambda reply: parse_decide(ns, reply, tid, outcome)


def _moved(ns: Namespace, p: Prepared) -> Any:
    return lambda reply: parse_reschedule(ns, reply, p) is not None


def _notify_keys(ns: Namespace, keys: list[str]) -> Op[int]:
    """Notify each key until no watcher is left; the timers completed."""
    completed = 0
    todo = keys
    while todo:
        replies = yield steps.Pipeline([notify_call(ns, k) for k in todo])
        again = []
        for key, reply in zip(todo, replies, strict=True):
            done, remaining = parse_notify(reply)
            completed += done
            if remaining:
                again.append(key)
        todo = again
    return completed
