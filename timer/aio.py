"""The timer calls of TimerClient for asyncio: same validation, scripts and results, awaited.

    from timer.aio import AsyncTimerClient

    async with await AsyncTimerClient.connect(url, "default") as c:
        await c.schedule("job:{42}", delay_ms=30_000, watch=["job:{42}:done"])
        await c.notify("job:{42}:done")            # the job finished: its timeout completes
        outcome = await c.wait("job:{42}", timeout=5.0)

It covers what a service does per request (schedule, schedule_many, cancel, complete,
reschedule, notify, get, wait) and reading outcomes through a consumer group
(``outcomes``, then ``await o.aack()``). Creating the namespace, trimming and stats stay
on TimerClient (operations, not request paths). Redis Cluster is not
supported here yet: ``connect`` refuses a cluster URL with a ConfigError.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, cast

import redis
import redis.asyncio as aioredis

from . import keys as K
from .client import ClientSettings, TimerClient, check_server_version
from .codec import DEFAULT_MAX_PAYLOAD
from .errors import ConfigError, TimerError, WaitTimeout
from .models import Outcome, Timer, TimerInfo
from .outcomes import outcome_from_entry
from .store import RedisSettings, map_errors


class AsyncTimerClient:
    """Schedule, cancel, notify and read durable timers of one namespace, with asyncio.

    Make one with ``await AsyncTimerClient.connect(url, namespace)``; it checks the server
    and reads the namespace once, so no later call does hidden I/O.
    """

    def __init__(self, client: aioredis.Redis, core: TimerClient) -> None:
        self.redis = client
        # The sync client on the same (async) connection builds every call and reads every
        # reply; it never does I/O itself because its metadata is already loaded.
        self._core = core
        self.namespace = core.namespace
        self.where = core.where

    @classmethod
    async def connect(
        cls,
        url: str,
        namespace: str = "default",
        *,
        result_ttl_s: float = 24 * 3600,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD,
        socket_timeout_s: float = 5.0,
    ) -> AsyncTimerClient:
        """Connect, check the server version and read the namespace (it must be initialised)."""
        K.check_namespace(namespace)  # before connecting: nothing to clean up on bad input
        rs = RedisSettings.from_url(url, socket_timeout_s=socket_timeout_s)
        client = aioredis.Redis.from_url(
            rs.url,
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=rs.connect_timeout_s,
            health_check_interval=30,
        )
        settings = ClientSettings(
            result_ttl_ms=int(result_ttl_s * 1000), max_payload_bytes=max_payload_bytes
        )
        # TimerClient only registers its scripts on the client here (async ones on an async
        # client): no I/O, so the sync type it declares does not matter.
        core = TimerClient(cast(Any, client), namespace, settings=settings, safe_url=rs.safe_url)
        try:
            with map_errors(rs.safe_url):
                info = await client.info()
                if int(info.get("cluster_enabled", 0)) == 1:
                    raise ConfigError(
                        f"{rs.safe_url} is a Redis Cluster node; the asyncio client does not "
                        "support Redis Cluster yet (use TimerClient)"
                    )
                check_server_version(info, rs.safe_url)
                stored = await client.hgetall(core.keys.meta)
            core._meta = core._meta_from(stored)
            core._checked_server = True
        except BaseException:
            await client.aclose()  # no half-open connection left behind
            raise
        return cls(client, core)

    def __repr__(self) -> str:
        return f"AsyncTimerClient(url={self.where!r}, namespace={self.namespace!r})"

    def shard_of(self, name: str) -> int:
        return self._core.shard_of(name)

    # -- schedule ---------------------------------------------------------------------

    async def schedule(
        self,
        timer_id: str,
        delay_ms: int | None = None,
        *,
        deadline_ms: int | None = None,
        payload: object = None,
        watch: Iterable[str] = (),
        need: int = 1,
    ) -> Timer:
        """As ``TimerClient.schedule``: idempotent, DuplicateTimer on other parameters."""
        core = self._core
        shard, keys, args = core._prepare(timer_id, delay_ms, deadline_ms, payload, watch, need)
        with map_errors(self.where):
            reply = await core.scripts.schedule(keys=keys, args=args)
        return core._timer_from_reply(timer_id, shard, reply)

    async def schedule_many(
        self, items: Iterable[Mapping[str, Any]], *, origin: str = ""
    ) -> list[Timer | TimerError]:
        """As ``TimerClient.schedule_many``: pipelined, one result (or error) per item."""
        core = self._core
        results: list[Timer | TimerError] = []
        for batch in core._batches(items, origin, results):
            with map_errors(self.where):
                pipe = self.redis.pipeline(transaction=False)
                for _, _, keys, args in batch:
                    await core.scripts.schedule(keys=keys, args=args, client=pipe)
                replies = await pipe.execute(raise_on_error=False)
            core._fill(results, batch, replies, origin)
        return results

    # -- decide -----------------------------------------------------------------------

    async def _decide(self, script: Any, timer_id: str, done: str) -> bool:
        tid, keys, args = self._core._decide_call(timer_id)
        with map_errors(self.where):
            reply = await script(keys=keys, args=args)
        return self._core._decided(reply, tid, done)

    async def cancel(self, timer_id: str) -> bool:
        """Cancel a pending timer; True if this call decided it (safe to repeat)."""
        return await self._decide(self._core.scripts.cancel, timer_id, "cancelled")

    async def complete(self, timer_id: str) -> bool:
        """Decide a pending timer as completed now; True if this call decided it."""
        return await self._decide(self._core.scripts.complete, timer_id, "completed")

    async def reschedule(
        self, timer_id: str, delay_ms: int | None = None, *, deadline_ms: int | None = None
    ) -> Timer | None:
        """Move a pending timer's deadline; None if it was already decided."""
        tid, shard, keys, args = self._core._reschedule_call(timer_id, delay_ms, deadline_ms)
        with map_errors(self.where):
            reply = await self._core.scripts.reschedule(keys=keys, args=args)
        return self._core._rescheduled(reply, tid, shard)

    async def notify(self, key: str) -> int:
        """Notify a watch key; the number of timers this call completed (safe to repeat)."""
        keys, args = self._core._notify_call(key)
        completed = 0
        while True:  # each call completes at most notify_batch watchers
            with map_errors(self.where):
                done, remaining = await self._core.scripts.notify(keys=keys, args=args)
            completed += int(done)
            if int(remaining) == 0:
                return completed

    # -- read -------------------------------------------------------------------------

    async def get(self, timer_id: str) -> TimerInfo | None:
        """The timer's state: pending with its record, or its retained outcome; else None."""
        tid, shard, record, result = self._core._get_call(timer_id)
        with map_errors(self.where):
            pipe = self.redis.pipeline(transaction=False)
            pipe.hget(record, tid)
            pipe.get(result)
            pending, decided = await pipe.execute()
        return self._core._info(tid, shard, pending, decided)

    async def wait(self, timer_id: str, timeout: float = 30.0) -> Outcome:
        """Wait (without blocking the loop) until the timer is decided; its Outcome."""
        deadline = time.monotonic() + timeout
        pause = 0.005
        while True:
            done = self._core._outcome_or_none(timer_id, await self.get(timer_id))
            if done is not None:
                return done
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(f"timer {timer_id!r} still pending after {timeout}s")
            await asyncio.sleep(min(pause, left))  # polling the server with backoff
            pause = min(pause * 2, 0.1)

    async def outcomes(
        self,
        group: str = "tickwheel",
        consumer: str = "consumer-1",
        *,
        block_ms: int = 1000,
        count: int = 100,
        reclaim_idle_ms: int = 60_000,
        stop_when_idle: bool = False,
    ) -> AsyncIterator[Outcome]:
        """As ``TimerClient.outcomes``: every shard through a consumer group, at-least-once.

        ``await o.aack()`` each one once handled. Entries another consumer took and left
        unacknowledged longer than ``reclaim_idle_ms`` are taken over first, and again
        whenever the streams are idle.
        """
        grp = K.check_name("consumer group", group)
        name = K.check_name("consumer", consumer)
        streams = self._core.outcome_streams()
        with map_errors(self.where):
            for stream in streams:
                try:
                    await self.redis.xgroup_create(stream, grp, id="0", mkstream=True)
                except redis.ResponseError as exc:
                    if "BUSYGROUP" not in str(exc):
                        raise

        def wrap(stream: str, entry_id: bytes, fields: dict[bytes, bytes]) -> Outcome:
            async def aack() -> None:
                with map_errors(self.where):
                    await self.redis.xack(stream, grp, entry_id)

            base = outcome_from_entry(streams[stream], entry_id, fields)
            return Outcome(**{**base.__dict__, "_aack": aack})

        async def reclaim() -> list[Outcome]:
            out: list[Outcome] = []
            with map_errors(self.where):
                for stream in streams:
                    start: Any = "0-0"
                    while True:
                        claimed: Any = await self.redis.xautoclaim(
                            stream, grp, name, reclaim_idle_ms, start_id=start, count=count
                        )
                        start, entries = claimed[0], claimed[1]
                        out.extend(wrap(stream, eid, f) for eid, f in entries if f)
                        if start in (b"0-0", "0-0") or not entries:
                            break
            return out

        for o in await reclaim():
            yield o
        while True:
            with map_errors(self.where):
                reply: Any = await self.redis.xreadgroup(
                    grp, name, dict.fromkeys(streams, ">"), count=count,
                    block=None if stop_when_idle else block_ms,
                )  # fmt: skip
            batch = [
                wrap(stream.decode(), eid, f)
                for stream, entries in reply or []
                for eid, f in entries
                if f
            ]
            if not batch:
                if stop_when_idle:
                    return
                batch = await reclaim()
            for o in batch:
                yield o

    async def server_time_ms(self) -> int:
        """The Redis server's clock, epoch ms: the one clock deadlines are computed on."""
        with map_errors(self.where):
            secs, micros = await self.redis.time()
        return int(secs) * 1000 + int(micros) // 1000

    # -- lifetime ---------------------------------------------------------------------

    async def aclose(self) -> None:
        await self.redis.aclose()

    async def __aenter__(self) -> AsyncTimerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
