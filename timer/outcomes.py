"""Reading outcomes from the shards' streams through a consumer group.

At-least-once: an outcome stays pending in the group until ``ack()``; entries a consumer
took and never acknowledged (it died) are reclaimed with XAUTOCLAIM once idle longer than
``reclaim_idle_ms``, and handed to whoever reads next.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import redis

from . import keys as K
from .codec import decode_payload
from .models import Outcome
from .store import map_errors

if TYPE_CHECKING:
    from .client import TimerClient


def outcome_from_entry(shard: int, entry_id: bytes, fields: dict[bytes, bytes]) -> Outcome:
    return Outcome(
        id=fields[b"id"].decode("utf-8", "surrogatepass"),
        outcome=fields[b"outcome"].decode(),
        deadline_ms=int(fields[b"deadline"]),
        decided_ms=int(fields[b"decided"]),
        payload=decode_payload(fields[b"payload"]),
        shard=shard,
        entry_id=entry_id.decode(),
    )


def iter_stream(client: TimerClient, shard: int, page: int = 10_000) -> Iterator[Outcome]:
    """Every outcome in one shard's stream, oldest first, read in pages (no consumer group:
    for audits, demos and analytics; handlers should use ``TimerClient.outcomes``)."""
    stream = client.keys.shard(shard).outcomes
    start: Any = "-"
    while True:
        with map_errors(client.where):
            entries = client.redis.xrange(stream, start, "+", count=page)
        if start != "-":
            entries = entries[1:]  # the page's first entry is the last one already given
        if not entries:
            return
        for entry_id, fields in entries:
            yield outcome_from_entry(shard, entry_id, fields)
        start = entries[-1][0]


def iter_all(client: TimerClient) -> Iterator[Outcome]:
    """Every outcome of every shard of the namespace."""
    for shard in range(client.meta.shards):
        yield from iter_stream(client, shard)


class OutcomeReader:
    def __init__(
        self,
        client: TimerClient,
        group: str,
        consumer: str,
        *,
        count: int = 100,
        reclaim_idle_ms: int = 60_000,
    ) -> None:
        self.client = client
        self.group = K.check_name("consumer group", group)
        self.consumer = K.check_name("consumer", consumer)
        self.count = count
        self.reclaim_idle_ms = reclaim_idle_ms
        self.streams = client.outcome_streams()
        self._ensure_groups()

    def _ensure_groups(self) -> None:
        r = self.client.redis
        with map_errors(self.client.where):
            for stream in self.streams:
                try:
                    r.xgroup_create(stream, self.group, id="0", mkstream=True)
                except redis.ResponseError as exc:
                    if "BUSYGROUP" not in str(exc):
                        raise

    def _wrap(self, stream: str, entry_id: bytes, fields: dict[bytes, bytes]) -> Outcome:
        shard = self.streams[stream]
        r, group = self.client.redis, self.group
        base = outcome_from_entry(shard, entry_id, fields)

        def ack() -> None:
            with map_errors(self.client.where):
                r.xack(stream, group, entry_id)

        return Outcome(**{**base.__dict__, "_ack": ack})

    def reclaim(self) -> list[Outcome]:
        """Take over entries another consumer left unacknowledged for too long."""
        out: list[Outcome] = []
        r = self.client.redis
        with map_errors(self.client.where):
            for stream in self.streams:
                start = "0-0"
                while True:
                    reply: Any = r.xautoclaim(
                        stream, self.group, self.consumer, self.reclaim_idle_ms,
                        start_id=start, count=self.count,
                    )  # fmt: skip
                    start, entries = reply[0], reply[1]
                    out.extend(self._wrap(stream, eid, f) for eid, f in entries if f)
                    if start in (b"0-0", "0-0") or not entries:
                        break
        return out

    def read(self, block_ms: int | None) -> list[Outcome]:
        """New outcomes for this consumer; blocks up to ``block_ms`` when there are none."""
        r = self.client.redis
        with map_errors(self.client.where):
            if self.client.cluster:
                reply = self._read_cluster(block_ms)
            else:
                reply = r.xreadgroup(
                    self.group,
                    self.consumer,
                    dict.fromkeys(self.streams, ">"),
                    count=self.count,
                    block=block_ms,
                )
        out: list[Outcome] = []
        streams: Any = reply or []
        for stream, entries in streams:
            name = stream.decode() if isinstance(stream, bytes) else stream
            out.extend(self._wrap(name, eid, f) for eid, f in entries if f)
        return out

    def _read_cluster(self, block_ms: int | None) -> list[Any]:
        # Streams of different shards live in different slots: one read per stream.
        # Without a multi-stream blocking read, wait by polling up to block_ms.
        r = self.client.redis
        end = time.monotonic() + (block_ms or 0) / 1000
        while True:
            reply: list[Any] = []
            for stream in self.streams:
                got = r.xreadgroup(self.group, self.consumer, {stream: ">"}, count=self.count)
                reply.extend(got or [])
            if reply or time.monotonic() >= end:
                return reply
            time.sleep(0.05)

    def iterate(self, *, block_ms: int, stop_when_idle: bool) -> Iterator[Outcome]:
        yield from self.reclaim()
        while True:
            batch = self.read(None if stop_when_idle else block_ms)
            if not batch:
                if stop_when_idle:
                    return
                yield from self.reclaim()
                continue
            yield from batch
