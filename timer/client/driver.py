"""The blocking driver: runs an operation's steps with redis-py (TimerClient's I/O).

An operation of ``timer.durable.timers.ops`` yields steps (a script, a command, a pipeline, a
sleep, a value to emit, a pipeline to send ahead and collect later); :class:`SyncDriver`
runs each with blocking redis-py calls, grouped per node on a Redis Cluster, waits for
durability on the writes' own connection when asked, and turns redis-py errors into
``TimerError``s. It is the only code of the sync client that talks to Redis; the asyncio
client's driver (``timer.aio``) runs the same operations awaited.
"""

from __future__ import annotations

import contextlib
import random
import threading
import warnings
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

import redis
import redis.client
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.sentinel import SentinelConnectionPool

from ..clock import SYSTEM_TIME, Time
from ..durable.admin import server as server_checks
from ..durable.model import steps
from ..durable.model.models import Durability, DurabilityWarning
from ..durable.model.scripts import ScriptName, source
from ..errors import TimerError
from ..redis import connections
from ..redis.cluster_route import (
    CLIENT_RETRIES,
    RETRY_BUDGET_S,
    Refresh,
    Routing,
    client_backoff,
    owner,
)
from ..redis.store import RedisSettings, map_errors, settle_replies, settle_wait
from .lanes import Lane

T = TypeVar("T")


def connect(rs: RedisSettings) -> redis.Redis | RedisCluster:
    """A redis-py client for the URL: a cluster client when the server says it is a
    Redis Cluster node (``HELLO``'s ``mode``; contacted once here for that)."""
    options = rs.options()
    with map_errors(rs.safe_url):
        client: Any = connections.client(rs)
        try:
            if rs.url.startswith(("redis://", "rediss://")):
                hello = server_checks.hello_fields(client.execute_command("HELLO"))
                if hello.get("mode") == "cluster":
                    client.close()
                    client = RedisCluster.from_url(rs.url, retry=cluster_retry(), **options)
        except BaseException:
            client.close()  # no half-open connection left behind
            raise
    return cast("redis.Redis | RedisCluster", client)


def cluster_retry() -> Retry:
    """The cluster client's own retries of a command whose node failed (as
    ``cluster_route.CLIENT_RETRIES`` says)."""
    return Retry(client_backoff(), retries=CLIENT_RETRIES)


class CountingPubSub(redis.client.PubSub):
    """A PubSub that counts its connections (redis-py reconnects and resubscribes silently,
    and a listener must know: events may have been missed meanwhile)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.connects = 0
        super().__init__(*args, **kwargs)

    def on_connect(self, connection: Any) -> None:
        self.connects += 1
        super().on_connect(connection)

    def master_moved(self) -> bool:
        """True when this connection's pool is a Sentinel master's and the Sentinels now
        name another master: a demoted master keeps its subscribers, who then hear
        nothing more (what is published goes to the new master)."""
        pool = self.connection_pool
        conn = self.connection
        if not isinstance(pool, SentinelConnectionPool) or conn is None:
            return False
        try:
            host, port = pool.get_master_address()
        except (redis.ConnectionError, redis.TimeoutError):
            return False  # no Sentinel answers: the connection's own errors will say
        return (conn.host, int(conn.port)) != (host, int(port))


class SyncDriver:
    """Runs operations with blocking calls on one redis-py client (or cluster client).

    Thread-safe as redis-py's client is (a connection pool): each operation that sends
    ahead keeps one connection of its own (a lane) while it does.
    """

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        *,
        where: str,
        durability: Durability,
        node_url: Callable[[str, int], str] | None = None,
        node_options: Mapping[str, Any] | None = None,
        time: Time = SYSTEM_TIME,
    ) -> None:
        self.redis: Any = client  # redis.Redis or RedisCluster: the calls we make are common
        self.time = time  # the client's: operations' sleeps and deadlines (steps.Clock)
        self.where = where  # the server's URL without its password, for errors
        self.durability = durability
        self.cluster = isinstance(client, RedisCluster)
        self.scripts: dict[ScriptName, Script] = {
            name: client.register_script(source(name)) for name in ScriptName
        }
        self._loaded: set[ScriptName] = set()  # scripts known to the server (load_scripts)
        # when the cluster's slot map may be read again
        self._refresh = Refresh(clock=self.time.monotonic)
        # A plain client per cluster node (host:port), ours: redis-py's own node clients
        # are replaced when it reads the slot map again, and their pools left unclosed.
        self._node_url, self._node_options = node_url, dict(node_options or {})
        self._nodes: dict[str, redis.Redis] = {}
        self._nodes_lock = threading.Lock()
        self._reserved = 0  # connections each pool may open (reserve_connections)
        self.retry_budget_s = RETRY_BUDGET_S  # a cluster call's retries after a backoff
        self._aof_checked = not durability.aof  # server_checks.check_aof, before the first wait

    def check_aof(self) -> None:
        """Before the first write that waits for ``aof``: the servers can promise it."""
        if not self._aof_checked:
            for note in self.run(server_checks.check_aof(self.where)):
                warnings.warn(note, DurabilityWarning, stacklevel=4)
            self._aof_checked = True

    def reserve_connections(self, n: int) -> None:
        """Let the connection pool (each node's, on a cluster) open at least ``n``
        connections: redis-py's default is 100, and a thread holds one per call, so a
        handler runner with 200 threads needs more (it calls this itself)."""
        pools = (
            [
                node.redis_connection.connection_pool
                for node in self.redis.get_nodes()
                if node.redis_connection is not None
            ]
            if self.cluster
            else [self.redis.connection_pool]
        )
        self._reserved = max(self._reserved, n)
        with self._nodes_lock:
            pools += [c.connection_pool for c in self._nodes.values()]
        for pool in pools:
            if getattr(pool, "max_connections", n) < n:
                pool.max_connections = n

    def node(self, name: str) -> Any:
        """The client of cluster node ``name`` (host:port) script pipelines use: our own,
        made at first use and kept (closed by :meth:`close`); redis-py's when this
        driver was given no URL to make one."""
        found = self._nodes.get(name)
        if found is not None:
            return found
        if self._node_url is None:
            node = self.redis.get_node(node_name=name)
            return None if node is None else self.redis.get_redis_connection(node)
        with self._nodes_lock:
            found = self._nodes.get(name)
            if found is None:
                host, _, port = name.rpartition(":")
                found = redis.Redis.from_url(self._node_url(host, int(port)), **self._node_options)
                pool = found.connection_pool
                if self._reserved and getattr(pool, "max_connections", 0) < self._reserved:
                    pool.max_connections = self._reserved
                self._nodes[name] = found
        return found

    def close(self) -> None:
        """Close the per-node clients (the main client is its owner's to close)."""
        with self._nodes_lock:
            nodes, self._nodes = list(self._nodes.values()), {}
        for client in nodes:
            client.close()

    def pubsub(self) -> CountingPubSub:
        """A new pub/sub connection for following shard events (one listener thread).

        On a Redis Cluster a PUBLISH reaches every node, so one node hears every shard's
        events; a primary that answers PING is picked at random at each call, so a
        listener that reconnects after its node died goes to a live one.
        """
        if self.cluster:
            # A node that answers PING, tried in random order: a listener reconnecting
            # because its node died must not be sent back to it by chance (each retry
            # there costs a backoff, while its shards' events are missed).
            nodes = list(self.redis.get_primaries())
            random.shuffle(nodes)
            for node in nodes:
                conn = self.redis.get_redis_connection(node)
                try:
                    conn.ping()
                except redis.RedisError:
                    continue
                return CountingPubSub(conn.connection_pool)
            node = nodes[0]  # none answers: the listener's own retries go on from here
            return CountingPubSub(self.redis.get_redis_connection(node).connection_pool)
        return CountingPubSub(self.redis.connection_pool)

    def run(self, op: steps.Op[T]) -> T:
        """Run an operation to its result (it emits nothing)."""
        emitted = self.drive(op)
        while True:
            try:
                next(emitted)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def drive(self, op: steps.Op[T]) -> Generator[Any, None, T]:
        """Run an operation's steps; yield what it emits; return its result."""
        reply: Any = None
        failed: TimerError | None = None  # a call's error, raised inside the operation
        lane: Lane | None = None  # made at the first Send (most operations never send ahead)
        try:
            while True:
                try:
                    step = op.send(reply) if failed is None else op.throw(failed)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
                failed = None
                if isinstance(step, steps.Emit):
                    reply = None
                    yield step.value
                elif isinstance(step, steps.Sleep):
                    reply = None
                    self.time.sleep(step.seconds)  # an operation polling with backoff
                elif isinstance(step, steps.Waits):
                    reply = self.durability.waits
                elif isinstance(step, steps.Clock):
                    reply = self.time
                elif isinstance(step, steps.Send):
                    lane = lane or Lane(self)
                    reply = lane.send(step.pipeline)
                elif isinstance(step, steps.Collect):
                    assert lane is not None, "Collect before any Send"
                    reply = lane.collect(step.ticket)
                else:
                    try:
                        reply = self.execute(step)
                    except TimerError as exc:  # the operation may answer it (or not)
                        failed = exc
        finally:
            if lane is not None:
                lane.close()

    def execute(self, step: steps.ScriptCall | steps.Command | steps.Pipeline) -> Any:
        if isinstance(step, steps.ScriptCall) and (
            self.cluster or (self.durability.waits and step.wait)
        ):  # the write, then WAIT; on a cluster, loaded on its own node only (see _pipeline)
            replies = self.pipeline(steps.Pipeline([step]))
            return settle_replies(replies, self.where, errors_in_slots=False)[0]
        with map_errors(self.where):
            if isinstance(step, steps.ScriptCall):
                return self.scripts[step.script](keys=step.keys, args=step.args)
            if isinstance(step, steps.Command) and step.every_primary:
                return self.on_every_primary(step)
            if isinstance(step, steps.Command) and step.confirmed and self.durability.waits:
                return self.routed_confirmed(step) if self.cluster else self.confirmed(step)
            if isinstance(step, steps.Command):
                return getattr(self.redis, step.name)(*step.args, **step.kwargs)
        return settle_replies(self.pipeline(step), self.where, errors_in_slots=step.errors_in_slots)

    def confirmed(self, step: steps.Command) -> Any:
        """The command, then the durability wait on its connection: its reply once what
        it read is as durable as this client's writes (NotDurable otherwise). XREADGROUP
        is a write (it moves entries to the pending list), so the wait covers every
        entry it returned, all written before it."""
        self.check_aof()
        pipe = self.redis.pipeline(transaction=False)
        getattr(pipe, step.name)(*step.args, **step.kwargs)
        pipe.execute_command(*self.durability.command())
        replies = settle_wait(self.durability, list(pipe.execute(raise_on_error=False)))
        return settle_replies(replies, self.where, errors_in_slots=False)[0]

    def on_every_primary(self, step: steps.Command) -> dict[str, Any]:
        if not self.cluster:
            return {self.where: getattr(self.redis, step.name)(*step.args, **step.kwargs)}
        return {
            node.name: getattr(self.redis.get_redis_connection(node), step.name)(
                *step.args, **step.kwargs
            )
            for node in self.redis.get_primaries()
        }

    def pipeline(self, step: steps.Pipeline) -> list[Any]:
        """Replies of a pipeline in order, a redis-py error in the slot of its call (the
        caller settles them: ``settle_replies``)."""
        if step.calls and isinstance(step.calls[0], steps.ScriptCall):
            scripts: list[steps.ScriptCall] = [
                c for c in step.calls if isinstance(c, steps.ScriptCall)
            ]
            replies = self.pipelined_scripts(scripts)
        else:
            with map_errors(self.where):
                pipe = self.redis.pipeline(transaction=False)
                for c in step.calls:
                    assert isinstance(c, steps.Command), "a pipeline holds one kind of call"
                    getattr(pipe, c.name)(*c.args, **c.kwargs)
                replies = pipe.execute(raise_on_error=False)
        return list(replies)

    def load_scripts(self, names: Iterable[ScriptName]) -> None:
        """Make sure the server has these scripts (a call by SHA alone needs them), once
        per client: a cache lost since (a restart) costs the NOSCRIPT replies a re-run."""
        with map_errors(self.where):
            for name in set(names) - self._loaded:
                script = self.scripts[name]
                if not self.redis.script_exists(script.sha)[0]:
                    self.redis.script_load(script.script)
                self._loaded.add(name)

    def pipelined_scripts(self, calls: Sequence[steps.ScriptCall]) -> list[Any]:
        """Script calls in pipelines, one per node; replies (or redis errors) in order.

        On a cluster each call goes to its slot's master, in one pipeline per master, and
        follows a failover or a resharding as ``timer.redis.cluster_route`` says.
        """
        if self.cluster:
            return self.routed_scripts(calls)
        with map_errors(self.where):  # (run_scripts loads a script the server lost)
            return self.run_scripts(self.redis, calls, list(range(len(calls))))

    def retry_alone(self, calls: Sequence[steps.ScriptCall], replies: list[Any]) -> list[Any]:
        """Run again, on one server, the calls whose script the server lost (a lane's
        replies, read off its own connection); the replies, updated."""
        with map_errors(self.where):
            for i, reply in enumerate(replies):
                if isinstance(reply, redis.exceptions.NoScriptError):
                    replies[i] = self.run_scripts(self.redis, calls, [i])[0]
        return replies

    def routed_scripts(self, calls: Sequence[steps.ScriptCall]) -> list[Any]:
        """Script calls on a cluster, each on its slot's master, pipelined per master;
        a reply that names a topology change (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, a node
        gone) is acted on as ``timer.redis.cluster_route`` says, within the retry budget.
        A node that fails costs only its own calls: the others' replies are kept."""
        return self.routed(
            [c.keys[0] for c in calls], lambda name, idxs: self._node_scripts(name, calls, idxs)
        )

    def routed_confirmed(self, step: steps.Command) -> Any:
        """A confirmed command on a cluster (``confirmed``'s read then wait): both on one
        connection to the master of its key's slot, routed as script calls are."""
        assert step.key is not None, "a confirmed command on a cluster names its key"
        self.check_aof()
        replies = self.routed([step.key], lambda name, _: self._node_confirmed(name, step))
        return settle_replies(replies, self.where, errors_in_slots=False)[0]

    def _node_confirmed(self, name: str, step: steps.Command) -> list[Any]:
        conn = self.node(name) if name else None
        if conn is None:
            return [redis.exceptions.ClusterDownError(f"no master known for node {name!r}")]
        try:
            pipe = conn.pipeline(transaction=False)
            getattr(pipe, step.name)(*step.args, **step.kwargs)
            pipe.execute_command(*self.durability.command())
            return settle_wait(self.durability, list(pipe.execute(raise_on_error=False)))
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            return [exc]

    def routed(self, keys: Sequence[str], send: Callable[[str, list[int]], list[Any]]) -> list[Any]:
        """Calls (one per key) through the cluster as ``timer.redis.cluster_route.Routing``
        says: ``send(node, indexes)`` sends a node its calls and returns their replies."""
        route = Routing(keys, self._owner, budget_s=self.retry_budget_s, clock=self.time.monotonic)
        while groups := route.groups():
            for name, idxs in groups.items():
                route.record(name, idxs, send(name, idxs))
            if route.refresh:
                self._refresh_slots()
            pause = route.pause_s()
            if pause:
                self.time.sleep(pause)
        return route.replies

    def _owner(self, key: str) -> str:
        return owner(self.redis, key)

    def _refresh_slots(self) -> None:
        """Read the slot map from the cluster again (rate-limited across threads)."""
        if self._refresh.due():
            # a refresh that fails keeps the map it had; the next round tries again
            with contextlib.suppress(redis.RedisError, RedisClusterException):
                self.redis.nodes_manager.initialize()

    def _node_scripts(
        self, name: str, calls: Sequence[steps.ScriptCall], idxs: list[int]
    ) -> list[Any]:
        """One node's pipeline of script calls: its replies, or the error that stopped the
        whole pipeline in each of its calls' slots (never raised: other nodes go on)."""
        conn = self.node(name) if name else None
        if conn is None:
            gone = redis.exceptions.ClusterDownError(f"no master known for node {name!r}")
            return [gone] * len(idxs)
        try:
            return self.run_scripts(conn, calls, idxs)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            return [exc] * len(idxs)

    def run_scripts(
        self, conn: Any, calls: Sequence[steps.ScriptCall], idxs: list[int]
    ) -> list[Any]:
        """One pipeline on one connection: the calls, then the durability wait if asked
        (WAIT covers the writes of its own connection), whose shortfall fails them all.

        Plain ``EVALSHA`` on one server or node: redis-py's pipelined ``Script`` asks the
        server ``SCRIPT EXISTS`` before every pipeline, a round trip each. A script
        the server lost (a restart) is loaded on that connection and its calls run again
        (a ``NOSCRIPT`` call did not run)."""
        durability = self.durability
        waits = durability.waits and any(calls[i].wait for i in idxs)
        if waits:
            self.check_aof()
        pipe = conn.pipeline(transaction=False)
        for i in idxs:
            call, script = calls[i], self.scripts[calls[i].script]
            pipe.evalsha(script.sha, len(call.keys), *call.keys, *call.args)
        if waits:
            pipe.execute_command(*durability.command())
        replies = list(pipe.execute(raise_on_error=False))
        if waits:
            replies = settle_wait(durability, replies)
        lost = [k for k, r in enumerate(replies) if isinstance(r, redis.exceptions.NoScriptError)]
        if lost:
            for name in {calls[idxs[k]].script for k in lost}:
                conn.script_load(self.scripts[name].script)
            again = self.run_scripts(conn, calls, [idxs[k] for k in lost])
            for k, reply in zip(lost, again, strict=True):
                replies[k] = reply
        return replies
