"""The operations of the clients on recurring schedules (sans-I/O, as ``ops``): create or
update, pause and resume, trigger and backfill, stop, read and list; and the script
calls they make. The records and the leader's plans are in :mod:`.records`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Unpack

import msgpack

from ...errors import InvalidInput, ScheduleNotFound, TimerError, instant_text, quoted
from ..model import steps
from ..model.checks import check_instant, check_int
from ..model.codec import decode_pending, encode_payload, text
from ..model.fields import MAX_DEADLINE_MS, ScheduleWhen
from ..model.keys import ShardKeys, shard_of
from ..model.models import Timer
from ..model.namespace import Namespace
from ..model.scripts import ScriptName, too_far
from ..model.steps import Op, ScriptCall, server_time_ms
from ..timers.items import check_watch
from ..timers.ops import schedule_many
from .records import (
    OVERLAP,
    Plan,
    ScheduleInfo,
    ScheduleSpec,
    check_schedule_name,
    decode_schedule,
    occurrence_name,
)
from .recurrence import occurrence_id


def put_call(  # noqa: PLR0917 - the schedule's parts, in the script's order
    ns: Namespace,
    name: str,
    mode: str,
    spec: ScheduleSpec,
    payload: bytes,
    watch: Sequence[str],
    first: Plan,
) -> ScriptCall:
    sk = schedule_keys(ns, name)
    keys = [sk.timers, sk.buckets, sk.schedules]
    args = [
        sk.prefix,
        ns.meta.bucket_ms,
        sk.events,
        name,
        mode,
        spec.encode(),
        payload,
        msgpack.packb(list(watch)),
        first.next_id,
        first.deadline,
        OVERLAP.index(spec.overlap),
        spec.group or "",
    ]
    return ScriptCall(ScriptName.PUT_SCHEDULE, keys, args)


def stop_call(ns: Namespace, name: str, mode: str) -> ScriptCall:
    sk = schedule_keys(ns, name)
    keys = [sk.timers, sk.schedules, sk.schedule_queue]
    return ScriptCall(ScriptName.STOP_SCHEDULE, keys, [sk.prefix, sk.events, name, mode])


def schedule_keys(ns: Namespace, name: str) -> ShardKeys:
    return ns.shard(shard_of("{" + name + "}", ns.meta.shards))


def put(
    ns: Namespace,
    name: object,
    *,
    mode: str,
    payload: object = None,
    watch: Iterable[str] = (),
    **spec: Unpack[ScheduleWhen],
) -> Op[ScheduleInfo]:
    """Create (``mode='create'``) or update (``'update'``) a schedule and arm its next
    occurrence after now (Redis time). Everything is checked before anything is sent."""
    name = check_schedule_name(name)
    parsed = ScheduleSpec.of(**spec)
    data = encode_payload(payload, ns.settings.max_payload_bytes)
    keys = check_watch(watch)
    _same_shard(ns, name, keys)
    now = yield from server_time_ms()
    first = Plan.at(name, parsed, parsed.recurrence.next_after(now))
    if first.deadline - now > ns.settings.max_delay_ms:
        # its occurrence is a timer: one past the cap is refused as schedule's deadline is
        raise InvalidInput(
            f"the first occurrence: {too_far(first.deadline, ns.settings.max_delay_ms)} "
            "(a nearer start, or a cron that matches sooner)"
        )
    reply = yield put_call(ns, name, mode, parsed, data, keys, first)
    if text(reply[0]) == "missing":
        raise ScheduleNotFound.of(name, ns.name)
    info = yield from get(ns, name)
    assert info is not None
    return info


def resume(ns: Namespace, name: object) -> Op[ScheduleInfo | None]:
    """Resume a paused schedule from its next occurrence after now; None if none."""
    name = check_schedule_name(name)
    info = yield from get(ns, name)
    if info is None:
        return None
    now = yield from server_time_ms()
    first = Plan.at(name, info.spec, info.spec.recurrence.next_after(max(now, info.last_ms or 0)))
    reply = yield put_call(ns, name, "resume", info.spec, b"", (), first)
    if text(reply[0]) == "missing":
        return None
    return (yield from get(ns, name))


MAX_BACKFILL = 1000  # occurrences one backfill creates, at most


def trigger(ns: Namespace, name: object) -> Op[Timer]:
    """Fire the schedule once now, beside its series: a timer ``{name}@<now>-manual``
    with its payload and watch keys, due now (its armed occurrence is unchanged)."""
    info = yield from _existing(ns, name)
    now = yield from server_time_ms()
    item = {
        "id": f"{{{info.name}}}@{now}-manual",
        "deadline_ms": now,
        "payload": info.payload,
        "watch": list(info.watch),
    }
    (result,) = yield from schedule_many(ns, [item], "schedule")
    if isinstance(result, TimerError):
        raise result
    return result


def backfill(
    ns: Namespace, name: object, start_ms: object, end_ms: object, *, limit: object = 1000
) -> Op[list[Timer | TimerError]]:
    """Fire the occurrences of ``[start_ms, end_ms]`` (up to now) once each, now, under
    their own ids: one that already fired and whose outcome is still retained is not
    fired again (its Timer says so: ``created`` False). At most ``limit`` (1,000)."""
    for what, value in (("start", start_ms), ("end", end_ms)):
        check_instant(what, value, MAX_DEADLINE_MS)
    cap = check_int("limit", limit, 1, MAX_BACKFILL)
    assert isinstance(start_ms, int) and isinstance(end_ms, int)
    if end_ms < start_ms:
        raise InvalidInput("backfill's end is before its start")
    info = yield from _existing(ns, name)
    now = yield from server_time_ms()
    until = min(end_ms, now)
    found = occurrence_name(info.armed) if info.armed else None
    armed = found[1] if found else None  # never created twice: it fires in its turn
    times = [t for t in info.spec.recurrence.preview(start_ms - 1, cap + 1) if t <= until]
    if len(times) > cap:
        more = "" if cap >= MAX_BACKFILL else f" (or raise {{0}}, at most {MAX_BACKFILL:,})"
        raise InvalidInput.about(  # its field named: the CLI says --limit
            f"more than {cap} occurrences between {instant_text(start_ms)} and "
            f"{instant_text(until)}: backfill it in parts, each a shorter range{more}",
            "limit",
        )
    items = [
        {
            "id": occurrence_id(info.name, t),
            "deadline_ms": t,
            "payload": info.payload,
            "watch": list(info.watch),
        }
        for t in times
        if t != armed
    ]
    return (yield from schedule_many(ns, items, "schedule"))


def _existing(ns: Namespace, name: object) -> Op[ScheduleInfo]:
    info = yield from get(ns, name)
    if info is None:
        raise ScheduleNotFound.of(name, ns.name)
    return info


def stop(ns: Namespace, name: object, mode: str) -> Op[bool]:
    """Pause or delete; False if there is no such schedule."""
    name = check_schedule_name(name)
    return bool(int((yield stop_call(ns, name, mode))))


def get(ns: Namespace, name: object) -> Op[ScheduleInfo | None]:
    name = check_schedule_name(name)
    shard = shard_of("{" + name + "}", ns.meta.shards)
    sk = ns.shard(shard)
    raw = yield steps.Command("hget", (sk.schedules, name))
    if raw is None:
        return None
    info = decode_schedule(name, raw, shard, None)
    return (yield from _with_next(sk, [info]))[0]


def listing(ns: Namespace) -> Op[list[ScheduleInfo]]:
    """Every schedule of the namespace, by name."""
    out: list[ScheduleInfo] = []
    for shard in range(ns.meta.shards):
        sk = ns.shard(shard)
        cursor, infos = 0, []
        while True:
            cursor, page = yield steps.Command("hscan", (sk.schedules, cursor), {"count": 1000})
            infos += [decode_schedule(text(n), raw, shard, None) for n, raw in page.items()]
            if int(cursor) == 0:
                break
        out += yield from _with_next(sk, infos)
    return sorted(out, key=lambda i: i.name)


def _with_next(sk: ShardKeys, infos: list[ScheduleInfo]) -> Op[list[ScheduleInfo]]:
    """The infos with the deadline of each armed occurrence (one HMGET)."""
    armed = [i.armed for i in infos if i.armed]
    if not armed:
        return infos
    raws = yield steps.Command("hmget", (sk.timers, armed))
    when = {a: decode_pending(r)["deadline_ms"] for a, r in zip(armed, raws, strict=True) if r}
    return [ScheduleInfo(**{**i.__dict__, "next_ms": when.get(i.armed or "")}) for i in infos]


def _same_shard(ns: Namespace, name: str, watch: Sequence[str]) -> None:
    shard = shard_of("{" + name + "}", ns.meta.shards)
    for key in watch:
        if shard_of(key, ns.meta.shards) != shard:
            raise InvalidInput(
                f"watch key {quoted(key)} is not in schedule {quoted(name)}'s shard: "
                "give it the hash "
                f"tag {{{name}}} (e.g. {quoted('{' + name + '}:done')})"
            )
