"""The asyncio driver: runs an operation's steps with redis.asyncio (AsyncTimerClient's
I/O), as :mod:`timer.client.driver` runs them blocking.

Each step is awaited: a script call, a command, a pipeline (per node on a Redis Cluster,
on the node's own connection so durability's WAIT covers the writes it follows), a
sleep, a value to emit, a pipeline sent ahead as a task and collected later; redis-py's
errors become ``TimerError``s. It is the only code of the asyncio client that talks to
Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.commands.core import AsyncScript
from redis.exceptions import RedisClusterException

from ..clock import SYSTEM_TIME, Time
from ..durable.admin import server as server_checks
from ..durable.model import steps
from ..durable.model.models import Durability, DurabilityWarning
from ..durable.model.scripts import ScriptName, source
from ..durable.model.steps import error_or
from ..errors import TimerError
from ..redis.cluster_route import (
    CLIENT_RETRIES,
    RETRY_BUDGET_S,
    Refresh,
    Routing,
    client_backoff,
    owner,
)
from ..redis.store import map_errors, settle_replies, settle_wait

T = TypeVar("T")


def cluster_retry() -> AsyncRetry:
    """The cluster client's own retries of a command whose node failed (as
    ``cluster_route.CLIENT_RETRIES`` says)."""
    return AsyncRetry(client_backoff(), retries=CLIENT_RETRIES)


class AsyncDriver:
    """Runs operations with awaited calls on one redis.asyncio client (or cluster
    client), for one event loop."""

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
        self.redis: Any = client  # aioredis.Redis or its RedisCluster: the calls are common
        self.time = time  # the client's: operations' sleeps and deadlines (steps.Clock)
        self.where = where  # the server's URL without its password, for errors
        self.durability = durability
        self.cluster = isinstance(client, AsyncRedisCluster)
        self._scripts: dict[ScriptName, AsyncScript] = {
            name: client.register_script(source(name)) for name in ScriptName
        }
        # when the cluster's slot map may be read again
        self._refresh = Refresh(clock=self.time.monotonic)
        self._node_url = node_url  # a cluster node's URL (host, port), with the same auth
        self._node_options = dict(node_options or {})
        self._nodes: dict[str, aioredis.Redis] = {}  # a plain client per cluster node
        self.retry_budget_s = RETRY_BUDGET_S  # a cluster call's retries after a backoff
        self._aof_checked = not durability.aof  # server_checks.check_aof, before the first wait

    async def check_aof(self) -> None:
        """Before the first write that waits for ``aof``: the servers can promise it."""
        if not self._aof_checked:
            for note in await self.run(server_checks.check_aof(self.where)):
                warnings.warn(note, DurabilityWarning, stacklevel=4)
            self._aof_checked = True

    async def run(self, op: steps.Op[T]) -> T:
        """Run an operation to its result (it emits nothing)."""
        result: list[T] = []
        async for _ in self.drive(op, result):
            pass
        return result[0]

    async def drive(self, op: steps.Op[T], result: list[T]) -> AsyncIterator[Any]:
        """Run an operation's steps; yield what it emits; put its result in ``result``.

        A pipeline sent ahead (``Send``) runs as a task while the operation prepares the
        next, each after the one before it (the server sees them in the order sent, as
        the blocking client's lane does); ``Collect`` awaits its task."""
        reply: Any = None
        failed: TimerError | None = None  # a call's error, raised inside the operation
        sent: list[asyncio.Task[Any]] = []
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
                    continue
                if not isinstance(step, steps.ScriptCall | steps.Command | steps.Pipeline):
                    reply = await self._answer(step, sent)
                    continue
                try:
                    reply = await self._execute(step)
                except TimerError as exc:  # the operation may answer it (or not)
                    failed = exc
        finally:
            for task in sent:  # an operation that ended early leaves none running
                if not task.done():
                    task.cancel()

    async def _answer(self, step: Any, sent: list[asyncio.Task[Any]]) -> Any:
        """What the operation gets back for a step that is not a call to the server."""
        if isinstance(step, steps.Sleep):
            await self.time.asleep(step.seconds)  # polling the server with backoff
            return None
        if isinstance(step, steps.Waits):
            return self.durability.waits
        if isinstance(step, steps.Clock):
            return self.time
        if isinstance(step, steps.Send):
            task = asyncio.ensure_future(self._after(sent[-1] if sent else None, step.pipeline))
            sent.append(task)
            return task
        assert isinstance(step, steps.Collect), step
        return await step.ticket

    async def _after(self, before: asyncio.Task[Any] | None, pipeline: steps.Pipeline) -> Any:
        """``pipeline``'s replies, sent once ``before`` (the pipeline sent ahead of it) ran."""
        if before is not None:
            with contextlib.suppress(Exception):  # its own Collect reports its error
                await before
        return await self._execute(pipeline)

    async def _execute(self, step: steps.ScriptCall | steps.Command | steps.Pipeline) -> Any:
        durability = self.durability
        if isinstance(step, steps.ScriptCall) and (
            self.cluster or (durability.waits and step.wait)
        ):
            # then WAIT; on a cluster, routed to its slot's master, never with ASKING
            return error_or((await self._execute(steps.Pipeline([step])))[0])
        if (
            self.cluster
            and isinstance(step, steps.Pipeline)
            and step.calls
            and isinstance(step.calls[0], steps.ScriptCall)
        ):
            scripts = [c for c in step.calls if isinstance(c, steps.ScriptCall)]
            raw = await self._scripts_per_node(scripts)
            return settle_replies(raw, self.where, errors_in_slots=step.errors_in_slots)
        with map_errors(self.where):
            if isinstance(step, steps.ScriptCall):
                return await self._scripts[step.script](keys=step.keys, args=step.args)
            if isinstance(step, steps.Command):
                if step.every_primary and self.cluster:
                    return {
                        node.name: await getattr(self.redis, step.name)(
                            *step.args, target_nodes=node, **step.kwargs
                        )
                        for node in self.redis.get_primaries()
                    }
                if step.confirmed and durability.waits:
                    if self.cluster:
                        return await self._routed_confirmed(step)
                    return await self._confirmed(step)
                reply = await getattr(self.redis, step.name)(*step.args, **step.kwargs)
                return {self.where: reply} if step.every_primary else reply
            raw = await self._pipeline(step.calls)
        return settle_replies(raw, self.where, errors_in_slots=step.errors_in_slots)

    async def _confirmed(self, step: steps.Command) -> Any:
        """The command, then the durability wait on its connection (as the blocking
        driver's ``confirmed``)."""
        await self.check_aof()
        pipe = self.redis.pipeline(transaction=False)
        getattr(pipe, step.name)(*step.args, **step.kwargs)
        pipe.execute_command(*self.durability.command())
        replies = settle_wait(self.durability, list(await pipe.execute(raise_on_error=False)))
        return settle_replies(replies, self.where, errors_in_slots=False)[0]

    async def _pipeline(
        self,
        calls: Sequence[steps.ScriptCall] | Sequence[steps.Command],
        node: aioredis.Redis | None = None,
    ) -> list[Any]:
        """One pipeline's raw replies (errors in their slots), on the server, or on one
        cluster ``node``'s own client. A script call is a plain ``EVALSHA``: redis-py's
        pipelined script asks ``SCRIPT EXISTS`` before every pipeline, a round trip each;
        a script the server lost (a restart) is loaded and its calls run again (a
        ``NOSCRIPT`` call did not run)."""
        durability = self.durability
        conn = node if node is not None else self.redis
        plain = node is not None or not self.cluster
        # a cluster pipeline takes no transaction flag (None); a plain one, False
        pipe = conn.pipeline(transaction=False) if plain else self.redis.pipeline()
        for c in calls:
            if isinstance(c, steps.ScriptCall):
                assert plain, "script calls on a cluster go through _scripts_per_node"
                script = self._scripts[c.script]
                pipe.evalsha(script.sha, len(c.keys), *c.keys, *c.args)
            else:
                getattr(pipe, c.name)(*c.args, **c.kwargs)
        waits = durability.waits and any(isinstance(c, steps.ScriptCall) and c.wait for c in calls)
        if waits:  # on the writes' own connection: WAIT covers only those
            await self.check_aof()
            pipe.execute_command(*durability.command())
        raw = list(await pipe.execute(raise_on_error=False))
        if waits:
            raw = settle_wait(durability, raw)
        lost = [k for k, r in enumerate(raw) if isinstance(r, redis.exceptions.NoScriptError)]
        if lost and plain:
            again_calls = [cast("steps.ScriptCall", calls[k]) for k in lost]
            for name in {c.script for c in again_calls}:
                await conn.script_load(self._scripts[name].script)
            for k, reply in zip(lost, await self._pipeline(again_calls, node), strict=True):
                raw[k] = reply
        return raw

    async def _scripts_per_node(self, calls: Sequence[steps.ScriptCall]) -> list[Any]:
        """Script calls on a cluster: each on its slot's master, one pipeline per master
        (on its own connection, WAIT after the writes when asked), the masters' run
        together; replies (or errors) in order. A reply that names a topology change
        (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, a node gone) is acted on as
        ``timer.redis.cluster_route`` says, within the retry budget; a node that fails costs
        only its own calls."""
        return await self._routed(
            [c.keys[0] for c in calls], lambda name, idxs: self._node_pipeline(name, calls, idxs)
        )

    async def _routed_confirmed(self, step: steps.Command) -> Any:
        """A confirmed command on a cluster: the read and the wait on one connection to
        its key's master, routed as script calls are (the blocking driver's
        ``routed_confirmed``)."""
        assert step.key is not None, "a confirmed command on a cluster names its key"
        await self.check_aof()
        replies = await self._routed([step.key], lambda name, _: self._node_confirmed(name, step))
        return settle_replies(replies, self.where, errors_in_slots=False)[0]

    async def _node_confirmed(self, name: str, step: steps.Command) -> list[Any]:
        if not name:
            return [redis.exceptions.ClusterDownError("no master covers the slot")]
        try:
            pipe = self._node(name).pipeline(transaction=False)
            getattr(pipe, step.name)(*step.args, **step.kwargs)
            pipe.execute_command(*self.durability.command())
            return settle_wait(self.durability, list(await pipe.execute(raise_on_error=False)))
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            return [exc]

    async def _routed(
        self, keys: Sequence[str], send: Callable[[str, list[int]], Awaitable[list[Any]]]
    ) -> list[Any]:
        """Calls (one per key) through the cluster as ``timer.redis.cluster_route.Routing``
        says, the nodes' sent together: ``send(node, indexes)`` returns their replies."""
        route = Routing(keys, self._owner, budget_s=self.retry_budget_s, clock=self.time.monotonic)
        while groups := route.groups():
            parts = await asyncio.gather(*(send(name, idxs) for name, idxs in groups.items()))
            for (name, idxs), part in zip(groups.items(), parts, strict=True):
                route.record(name, idxs, part)
            if route.refresh and self._refresh.due():
                with contextlib.suppress(redis.RedisError, RedisClusterException):
                    await self.redis.nodes_manager.initialize()
            pause = route.pause_s()
            if pause:
                await self.time.asleep(pause)
        return route.replies

    def _owner(self, key: str) -> str:
        return owner(self.redis, key)

    async def _node_pipeline(
        self, name: str, calls: Sequence[steps.ScriptCall], idxs: list[int]
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

    async def aclose(self) -> None:
        for conn in self._nodes.values():
            await conn.aclose()
        await self.redis.aclose()
