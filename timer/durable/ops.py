"""Every operation on the durable data model, written once, for both clients (sans-I/O).

An operation is a generator: it validates its arguments, then yields steps
(:class:`~timer.durable.calls.ScriptCall`, ``Command``, ``Pipeline``, ``Sleep``, ``Emit``)
and receives each step's reply, and returns its result. It never touches a connection:
``TimerClient`` runs it with blocking redis-py calls, ``AsyncTimerClient`` with awaited
ones, so ``notify``'s batching, ``wait``'s backoff and the consumer-group reader exist
once. Validation runs at the first step, before anything is sent, so bad input writes
nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from ..errors import ConfigError, InvalidInput, TimerError, WaitTimeout
from . import groups as group_ops
from . import steps
from .calls import (
    TIMERS_PER_CALL,
    decide_call,
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
from .checks import check_int, check_seconds
from .codec import FORMAT_VERSION
from .entries import outcome_of, timer_info
from .items import ScheduleItem, check_origin, schedule_item, schedule_item_of
from .keys import NAMESPACES, NamespaceKeys, check_name
from .models import (
    Durability,
    Meta,
    Outcome,
    Timer,
    TimerInfo,
)
from .namespace import Namespace, meta_from
from .scripts import ScriptName
from .server_checks import check_durability, check_server, server_settings
from .shard_calls import MigrateStep, get_call, migrate_call, parse_migrate, results_init_call
from .steps import Op

T = TypeVar("T")
Delivery = group_ops.Delivery
ack = group_ops.ack


def init(
    keys: NamespaceKeys,
    shards: int,
    bucket_ms: int,
    *,
    where: str,
    check: bool,
    allow_eviction: bool,
    durability: Durability | None = None,
) -> Op[tuple[Meta, list[str]]]:
    """Create the namespace once; again with the same shard count is a no-op.

    Arguments are checked before anything is sent; ``check`` asks the server's version
    first (once per client). A server that may evict timers is refused (unless
    ``allow_eviction``) before anything is written. Returns the Meta and the durability
    warnings to show.
    """
    check_int("shards", shards, 1, 16384)
    check_int("bucket_ms", bucket_ms, 1, 3_600_000)
    servers = yield from server_settings(where, check_version=check)  # one INFO for both
    notes = check_durability(servers, where, allow_eviction=allow_eviction, durability=durability)
    stored = yield steps.Command("hgetall", (keys.meta,))
    if stored:  # created already: the same shard count is a no-op (tables ensured)
        meta = meta_from(stored, keys.namespace, where)
        _same_shards(keys, meta, shards)
        yield from _start_results_tables(keys, meta.shards)  # never reset: see results_init
        yield steps.Command("sadd", (NAMESPACES, keys.namespace))
        return meta, notes
    # A new namespace, all or nothing: its listing and tables first, the meta hash last
    # (what makes it exist for every client); a refusal half-way (an ACL user without
    # access to tw:namespaces) takes back what this call wrote.
    listed = False
    try:
        listed = int((yield steps.Command("sadd", (NAMESPACES, keys.namespace)))) == 1
        yield from _start_results_tables(keys, shards)
        # HSETNX is atomic per field: two racing inits agree on whoever wrote shards first.
        replies = yield steps.Pipeline(
            [
                steps.Command("hsetnx", (keys.meta, "shards", shards)),
                steps.Command("hsetnx", (keys.meta, "bucket_ms", bucket_ms)),
                steps.Command("hsetnx", (keys.meta, "version", FORMAT_VERSION)),
                steps.Command("hgetall", (keys.meta,)),
            ]
        )
    except TimerError:
        yield from _take_back(keys, shards, listed=listed)
        raise
    meta = meta_from(replies[3], keys.namespace, where)
    _same_shards(keys, meta, shards)
    return meta, notes


def _same_shards(keys: NamespaceKeys, meta: Meta, shards: int) -> None:
    if meta.shards != shards:
        raise ConfigError(
            f"namespace {keys.namespace!r} already has {meta.shards} shards; it cannot be "
            f"re-initialised with {shards} (use another namespace)"
        )


def _take_back(keys: NamespaceKeys, shards: int, *, listed: bool) -> Op[None]:
    """Undo a refused ``init`` of a new namespace: the tables it started, its listing.
    Best effort (what could not be written cannot be undone either); no timer can exist
    yet, as every client refuses a namespace without its meta hash."""
    stored = yield steps.Command("hgetall", (keys.meta,))
    if stored:  # another init made it meanwhile: its tables are its own
        return
    undo: list[steps.Command] = [
        steps.Command("delete", (keys.shard(s).results_table,)) for s in range(shards)
    ]
    if listed:
        undo.append(steps.Command("srem", (NAMESPACES, keys.namespace)))
    yield steps.Pipeline(undo, errors_in_slots=True)


def _start_results_tables(keys: NamespaceKeys, shards: int) -> Op[None]:
    for first in range(0, shards, 1000):
        yield steps.Pipeline(
            [results_init_call(keys.shard(s)) for s in range(first, min(shards, first + 1000))]
        )


def read_meta(keys: NamespaceKeys, *, where: str, check: bool, older: bool = False) -> Op[Meta]:
    if check:
        yield from check_server(where)
    stored = yield steps.Command("hgetall", (keys.meta,))
    return meta_from(stored, keys.namespace, where, older=older)


MIGRATE_BUDGET = 500  # records, ids, keys or entries one migrate.lua call converts


def migrate(
    keys: NamespaceKeys,
    *,
    where: str,
    check: bool,
    result_ttl_ms: int,
    progress: Callable[[int, MigrateStep], None] | None = None,
    budget: int = MIGRATE_BUDGET,
) -> Op[tuple[int, int]]:
    """Convert a namespace an earlier release made to this release's layout: (format
    before, format after).

    Shard by shard, ``migrate.lua`` converts a bounded step a call until the shard is
    done (``progress(shard, step)`` after each call); then the meta takes the new
    format, and each shard's migration state goes. Run it with the namespace's workers
    stopped (every client and worker refuses the namespace until it is converted).
    Interrupted, it leaves every shard consistent: run again, it goes on where it was.
    """
    check_int("budget", budget, 1, 100_000)
    meta = yield from read_meta(keys, where=where, check=check, older=True)
    if meta.version < FORMAT_VERSION:
        for s in range(meta.shards):
            call = migrate_call(keys.shard(s), budget, result_ttl_ms)
            while True:
                step = parse_migrate((yield call))
                if progress is not None:
                    progress(s, step)
                if step.done:
                    break
        yield steps.Command("hset", (keys.meta, "version", FORMAT_VERSION))
    yield steps.Pipeline(
        [steps.Command("delete", (keys.shard(s).migration,)) for s in range(meta.shards)],
        errors_in_slots=True,
    )
    return meta.version, FORMAT_VERSION


def server_time_ms() -> Op[int]:
    """The Redis server's clock, epoch ms: the one clock deadlines are computed on."""
    return (yield from server_time_us()) // 1000


def server_time_us() -> Op[int]:
    """The Redis server's clock, epoch microseconds (TIME's own resolution)."""
    secs, micros = yield steps.Command("time")
    return int(secs) * 1_000_000 + int(micros)


# -- schedule and decide -------------------------------------------------------------------


def schedule(ns: Namespace, spec: Mapping[str, object]) -> Op[Timer]:
    """One timer (a :class:`~.fields.TimerSpec`): a one-timer call of the same script
    ``schedule_many`` uses."""
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
            raise WaitTimeout(f"timer {timer_id!r} still pending after {timeout}s")
        yield steps.Sleep(min(pause, left))
        pause = min(pause * 2, 0.1)
