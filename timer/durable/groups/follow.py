"""Following the outcome streams with no consumer group (``tail`` without ``--group``,
``TimerClient.follow``): nothing is left behind in Redis and nothing is acknowledged."""

from __future__ import annotations

from typing import Any

from ..model import steps
from ..model.codec import text
from ..model.entries import outcome_or_undecodable
from ..model.namespace import Namespace
from ..model.steps import Op
from .streams import POLL_S


def follow(
    ns: Namespace, *, history: bool, block_ms: int, per_stream: bool, stop_when_idle: bool
) -> Op[None]:
    """Emit each outcome as it lands, with no consumer group (nothing is left behind).

    From now on, or with ``history`` from the oldest outcome the streams hold, in the
    order they were decided across the shards (each stream is in order; a read's
    entries are merged by their ids' time, and one past the newest entry of a stream
    that may hold more waits for that stream's next read). Dead letters put back for a
    group are not new outcomes and are not shown.
    """
    streams = ns.outcome_streams()
    held: list[tuple[tuple[int, int], str, Any, Any]] = []  # read, not yet in order
    if history:
        last = dict.fromkeys(streams, "0-0")
    else:
        tops = yield steps.Pipeline(
            [steps.Command("xrevrange", (s, "+", "-"), {"count": 1}) for s in streams]
        )
        last = {s: text(t[0][0]) if t else "0-0" for s, t in zip(streams, tops, strict=True)}
    while True:
        reply = yield from _follow_read(streams, last, block_ms, per_stream, stop_when_idle)
        if not reply and not held:
            if stop_when_idle:
                return
            continue
        limit: tuple[int, int] | None = None  # the newest a stream with more to read gave
        for stream, entries in reply:
            name = text(stream)
            for entry_id, fields in entries:
                last[name] = text(entry_id)
                if fields and b"only" not in fields:
                    held.append((_entry_time(last[name]), name, entry_id, fields))
            if len(entries) >= FOLLOW_COUNT:
                newest = _entry_time(last[name])
                limit = newest if limit is None else min(limit, newest)
        held.sort(key=lambda h: h[0])
        ready = held if limit is None else [h for h in held if h[0] <= limit]
        held = held[len(ready) :]
        for _, name, entry_id, fields in ready:
            yield steps.Emit(outcome_or_undecodable(streams[name], entry_id, fields))


FOLLOW_COUNT = 1000  # entries a follow reads from a stream at once


def _follow_read(
    streams: dict[str, Any],
    last: dict[str, str],
    block_ms: int,
    per_stream: bool,
    stop_when_idle: bool,
) -> Op[list[Any]]:
    """One read of every stream after ``last``: one XREAD that blocks, or (``per_stream``,
    where one command may not name keys of several nodes) one a stream, polled until
    something comes or the block's time is up."""
    if not per_stream:
        wait = None if stop_when_idle else block_ms
        got = yield steps.Command("xread", (dict(last),), {"count": FOLLOW_COUNT, "block": wait})
        return list(got or [])
    reply: list[Any] = []
    clock = yield steps.Clock()
    end = clock.monotonic() + (0 if stop_when_idle else block_ms / 1000)
    while True:
        for s in streams:
            got = yield steps.Command("xread", ({s: last[s]},), {"count": FOLLOW_COUNT})
            reply.extend(got or [])
        if reply or clock.monotonic() >= end:
            return reply
        yield steps.Sleep(POLL_S)


def _entry_time(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)
