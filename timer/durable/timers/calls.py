"""Build a call, read its reply: one pure builder and one pure parser per Lua script.

No I/O here (BullMQ's ``scripts.ts`` is the model). A builder turns typed, validated
arguments into a :class:`~timer.durable.model.steps.ScriptCall` (script, KEYS, ARGV), so
nobody else knows the argument order of a script; a parser turns the script's reply into a
typed result or a :class:`~timer.errors.TimerError`. The sync client, the asyncio client, the worker
and the tests all go through these; only the I/O around them differs.

Here: the calls of the client's own scripts (schedule, decide, get). The steps are in
:mod:`timer.durable.model.steps`, a timer's gate in :mod:`.items`, the namespace in
:mod:`timer.durable.model.namespace`, the leader's scripts in
:mod:`timer.durable.shards.calls`, the consumer groups' in :mod:`timer.durable.groups.calls`,
and reading stored records in :mod:`timer.durable.model.entries`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from ...errors import Capped, HeartbeatCapped, StoreError, TimerError, instant_text, quoted
from ..model.checks import check_bool, check_int
from ..model.codec import decode_result, text
from ..model.keys import ShardKeys, check_name
from ..model.models import Timer
from ..model.namespace import Namespace
from ..model.scripts import ScriptName, script_error
from ..model.steps import ScriptCall
from .items import ScheduleItem, check_when

# -- schedule ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Prepared:
    """A validated ``reschedule`` call, with what its parser needs."""

    call: ScriptCall
    timer_id: str
    shard: int
    origin: str


TIMERS_PER_CALL = 100  # timers of one shard per schedule call: ~1 ms of Redis time


def schedule_call(ns: Namespace, items: Sequence[ScheduleItem], origin: str) -> ScriptCall:
    """One ``schedule`` call for up to TIMERS_PER_CALL timers of one shard, packed once."""
    if not items or len(items) > TIMERS_PER_CALL:
        raise ValueError(f"a schedule call takes 1 to {TIMERS_PER_CALL} timers")
    sk = ns.shard(items[0].shard)
    keys = [sk.timers, sk.buckets]
    # Four slots a timer, flat (no table a timer for the script to unpack); a timer with
    # more than those four is its id, then all its slots, then false, false. The
    # old raw format (no bin or str8 types): what Redis's Lua cmsgpack reads.
    flat: list[Any] = []
    for item in items:
        spec = item.spec
        if len(spec) == 4:
            flat += spec
        else:
            flat += (spec[0], spec, False, False)
    timers = msgpack.packb(flat, use_bin_type=False)
    args = [sk.prefix, ns.meta.bucket_ms, ns.settings.max_delay_ms, sk.events, origin, timers]
    return ScriptCall(ScriptName.SCHEDULE, keys, args)


def parse_schedule(
    reply: Sequence[Any], items: Sequence[ScheduleItem], origin: str
) -> list[Timer | TimerError]:
    """One result per timer of a ``schedule`` call: its Timer, or the error in its slot."""
    return [_schedule_result(r, item, origin) for r, item in zip(reply, items, strict=True)]


def _schedule_result(reply: Any, item: ScheduleItem, origin: str) -> Timer | TimerError:
    if isinstance(reply, Exception):  # an error reply in the slot (CONFLICT, TOOFAR)
        message = str(reply)
        return script_error(message) or StoreError(f"Redis answered with an error: {message}")
    if isinstance(reply, int):  # created by this call: its deadline
        return Timer(item.timer_id, item.shard, reply, "pending", True, origin)
    status = text(reply[0])
    if status == "pending":  # it existed; with a count, a debounce call it absorbed
        absorbed = int(reply[4]) if len(reply) > 4 else 0
        return Timer(
            item.timer_id, item.shard, int(reply[1]), "pending", False, text(reply[3]), absorbed
        )
    rec = decode_result(reply[1])
    return Timer(
        item.timer_id, item.shard, rec["deadline_ms"], rec["outcome"], False, rec["origin"]
    )


# -- decide: cancel, complete, reschedule, notify ---------------------------------------


def decide_call(ns: Namespace, script: ScriptName, timer_id: object) -> tuple[ScriptCall, str]:
    """``cancel`` or ``complete`` of one timer: (call, its validated id)."""
    tid = check_name("timer id", timer_id)
    sk = ns.shard(ns.shard_of(tid))
    keys = [sk.timers, sk.buckets, sk.outcomes]
    args = [sk.prefix, tid, ns.meta.bucket_ms, ns.settings.result_ttl_ms, sk.events]
    return ScriptCall(script, keys, args), tid


def parse_decide(ns: Namespace, reply: Sequence[Any], tid: str, done: str) -> bool:
    """True if this call decided the timer as ``done``; TimerNotFound if it is unknown."""
    status = text(reply[0])
    if status == "missing":
        raise ns.not_found(tid)
    return status == done


def reschedule_call(
    ns: Namespace, timer_id: object, delay_ms: object, deadline_ms: object
) -> Prepared:
    tid = check_name("timer id", timer_id)
    return _move_call(ns, tid, *check_when(ns, delay_ms, deadline_ms))


def _move_call(ns: Namespace, tid: str, mode: str, value: int) -> Prepared:
    """reschedule.lua for a checked id: mode 'in' or 'at' (reschedule), 'beat' (heartbeat)."""
    shard = ns.shard_of(tid)
    sk = ns.shard(shard)
    keys = [sk.timers, sk.buckets]
    args = [sk.prefix, tid, mode, value, ns.meta.bucket_ms, ns.settings.max_delay_ms, sk.events]
    return Prepared(ScriptCall(ScriptName.RESCHEDULE, keys, args), tid, shard, "")


def parse_reschedule(ns: Namespace, reply: Sequence[Any], p: Prepared) -> Timer | None:
    status = text(reply[0])
    if status == "missing":
        raise ns.not_found(p.timer_id)
    if status == "decided":
        return None
    if status == "pastcap":
        cap = int(reply[1])
        refused = Capped.about(  # its field named: the CLI says --max-total
            "timer {id} has a cap: it may not fall due after its cap, {cap} (created + {0}), "
            "so this reschedule was refused and nothing moved; reschedule it to at most its "
            "cap, or cancel it and schedule a new timer",
            "max_total_ms",
            id=quoted(p.timer_id),
            cap=instant_text(cap),
        )
        refused.deadline_ms = cap
        raise refused
    return Timer(p.timer_id, p.shard, int(reply[1]), "pending", False, moved=_moved(reply))


def heartbeat_call(
    ns: Namespace, timer_id: object, extend_ms: object, earlier: object = False
) -> Prepared:
    """A heartbeat: reschedule.lua in mode 'beat' (now + extend_ms, later only, capped),
    or 'start' with ``earlier`` (now + extend_ms even if earlier, capped)."""
    tid = check_name("timer id", timer_id)
    return _move_call(
        ns,
        tid,
        "start" if check_bool("earlier", earlier) else "beat",
        check_int("extend_ms", extend_ms, 0, ns.settings.max_delay_ms),
    )


def parse_heartbeat(ns: Namespace, reply: Sequence[Any], p: Prepared) -> Timer:
    """The timer as the heartbeat left it (pending, its new deadline), or as it ended;
    HeartbeatCapped when it would pass its cap (it now falls due at the cap)."""
    status = text(reply[0])
    if status == "missing":
        raise ns.not_found(p.timer_id)
    if status == "decided":
        rec = decode_result(reply[1])
        return Timer(p.timer_id, p.shard, rec["deadline_ms"], rec["outcome"], False)
    deadline = int(reply[1])
    if status == "capped":
        capped = HeartbeatCapped.about(  # its field named: the CLI says --max-total
            "timer {id} would pass its cap (created + {0}): refused; it falls due at its cap, "
            "{cap}, and no heartbeat moves it later",
            "max_total_ms",
            id=quoted(p.timer_id),
            cap=instant_text(deadline),
        )
        capped.deadline_ms = deadline
        raise capped
    return Timer(p.timer_id, p.shard, deadline, "pending", False, moved=_moved(reply))


def _moved(reply: Sequence[Any]) -> bool:
    """reschedule.lua's third element: 1 when the call changed the deadline."""
    return int(reply[2]) == 1


def notify_call(ns: Namespace, key: object) -> ScriptCall:
    name = check_name("watch key", key)
    sk = ns.shard(ns.shard_of(name))
    args = [
        sk.prefix,
        name,
        ns.meta.bucket_ms,
        ns.settings.result_ttl_ms,
        sk.events,
        ns.keys.key_channel(name),
        ns.settings.notify_batch,
    ]
    return ScriptCall(ScriptName.NOTIFY, [sk.timers, sk.buckets, sk.outcomes], args)


def parse_notify(reply: Sequence[Any]) -> tuple[int, int]:
    """(timers completed by this call, watchers still to process)."""
    return int(reply[0]), int(reply[1])


# -- get --------------------------------------------------------------------------------


def get_call(sk: ShardKeys, tid: str) -> ScriptCall:
    """A timer's pending record and, if none, its retained outcome, in one call."""
    return ScriptCall(ScriptName.GET, [sk.timers], [sk.prefix, tid], wait=False)
