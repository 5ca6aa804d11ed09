"""Every operation on the durable data model, written once, for both clients (sans-I/O).

An operation is a generator: it validates its arguments, then yields steps
(:class:`~timer.durable.timers.calls.ScriptCall`, ``Command``, ``Pipeline``, ``Sleep``, ``Emit``)
and receives each step's reply, and returns its result. It never touches a connection:
``TimerClient`` runs it with blocking redis-py calls, ``AsyncTimerClient`` with awaited
ones, so ``notify``'s batching, ``wait``'s backoff and the consumer-group reader exist
once. Validation runs at the first step, before anything is sent, so bad input writes
nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from ...errors import InvalidInput, TimerError, WaitTimeout, quoted
from ..model import steps
from ..model.checks import check_seconds
from ..model.entries import outcome_of, timer_info
from ..model.keys import check_name
from ..model.models import Outcome, Timer, TimerInfo
from ..model.namespace import Namespace
from ..model.scripts import ScriptName
from ..model.steps import Op
from .calls import (
    TIMERS_PER_CALL,
    decide_call,
    get_call,
    heartbeat_call,
    notify_call,
    parse_decide,
    parse_heartbeat,
    parse_notify,
    parse_reschedule,
    parse_schedule,
    reschedule_call,
    schedule_call,
)
from .items import ScheduleItem, check_origin, schedule_item, schedule_item_of

T = TypeVar("T")


# -- schedule and decide -------------------------------------------------------------------


def schedule(ns: Namespace, spec: Mapping[str, object]) -> Op[Timer]:
    """One timer (a :class:`~timer.durable.model.fields.TimerSpec`): a one-timer call of the
    same script ``schedule_many`` uses."""
    item = schedule_item(ns, spec)
    (result,) = parse_schedule((yield schedule_call(ns, [item], "")), [item], "")
    if isinstance(result, TimerError):
        raise result
    return result


# A schedule_many batch sent ahead: its ticket, and the (result slot, item) of each call.
_Batch = tuple[Any, list[list[tuple[int, ScheduleItem]]]]
SENDS_IN_FLIGHT = 2  # schedule_many's pipelines sent and not yet collected, at most


def schedule_many(
    ns: Namespace, items: Iterable[Mapping[str, Any]], origin: str
) -> Op[list[Timer | TimerError]]:
    """Validate every item, send the good ones in pipelined batches; a result per item.

    Each pipeline holds up to ``pipeline_batch`` timers: one script call per shard and
    per ``TIMERS_PER_CALL`` timers (on a Cluster, redis-py sends each node its calls). A
    bad item gets its error in its slot (nothing is written for it); the others go on.
    A batch is sent before the one ahead of it is collected (``Send``/``Collect``), so
    a driver that can send ahead keeps the server busy while it validates the next.
    """
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
        raise InvalidInput(
            f"schedule_many takes a list of mappings (one per timer), got "
            f"{type(items).__name__}; for one timer call schedule()"
        )
    origin = check_origin(origin)
    results: list[Timer | TimerError] = []
    by_shard: dict[int, list[tuple[int, ScheduleItem]]] = {}
    queued = 0
    # A pipeline is sent as soon as pipeline_batch timers are packed, and the one before
    # it collected only then: the server runs one while the client validates and packs
    # the next. Smaller pipelines would overlap a call of pipeline_batch items too, but
    # are slower: smaller script calls cost the server more per timer.
    # Replies are collected oldest first, and the server runs pipelines in sent order.
    send_at = ns.settings.pipeline_batch
    in_flight: deque[_Batch] = deque()
    for raw in items:
        try:
            item = schedule_item_of(ns, raw)
        except InvalidInput as exc:
            results.append(exc)
            continue
        results.append(InvalidInput("not sent"))  # replaced once its batch has run
        by_shard.setdefault(item.shard, []).append((len(results) - 1, item))
        queued += 1
        if queued >= send_at:
            in_flight.append((yield from _send(ns, by_shard, origin)))
            queued = 0
            if len(in_flight) >= SENDS_IN_FLIGHT:
                yield from _collect(in_flight.popleft(), results, origin)
    if by_shard:
        in_flight.append((yield from _send(ns, by_shard, origin)))
    while in_flight:
        yield from _collect(in_flight.popleft(), results, origin)
    return results


def _send(
    ns: Namespace, by_shard: dict[int, list[tuple[int, ScheduleItem]]], origin: str
) -> Op[_Batch]:
    """Send the packed timers (then forget them): one script call per shard and per
    ``TIMERS_PER_CALL`` timers, in one pipeline; its ticket, and each call's slots."""
    calls: list[list[tuple[int, ScheduleItem]]] = []  # (slot, item) per call
    for group in by_shard.values():
        calls += (group[i : i + TIMERS_PER_CALL] for i in range(0, len(group), TIMERS_PER_CALL))
    by_shard.clear()
    pipeline = steps.Pipeline(
        [schedule_call(ns, [it for _, it in call], origin) for call in calls],
        errors_in_slots=True,
    )
    return (yield steps.Send(pipeline)), calls


def _collect(batch: _Batch, results: list[Timer | TimerError], origin: str) -> Op[None]:
    """Read a sent pipeline's replies into the results' slots."""
    ticket, calls = batch
    replies = yield steps.Collect(ticket)
    for call, reply in zip(calls, replies, strict=True):
        if isinstance(reply, TimerError):  # the whole call failed (NotDurable, ...)
            for slot, _ in call:
                results[slot] = reply
            continue
        parsed = parse_schedule(reply, [it for _, it in call], origin)
        for (slot, _), result in zip(call, parsed, strict=True):
            results[slot] = result


def cancel(ns: Namespace, timer_id: object) -> Op[bool]:
    call, tid = decide_call(ns, ScriptName.CANCEL, timer_id)
    return parse_decide(ns, (yield call), tid, "cancelled")


def complete(ns: Namespace, timer_id: object) -> Op[bool]:
    call, tid = decide_call(ns, ScriptName.COMPLETE, timer_id)
    return parse_decide(ns, (yield call), tid, "completed")


def reschedule(
    ns: Namespace, timer_id: object, delay_ms: object, deadline_ms: object
) -> Op[Timer | None]:
    p = reschedule_call(ns, timer_id, delay_ms, deadline_ms)
    return parse_reschedule(ns, (yield p.call), p)


def heartbeat(
    ns: Namespace, timer_id: object, extend_ms: object, earlier: object = False
) -> Op[Timer]:
    p = heartbeat_call(ns, timer_id, extend_ms, earlier)
    return parse_heartbeat(ns, (yield p.call), p)


def notify(ns: Namespace, key: object) -> Op[int]:
    """Notify a watch key until no watcher is left to process; the timers completed."""
    call = notify_call(ns, key)
    completed = 0
    while True:  # each call completes at most notify_batch watchers
        done, remaining = parse_notify((yield call))
        completed += done
        if remaining == 0:
            return completed


# -- read ----------------------------------------------------------------------------------


def get(ns: Namespace, timer_id: object) -> Op[TimerInfo | None]:
    tid = check_name("timer id", timer_id)
    shard = ns.shard_of(tid)
    sk = ns.shard(shard)
    pending, decided = yield get_call(sk, tid)
    return timer_info(tid, shard, pending or None, decided or None)


def wait(ns: Namespace, timer_id: object, timeout: float) -> Op[Outcome]:
    """Poll the retained outcome with backoff (5 → 100 ms) until the timer is decided."""
    timeout = check_seconds("timeout", timeout)
    clock = yield steps.Clock()
    deadline = clock.monotonic() + timeout
    pause = 0.005
    while True:
        info = yield from get(ns, timer_id)
        if info is None:
            raise ns.not_found(str(timer_id))
        if info.state != "pending":
            return outcome_of(info)
        left = deadline - clock.monotonic()
        if left <= 0:
            raise WaitTimeout(f"timer {quoted(timer_id)} still pending after {timeout}s")
        # nothing decides it but a firing or a call: a clock that knows when the next
        # firing is (the time-skipping kit's) moves there at once (trial 33: a wait of
        # an hour there was 36,000 polls, a minute of real time)
        yield steps.Sleep(min(pause, left), at_most=left)
        pause = min(pause * 2, 0.1)
