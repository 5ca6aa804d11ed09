"""AsyncTimerClient: the request-path calls of TimerClient for asyncio.

    from timer.aio import AsyncTimerClient

    async with await AsyncTimerClient.connect(url, "default") as c:
        await c.schedule("job:{42}", delay_ms=30_000, watch=["job:{42}:done"])
        await c.notify("job:{42}:done")            # the job finished: its timeout completes
        outcome = await c.wait("job:{42}", timeout=5.0)

A peer of the sync client, not a wrapper: both run the same operations of
``timer.durable.ops`` (validation, script calls, parsing, ``notify``'s batches, ``wait``'s
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

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.commands.core import AsyncScript
from redis.exceptions import RedisClusterException

from . import cluster_route as R
from .aio_group import AsyncConsumer
from .durable import calls as C
from .durable import keys as K
from .durable import ops
from .durable.codec import DEFAULT_MAX_PAYLOAD
from .durable.models import ClientSettings, Meta, Outcome, Timer, TimerInfo
from .durable.reader import GroupReader, check_options
from .durable.scripts import ScriptName, source
from .errors import TimerError
from .schedules import AsyncSchedules
from .store import RedisSettings, map_errors, node_url, settle_replies, settle_wait
from .timers import AsyncTimers

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
    ) -> None:
        self.redis: Any = client  # aioredis.Redis or its RedisCluster: the calls are common
        self.cluster = isinstance(client, AsyncRedisCluster)
        self._node_url = node_url  # a cluster node's URL (host, port), with the same auth
        self._node_options = dict(node_options or {})
        self._nodes: dict[str, aioredis.Redis] = {}  # a plain client per cluster node
        self._refresh = R.Refresh()  # when the cluster's slot map may be read again
        self.retry_budget_s = R.RETRY_BUDGET_S  # a cluster call's retries after a backoff
        self.namespace = K.check_namespace(namespace)
        self.keys = K.NamespaceKeys(self.namespace)
        self.meta = meta
        self.settings = settings or ClientSettings()
        self.where = safe_url
        self._scripts: dict[ScriptName, AsyncScript] = {
            name: client.register_script(source(name)) for name in ScriptName
        }

    @classmethod
    async def connect(
        cls,
        url: str,
        namespace: str = "default",
        *,
        result_ttl_s: float = 24 * 3600,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD,
        socket_timeout_s: float = 5.0,
        durability: str = "none",
        durability_timeout_s: float = 1.0,
    ) -> AsyncTimerClient:
        """Connect, check the server version and read the namespace (it must be initialised).

        ``durability`` as for ``TimerClient.from_url``.
        """
        keys = K.NamespaceKeys(K.check_namespace(namespace))  # before connecting
        settings = ClientSettings.of(
            result_ttl_s=result_ttl_s, max_payload_bytes=max_payload_bytes,
            durability=durability, durability_timeout_s=durability_timeout_s,
        )  # fmt: skip
        rs = RedisSettings.from_url(url, socket_timeout_s=socket_timeout_s)
        options = rs.options()
        client: Any = aioredis.Redis.from_url(rs.url, health_check_interval=30, **options)
        try:
            with map_errors(rs.safe_url):
                hello = ops.hello_fields(await client.execute_command("HELLO"))
                ops.check_server_version(ops.version_of_hello(hello), rs.safe_url)
                if hello.get("mode") == "cluster":
                    await client.aclose()
                    client = AsyncRedisCluster.from_url(rs.url, retry=cluster_retry(),
                                                        **options)  # fmt: skip
                    await client.initialize()
                stored = await client.hgetall(keys.meta)
            meta = C.meta_from(stored, keys.namespace, rs.safe_url)
        except BaseException:
            await client.aclose()  # no half-open connection left behind
            raise
        return cls(client, namespace, meta, settings=settings, safe_url=rs.safe_url,
                   node_url=functools.partial(node_url, rs.url), node_options=options)  # fmt: skip

    def __repr__(self) -> str:
        return f"AsyncTimerClient(url={self.where!r}, namespace={self.namespace!r})"

    # -- the driver: run an operation's steps with awaited calls -------------------------

    async def _run(self, op: ops.Op[T]) -> T:
        """Run an operation to its result (it emits nothing)."""
        result: list[T] = []
        async for _ in self._drive(op, result):
            pass
        return result[0]

    async def _drive(self, op: ops.Op[T], result: list[T]) -> AsyncIterator[Any]:
        """Run an operation's steps; yield what it emits; put its result in ``result``.

        A pipeline sent ahead (``Send``) runs as a task while the operation prepares the
        next, each after the one before it (the server sees them in the order sent, as
        the blocking client's lane does); ``Collect`` awaits its task."""
        reply: Any = None
        sent: list[asyncio.Task[Any]] = []
        try:
            while True:
                try:
                    step = op.send(reply)
                except StopIteration as done:
                    result.append(done.value)
                    return
                reply = None
                if isinstance(step, C.Emit):
                    yield step.value
                elif isinstance(step, C.Sleep):
                    await asyncio.sleep(step.seconds)  # polling the server with backoff
                elif isinstance(step, C.Send):
                    task = asyncio.ensure_future(
                        self._after(sent[-1] if sent else None, step.pipeline)
                    )
                    sent.append(task)
                    reply = task
                elif isinstance(step, C.Collect):
                    reply = await step.ticket
                else:
                    reply = await self._execute(step)
        finally:
            for task in sent:  # an operation that ended early leaves none running
                if not task.done():
                    task.cancel()

    async def _after(self, before: asyncio.Task[Any] | None, pipeline: C.Pipeline) -> Any:
        """``pipeline``'s replies, sent once ``before`` (the pipeline sent ahead of it) ran."""
        if before is not None:
            with contextlib.suppress(Exception):  # its own Collect reports its error
                await before
        return await self._execute(pipeline)

    async def _execute(self, step: C.ScriptCall | C.Command | C.Pipeline) -> Any:
        durability = self.settings.durability
        if isinstance(step, C.ScriptCall) and (self.cluster or (durability.waits and step.wait)):
            # then WAIT; on a cluster, routed to its slot's master, never with ASKING
            return C.error_or((await self._execute(C.Pipeline([step])))[0])
        if (
            self.cluster
            and isinstance(step, C.Pipeline)
            and step.calls
            and isinstance(step.calls[0], C.ScriptCall)
        ):
            scripts = [c for c in step.calls if isinstance(c, C.ScriptCall)]
            raw = await self._scripts_per_node(scripts)
            return settle_replies(raw, self.where, errors_in_slots=step.errors_in_slots)
        with map_errors(self.where):
            if isinstance(step, C.ScriptCall):
                return await self._scripts[step.script](keys=step.keys, args=step.args)
            if isinstance(step, C.Command):
                if step.every_primary and self.cluster:
                    return {
                        node.name: await getattr(self.redis, step.name)(
                            *step.args, target_nodes=node, **step.kwargs
                        )
                        for node in self.redis.get_primaries()
                    }
                reply = await getattr(self.redis, step.name)(*step.args, **step.kwargs)
                return {self.where: reply} if step.every_primary else reply
            raw = await self._pipeline(step.calls)
        return settle_replies(raw, self.where, errors_in_slots=step.errors_in_slots)

    async def _pipeline(
        self,
        calls: Sequence[C.ScriptCall] | Sequence[C.Command],
        node: aioredis.Redis | None = None,
    ) -> list[Any]:
        """One pipeline's raw replies (errors in their slots), on the server, or on one
        cluster ``node``'s own client. A script call is a plain ``EVALSHA``: redis-py's
        pipelined script asks ``SCRIPT EXISTS`` before every pipeline, a round trip each
        (#32); a script the server lost (a restart) is loaded and its calls run again (a
        ``NOSCRIPT`` call did not run)."""
        durability = self.settings.durability
        conn = node if node is not None else self.redis
        plain = node is not None or not self.cluster
        # a cluster pipeline takes no transaction flag (None); a plain one, False
        pipe = conn.pipeline(transaction=False) if plain else self.redis.pipeline()
        for c in calls:
            if isinstance(c, C.ScriptCall):
                assert plain, "script calls on a cluster go through _scripts_per_node"
                script = self._scripts[c.script]
                pipe.evalsha(script.sha, len(c.keys), *c.keys, *c.args)
            else:
                getattr(pipe, c.name)(*c.args, **c.kwargs)
        waits = durability.waits and any(isinstance(c, C.ScriptCall) and c.wait for c in calls)
        if waits:  # on the writes' own connection: WAIT covers only those
            pipe.execute_command(*durability.command())
        raw = list(await pipe.execute(raise_on_error=False))
        if waits:
            raw = settle_wait(durability, raw)
        lost = [k for k, r in enumerate(raw) if isinstance(r, redis.exceptions.NoScriptError)]
        if lost and plain:
            again_calls = [cast("C.ScriptCall", calls[k]) for k in lost]
            for name in {c.script for c in again_calls}:
                await conn.script_load(self._scripts[name].script)
            for k, reply in zip(lost, await self._pipeline(again_calls, node), strict=True):
                raw[k] = reply
        return raw

    async def _scripts_per_node(self, calls: Sequence[C.ScriptCall]) -> list[Any]:
        """Script calls on a cluster: each on its slot's master, one pipeline per master
        (on its own connection, WAIT after the writes when asked), the masters' run
        together; replies (or errors) in order. A reply that names a topology change
        (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, a node gone) is acted on as
        ``timer.cluster_route`` says, within the retry budget; a node that fails costs
        only its own calls."""
        loop = asyncio.get_running_loop()
        route = R.Routing([c.keys[0] for c in calls], self._owner,
                          budget_s=self.retry_budget_s, clock=loop.time)  # fmt: skip
        while groups := route.groups():
            parts = await asyncio.gather(*(
                self._node_pipeline(name, calls, idxs) for name, idxs in groups.items()
            ))  # fmt: skip
            for (name, idxs), part in zip(groups.items(), parts, strict=True):
                route.record(name, idxs, part)
            if route.refresh and self._refresh.due():
                with contextlib.suppress(redis.RedisError, RedisClusterException):
                    await self.redis.nodes_manager.initialize()
            pause = route.pause_s()
            if pause:
                await asyncio.sleep(pause)
        return route.replies

    def _owner(self, key: str) -> str:
        return R.owner(self.redis, key)

    async def _node_pipeline(
        self, name: str, calls: Sequence[C.ScriptCall], idxs: list[int]
    ) -> list[Any]:
        """One node's pipeline of script calls: its replies, or the error that stopped
        the whole pipeline in each of its calls' slots (never raised: others go on)."""
        if not name:
            return [redis.exceptions.ClusterDownError("no master covers the slot")] * len(idxs)
        try:
            return await self._pipeline([calls[i] for i in idxs], self._node(name))
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            return [exc] * len(idxs)

    def _node(self, name: str) -> aioredis.Redis:
        """A plain client of one cluster node, ``host:port`` (made at first use, kept)."""
        conn = self._nodes.get(name)
        if conn is None:
            assert self._node_url is not None, "a cluster client is made by connect()"
            host, _, port = name.rpartition(":")
            conn = aioredis.Redis.from_url(self._node_url(host, int(port)), **self._node_options)
            self._nodes[name] = conn
        return conn

    def _ns(self) -> C.Namespace:
        return C.Namespace(self.keys, self.meta, self.settings)

    @property
    def schedules(self) -> AsyncSchedules:
        """The namespace's recurring schedules, awaited (as ``TimerClient.schedules``)."""
        return AsyncSchedules(self._run, self._ns)

    def consumer(
        self, group: str, consumer: str, *, reclaim_idle_ms: int = 60_000
    ) -> AsyncConsumer:
        """One consumer of ``group`` read a batch at a time and settled by ref (ack, retry,
        dead_letter): for outcomes held across requests (see :mod:`timer.aio_group`)."""
        return AsyncConsumer(self._run, self._ns(), group, consumer,
                             reclaim_idle_ms=reclaim_idle_ms, per_stream=self.cluster)  # fmt: skip

    @property
    def timers(self) -> AsyncTimers:
        """Finding timers and acting on a selection, awaited (as ``TimerClient.timers``)."""
        return AsyncTimers(self._run, self._ns)

    def shard_of(self, name: str) -> int:
        return K.shard_of(name, self.meta.shards)

    # -- schedule and decide ----------------------------------------------------------

    async def schedule(
        self,
        timer_id: str,
        delay_ms: int | None = None,
        *,
        deadline_ms: int | None = None,
        payload: object = None,
        watch: Iterable[str] = (),
        need: int = 1,
        rearm: bool = False,
        traceparent: str | None = None,
        callback_url: str | None = None,
    ) -> Timer:
        """As ``TimerClient.schedule``: idempotent, DuplicateTimer on other parameters."""
        return await self._run(ops.schedule(
            self._ns(), timer_id, delay_ms=delay_ms, deadline_ms=deadline_ms,
            payload=payload, watch=watch, need=need, rearm=rearm, traceparent=traceparent,
            callback_url=callback_url,
        ))  # fmt: skip

    async def schedule_many(
        self, items: Iterable[Mapping[str, Any]], *, origin: str = ""
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
        """Move a pending timer's deadline; None if it was already decided."""
        return await self._run(ops.reschedule(self._ns(), timer_id, delay_ms, deadline_ms))

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
            self._ns(),
            group,
            consumer,
            reclaim_idle_ms=reclaim_idle_ms,
            per_stream=self.cluster,
        )
        await self._run(reader.ensure())
        ended: list[None] = []
        run = reader.run(count=count, block_ms=block_ms, stop_when_idle=stop_when_idle)
        async for delivery in self._drive(run, ended):
            aack = functools.partial(self._ack, delivery)
            yield dataclasses.replace(delivery.outcome, _aack=aack)

    async def _ack(self, delivery: ops.Delivery) -> None:
        await self._run(ops.ack(delivery))

    async def server_time_ms(self) -> int:
        """The Redis server's clock, epoch ms: the one clock deadlines are computed on."""
        return await self._run(ops.server_time_ms())

    # -- lifetime ---------------------------------------------------------------------

    async def aclose(self) -> None:
        for conn in self._nodes.values():
            await conn.aclose()
        await self.redis.aclose()

    async def __aenter__(self) -> AsyncTimerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def cluster_retry() -> AsyncRetry:
    """The cluster client's own retries of a command whose node failed (as
    ``cluster_route.CLIENT_RETRIES`` says)."""
    return AsyncRetry(R.client_backoff(), retries=R.CLIENT_RETRIES)
