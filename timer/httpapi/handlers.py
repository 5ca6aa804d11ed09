"""What each endpoint does, over ``AsyncTimerClient``: the library validates, decides and
raises; this module only shapes requests and replies."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import prometheus_client
import redis
from prometheus_client import multiprocess
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from timer import InvalidInput, NotFound, TimerClient, TimerError, TimerNotFound
from timer.aio.group import AsyncConsumer
from timer.durable.model.codec import jsonable
from timer.durable.model.keys import check_name
from timer.durable.model.models import Outcome
from timer.redis import connections
from timer.redis.store import RedisSettings
from timer.shapes import dead_letter_json, group_json, outcome_json, timer_info_json, timer_json

from . import schedules
from .context import METRICS, MULTIPROC_ENV, Call, Clients, Handler, error_of, first_time
from .routing import JSONReply
from .schemas import SCHEDULE, whole_numbers
from .words import item_problems, shown

log = logging.getLogger("tickwheel.httpapi")


async def schedule(call: Call) -> Response:
    call.clients.check_callback(call.body)
    b = dict(call.body)  # the fields of a timer (timer.durable.model.fields), checked by its schema
    t = await call.client.schedule(
        b.pop("id"), b.pop("delay_ms", None), deadline_ms=b.pop("deadline_ms", None), **b
    )
    return JSONReply(jsonable(timer_json(t)), status_code=201 if t.created else 200)


async def schedule_batch(call: Call) -> Response:
    items = [_nulls_left_out(item) for item in call.body["items"]]
    # each item checked as POST …/timers checks its body, then its callback host: a
    # refusal in its slot, in the words a single timer's has
    refused: dict[int, TimerError] = {
        i: InvalidInput(said) for i, said in item_problems(items).items()
    }
    for i, item in enumerate(items):
        if i in refused:
            continue
        whole_numbers(item, SCHEDULE)  # 1e3 is 1000, as for POST …/timers
        try:
            call.clients.check_callback(item)
        except InvalidInput as exc:
            refused[i] = exc
    sent = [item for i, item in enumerate(items) if i not in refused]
    done = iter(await call.client.schedule_many(sent, origin=call.body.get("origin", "")))
    results = [refused[i] if i in refused else next(done) for i in range(len(items))]
    out: list[dict[str, Any]] = []
    for r in results:
        if isinstance(r, TimerError):
            status, body = error_of(r)
            out.append({"status": status, **body})
        else:
            out.append({"status": 201 if r.created else 200, **timer_json(r)})
    return JSONReply({"results": out})  # plain values already: no jsonable() walk


def _nulls_left_out(item: Any) -> Any:
    """A batch item's fields given as null (payload's aside: null is a payload) are left
    out, as earlier releases took them (a serializer writing null for what is unset
    kept working); ``POST …/timers`` refuses them, so the log says so once."""
    if not isinstance(item, dict) or all(v is not None for k, v in item.items() if k != "payload"):
        return item
    if first_time("nulls"):
        log.warning(
            "a batch item gave %s as null: left out, as earlier releases took it; POST "
            "…/timers refuses a null field, so leave it out instead",
            ", ".join(sorted(k for k, v in item.items() if v is None and k != "payload")),
        )
    return {k: v for k, v in item.items() if v is not None or k == "payload"}


async def get(call: Call) -> dict[str, Any]:
    tid = call.params["timer_id"]
    info = await call.client.get(tid)
    if info is None:
        raise TimerNotFound.of(tid, call.client.namespace)
    return timer_info_json(info)


async def wait(call: Call) -> dict[str, Any]:
    timeout = float(call.query["timeout_s"])
    return outcome_json(await call.client.wait(call.params["timer_id"], timeout=timeout))


def _consumer(call: Call) -> AsyncConsumer:
    q = call.query
    return call.clients.consumer(
        call.client, call.params["group"], q["consumer"], q["reclaim_idle_ms"]
    )


async def consume(call: Call) -> dict[str, Any]:
    got = await _consumer(call).poll(call.query["count"], call.query["wait_ms"])
    return {"outcomes": [outcome_json(o) for o in got]}


async def events(call: Call) -> Response:
    """Server-Sent Events: each outcome an event ``outcome`` whose id is its ref; a
    comment every 15 s when there is none (proxies keep the stream open)."""
    return EventStream(_consumer(call), call.query["count"])


class EventStream(Response):
    """One consumer's outcomes as Server-Sent Events, written one event at a time.

    After each write the loop turns once (a write that failed closes the connection
    then) and the stream asks whether the client is gone: at the first sign it stops
    reading and writing, and gives back what it read and did not send (the last one
    written too: its write may have failed), each by a retry due at once, which the
    group's next claim hands to any consumer (not after ``reclaim_idle_ms``; its
    attempt counts, as a reclaim's would). One line in the log says so."""

    media_type = "text/event-stream"

    def __init__(self, consumer: AsyncConsumer, count: int) -> None:
        self.consumer, self.count = consumer, count
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        unsent: list[Outcome] = []
        try:
            await self._stream(request, send, unsent)
        finally:
            with anyio.CancelScope(shield=True):  # a server stopping gives them back too
                await self._give_back(unsent)

    async def _stream(self, request: Request, send: Send, unsent: list[Outcome]) -> None:
        quiet = 0
        while not await request.is_disconnected():
            try:
                got = await self.consumer.poll(self.count, 1000)
            except TimerError as exc:
                await _write(send, f"event: error\ndata: {json.dumps(str(exc))}\n\n", more=False)
                return
            unsent[:] = got
            while unsent:
                if await request.is_disconnected():
                    return  # gone while this batch was read: every one given back
                o = unsent[0]
                data = json.dumps(jsonable(outcome_json(o)), separators=(",", ":"))
                await _write(send, f"event: outcome\nid: {o.shard}/{o.entry_id}\ndata: {data}\n\n")
                await asyncio.sleep(0)  # a failed write loses the connection on this turn
                if await request.is_disconnected():
                    return  # its write may have failed: given back with the others
                unsent.pop(0)
            quiet = 0 if got else quiet + 1
            if quiet >= 15:
                await _write(send, ": still here\n\n")
                quiet = 0

    async def _give_back(self, unsent: list[Outcome]) -> None:
        c = self.consumer
        where = (
            f"event stream of group {shown(c.group)}, consumer {shown(c.consumer)}, "
            f"namespace {shown(c.ns.name)}"
        )
        if not unsent:
            log.info("%s: the client left", where)
            return
        back = 0
        try:
            for o in unsent:  # one call each: at most count (1000) of them
                back += await c.give_back(f"{o.shard}/{o.entry_id}")
        except TimerError as exc:
            log.warning(
                "%s: the client left; giving back the %d outcomes read and not sent failed "
                "(%s): they are delivered again after reclaim_idle_ms",
                where, len(unsent), exc,
            )  # fmt: skip
            return
        log.warning(
            "%s: the client left; %d outcomes read and not sent given back to the group "
            "(%d settled meanwhile)",
            where, back, len(unsent) - back,
        )  # fmt: skip
        unsent.clear()


async def _write(send: Send, text: str, *, more: bool = True) -> None:
    await send({"type": "http.response.body", "body": text.encode(), "more_body": more})


async def ack(call: Call) -> dict[str, Any]:
    return {"acked": await _consumer_of_body(call).ack(call.body["refs"])}


async def retry(call: Call) -> dict[str, Any]:
    pending = await _consumer_of_body(call).retry(call.body["ref"], call.body["delay_ms"])
    return {"ref": call.body["ref"], "retrying": pending}


async def dead(call: Call) -> dict[str, Any]:
    consumer = _consumer_of_body(call, call.body.get("consumer", "http"))
    ref = await consumer.dead_letter(call.body["ref"], call.body["error"])
    return {"ref": call.body["ref"], "dead_letter": ref}


def _consumer_of_body(call: Call, name: str = "http") -> AsyncConsumer:
    """Settling needs no consumer name (a ref names the entry); a dead letter records
    the one given."""
    return call.clients.consumer(call.client, call.params["group"], name, 60_000)


async def cancel(call: Call) -> dict[str, Any]:
    tid = call.params["timer_id"]
    return {"id": tid, "cancelled": await call.client.cancel(tid)}


async def complete(call: Call) -> dict[str, Any]:
    tid = call.params["timer_id"]
    return {"id": tid, "completed": await call.client.complete(tid)}


async def reschedule(call: Call) -> dict[str, Any]:
    tid = call.params["timer_id"]
    moved = await call.client.reschedule(
        tid, call.body.get("delay_ms"), deadline_ms=call.body.get("deadline_ms")
    )
    return {
        "id": tid,
        "rescheduled": moved is not None,
        "timer": None if moved is None else timer_json(moved),
    }


async def heartbeat(call: Call) -> dict[str, Any]:
    """``extended``: the heartbeat was taken, the timer is pending (false: it ended, so a
    client stops the job: the meaning clients rely on); ``moved``: this moved its
    deadline (the script says so: one round trip)."""
    tid = call.params["timer_id"]
    t = await call.client.heartbeat(
        tid, call.body["extend_ms"], earlier=call.body.get("earlier", False)
    )
    return {"id": tid, "extended": t.state == "pending", "moved": t.moved, "timer": timer_json(t)}


async def notify(call: Call) -> dict[str, Any]:
    keys = list(dict.fromkeys(call.body["keys"]))
    for k in keys:  # every key checked before any is notified: a refusal writes nothing
        check_name("watch key", k)
    per_key = {k: await call.client.notify(k) for k in keys}
    return {"completed": sum(per_key.values()), "per_key": per_key}


def _sync(call: Call) -> TimerClient:
    return call.clients.sync(call.client)


def _ref(call: Call) -> str:
    return f"{call.params['shard']}/{call.params['entry']}"


async def stats(call: Call) -> dict[str, Any]:
    c = _sync(call)
    return await asyncio.to_thread(lambda: c.stats(servers=False))


async def groups(call: Call) -> dict[str, Any]:
    c = _sync(call)
    found = await asyncio.to_thread(c.groups)
    return {"groups": [group_json(g) for g in found]}


async def dead_letters(call: Call) -> dict[str, Any]:
    c, q = _sync(call), call.query
    found = await asyncio.to_thread(
        lambda: c.dead_letters(
            q["group"] or None, error=q["error"] or None, match=q["match"] or None, limit=q["limit"]
        )
    )
    return {"dead_letters": [dead_letter_json(d) for d in found]}


def _dead_batch(action: str) -> Callable[[Call], Awaitable[dict[str, Any]]]:
    async def act(call: Call) -> dict[str, Any]:
        c, b = _sync(call), call.body
        unconfirmed = "refs" not in b and b.get("expect") is None
        if unconfirmed and first_time(f"unconfirmed {action}"):
            # A selection acted on with no count confirmed ({} is every dead letter): done,
            # as in earlier releases (a client relying on it keeps working), and said.
            log.warning("POST …/dead/%s: %s", action, UNCONFIRMED)
        do = c.redeliver_dead_letters if action == "redeliver" else c.drop_dead_letters
        done = await asyncio.to_thread(
            lambda: do(
                b.get("refs"),
                group=b.get("group") or None,
                error=b.get("error") or None,
                match=b.get("match") or None,
                expect=b.get("expect"),
            )
        )
        said = {"warning": UNCONFIRMED} if unconfirmed else {}
        return {"matched": done.matched, "done": done.done, "missing": done.missing, **said}

    return act


UNCONFIRMED = (
    "done on whatever the filter selected, with no count confirmed ({} selects every dead "
    "letter; earlier releases took no count, so this still works): send expect, the count "
    "GET …/dead with that filter lists, and another count selected by then is a 409 with "
    "nothing done"
)


async def dead_letter(call: Call) -> dict[str, Any]:
    c, ref = _sync(call), _ref(call)
    d = await asyncio.to_thread(c.dead_letter, ref)
    if d is None:
        raise NotFound(f"no dead letter {ref} in namespace {shown(c.namespace)}")
    return dead_letter_json(d)


async def redeliver(call: Call) -> dict[str, Any]:
    c, ref = _sync(call), _ref(call)
    new = await asyncio.to_thread(c.redeliver, ref)
    if new is None:
        raise NotFound(f"no dead letter {ref} in namespace {shown(c.namespace)}")
    return {"ref": ref, "redelivered_as": new}


async def drop(call: Call) -> dict[str, Any]:
    c, ref = _sync(call), _ref(call)
    if not await asyncio.to_thread(c.drop_dead_letter, ref):
        raise NotFound(f"no dead letter {ref} in namespace {shown(c.namespace)}")
    return {"ref": ref, "dropped": True}


async def health(_: Call) -> dict[str, Any]:
    return {"live": True}


async def metrics(_: Call) -> Response:
    """This process's metrics; under ``tickwheel serve --workers N``, every worker's
    summed (prometheus-client's multiprocess mode, its files in the directory that
    ``serve`` made): a scrape answered by any of them tells the whole."""
    registry = METRICS
    if os.environ.get(MULTIPROC_ENV):
        registry = prometheus_client.CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return Response(
        prometheus_client.generate_latest(registry),
        media_type=prometheus_client.CONTENT_TYPE_LATEST,
    )


def table(clients: Clients) -> dict[str, Handler]:
    async def ready(_: Call) -> Response:
        rs = RedisSettings.from_url(clients.url)
        r = connections.async_client(rs)
        try:
            await r.ping()  # refused (MISCONF) while the server cannot write its disk
        except Exception as exc:  # any failure means not ready
            body = {"ready": False, "error": type(exc).__name__}
            if isinstance(exc, redis.ResponseError):  # the server's own word, e.g. MISCONF
                body["reason"] = str(exc)[:200]
            return JSONReply(body, status_code=503)
        finally:
            await r.aclose()
        return JSONReply({"ready": True})

    return {
        "scheduleTimer": schedule,
        "scheduleTimers": schedule_batch,
        "getTimer": get,
        "waitTimer": wait,
        "cancelTimer": cancel,
        "completeTimer": complete,
        "rescheduleTimer": reschedule,
        "heartbeatTimer": heartbeat,
        "notifyKeys": notify,
        "health": health,
        "ready": ready,
        "consumeOutcomes": consume,
        "streamOutcomes": events,
        "ackOutcomes": ack,
        "retryOutcome": retry,
        "deadLetterOutcome": dead,
        "stats": stats,
        "groups": groups,
        "deadLetters": dead_letters,
        "redeliverDeadLetters": _dead_batch("redeliver"),
        "dropDeadLetters": _dead_batch("drop"),
        "deadLetter": dead_letter,
        "redeliverDeadLetter": redeliver,
        "dropDeadLetter": drop,
        "metrics": metrics,
        **schedules.HANDLERS,  # timer.httpapi.schedules: …/schedules
    }
