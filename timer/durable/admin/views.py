"""What an operator sees of a namespace: its history and recent outcomes, what is due
next, its figures (stats), its memory, its leaders, and the namespaces a server holds.
Sans-I/O operations, as in :mod:`timer.durable.timers.ops`; read-only."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..model import steps
from ..model.checks import check_int
from ..model.codec import text
from ..model.entries import outcome_or_undecodable
from ..model.keys import NAMESPACES, ShardKeys, results_parts
from ..model.models import Outcome
from ..model.namespace import Namespace, check_shards
from ..model.steps import Op, server_time_ms
from ..shards.ops import read_due
from .server import server_settings


def outcomes_total(ns: Namespace) -> Op[int]:
    """How many outcomes the namespace's streams hold (one pipelined XLEN per shard)."""
    lengths = yield steps.Pipeline([steps.Command("xlen", (s,)) for s in ns.outcome_streams()])
    return sum(int(n) for n in lengths)


def history(ns: Namespace, shards: Iterable[int], page: int = 10_000) -> Op[None]:
    """Emit every outcome retained in the shards' streams, oldest first per shard, read
    in pages with XRANGE (no consumer group: audits, demos, analytics). A dead letter put
    back for a group (``redeliver``) is a copy, not another outcome: it is skipped."""
    for shard in check_shards(ns, shards):
        stream = ns.shard(shard).outcomes
        start: Any = "-"
        while True:
            entries = yield steps.Command("xrange", (stream, start, "+"), {"count": page})
            if start != "-":
                entries = entries[1:]  # the page's first entry is the last one already given
            if not entries:
                break
            for entry_id, fields in entries:
                if b"only" not in fields:  # a dead letter put back for a group: a copy
                    yield steps.Emit(outcome_or_undecodable(shard, entry_id, fields))
            start = entries[-1][0]


def namespaces() -> Op[list[str]]:
    """The namespaces ``init`` has created on this server (or cluster), sorted."""
    names = yield steps.Command("smembers", (NAMESPACES,))
    return sorted(text(n) for n in names)


def recent(ns: Namespace, count: int, shards: Iterable[int] | None = None) -> Op[list[Outcome]]:
    """The newest ``count`` outcomes of each shard (all, or ``shards``), newest first
    overall: one pipelined XREVRANGE per shard."""
    check_int("count", count, 1, 100_000)
    picked = check_shards(ns, shards)
    pages = yield steps.Pipeline(
        [
            steps.Command("xrevrange", (ns.shard(s).outcomes, "+", "-"), {"count": count})
            for s in picked
        ]
    )
    out = [
        outcome_or_undecodable(s, entry_id, fields)
        for s, entries in zip(picked, pages, strict=True)
        for entry_id, fields in entries
        if fields and b"only" not in fields
    ]
    out.sort(key=lambda o: o.decided_ms, reverse=True)
    return out


def next_due(ns: Namespace, shard: int, count: int) -> Op[list[tuple[int, str]]]:
    """The ``count`` pending timers of a shard due first: (deadline_ms, id), soonest first.

    Reads the shard's first ``count`` durable buckets (at most ``10 * count`` ids), and
    when they hold fewer than ``count`` the first coarse bucket (far timers), so it is
    cheap however many timers the shard holds.
    """
    check_int("shard", shard, 0, ns.meta.shards - 1)
    check_int("count", count, 1, 1000)
    sk = ns.shard(shard)
    timers: list[tuple[int, str]] = []
    first = yield steps.Command("zrange", (sk.buckets, 0, count - 1), {"withscores": True})
    if first:
        timers = (
            yield from read_due(
                sk, int(first[-1][1]), set(), max_ids=10 * count, bucket_ms=ns.meta.bucket_ms
            )
        ).timers
    if len(timers) < count:  # fine buckets end an hour or so ahead: then the far ones
        far = yield steps.Command("zrange", (sk.coarse_buckets, 0, 0), {"withscores": True})
        if far:
            more = yield from read_due(sk, int(far[0][1]), set(), max_ids=10 * count, coarse=True)
            timers = sorted(timers + more.timers)
    return timers[:count]


def stats(ns: Namespace, *, servers: bool = True) -> Op[dict[str, Any]]:
    """Per shard: pending, leader, epoch, outcomes, lag (ms past the oldest ended bucket),
    the lease's time to live; and (unless ``servers=False``: one INFO per primary less)
    what each server says about durability (eviction policy, AOF)."""
    now = yield from server_time_ms()
    settings = (yield from server_settings()) if servers else []
    commands: list[steps.Command] = []
    for s in range(ns.meta.shards):
        sk = ns.shard(s)
        commands += [
            steps.Command("hlen", (sk.timers,)),
            steps.Command("get", (sk.lease,)),
            steps.Command("get", (sk.epoch,)),
            steps.Command("zrange", (sk.buckets, 0, 0), {"withscores": True}),
            steps.Command("xlen", (sk.outcomes,)),
            steps.Command("pttl", (sk.lease,)),
            steps.Command("zrange", (sk.coarse_buckets, 0, 0), {"withscores": True}),
        ]
    replies = yield steps.Pipeline(commands)
    shards: list[dict[str, Any]] = []
    for s in range(ns.meta.shards):
        pending, leader, epoch, oldest, outs, ttl, far = replies[7 * s : 7 * s + 7]
        lag = 0
        # a bucket left by cancelled ids is cleared at its sweep: with nothing pending
        # nothing is late, whether or not a worker sweeps (the overview's alarm)
        if oldest and int(pending):
            bucket_end = int(oldest[0][1]) + ns.meta.bucket_ms
            lag = max(0, now - bucket_end)
        # a coarse bucket is moved an hour ahead: one that has started is overdue
        if far and int(pending):
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


MEASURED_AT_LEAST = 100  # timers of a kind before memory() gives bytes per timer


def memory(ns: Namespace, sample: int = 10) -> Op[dict[str, Any]]:
    """Redis bytes held per pending and per decided timer (estimates, two round trips).

    Pending: each shard's timers hash and bucket mirrors (``MEMORY USAGE``, which
    itself samples a large hash), plus the mean of up to ``sample`` durable buckets
    times the number of buckets, and the same for the coarse buckets. Decided: the
    outcome streams' bytes per entry, plus a retained result's bytes: the bytes of up
    to ``sample`` of the results table's hashes over the results they hold. Watch
    indexes are not counted. None below ``MEASURED_AT_LEAST`` timers of the kind: an
    empty stream or hash costs a few kilobytes of its own, which a handful of timers
    would each appear to hold.
    """
    check_int("sample", sample, 1, 1000)
    first = [cmd for s in range(ns.meta.shards) for cmd in _memory_probes(ns.shard(s), sample)]
    replies = yield steps.Pipeline(first)
    fixed = stream = buckets = coarse = pending = outcomes = held = 0
    probes: list[tuple[str, steps.Command]] = []
    for s in range(ns.meta.shards):
        (t_mem, bz_mem, zcard, names, hlen, out_mem, xlen, cz_mem, ccard, cnames, table) = replies[
            11 * s : 11 * s + 11
        ]
        sk = ns.shard(s)
        fixed += int(t_mem or 0) + int(bz_mem or 0) + int(cz_mem or 0) if int(hlen) else 0
        buckets += int(zcard)
        coarse += int(ccard)
        probes += [("coarse", steps.Command("memory_usage", (sk.coarse(int(m)),))) for m in cnames]
        pending += int(hlen)
        stream += int(out_mem or 0) if int(xlen) else 0
        outcomes += int(xlen)
        probes += [("bucket", steps.Command("memory_usage", (sk.bucket(int(n)),))) for n in names]
        parts = results_parts(table[0], table[1])  # sample the results table
        held += int(table[2] or 0)
        for b in range(0, parts, max(1, parts // sample)):
            probes += [
                ("part", steps.Command("memory_usage", (sk.results_part(b),))),
                ("part_len", steps.Command("hlen", (sk.results_part(b),))),
            ]
    sizes = (yield steps.Pipeline([cmd for _, cmd in probes])) if probes else []
    measured: dict[str, list[int]] = {
        "bucket": [],
        "coarse": [],
        "result": [],
        "part": [],
        "part_len": [],
    }
    for (kind, _), size in zip(probes, sizes, strict=True):
        if size:  # a result past its TTL (or a bucket just emptied) is gone: not a sample
            measured[kind].append(int(size))
    sampled_results = len(measured["part_len"])
    if measured["part_len"]:  # bytes per result in the table, as the mean of the others
        measured["result"].append(round(sum(measured["part"]) / sum(measured["part_len"])))
    indexed = fixed + _mean(measured["bucket"]) * buckets + _mean(measured["coarse"]) * coarse
    per_pending = indexed / pending if pending >= MEASURED_AT_LEAST else None
    per_decided = (
        stream / outcomes + _mean(measured["result"]) if outcomes >= MEASURED_AT_LEAST else None
    )
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


def _memory_probes(sk: ShardKeys, sample: int) -> list[steps.Command]:
    """The first round of ``memory``, for one shard (eleven commands, in this order)."""
    return [
        steps.Command("memory_usage", (sk.timers,)),
        steps.Command("memory_usage", (sk.buckets,)),
        steps.Command("zcard", (sk.buckets,)),
        steps.Command("zrange", (sk.buckets, 0, sample - 1)),
        steps.Command("hlen", (sk.timers,)),
        steps.Command("memory_usage", (sk.outcomes,)),
        steps.Command("xlen", (sk.outcomes,)),
        steps.Command("memory_usage", (sk.coarse_buckets,)),
        steps.Command("zcard", (sk.coarse_buckets,)),
        steps.Command("zrange", (sk.coarse_buckets, 0, sample - 1)),
        steps.Command("hmget", (sk.results_table, "L", "S", "N")),
    ]


def _mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else 0.0


def leaders(ns: Namespace) -> Op[dict[int, str | None]]:
    """Each shard's lease holder now (None: no leader)."""
    shards = range(ns.meta.shards)
    held = yield steps.Pipeline([steps.Command("get", (ns.shard(s).lease,)) for s in shards])
    return {s: None if who is None else text(who) for s, who in zip(shards, held, strict=True)}
