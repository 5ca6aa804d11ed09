"""What each endpoint does, over ``AsyncTimerClient``: the library validates, decides and
raises; this module only shapes requests and replies."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import prometheus_client
import redis.asyncio as aioredis
from prometheus_client import multiprocess
from starlette.responses import JSONResponse, Response, StreamingResponse

from timer import InvalidInput, NotFound, TimerClient, TimerError, TimerNotFound
from timer.aio_group import AsyncConsumer
from timer.durable import keys as K
from timer.durable.codec import jsonable
from timer.durable.models import DeadLetter, GroupInfo, Outcome, Timer, TimerInfo
from timer.store import RedisSettings

from .context import METRICS, MULTIPROC_ENV, Call, Clients, Handler, error_of


def timer_shape(t: Timer) -> dict[str, Any]:
    return {"id": t.id, "shard": t.shard, "deadline_ms": t.deadline_ms, "state": t.state,
            "created": t.created, "origin": t.origin}  # fmt: skip


def info_shape(t: TimerInfo) -> dict[str, Any]:
    return {"id": t.id, "shard": t.shard, "state": t.state, "deadline_ms": t.deadline_ms,
            "decided_ms": t.decided_ms, "created_ms": t.created_ms, "payload": t.payload,
            "watch": list(t.watch), "need": t.need, "notified": list(t.got),
            "traceparent": t.traceparent}  # fmt: skip


def outcome_shape(o: Outcome) -> dict[str, Any]:
    return {"id": o.id, "outcome": o.outcome, "deadline_ms": o.deadline_ms,
            "decided_ms": o.decided_ms, "lateness_ms": o.lateness_ms, "shard": o.shard,
            "payload": o.payload}  # fmt: skip


async def schedule(call: Call) -> Response:
    call.clients.check_callback(call.body)
    b = dict(call.body)
    t = await call.client.schedule(
        b.pop("id"), b.pop("delay_ms", None), deadline_ms=b.pop("deadline_ms", None),
        payload=b.pop("payload", None), watch=b.pop("watch", ()), need=b.pop("need", 1),
        rearm=b.pop("rearm", False), traceparent=b.pop("traceparent", None),
        callback_url=b.pop("callback_url", None),
    )  # fmt: skip
    return JSONResponse(jsonable(timer_shape(t)), status_code=201 if t.created else 200)


async def schedule_batch(call: Call) -> Response:
    items = call.body["items"]
    refused: dict[int, TimerError] = {}
    for i, item in enumerate(items):  # a callback host not allowed: refused in its slot
        try:
            if isinstance(item, dict):
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
            out.append({"status": 201 if r.created else 200, **timer_shape(r)})
    return JSONResponse({"results": out})  # plain values already: no jsonable() walk


async def get(call: Call) -> dict[str, Any]:
    tid = call.params["timer_id"]
    info = await call.client.get(tid)
    if info is None:
        raise TimerNotFound.of(tid, call.client.namespace)
    return info_shape(info)


async def wait(call: Call) -> dict[str, Any]:
    timeout = float(call.query["timeout_s"])
    return outcome_shape(await call.client.wait(call.params["timer_id"], timeout=timeout))


def _consumer(call: Call) -> AsyncConsumer:
    q = call.query
    return call.clients.consumer(call.client, call.params["group"], q["consumer"],
                                 q["reclaim_idle_ms"])  # fmt: skip


def delivered_shape(o: Outcome) -> dict[str, Any]:
    return {**outcome_shape(o), "ref": f"{o.shard}/{o.entry_id}", "attempt": o.attempt,
            "idempotency_key": o.idempotency_key, "traceparent": o.traceparent}  # fmt: skip


async def consume(call: Call) -> dict[str, Any]:
    got = await _consumer(call).poll(call.query["count"], call.query["wait_ms"])
    return {"outcomes": [delivered_shape(o) for o in got]}


async def events(call: Call) -> Response:
    """Server-Sent Events: each outcome an event ``outcome`` whose id is its ref; a
    comment every 15 s when there is none (proxies keep the stream open)."""
    consumer = _consumer(call)
    count = call.query["count"]

    async def stream() -> AsyncIterator[str]:
        quiet = 0
        while not await call.request.is_disconnected():
            try:
                got = await consumer.poll(count, 1000)
            except TimerError as exc:
                yield f"event: error\ndata: {json.dumps(str(exc))}\n\n"
                return
            for o in got:
                data = json.dumps(jsonable(delivered_shape(o)), separators=(",", ":"))
                yield f"event: outcome\nid: {o.shard}/{o.entry_id}\ndata: {data}\n\n"
            quiet = 0 if got else quiet + 1
            if quiet >= 15:
                yield ": still here\n\n"
                quiet = 0

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


async def ack(call: Call) -> dict[str, Any]:
    refs = call.body["refs"]
    await _consumer_of_body(call).ack(refs)
    return {"acked": len(refs)}


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
    return {"id": tid, "rescheduled": moved is not None,
            "timer": None if moved is None else timer_shape(moved)}  # fmt: skip


async def notify(call: Call) -> dict[str, Any]:
    keys = list(dict.fromkeys(call.body["keys"]))
    for k in keys:  # every key checked before any is notified: a refusal writes nothing
        K.check_name("watch key", k)
    per_key = {k: await call.client.notify(k) for k in keys}
    return {"completed": sum(per_key.values()), "per_key": per_key}


def group_shape(g: GroupInfo) -> dict[str, Any]:
    return {"name": g.name, "pending": g.pending, "retrying": g.retrying, "lag": g.lag,
            "oldest_pending_age_ms": g.oldest_pending_age_ms,
            "consumers": [{"name": c.name, "pending": c.pending, "idle_ms": c.idle_ms}
                          for c in g.consumers]}  # fmt: skip


def dead_shape(d: DeadLetter) -> dict[str, Any]:
    return {"ref": d.ref, "group": d.group, "consumer": d.consumer, "attempts": d.attempts,
            "failed_ms": d.failed_ms, "error": d.error.splitlines()[0] if d.error else "",
            "timer": d.outcome.id if d.outcome else None}  # fmt: skip


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
    return {"groups": [group_shape(g) for g in found]}


async def dead_letters(call: Call) -> dict[str, Any]:
    c, q = _sync(call), call.query
    found = await asyncio.to_thread(lambda: c.dead_letters(q["group"] or None, limit=q["limit"]))
    return {"dead_letters": [dead_shape(d) for d in found]}


async def dead_letter(call: Call) -> dict[str, Any]:
    c, ref = _sync(call), _ref(call)
    d = await asyncio.to_thread(c.dead_letter, ref)
    if d is None:
        raise NotFound(f"no dead letter {ref} in namespace {c.namespace!r}")
    return {**dead_shape(d), "error": d.error,
            "outcome": None if d.outcome is None else outcome_shape(d.outcome)}  # fmt: skip


async def redeliver(call: Call) -> dict[str, Any]:
    c, ref = _sync(call), _ref(call)
    new = await asyncio.to_thread(c.redeliver, ref)
    if new is None:
        raise NotFound(f"no dead letter {ref} in namespace {c.namespace!r}")
    return {"ref": ref, "redelivered_as": new}


async def drop(call: Call) -> dict[str, Any]:
    c, ref = _sync(call), _ref(call)
    if not await asyncio.to_thread(c.drop_dead_letter, ref):
        raise NotFound(f"no dead letter {ref} in namespace {c.namespace!r}")
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
    return Response(prometheus_client.generate_latest(registry),
                    media_type=prometheus_client.CONTENT_TYPE_LATEST)  # fmt: skip


def table(clients: Clients) -> dict[str, Handler]:
    async def ready(_: Call) -> Response:
        rs = RedisSettings.from_url(clients.url)
        r = aioredis.Redis.from_url(rs.url, **rs.options())
        try:
            await r.ping()
        except Exception as exc:  # any failure means not ready
            return JSONResponse({"ready": False, "error": type(exc).__name__}, status_code=503)
        finally:
            await r.aclose()
        return JSONResponse({"ready": True})

    return {
        "scheduleTimer": schedule, "scheduleTimers": schedule_batch, "getTimer": get,
        "waitTimer": wait, "cancelTimer": cancel, "completeTimer": complete,
        "rescheduleTimer": reschedule, "notifyKeys": notify, "health": health, "ready": ready,
        "consumeOutcomes": consume, "streamOutcomes": events, "ackOutcomes": ack,
        "retryOutcome": retry, "deadLetterOutcome": dead, "stats": stats, "groups": groups,
        "deadLetters": dead_letters, "deadLetter": dead_letter,
        "redeliverDeadLetter": redeliver, "dropDeadLetter": drop, "metrics": metrics,
    }  # fmt: skip
