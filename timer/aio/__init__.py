"""AsyncTimerClient: the request-path calls of TimerClient for asyncio.

    from timer.aio import AsyncTimerClient

    async with await AsyncTimerClient.connect(url, "default") as c:
        await c.schedule("job:{42}", delay_ms=30_000, watch=["job:{42}:done"])
        await c.notify("job:{42}:done")            # the job finished: its timeout completes
        outcome = await c.wait("job:{42}", timeout=5.0)

A peer of the sync client, not a wrapper: both run the same operations of
``timer.durable.timers.ops`` (validation, script calls, parsing, ``notify``'s batches, ``wait``'s
backoff, the consumer-group reader); this module only awaits their steps. It covers what
a service does per request (schedule, schedule_many, cancel, complete, reschedule,
notify, get, wait) and reading outcomes through a consumer group (``outcomes``, then
``await o.aack()``). Creating the namespace, trimming and stats stay on TimerClient
(operations, not request paths). A URL naming a Redis Cluster node gives a cluster
client, as ``TimerClient.from_url`` does: commands are routed by key, and a pipeline of
script calls is split per node (a cluster pipeline refuses scripts), each part on that
node's own connection, so durability's WAIT covers the writes it follows.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, TypeVar, Unpack

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry

from ..clock import SYSTEM_TIME, Time
from ..durable.admin import server as server_checks
from ..durable.groups import streams as group_ops
from ..durable.groups.reader import GroupReader, check_options
from ..durable.model import keys as keyspace
from ..durable.model import steps
from ..durable.model.codec import DEFAULT_MAX_PAYLOAD
from ..durable.model.fields import TimerOptions, TimerSpec
from ..durable.model.models import ClientSettings, Meta, Outcome, Timer, TimerInfo
from ..durable.model.namespace import Namespace, meta_from
from ..durable.timers import ops
from ..durable.timers.items import timer_spec
from ..errors import ConfigError, TimerError
from ..redis import connections
from ..redis.cluster_route import CLIENT_RETRIES, client_backoff
from ..redis.local_server import default_url
from ..redis.store import RedisSettings, map_errors, node_url
from ..schedules import AsyncSchedules
from ..timers import AsyncTimers
from .driver import AsyncDriver
from .group import AsyncConsumer

T = TypeVar("T")


class AsyncTimerClient:
    """Schedule, cancel, notify and read durable timers of one namespace, with asyncio.

    Make one with ``await AsyncTimerClient.connect(url, namespace)``; it checks the server
    and reads the namespace once, so no later call does hidden I/O. For one event loop.
    """

    def __init__(
        self,
        client: aioredis.Redis | AsyncRedisCluster,
        namespace: str,
        meta: Meta,
        *,
        settings: ClientSettings | None = None,
        safe_url: str = "redis",
        node_url: Callable[[str, int], str] | None = None,
        node_options: Mapping[str, Any] | None = None,
        time: Time = SYSTEM_TIME,
    ) -> None:
        """``time``: where its operations read the clock and sleep (:mod:`timer.clock`;
        the system's unless a test or a simulation gives another). A cluster client
        needs ``node_url`` (``connect`` gives it): script pipelines go to each master on
        a client of the driver's own, and redis.asyncio has no per-node client to lend."""
        self.namespace = keyspace.check_namespace(namespace)
        if isinstance(client, AsyncRedisCluster) and node_url is None:
            raise ConfigError(
                "a Redis Cluster client needs node_url (host, port -> its URL): "
                "AsyncTimerClient.connect(url) makes one"
            )
        self.keys = keyspace.NamespaceKeys(self.namespace)
        self.time = time
        self.meta = meta
        self.settings = settings or ClientSettings()
        self.where = safe_url
        self._driver = AsyncDriver(
            client,
            where=safe_url,
            durability=self.settings.durability,
            node_url=node_url,
            node_options=node_options,
            time=time,
        )
        self._run = self._driver.run  # runs an operation to its result
        self.redis: Any = client  # aioredis.Redis or its RedisCluster: the calls are common
        self.cluster = self._driver.cluster

    @classmethod
    async def connect(
        cls,
        url: str | None = None,
        namespace: str = "default",
        *,
        result_ttl_s: float = 24 * 3600,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD,
        socket_timeout_s: float = 5.0,
        durability: str = "none",
        durability_timeout_s: float = 1.0,
    ) -> AsyncTimerClient:
        """Connect, check the server version and read the namespace (it must be initialised).

        ``durability`` and a missing ``url`` as for ``TimerClient.from_url``.
        """
        keys = keyspace.NamespaceKeys(keyspace.check_namespace(namespace))  # before connecting
        if url is None:
            url = default_url()
        settings = ClientSettings.of(
            result_ttl_s=result_ttl_s,
            max_payload_bytes=max_payload_bytes,
            durability=durability,
            durability_timeout_s=durability_timeout_s,
        )
        rs = RedisSettings.from_url(url, socket_timeout_s=socket_timeout_s)
        rs.check_wait_fits(settings.durability)
        options = rs.options()
        client: Any = connections.async_client(rs)
        try:
            with map_errors(rs.safe_url):
                hello = server_checks.hello_fields(await client.execute_command("HELLO"))
                server_checks.check_server_version(
                    server_checks.version_of_hello(hello), rs.safe_url
                )
                if hello.get("mode") == "cluster" and rs.sentinel is None:
                    await client.aclose()
                    retry = AsyncRetry(client_backoff(), retries=CLIENT_RETRIES)
                    client = AsyncRedisCluster.from_url(rs.url, retry=retry, **options)
                    await client.initialize()
                stored = await client.hgetall(keys.meta)
            meta = meta_from(stored, keys.namespace, rs.safe_url)
        except BaseException:
            await client.aclose()  # no half-open connection left behind
            raise
        return cls(
            client,
            namespace,
            meta,
            settings=settings,
            safe_url=rs.safe_url,
            node_url=functools.partial(node_url, rs.url),
            node_options=options,
        )

    def __repr__(self) -> str:
        return f"AsyncTimerClient(url={self.where!r}, namespace={self.namespace!r})"

    def _ns(self) -> Namespace:
        return Namespace(self.keys, self.meta, self.settings)

    @property
    def schedules(self) -> AsyncSchedules:
        """The namespace's recurring schedules, awaited (as ``TimerClient.schedules``)."""
        return AsyncSchedules(self._run, self._ns)

    def consumer(
        self, group: str, consumer: str, *, reclaim_idle_ms: int = 60_000
    ) -> AsyncConsumer:
        """One consumer of ``group`` read a batch at a time and settled by ref (ack, retry,
        dead_letter): for outcomes held across requests (see :mod:`timer.aio.group`)."""
        return AsyncConsumer(
            self._run,
            self._ns(),
            group,
            consumer,
            reclaim_idle_ms=reclaim_idle_ms,
            per_stream=self.cluster,
        )

    @property
    def timers(self) -> AsyncTimers:
        """Finding timers and acting on a selection, awaited (as ``TimerClient.timers``)."""
        return AsyncTimers(self._run, self._ns)

    def shard_of(self, name: str) -> int:
        return keyspace.shard_of(name, self.meta.shards)

    # -- schedule and decide ----------------------------------------------------------

    async def schedule(
        self,
        timer_id: str,
        delay_ms: int | None = None,
        *,
        deadline_ms: int | None = None,
        **options: Unpack[TimerOptions],
    ) -> Timer:
        """As ``TimerClient.schedule``: idempotent, DuplicateTimer on other parameters."""
        spec = timer_spec(timer_id, delay_ms, deadline_ms, options)
        return await self._run(ops.schedule(self._ns(), spec))

    async def schedule_many(
        self, items: Iterable[TimerSpec | Mapping[str, Any]], *, origin: str = ""
    ) -> list[Timer | TimerError]:
        """As ``TimerClient.schedule_many``: pipelined, one result (or error) per item."""
        return await self._run(ops.schedule_many(self._ns(), items, origin))

    async def cancel(self, timer_id: str) -> bool:
        """Cancel a pending timer; True if this call decided it (safe to repeat)."""
        return await self._run(ops.cancel(self._ns(), timer_id))

    async def complete(self, timer_id: str) -> bool:
        """Decide a pending timer as completed now; True if this call decided it."""
        return await self._run(ops.complete(self._ns(), timer_id))

    async def reschedule(
        self, timer_id: str, delay_ms: int | None = None, *, deadline_ms: int | None = None
    ) -> Timer | None:
        """Move a pending timer's deadline; None if it was already decided; :class:`Capped`
        (nothing moved) past its cap."""
        return await self._run(ops.reschedule(self._ns(), timer_id, delay_ms, deadline_ms))

    async def heartbeat(self, timer_id: str, extend_ms: int, *, earlier: bool = False) -> Timer:
        """A heartbeat: push a pending timer's deadline to ``extend_ms`` from now (Redis
        time), never earlier than it is. One round trip. A timer scheduled with
        ``max_total_ms`` never falls due after created + max_total_ms: a heartbeat past
        that raises HeartbeatCapped (the timer now falls due at its cap). With
        ``earlier=True`` the deadline becomes now + extend_ms even if that is earlier: a
        job that started trades its queue-wait deadline for its run deadline (the
        Temporal mapping in the job-timeouts guide). A decided timer is returned as it
        ended (``state``); an unknown id raises TimerNotFound."""
        return await self._run(ops.heartbeat(self._ns(), timer_id, extend_ms, earlier))

    async def notify(self, key: str) -> int:
        """Notify a watch key; the number of timers this call completed (safe to repeat)."""
        return await self._run(ops.notify(self._ns(), key))

    # -- read -------------------------------------------------------------------------

    async def get(self, timer_id: str) -> TimerInfo | None:
        """The timer's state: pending with its record, or its retained outcome; else None."""
        return await self._run(ops.get(self._ns(), timer_id))

    async def wait(self, timer_id: str, timeout: float = 30.0) -> Outcome:
        """Wait (without blocking the loop) until the timer is decided; its Outcome."""
        return await self._run(ops.wait(self._ns(), timer_id, timeout))

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
        check_options(count=count, block_ms=block_ms, stop_when_idle=stop_when_idle)
        reader = GroupReader.of(
            self._ns(), group, consumer, reclaim_idle_ms=reclaim_idle_ms, per_stream=self.cluster
        )
        await self._run(reader.ensure())
        ended: list[None] = []
        run = reader.run(count=count, block_ms=block_ms, stop_when_idle=stop_when_idle)
        async for delivery in self._driver.drive(run, ended):
            aack = functools.partial(self._ack, delivery)
            yield dataclasses.replace(delivery.outcome, _aack=aack)

    async def _ack(self, delivery: group_ops.Delivery) -> None:
        await self._run(group_ops.ack(delivery))

    async def server_time_ms(self) -> int:
        """The Redis server's clock, epoch ms: the one clock deadlines are computed on."""
        return await self._run(steps.server_time_ms())

    # -- lifetime ---------------------------------------------------------------------

    async def aclose(self) -> None:
        await self._driver.aclose()
        await self.redis.aclose()

    async def __aenter__(self) -> AsyncTimerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
