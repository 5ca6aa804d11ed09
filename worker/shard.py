"""One led shard: its lease epoch, its timers inside the horizon, its loaded buckets."""

from __future__ import annotations

import queue
from dataclasses import dataclass, field
from typing import Any

from timer import TimerTask
from timer.codec import decode_record
from timer.keys import ShardKeys


class FireTask(TimerTask):
    """A durable timer's entry in the worker's wheel: when it expires, queue it to fire."""

    __slots__ = ("deadline_ms", "epoch", "shard", "sink", "timer_id")

    def __init__(  # noqa: PLR0917 - built on the hot path: positional is cheaper
        self,
        delay_ms: int,
        shard: int,
        epoch: int,
        timer_id: str,
        deadline_ms: int,
        sink: queue.SimpleQueue[FireTask],
    ) -> None:
        super().__init__(delay_ms)
        self.shard = shard
        self.epoch = epoch
        self.timer_id = timer_id
        self.deadline_ms = deadline_ms
        self.sink = sink

    def run(self) -> None:
        self.sink.put(self)


@dataclass
class ShardState:
    shard: int
    epoch: int
    keys: ShardKeys
    renewed_mono_ms: float
    tasks: dict[str, FireTask] = field(default_factory=dict)
    loaded: set[int] = field(default_factory=set)
    last_sweep_mono_ms: float = 0.0
    last_load_mono_ms: float = 0.0
    last_trim_mono_ms: float | None = None  # None: not yet trimmed since it was acquired
    needs_reload: bool = True
    more_to_load: bool = False


def read_due(
    r: Any,
    keys: ShardKeys,
    until_ms: int,
    skip: set[int],
    *,
    chunk: int = 1000,
    max_ids: int = 200_000,
) -> tuple[list[int], list[tuple[int, str]]]:
    """Durable buckets starting before ``until_ms`` (not in ``skip``) and their timers.

    Returns (bucket numbers read whole, [(deadline_ms, id)] sorted oldest first). Bucket
    sets are read with SSCAN and records with HMGET in chunks, so no call blocks Redis
    long. Reading stops after the bucket that reaches ``max_ids``: a backlog left by a
    long outage is taken in slices, oldest buckets first, not all at once into memory.
    """
    members = r.zrangebyscore(keys.buckets, "-inf", until_ms)
    buckets: list[int] = []
    ids: list[str] = []
    for n in (int(m) for m in members):
        if n in skip:
            continue
        if len(ids) >= max_ids:
            break
        buckets.append(n)
        for member in r.sscan_iter(keys.bucket(n), count=chunk):
            ids.append(member.decode("utf-8", "surrogatepass"))
    due: list[tuple[int, str]] = []
    for start in range(0, len(ids), chunk):
        part = ids[start : start + chunk]
        for tid, raw in zip(part, r.hmget(keys.timers, part), strict=True):
            if raw is not None:
                due.append((int(decode_record(raw)["d"]), tid))
    due.sort()
    return buckets, due
