"""The worker's side of a namespace: membership (heartbeat, the live workers, leave),
a shard's backlog, reading its due buckets, and trimming outcomes. Sans-I/O operations,
as in :mod:`timer.durable.timers.ops`; a shard's fenced scripts are in :mod:`.calls`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..model import steps
from ..model.checks import check_bool, check_int
from ..model.codec import decode_pending, text
from ..model.keys import NamespaceKeys, ShardKeys, check_name
from ..model.leader import DueTimers
from ..model.models import COARSE_MS, Trimmed
from ..model.namespace import Namespace, check_shards
from ..model.steps import Op, error_or
from .calls import TRIM_RESULT_HASHES, parse_trim, trim_call, trim_results_call


def trim_outcomes(
    ns: Namespace,
    retention_ms: int | None,
    *,
    keep_unread: bool,
    shards: Iterable[int] | None,
    pass_within: int | None = None,
    until_done: bool = True,
    per_call: int = TRIM_RESULT_HASHES,
) -> Op[list[Trimmed]]:
    """Each shard's stream trimmed and its round of the results table: one pipelined
    call a shard; then, ``until_done``, for the shards whose round has more hashes than a
    call visits (``per_call``), further calls on the results table alone until it is
    done (else ``results_left`` says what is left, for ``trim_results``)."""
    keep = None if retention_ms is None else check_int("retention_ms", retention_ms, 0)
    check_bool("keep_unread", keep_unread)
    check_bool("until_done", until_done)
    passes = None if pass_within is None else check_int("pass_within", pass_within, 1, 2**31 - 1)
    picked = check_shards(ns, shards)
    calls = [
        trim_call(ns.shard(s), keep, keep_unread=keep_unread, passes=passes, per_call=per_call)
        for s in picked
    ]
    replies = yield steps.Pipeline(calls, errors_in_slots=True)
    done = {s: parse_trim(error_or(r), s) for s, r in zip(picked, replies, strict=True)}
    owed = [s for s in picked if done[s].results_left > 0 and until_done]
    while owed:  # each call visits at least one hash of what is left: this ends
        more = [trim_results_call(ns.shard(s), done[s].results_left, per_call) for s in owed]
        replies = yield steps.Pipeline(more, errors_in_slots=True)
        for s, r in zip(owed, replies, strict=True):
            again = parse_trim(error_or(r), s)
            dropped = done[s].results_dropped + again.results_dropped
            done[s] = replace(done[s], results_dropped=dropped, results_left=again.results_left)
        owed = [s for s in owed if done[s].results_left > 0]
    return [done[s] for s in picked]


def heartbeat(keys: NamespaceKeys, worker: str, now_ms: int, live_window_ms: int) -> Op[int]:
    """Announce ``worker`` at ``now_ms``; forget long-gone workers; how many are live:
    those heard within ``live_window_ms`` of now, either way. A heartbeat scored further
    ahead than that came from a clock that ran ahead (a worker's estimate of Redis time,
    wrong): counted as live until real time caught up with it, it shrank every worker's
    fair share and left shards led by no one that long (found by the simulation: a dead
    worker's beat 21 s ahead left a shard's timers unfired for 21 s)."""
    replies = yield steps.Pipeline(
        [
            steps.Command("zadd", (keys.workers, {worker: now_ms})),
            steps.Command("zremrangebyscore", (keys.workers, "-inf", now_ms - 10 * live_window_ms)),
            steps.Command(
                "zcount", (keys.workers, now_ms - live_window_ms, now_ms + live_window_ms)
            ),
        ]
    )
    return int(replies[-1])


def workers(keys: NamespaceKeys) -> Op[list[tuple[str, int]]]:
    """Every worker that announced itself recently: (id, last heartbeat, Redis ms)."""
    seen = yield steps.Command("zrange", (keys.workers, 0, -1), {"withscores": True})
    return [(text(w), int(ms)) for w, ms in seen]


CARD_KEEP_MS = 600_000  # a worker's card outlives it ten minutes: "what was it doing?"


def put_card(keys: NamespaceKeys, worker: str, card: Mapping[str, Any]) -> Op[None]:
    """A worker's card (JSON), replaced each time, kept ``CARD_KEEP_MS`` after the last."""
    body = json.dumps(card, separators=(",", ":"))
    yield steps.Command("set", (keys.card(worker), body), {"px": CARD_KEEP_MS})


def cards(keys: NamespaceKeys, workers: Sequence[str]) -> Op[dict[str, dict[str, Any]]]:
    """The cards of ``workers`` that have one (one MGET: the namespace's slot)."""
    for w in workers:
        check_name("worker id", w)
    if not workers:
        return {}
    got = yield steps.Command("mget", ([keys.card(w) for w in workers],))
    out: dict[str, dict[str, Any]] = {}
    for worker, raw in zip(workers, got, strict=True):
        if raw is None:
            continue
        try:
            card = json.loads(raw)
        except ValueError:  # not a card we wrote: passed over
            continue
        if isinstance(card, dict):
            out[worker] = card
    return out


def leave(keys: NamespaceKeys, worker: str) -> Op[None]:
    yield steps.Command("zrem", (keys.workers, worker))


def backlog(sk: ShardKeys) -> Op[tuple[int, int | None]]:
    """(timers pending in the shard, start of its oldest durable bucket or None)."""
    pending, oldest = yield steps.Pipeline(
        [
            steps.Command("hlen", (sk.timers,)),
            steps.Command("zrange", (sk.buckets, 0, 0), {"withscores": True}),
        ]
    )
    return int(pending), (int(oldest[0][1]) if oldest else None)


def read_due(
    sk: ShardKeys,
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
    members = yield steps.Command("zrangebyscore", (mirror, "-inf", until_ms))
    width = COARSE_MS if coarse else bucket_ms
    buckets: list[int] = []
    found: dict[str, int] = {}  # id -> its deadline, each once
    ranked: dict[str, int] = {}  # id -> its priority, where not 0
    for n in (int(m) for m in members):
        if n in skip:
            continue
        if len(found) >= max_ids:  # counted in pending timers: stale ids take no room
            break
        buckets.append(n)
        cursor = 0
        while True:
            part = yield steps.Command("lrange", (bucket(n), cursor, cursor + chunk - 1))
            cursor = 0 if len(part) < chunk else cursor + chunk
            names = [t for t in dict.fromkeys(text(m) for m in part) if t not in found]
            if names:
                records = yield steps.Command("hmget", (sk.timers, names))
                for tid, raw in zip(names, records, strict=True):
                    if raw is None:
                        continue  # decided: a stale id of a list
                    rec = decode_pending(raw)
                    d = rec["deadline_ms"]
                    if width is None or d // width == n:  # due here, not moved elsewhere
                        found[tid] = d
                        if rec["priority"]:
                            ranked[tid] = rec["priority"]
            if cursor == 0:
                break
    due = [(d, tid) for tid, d in found.items()]
    due.sort()
    return DueTimers(buckets, due, ranked)
