"""A client's driver: runs an operation's steps with redis-py, the only code of the
client that talks to Redis.

An operation of ``timer.durable.timers.ops`` yields steps (a script call, a command, a
pipeline of either, a sleep, a value to emit, a pipeline to send ahead and collect
later, a question); the driver runs each and sends the operation its reply. On a Redis
Cluster script calls go each to its slot's master, one pipeline per master on that
node's own connection (so durability's WAIT covers the writes it follows), and a reply
naming a topology change is acted on as ``timer.redis.cluster_route`` says; a script
the server lost (a restart) is loaded and its calls run again; redis-py's errors become
``TimerError``s.

One source, two drivers: ``timer/aio/driver.py`` (asyncio) is written by hand, and
``timer/client/driver.py`` (blocking) is generated from it by the repository's unasync tool,
which rewrites names (``async`` and ``await`` dropped, ``redis.asyncio`` for ``redis``,
the masters' pipelines of a round sent one after another instead of together); a unit
test fails while the generated file is not what the tool writes. What only one client
does lives beside its driver: sending ahead (each package's ``lanes``: tasks here, one
connection kept by the blocking client), and the blocking client's connecting, pub/sub
and pool sizes (``timer.client.transport``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import RedisClusterException

from ..clock import SYSTEM_TIME, Time
from ..durable.admin import server as server_checks
from ..durable.model import steps
from ..durable.model.models import Durability, DurabilityWarning
from ..durable.model.scripts import ScriptName, source
from ..errors import TimerError
from ..redis.cluster_route import RETRY_BUDGET_S, Refresh, Routing, owner
from ..redis.store import map_errors, settle_replies, settle_wait
from .lanes import Lane

T = TypeVar("T")

# What a node's pipeline fails with as a whole: its calls' slots get it, the others go on.
NODE_FAILED = (redis.exceptions.ClusterDownError, redis.ConnectionError, redis.TimeoutError)


class AsyncDriver:
    """Runs operations on one redis-py client (or cluster client), for every thread of a
    process (the blocking driver: redis-py's client is a connection pool) or one event
    loop. An operation that sends ahead keeps a lane of its own while it does."""

    def __init__(
        self,
        client: aioredis.Redis | AsyncRedisCluster,
        *,
        where: str,
        durability: Durability,
        node_url: Callable[[str, int], str] | None = None,
        node_options: Mapping[str, Any] | None = None,
        time: Time = SYSTEM_TIME,
    ) -> None:
        self.redis: Any = client  # a plain or a cluster client: the calls we make are common
        self.time = time  # the client's: operations' sleeps and deadlines (steps.Clock)
        self.where = where  # the server's URL without its password, for errors
        self.durability = durability
        self.cluster = isinstance(client, AsyncRedisCluster)
        self.scripts: dict[ScriptName, AsyncScript] = {
            name: client.register_script(source(name)) for name in ScriptName
        }
        self._loaded: set[ScriptName] = set()  # scripts known to the server (load_scripts)
        # when the cluster's slot map may be read again
        self._refresh = Refresh(clock=self.time.monotonic)
        # A plain client per cluster node (host:port), ours: redis-py's own node clients
        # are replaced when it reads the slot map again, and their pools left unclosed.
        # The lock is for the blocking driver's threads; nothing is awaited while it is held.
        self._node_url, self._node_options = node_url, dict(node_options or {})
        self._nodes: dict[str, aioredis.Redis] = {}
        self._nodes_lock = threading.Lock()
        self.reserved = 0  # connections a node client's pool may open at least (0: its own)
        self.retry_budget_s = RETRY_BUDGET_S  # a cluster call's retries after a backoff
        self._aof_checked = not durability.aof  # server_checks.check_aof, before the first wait

    async def check_aof(self) -> None:
        """Before the first write that waits for ``aof``: the servers can promise it."""
        if not self._aof_checked:
            for note in await self.run(server_checks.check_aof(self.where)):
                warnings.warn(note, DurabilityWarning, stacklevel=4)
            self._aof_checked = True

    # -- running an operation ---------------------------------------------------------

    async def run(self, op: steps.Op[T]) -> T:
        """Run an operation to its result (it emits nothing)."""
        result: list[T] = []
        async for _ in self.drive(op, result):
            pass
        return result[0]

    async def drive(self, op: steps.Op[T], result: list[T]) -> AsyncIterator[Any]:
        """Run an operation's steps; yield what it emits; put its result in ``result``
        (an async generator returns no value, and the blocking twin is written as this)."""
        reply: Any = None
        failed: TimerError | None = None  # a call's error, raised inside the operation
        lane: Lane | None = None  # made at the first Send (most operations never send ahead)
        try:
            while True:
                try:
                    step = op.send(reply) if failed is None else op.throw(failed)
                except StopIteration as done:
                    result.append(done.value)
                    return
                reply, failed = None, None
                if isinstance(step, steps.Emit):
                    yield step.value
                elif isinstance(step, steps.Send):
                    lane = lane or Lane(self)
                    reply = await lane.send(step.pipeline)
                elif isinstance(step, steps.Collect):
                    assert lane is not None, "Collect before any Send"
                    reply = await lane.collect(step.ticket)
                elif isinstance(step, steps.ScriptCall | steps.Command | steps.Pipeline):
                    try:
                        reply = await self.execute(step)
                    except TimerError as exc:  # the operation may answer it (or not)
                        failed = exc
                elif isinstance(step, steps.Sleep):  # an operation polling with backoff
                    await self.time.apoll(step.seconds, step.at_most or step.seconds)
                elif isinstance(step, steps.Waits):
                    reply = self.durability.waits
                else:
                    reply = self.time  # steps.Clock
        finally:
            if lane is not None:
                lane.close()

    async def execute(self, step: steps.ScriptCall | steps.Command | steps.Pipeline) -> Any:
        """A call's reply, or a pipeline's replies in order; its error as a TimerError
        (in its slot, for a pipeline that asks so)."""
        if isinstance(step, steps.ScriptCall) and (
            self.cluster or (self.durability.waits and step.wait)
        ):  # the write, then WAIT on its connection; on a cluster, routed to its master
            replies = await self.execute(steps.Pipeline([step]))
            return replies[0]
        if isinstance(step, steps.Pipeline):
            replies = await self.pipeline(step.calls)
            return settle_replies(replies, self.where, errors_in_slots=step.errors_in_slots)
        with map_errors(self.where):
            if isinstance(step, steps.ScriptCall):
                return await self.scripts[step.script](keys=step.keys, args=step.args)
            if step.every_primary:
                return await self.on_every_primary(step)
            if step.confirmed and self.durability.waits and self.cluster:
                return await self.routed_confirmed(step)
            if step.confirmed and self.durability.waits:
                return await self.confirmed(step)
            return await getattr(self.redis, step.name)(*step.args, **step.kwargs)

    async def on_every_primary(self, step: steps.Command) -> dict[str, Any]:
        """The command on each primary of a cluster (the one server otherwise): the
        replies by node name."""
        if not self.cluster:
            return {self.where: await getattr(self.redis, step.name)(*step.args, **step.kwargs)}
        return {
            node.name: await getattr(self.node(node.name), step.name)(*step.args, **step.kwargs)
            for node in self.redis.get_primaries()
        }

    async def confirmed(self, step: steps.Command) -> Any:
        """The command, then the durability wait on its connection: its reply once what
        it read is as durable as this client's writes (NotDurable otherwise). XREADGROUP
        is a write (it moves entries to the pending list), so the wait covers every
        entry it returned, all written before it."""
        await self.check_aof()
        replies = await self._confirmed_on(self.redis, step)
        return settle_replies(replies, self.where, errors_in_slots=False)[0]

    async def _confirmed_on(self, conn: Any, step: steps.Command) -> list[Any]:
        pipe = conn.pipeline(transaction=False)
        getattr(pipe, step.name)(*step.args, **step.kwargs)
        pipe.execute_command(*self.durability.command())
        return settle_wait(self.durability, list(await pipe.execute(raise_on_error=False)))

    async def pipeline(
        self,
        calls: Sequence[steps.ScriptCall] | Sequence[steps.Command],
    ) -> list[Any]:
        """Replies of a pipeline's calls in order, a redis-py error in the slot of its call
        (the caller settles them: ``settle_replies``). Script calls on a cluster go each
        to its slot's master (:meth:`routed_scripts`); other calls in one pipeline."""
        if self.cluster and calls and isinstance(calls[0], steps.ScriptCall):
            return await self.routed_scripts([c for c in calls if isinstance(c, steps.ScriptCall)])
        with map_errors(self.where):
            return await self._pipeline_on(self.redis, calls)

    async def _pipeline_on(
        self, conn: Any, calls: Sequence[steps.ScriptCall] | Sequence[steps.Command]
    ) -> list[Any]:
        """One pipeline on one connection: the calls, then the durability wait if asked
        (WAIT covers the writes of its own connection), whose shortfall fails them all.

        A script call is a plain ``EVALSHA``: redis-py's pipelined ``Script`` asks the
        server ``SCRIPT EXISTS`` before every pipeline, a round trip each. A script the
        server lost (a restart) is loaded on that connection and its calls run again (a
        ``NOSCRIPT`` call did not run)."""
        durability = self.durability
        waits = durability.waits and any(isinstance(c, steps.ScriptCall) and c.wait for c in calls)
        if waits:
            await self.check_aof()
        pipe = conn.pipeline(transaction=False)
        for c in calls:
            if isinstance(c, steps.ScriptCall):
                pipe.evalsha(self.scripts[c.script].sha, len(c.keys), *c.keys, *c.args)
            else:
                getattr(pipe, c.name)(*c.args, **c.kwargs)
        if waits:
            pipe.execute_command(*durability.command())
        replies = list(await pipe.execute(raise_on_error=False))
        if waits:
            replies = settle_wait(durability, replies)
        lost = [k for k, r in enumerate(replies) if isinstance(r, redis.exceptions.NoScriptError)]
        if lost:
            again = [cast("steps.ScriptCall", calls[k]) for k in lost]
            for name in {c.script for c in again}:
                await conn.script_load(self.scripts[name].script)
            for k, reply in zip(lost, await self._pipeline_on(conn, again), strict=True):
                replies[k] = reply
        return replies

    async def load_scripts(self, names: Iterable[ScriptName]) -> None:
        """Make sure the server has these scripts (a call by SHA alone needs them), once
        per client: a cache lost since (a restart) costs the NOSCRIPT replies a re-run."""
        with map_errors(self.where):
            for name in set(names) - self._loaded:
                script = self.scripts[name]
                exists = await self.redis.script_exists(script.sha)
                if not exists[0]:
                    await self.redis.script_load(script.script)
                self._loaded.add(name)

    # -- a Redis Cluster: each call on its slot's master ------------------------------

    async def routed_scripts(self, calls: Sequence[steps.ScriptCall]) -> list[Any]:
        """Script calls on a cluster, each on its slot's master, pipelined per master;
        a reply that names a topology change (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, a node
        gone) is acted on as ``timer.redis.cluster_route`` says, within the retry budget.
        A node that fails costs only its own calls: the others' replies are kept."""
        return await self.routed(
            [c.keys[0] for c in calls],
            lambda name, idxs: self._node_scripts(name, [calls[i] for i in idxs]),
        )

    async def _node_scripts(self, name: str, calls: Sequence[steps.ScriptCall]) -> list[Any]:
        """One node's pipeline of script calls: its replies, or the error that stopped the
        whole pipeline in each of its calls' slots (never raised: other nodes go on)."""
        try:
            return await self._pipeline_on(self.node(name), calls)
        except NODE_FAILED as exc:
            return [exc] * len(calls)

    async def routed_confirmed(self, step: steps.Command) -> Any:
        """A confirmed command on a cluster (``confirmed``'s read then wait): both on one
        connection to the master of its key's slot, routed as script calls are."""
        assert step.key is not None, "a confirmed command on a cluster names its key"
        await self.check_aof()
        replies = await self.routed([step.key], lambda name, _: self._node_confirmed(name, step))
        return settle_replies(replies, self.where, errors_in_slots=False)[0]

    async def _node_confirmed(self, name: str, step: steps.Command) -> list[Any]:
        try:
            return await self._confirmed_on(self.node(name), step)
        except NODE_FAILED as exc:
            return [exc]

    async def routed(
        self,
        keys: Sequence[str],
        send: Callable[[str, list[int]], Awaitable[list[Any]]],
    ) -> list[Any]:
        """Calls (one per key) through the cluster as ``timer.redis.cluster_route.Routing``
        says: ``send(node, indexes)`` sends a node its calls and returns their replies."""
        route = Routing(keys, self._owner, budget_s=self.retry_budget_s, clock=self.time.monotonic)
        while groups := route.groups():
            parts = await asyncio.gather(*(send(name, idxs) for name, idxs in groups.items()))
            for (name, idxs), part in zip(groups.items(), parts, strict=True):
                route.record(name, idxs, part)
            if route.refresh and self._refresh.due():  # rate-limited across threads
                # a refresh that fails keeps the map it had; the next round tries again
                with contextlib.suppress(redis.RedisError, RedisClusterException):
                    await self.redis.nodes_manager.initialize()
            pause = route.pause_s()
            if pause:
                await self.time.asleep(pause)
        return route.replies

    def _owner(self, key: str) -> str:
        return owner(self.redis, key)

    def node(self, name: str) -> aioredis.Redis:
        """The client of cluster node ``name`` (host:port) its pipelines use: our own,
        made at first use and kept (closed by :meth:`aclose`); redis-py's when this
        driver was given no URL to make one (a blocking client made by hand). No node
        (no master covers the slot) is a ClusterDownError."""
        found = self._nodes.get(name)
        if found is not None:
            return found
        if self._node_url is None:
            node = self.redis.get_node(node_name=name) if name else None
            if node is None:
                raise redis.exceptions.ClusterDownError(f"no master known for node {name!r}")
            return cast("aioredis.Redis", self.redis.get_redis_connection(node))
        if not name:
            raise redis.exceptions.ClusterDownError("no master covers the slot")
        with self._nodes_lock:
            found = self._nodes.get(name)
            if found is None:
                host, _, port = name.rpartition(":")
                found = aioredis.Redis.from_url(
                    self._node_url(host, int(port)),
                    **self._node_options,
                )
                pool = found.connection_pool
                if self.reserved and getattr(pool, "max_connections", 0) < self.reserved:
                    pool.max_connections = self.reserved
                self._nodes[name] = found
        return found

    def node_clients(self) -> list[aioredis.Redis]:
        """The clients of cluster nodes made so far."""
        with self._nodes_lock:
            return list(self._nodes.values())

    async def aclose(self) -> None:
        """Close the clients of cluster nodes (the main client is its owner's to close)."""
        with self._nodes_lock:
            nodes, self._nodes = list(self._nodes.values()), {}
        for client in nodes:
            await client.aclose()
