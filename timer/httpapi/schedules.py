"""What each schedule endpoint does (``…/schedules``), over ``AsyncTimerClient.schedules``:
the library checks, decides and raises (a bad cron, no such schedule: 400, 404), as it
does for the CLI and the dashboard; a schedule is answered in the one shape both doors
use (:func:`timer.shapes.schedule_json`)."""

from __future__ import annotations

import urllib.parse
from typing import Any

from starlette.responses import Response

from timer import DuplicateTimer, ScheduleNotFound, TimerError
from timer.durable.model.codec import jsonable
from timer.durable.schedules.records import ScheduleInfo, ScheduleSpec
from timer.durable.timers.items import check_watch
from timer.shapes import advised, schedule_json, timer_json

from .context import Call, Handler, error_of
from .routing import JSONReply
from .words import shown


def _name(call: Call) -> str:
    name: str = call.params["schedule"]
    return name


def _found(call: Call, info: ScheduleInfo | None) -> dict[str, Any]:
    """The schedule, or the one 404 of a missing one."""
    if info is None:
        raise ScheduleNotFound.of(_name(call), call.client.namespace)
    return schedule_json(info)


async def list_schedules(call: Call) -> dict[str, Any]:
    return {"schedules": [schedule_json(s) for s in await call.client.schedules.list()]}


async def create(call: Call) -> Response:
    """201 and the schedule; 200 and it as it is when it exists with this very spec (a
    client retrying a create whose answer it lost); 409 when with another."""
    spec = dict(call.body)
    name = spec.pop("name")
    try:
        info = await call.client.schedules.create(name, **spec)
    except DuplicateTimer:
        found = await call.client.schedules.get(name)
        if found is None or not _same(found, spec):
            at = f"…/schedules/{urllib.parse.quote(name, safe='')}"
            raise DuplicateTimer(
                f"schedule {shown(name)} exists with another spec: POST {at}/update "
                f"replaces its spec, or POST {at}/delete deletes it first"
            ) from None
        return JSONReply(jsonable(advised(found, call.client.time.wall_ms())))
    return JSONReply(jsonable(advised(info, call.client.time.wall_ms())), status_code=201)


def _same(info: ScheduleInfo, spec: dict[str, Any]) -> bool:
    """Whether ``spec`` (a create's body but its name) is the schedule's as stored."""
    when = {k: v for k, v in spec.items() if k not in ("payload", "watch")}
    return (
        ScheduleSpec.of(**when) == info.spec
        and jsonable(spec.get("payload")) == jsonable(info.payload)
        and tuple(check_watch(spec.get("watch", ()))) == tuple(info.watch)
    )


async def get(call: Call) -> dict[str, Any]:
    return _found(call, await call.client.schedules.get(_name(call)))


async def update(call: Call) -> dict[str, Any]:
    return advised(
        await call.client.schedules.update(_name(call), **call.body), call.client.time.wall_ms()
    )


async def pause(call: Call) -> dict[str, Any]:
    """The schedule as pausing left it; pausing a paused one again changes nothing."""
    s = call.client.schedules
    if not await s.pause(_name(call)):
        raise ScheduleNotFound.of(_name(call), call.client.namespace)
    return _found(call, await s.get(_name(call)))


async def resume(call: Call) -> dict[str, Any]:
    return _found(call, await call.client.schedules.resume(_name(call)))


async def trigger(call: Call) -> dict[str, Any]:
    t = await call.client.schedules.trigger(_name(call))
    return {"name": _name(call), "timer": timer_json(t)}


async def backfill(call: Call) -> dict[str, Any]:
    b = call.body
    done = await call.client.schedules.backfill(
        _name(call), b["start_ms"], b["end_ms"], limit=b.get("limit", 1000)
    )
    results: list[dict[str, Any]] = []
    for r in done:  # one result or error per occurrence, as POST …/timers/batch answers
        if isinstance(r, TimerError):
            status, body = error_of(r)
            results.append({"status": status, **body})
        else:
            results.append({"status": 201 if r.created else 200, **timer_json(r)})
    return {"name": _name(call), "results": results}


async def delete(call: Call) -> dict[str, Any]:
    name = _name(call)
    if not await call.client.schedules.delete(name, keep_armed=call.body.get("keep_armed", False)):
        raise ScheduleNotFound.of(name, call.client.namespace)
    return {"name": name, "deleted": True}


HANDLERS: dict[str, Handler] = {
    "listSchedules": list_schedules,
    "createSchedule": create,
    "getSchedule": get,
    "updateSchedule": update,
    "pauseSchedule": pause,
    "resumeSchedule": resume,
    "triggerSchedule": trigger,
    "backfillSchedule": backfill,
    "deleteSchedule": delete,
}
