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

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from ..errors import ConfigError, InvalidInput, StoreError, TimerError, WaitTimeout
from . import calls as C
from . import groups as G
from . import keys as K
from .calls import Op as Op  # noqa: PLC0414 - re-exported for the clients
from .checks import check_bool, check_seconds
from .codec import FORMAT_VERSION, decode_pending
from .models import (
    COARSE_MS,
    DueTimers,
    Meta,
    Outcome,
    ServerSettings,
    Timer,
    TimerInfo,
    Trimmed,
)
from .scripts import ScriptName

T = TypeVar("T")
Delivery = G.Delivery
ack = G.ack

MIN_SERVER = {"redis": (6, 2), "valkey": (7, 2)}


def check_server_version(info: Mapping[str, Any], where: str) -> None:
    """ConfigError unless INFO server describes Redis >= 6.2 or Valkey >= 7.2."""
    if "valkey_version" in info:
        kind, version = "valkey", info["valkey_version"]
    else:
        kind, version = "redis", info.get("redis_version", "0")
    have = tuple(int(x) for x in str(version).split(".")[:2])
    if have < MIN_SERVER[kind]:
        need = ".".join(map(str, MIN_SERVER[kind]))
        raise ConfigError(
            f"{kind} {version} at {where} is too old: tickwheel needs {kind} >= {need} "
            "(Redis >= 6.2 or Valkey >= 7.2)"
        )


def server_settings(where: str = "", *, check_version: bool = False) -> Op[list[ServerSettings]]:
    """What every server (every primary of a cluster) says about keeping our data; with
    ``check_version``, a ConfigError for a server too old (from the same INFO)."""
    infos = yield C.Command("info", (), every_primary=True)
    if check_version:
        for info in infos.values():
            check_server_version(info, where)
    return [
        ServerSettings(
            node=str(node),
            version=str(info.get("valkey_version") or info.get("redis_version", "?")),
            maxmemory_policy=str(info.get("maxmemory_policy", "noeviction")),
            aof_enabled=int(info.get("aof_enabled", 0)) == 1,
        )
        for node, info in sorted(infos.items())
    ]


def check_durability(
    servers: Iterable[ServerSettings], where: str, *, allow_eviction: bool
) -> list[str]:
    """ConfigError for a server that may evict timers (unless allowed); a warning each
    for a server without AOF."""
    notes: list[str] = []
    for s in servers:
        if s.evicts and not allow_eviction:
            raise ConfigError(
                f"the server at {where} ({s.node}) has maxmemory-policy {s.maxmemory_policy}: "
                "it may evict timers and outcomes without a trace. Set "
                "`maxmemory-policy noeviction` (CONFIG SET or redis.conf), or pass "
                "allow_eviction (`--allow-eviction`) if you accept losing timers"
            )
        if s.evicts:
            notes.append(f"{s.node}: maxmemory-policy {s.maxmemory_policy} may evict timers")
        if not s.aof_enabled:
            notes.append(
                f"{s.node}: AOF is off (appendonly no): a crash of the server loses the "
                "timers written since its last snapshot; set `appendonly yes`"
            )
    return notes


# -- namespace -----------------------------------------------------------------------------


def hello_fields(reply: Any) -> dict[str, Any]:
    """HELLO's reply (a flat list under RESP2, a map under RESP3) as text -> value."""
    pairs = (
        reply.items() if isinstance(reply, Mapping) else zip(reply[::2], reply[1::2], strict=True)
    )
    return {C.text(k): C.text(v) if isinstance(v, bytes) else v for k, v in pairs}


def version_of_hello(hello: Mapping[str, Any]) -> dict[str, Any]:
    """HELLO's fields in INFO's terms, for ``check_server_version``."""
    key = "valkey_version" if hello.get("server") == "valkey" else "redis_version"
    return {key: hello.get("version", "0")}


def check_server(where: str) -> Op[None]:
    """ConfigError unless the server is new enough. Asked with HELLO (a connection
    command any ACL user may run), not INFO (which Redis classes as dangerous), so a
    client or handler runner needs no INFO permission (README, *Security*)."""
    try:  # every primary of a cluster (HELLO names no key to route it by)
        replies = yield C.Command("execute_command", ("HELLO",), every_primary=True)
    except StoreError as exc:  # HELLO with no version is Redis >= 6.2 (6.0 wants one)
        raise ConfigError(
            f"the server at {where} does not answer HELLO ({exc}): tickwheel needs "
            "Redis >= 6.2 or Valkey >= 7.2"
        ) from None
    for reply in replies.values():
        check_server_version(version_of_hello(hello_fields(reply)), where)


def init(
    keys: K.NamespaceKeys,
    shards: int,
    bucket_ms: int,
    *,
    where: str,
    check: bool,
    allow_eviction: bool,
) -> Op[tuple[Meta, list[str]]]:
    """Create the namespace once; again with the same shard count is a no-op.

    Arguments are checked before anything is sent; ``check`` asks the server's version
    first (once per client). A server that may evict timers is refused (unless
    ``allow_eviction``) before anything is written. Returns the Meta and the durability
    warnings to show.
    """
    C.check_int("shards", shards, 1, 16384)
    C.check_int("bucket_ms", bucket_ms, 1, 3_600_000)
    servers = yield from server_settings(where, check_version=check)  # one INFO for both
    notes = check_durability(servers, where, allow_eviction=allow_eviction)
    stored = yield C.Command("hgetall", (keys.meta,))
    if stored:  # created already: the same shard count is a no-op (tables ensured)
        meta = C.meta_from(stored, keys.namespace, where)
        _same_shards(keys, meta, shards)
        yield from _start_results_tables(keys, meta.shards)  # never reset: see results_init
        yield C.Command("sadd", (K.NAMESPACES, keys.namespace))
        return meta, notes
    # A new namespace, all or nothing: its listing and tables first, the meta hash last
    # (what makes it exist for every client); a refusal half-way (an ACL user without
    # access to tw:namespaces) takes back what this call wrote.
    listed = False
    try:
        listed = int((yield C.Command("sadd", (K.NAMESPACES, keys.namespace)))) == 1
        yield from _start_results_tables(keys, shards)
        # HSETNX is atomic per field: two racing inits agree on whoever wrote shards first.
        replies = yield C.Pipeline([
            C.Command("hsetnx", (keys.meta, "shards", shards)),
            C.Command("hsetnx", (keys.meta, "bucket_ms", bucket_ms)),
            C.Command("hsetnx", (keys.meta, "version", FORMAT_VERSION)),
            C.Command("hgetall", (keys.meta,)),
        ])  # fmt: skip
    except TimerError:
        yield from _take_back(keys, shards, listed=listed)
        raise
    meta = C.meta_from(replies[3], keys.namespace, where)
    _same_shards(keys, meta, shards)
    return meta, notes


def _same_shards(keys: K.NamespaceKeys, meta: Meta, shards: int) -> None:
    if meta.shards != shards:
        raise ConfigError(
            f"namespace {keys.namespace!r} already has {meta.shards} shards; it cannot be "
            f"re-initialised with {shards} (use another namespace)"
        )


def _take_back(keys: K.NamespaceKeys, shards: int, *, listed: bool) -> Op[None]:
    """Undo a refused ``init`` of a new namespace: the tables it started, its listing.
    Best effort (what could not be written cannot be undone either); no timer can exist
    yet, as every client refuses a namespace without its meta hash."""
    stored = yield C.Command("hgetall", (keys.meta,))
    if stored:  # another init made it meanwhile: its tables are its own
        return
    undo: list[C.Command] = [
        C.Command("delete", (keys.shard(s).results_table,)) for s in range(shards)
    ]
    if listed:
        undo.append(C.Command("srem", (K.NAMESPACES, keys.namespace)))
    yield C.Pipeline(undo, errors_in_slots=True)


def _start_results_tables(keys: K.NamespaceKeys, shards: int) -> Op[None]:
    for first in range(0, shards, 1000):
        yield C.Pipeline([C.results_init_call(keys.shard(s))
                          for s in range(first, min(shards, first + 1000))])  # fmt: skip


def read_meta(keys: K.NamespaceKeys, *, where: str, check: bool, older: bool = False) -> Op[Meta]:
    if check:
        yield from check_server(where)
    stored = yield C.Command("hgetall", (keys.meta,))
    return C.meta_from(stored, keys.namespace, where, older=older)


MIGRATE_BUDGET = 500  # records, ids, keys or entries one migrate.lua call converts


def migrate(
    keys: K.NamespaceKeys,
    *,
    where: str,
    check: bool,
    result_ttl_ms: int,
    progress: Callable[[int, C.MigrateStep], None] | None = None,
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
    C.check_int("budget", budget, 1, 100_000)
    meta = yield from read_meta(keys, where=where, check=check, older=True)
    if meta.version < FORMAT_VERSION:
        for s in range(meta.shards):
            call = C.migrate_call(keys.shard(s), budget, result_ttl_ms)
            while True:
                step = C.parse_migrate((yield call))
                if progress is not None:
                    progress(s, step)
                if step.done:
                    break
        yield C.Command("hset", (keys.meta, "version", FORMAT_VERSION))
    yield C.Pipeline(
        [C.Command("delete", (keys.shard(s).migration,)) for s in range(meta.shards)],
        errors_in_slots=True,
    )
    return meta.version, FORMAT_VERSION


def server_time_ms() -> Op[int]:
    """The Redis server's clock, epoch ms: the one clock deadlines are computed on."""
    secs, micros = yield C.Command("time")
    return int(secs) * 1000 + int(micros) // 1000


# -- schedule and decide -------------------------------------------------------------------


def schedule(ns: C.Namespace, timer_id: object, **timer: Any) -> Op[Timer]:
    """One timer: a one-timer call of the same script ``schedule_many`` uses."""
    item = C.schedule_item(ns, timer_id, **timer)
    (result,) = C.parse_schedule((yield C.schedule_call(ns, [item], "")), [item], "")
    if isinstance(result, TimerError):
        raise result
    return result


# A schedule_many batch sent ahead: its ticket, and the (result slot, item) of each call.
_Batch = tuple[Any, list[list[tuple[int, C.ScheduleItem]]]]
SENDS_IN_FLIGHT = 2  # schedule_many's pipelines sent and not yet collected, at most


def schedule_many(
    ns: C.Namespace, items: Iterable[Mapping[str, Any]], origin: str
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
    origin = C.check_origin(origin)
    results: list[Timer | TimerError] = []
    by_shard: dict[int, list[tuple[int, C.ScheduleItem]]] = {}
    queued = 0

    def send() -> Op[_Batch]:
        calls: list[list[tuple[int, C.ScheduleItem]]] = []  # (slot, item) per call
        for group in by_shard.values():
            calls += (
                group[i : i + C.TIMERS_PER_CALL] for i in range(0, len(group), C.TIMERS_PER_CALL)
            )
        by_shard.clear()
        pipeline = C.Pipeline(
            [C.schedule_call(ns, [it for _, it in call], origin) for call in calls],
            errors_in_slots=True,
        )
        return (yield C.Send(pipeline)), calls

    def collect(batch: _Batch) -> Op[None]:
        ticket, calls = batch
        replies = yield C.Collect(ticket)
        for call, reply in zip(calls, replies, strict=True):
            if isinstance(reply, TimerError):  # the whole call failed (NotDurable, ...)
                for slot, _ in call:
                    results[slot] = reply
                continue
            parsed = C.parse_schedule(reply, [it for _, it in call], origin)
            for (slot, _), result in zip(call, parsed, strict=True):
                results[slot] = result

    # A pipeline is sent as soon as pipeline_batch timers are packed, and the one before
    # it collected only then: the server runs one while the client validates and packs
    # the next (#14). Smaller pipelines would overlap a call of pipeline_batch items too,
    # but measured slower: smaller script calls cost the server more per timer.
    # Replies are collected oldest first, and the server runs pipelines in sent order.
    send_at = ns.settings.pipeline_batch
    in_flight: deque[_Batch] = deque()
    for raw in items:
        try:
            item = C.schedule_item_of(ns, raw)
        except InvalidInput as exc:
            results.append(exc)
            continue
        results.append(InvalidInput("not sent"))  # replaced once its batch has run
        by_shard.setdefault(item.shard, []).append((len(results) - 1, item))
        queued += 1
        if queued >= send_at:
            in_flight.append((yield from send()))
            queued = 0
            if len(in_flight) >= SENDS_IN_FLIGHT:
                yield from collect(in_flight.popleft())
    if by_shard:
        in_flight.append((yield from send()))
    while in_flight:
        yield from collect(in_flight.popleft())
    return results


def cancel(ns: C.Namespace, timer_id: object) -> Op[bool]:
    call, tid = C.decide_call(ns, ScriptName.CANCEL, timer_id)
    return C.parse_decide(ns, (yield call), tid, "cancelled")


def complete(ns: C.Namespace, timer_id: object) -> Op[bool]:
    call, tid = C.decide_call(ns, ScriptName.COMPLETE, timer_id)
    return C.parse_decide(ns, (yield call), tid, "completed")


def reschedule(
    ns: C.Namespace, timer_id: object, delay_ms: object, deadline_ms: object
) -> Op[Timer | None]:
    p = C.reschedule_call(ns, timer_id, delay_ms, deadline_ms)
    return C.parse_reschedule(ns, (yield p.call), p)


def notify(ns: C.Namespace, key: object) -> Op[int]:
    """Notify a watch key until no watcher is left to process; the timers completed."""
    call = C.notify_call(ns, key)
    completed = 0
    while True:  # each call completes at most notify_batch watchers
        done, remaining = C.parse_notify((yield call))
        completed += done
        if remaining == 0:
            return completed


# -- read ----------------------------------------------------------------------------------


def get(ns: C.Namespace, timer_id: object) -> Op[TimerInfo | None]:
    tid = K.check_name("timer id", timer_id)
    shard = ns.shard_of(tid)
    sk = ns.shard(shard)
    pending, decided = yield C.get_call(sk, tid)
    return C.timer_info(tid, shard, pending or None, decided or None)


def wait(ns: C.Namespace, timer_id: object, timeout: float) -> Op[Outcome]:
    """Poll the retained outcome with backoff (5 → 100 ms) until the timer is decided."""
    timeout = check_seconds("timeout", timeout)
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        info = yield from get(ns, timer_id)
        if info is None:
            raise ns.not_found(str(timer_id), " (or its outcome is older than result_ttl)")
        if info.state != "pending":
            assert info.decided_ms is not None
            return Outcome(
                info.id, info.state, info.deadline_ms, info.decided_ms, info.payload, info.shard
            )
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(f"timer {timer_id!r} still pending after {timeout}s")
        yield C.Sleep(min(pause, left))
        pause = min(pause * 2, 0.1)


def outcomes_total(ns: C.Namespace) -> Op[int]:
    """How many outcomes the namespace's streams hold (one pipelined XLEN per shard)."""
    lengths = yield C.Pipeline([C.Command("xlen", (s,)) for s in ns.outcome_streams()])
    return sum(int(n) for n in lengths)


def history(ns: C.Namespace, shards: Iterable[int], page: int = 10_000) -> Op[None]:
    """Emit every outcome retained in the shards' streams, oldest first per shard, read
    in pages with XRANGE (no consumer group: audits, demos, analytics). A dead letter put
    back for a group (``redeliver``) is a copy, not another outcome: it is skipped."""
    for shard in C.check_shards(ns, shards):
        stream = ns.shard(shard).outcomes
        start: Any = "-"
        while True:
            entries = yield C.Command("xrange", (stream, start, "+"), {"count": page})
            if start != "-":
                entries = entries[1:]  # the page's first entry is the last one already given
            if not entries:
                break
            for entry_id, fields in entries:
                if b"only" not in fields:  # a dead letter put back for a group: a copy
                    yield C.Emit(C.outcome_or_undecodable(shard, entry_id, fields))
            start = entries[-1][0]


def namespaces() -> Op[list[str]]:
    """The namespaces ``init`` has created on this server (or cluster), sorted."""
    names = yield C.Command("smembers", (K.NAMESPACES,))
    return sorted(C.text(n) for n in names)


def recent(ns: C.Namespace, count: int, shards: Iterable[int] | None = None) -> Op[list[Outcome]]:
    """The newest ``count`` outcomes of each shard (all, or ``shards``), newest first
    overall: one pipelined XREVRANGE per shard."""
    C.check_int("count", count, 1, 100_000)
    picked = C.check_shards(ns, shards)
    pages = yield C.Pipeline(
        [C.Command("xrevrange", (ns.shard(s).outcomes, "+", "-"), {"count": count})
         for s in picked]
    )  # fmt: skip
    out = [
        C.outcome_or_undecodable(s, entry_id, fields)
        for s, entries in zip(picked, pages, strict=True)
        for entry_id, fields in entries
        if fields and b"only" not in fields
    ]
    out.sort(key=lambda o: o.decided_ms, reverse=True)
    return out


def next_due(ns: C.Namespace, shard: int, count: int) -> Op[list[tuple[int, str]]]:
    """The ``count`` pending timers of a shard due first: (deadline_ms, id), soonest first.

    Reads the shard's first ``count`` durable buckets (at most ``10 * count`` ids), and
    when they hold fewer than ``count`` the first coarse bucket (far timers), so it is
    cheap however many timers the shard holds.
    """
    C.check_int("shard", shard, 0, ns.meta.shards - 1)
    C.check_int("count", count, 1, 1000)
    sk = ns.shard(shard)
    timers: list[tuple[int, str]] = []
    first = yield C.Command("zrange", (sk.buckets, 0, count - 1), {"withscores": True})
    if first:
        timers = (
            yield from read_due(
                sk, int(first[-1][1]), set(), max_ids=10 * count, bucket_ms=ns.meta.bucket_ms
            )
        ).timers
    if len(timers) < count:  # fine buckets end an hour or so ahead: then the far ones
        far = yield C.Command("zrange", (sk.coarse_buckets, 0, 0), {"withscores": True})
        if far:
            more = yield from read_due(sk, int(far[0][1]), set(), max_ids=10 * count, coarse=True)
            timers = sorted(timers + more.timers)
    return timers[:count]


def stats(ns: C.Namespace, *, servers: bool = True) -> Op[dict[str, Any]]:
    """Per shard: pending, leader, epoch, outcomes, lag (ms past the oldest ended bucket),
    the lease's time to live; and (unless ``servers=False``: one INFO per primary less)
    what each server says about durability (eviction policy, AOF)."""
    now = yield from server_time_ms()
    settings = (yield from server_settings()) if servers else []
    commands: list[C.Command] = []
    for s in range(ns.meta.shards):
        sk = ns.shard(s)
        commands += [
            C.Command("hlen", (sk.timers,)),
            C.Command("get", (sk.lease,)),
            C.Command("get", (sk.epoch,)),
            C.Command("zrange", (sk.buckets, 0, 0), {"withscores": True}),
            C.Command("xlen", (sk.outcomes,)),
            C.Command("pttl", (sk.lease,)),
            C.Command("zrange", (sk.coarse_buckets, 0, 0), {"withscores": True}),
        ]
    replies = yield C.Pipeline(commands)
    shards: list[dict[str, Any]] = []
    for s in range(ns.meta.shards):
        pending, leader, epoch, oldest, outs, ttl, far = replies[7 * s : 7 * s + 7]
        lag = 0
        if oldest:
            bucket_end = int(oldest[0][1]) + ns.meta.bucket_ms
            lag = max(0, now - bucket_end)
        if far:  # a coarse bucket is moved an hour ahead: one that has started is overdue
            lag = max(lag, now - int(far[0][1]))
        shards.append(
            {
                "shard": s,
                "pending": int(pending),
                "leader": leader.decode() if leader else None,
                "epoch": int(epoch) if epoch else 0,
                "outcomes": int(outs),
                "lag_ms": lag,
                "lease_ttl_ms": int(ttl) if int(ttl) >= 0 else None,  # until it lapses
            }
        )
    return {
        "namespace": ns.name,
        "shards": shards,
        "pending": sum(x["pending"] for x in shards),
        "outcomes": sum(x["outcomes"] for x in shards),
        "max_lag_ms": max((int(x["lag_ms"]) for x in shards), default=0),
        "now_ms": now,
        "servers": [
            {
                "node": v.node,
                "version": v.version,
                "maxmemory_policy": v.maxmemory_policy,
                "aof": v.aof_enabled,
            }
            for v in settings
        ],
    }


def memory(ns: C.Namespace, sample: int = 10) -> Op[dict[str, Any]]:
    """Redis bytes held per pending and per decided timer (estimates, two round trips).

    Pending: each shard's timers hash and bucket mirrors (``MEMORY USAGE``, which
    itself samples a large hash), plus the mean of up to ``sample`` durable buckets
    times the number of buckets, and the same for the coarse buckets. Decided: the
    outcome streams' bytes per entry, plus a retained result's bytes: the bytes of up
    to ``sample`` of the results table's hashes over the results they hold. Watch
    indexes are not counted. None where there is nothing to measure.
    """
    C.check_int("sample", sample, 1, 1000)
    first: list[C.Command] = []
    for s in range(ns.meta.shards):
        sk = ns.shard(s)
        first += [
            C.Command("memory_usage", (sk.timers,)),
            C.Command("memory_usage", (sk.buckets,)),
            C.Command("zcard", (sk.buckets,)),
            C.Command("zrange", (sk.buckets, 0, sample - 1)),
            C.Command("hlen", (sk.timers,)),
            C.Command("memory_usage", (sk.outcomes,)),
            C.Command("xlen", (sk.outcomes,)),
            C.Command("memory_usage", (sk.coarse_buckets,)),
            C.Command("zcard", (sk.coarse_buckets,)),
            C.Command("zrange", (sk.coarse_buckets, 0, sample - 1)),
            C.Command("hmget", (sk.results_table, "L", "S", "N")),
        ]
    replies = yield C.Pipeline(first)
    fixed = stream = buckets = coarse = pending = outcomes = held = 0
    probes: list[tuple[str, C.Command]] = []
    for s in range(ns.meta.shards):
        (t_mem, bz_mem, zcard, names, hlen, out_mem, xlen, cz_mem, ccard, cnames,
         table) = replies[11 * s : 11 * s + 11]  # fmt: skip
        sk = ns.shard(s)
        fixed += int(t_mem or 0) + int(bz_mem or 0) + int(cz_mem or 0) if int(hlen) else 0
        buckets += int(zcard)
        coarse += int(ccard)
        probes += [("coarse", C.Command("memory_usage", (sk.coarse(int(m)),))) for m in cnames]
        pending += int(hlen)
        stream += int(out_mem or 0) if int(xlen) else 0
        outcomes += int(xlen)
        probes += [("bucket", C.Command("memory_usage", (sk.bucket(int(n)),))) for n in names]
        parts = 2 ** int(table[0] or 0) + int(table[1] or 0)  # sample the results table
        held += int(table[2] or 0)
        for b in range(0, parts, max(1, parts // sample)):
            probes += [("part", C.Command("memory_usage", (sk.results_part(b),))),
                       ("part_len", C.Command("hlen", (sk.results_part(b),)))]  # fmt: skip
    sizes = (yield C.Pipeline([cmd for _, cmd in probes])) if probes else []
    measured: dict[str, list[int]] = {"bucket": [], "coarse": [], "result": [], "part": [],
                                      "part_len": []}  # fmt: skip
    for (kind, _), size in zip(probes, sizes, strict=True):
        if size:  # a result past its TTL (or a bucket just emptied) is gone: not a sample
            measured[kind].append(int(size))
    sampled_results = len(measured["part_len"])
    if measured["part_len"]:  # bytes per result in the table, as the mean of the others
        measured["result"].append(round(sum(measured["part"]) / sum(measured["part_len"])))

    def mean(values: list[int]) -> float:
        return sum(values) / len(values) if values else 0.0

    indexed = fixed + mean(measured["bucket"]) * buckets + mean(measured["coarse"]) * coarse
    per_pending = indexed / pending if pending else None
    per_decided = stream / outcomes + mean(measured["result"]) if outcomes else None
    return {
        "bytes_per_pending_timer": None if per_pending is None else round(per_pending, 1),
        "bytes_per_decided_timer": None if per_decided is None else round(per_decided, 1),
        "pending": pending,
        "outcomes": outcomes,
        "retained_in_table": held,
        "durable_buckets": buckets,
        "coarse_buckets": coarse,
        "sampled_buckets": len(measured["bucket"]),
        "sampled_results": sampled_results,
    }


def leaders(ns: C.Namespace) -> Op[dict[int, str | None]]:
    """Each shard's lease holder now (None: no leader)."""
    shards = range(ns.meta.shards)
    held = yield C.Pipeline([C.Command("get", (ns.shard(s).lease,)) for s in shards])
    return {s: None if who is None else C.text(who) for s, who in zip(shards, held, strict=True)}


def trim_outcomes(
    ns: C.Namespace, retention_ms: int | None, *, keep_unread: bool, shards: Iterable[int] | None
) -> Op[list[Trimmed]]:
    keep = None if retention_ms is None else C.check_int("retention_ms", retention_ms, 0)
    check_bool("keep_unread", keep_unread)
    picked = C.check_shards(ns, shards)
    calls = [C.trim_call(ns.shard(s), keep, keep_unread=keep_unread) for s in picked]
    replies = yield C.Pipeline(calls, errors_in_slots=True)
    return [C.parse_trim(C.error_or(r), s) for s, r in zip(picked, replies, strict=True)]


# -- membership and a shard's leader ---------------------------------------------------------


def heartbeat(keys: K.NamespaceKeys, worker: str, now_ms: int, live_window_ms: int) -> Op[int]:
    """Announce ``worker`` at ``now_ms``; forget long-gone workers; how many are live."""
    replies = yield C.Pipeline([
        C.Command("zadd", (keys.workers, {worker: now_ms})),
        C.Command("zremrangebyscore", (keys.workers, "-inf", now_ms - 10 * live_window_ms)),
        C.Command("zcount", (keys.workers, now_ms - live_window_ms, "+inf")),
    ])  # fmt: skip
    return int(replies[-1])


def workers(keys: K.NamespaceKeys) -> Op[list[tuple[str, int]]]:
    """Every worker that announced itself recently: (id, last heartbeat, Redis ms)."""
    seen = yield C.Command("zrange", (keys.workers, 0, -1), {"withscores": True})
    return [(C.text(w), int(ms)) for w, ms in seen]


def leave(keys: K.NamespaceKeys, worker: str) -> Op[None]:
    yield C.Command("zrem", (keys.workers, worker))


def backlog(sk: K.ShardKeys) -> Op[tuple[int, int | None]]:
    """(timers pending in the shard, start of its oldest durable bucket or None)."""
    pending, oldest = yield C.Pipeline([
        C.Command("hlen", (sk.timers,)),
        C.Command("zrange", (sk.buckets, 0, 0), {"withscores": True}),
    ])  # fmt: skip
    return int(pending), (int(oldest[0][1]) if oldest else None)


def read_due(
    sk: K.ShardKeys,
    until_ms: int,
    skip: set[int],
    *,
    chunk: int = 1000,
    max_ids: int = 200_000,
    coarse: bool = False,
    bucket_ms: int | None = None,
) -> Op[DueTimers]:
    """Durable buckets starting before ``until_ms`` (not in ``skip``) and their timers.

    Buckets are read with LRANGE and records with HMGET in chunks, so no call blocks
    Redis long. Reading stops after the bucket that reaches ``max_ids`` pending timers: a
    backlog left by a long outage is taken in slices, oldest buckets first, not all at
    once into memory. ``coarse`` reads the coarse buckets (far timers) instead of the
    fine ones. Buckets (the lazy lists of ``lua/include/buckets.lua``) may hold ids
    stale or repeated until the sweep takes them, so each id is taken once, only while
    pending and due in the bucket it was found in (fine buckets ``bucket_ms`` wide, if
    given), and stale ones take no room.
    """
    mirror, bucket = (sk.coarse_buckets, sk.coarse) if coarse else (sk.buckets, sk.bucket)
    members = yield C.Command("zrangebyscore", (mirror, "-inf", until_ms))
    width = COARSE_MS if coarse else bucket_ms
    buckets: list[int] = []
    found: dict[str, int] = {}  # id -> its deadline, each once
    for n in (int(m) for m in members):
        if n in skip:
            continue
        if len(found) >= max_ids:  # counted in pending timers: stale ids take no room
            break
        buckets.append(n)
        cursor = 0
        while True:
            part = yield C.Command("lrange", (bucket(n), cursor, cursor + chunk - 1))
            cursor = 0 if len(part) < chunk else cursor + chunk
            names = [t for t in dict.fromkeys(C.text(m) for m in part) if t not in found]
            if names:
                records = yield C.Command("hmget", (sk.timers, names))
                for tid, raw in zip(names, records, strict=True):
                    if raw is None:
                        continue  # decided: a stale id of a list
                    d = int(decode_pending(raw)["d"])
                    if width is None or d // width == n:  # due here, not moved elsewhere
                        found[tid] = d
            if cursor == 0:
                break
    due = [(d, tid) for tid, d in found.items()]
    due.sort()
    return DueTimers(buckets, due)
