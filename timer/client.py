"""TimerClient: durable timers in Redis, with blocking redis-py calls (DESIGN §3, §5, §6).

Every call is an operation of ``timer.durable.ops`` (validation, script calls, parsing)
run by this module's driver, which is the only code here that talks to Redis: it runs
each step the operation yields (a script, a command, a pipeline grouped per node on a
Redis Cluster) and turns redis-py errors into ``TimerError``s. The asyncio client runs
the same operations with awaited calls.
"""

from __future__ import annotations

import dataclasses
import functools
import random
import time
import warnings
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

import redis
import redis.client
from redis.cluster import RedisCluster
from redis.commands.core import Script

from .durable import calls as C
from .durable import groups as G
from .durable import keys as K
from .durable import ops
from .durable.codec import DEFAULT_MAX_PAYLOAD
from .durable.models import (
    ClientSettings,
    DeadLetter,
    DueTimers,
    FireResult,
    GroupInfo,
    LeaseGrant,
    LeaseRenewal,
    Meta,
    Outcome,
    ServerSettings,
    SweepResult,
    Timer,
    TimerInfo,
    Trimmed,
)
from .durable.scripts import ScriptName, source
from .errors import TimerError
from .store import RedisSettings, map_errors, settle_replies, settle_wait

T = TypeVar("T")

# Replies of a pipelined call that the main client can fix by itself (redirect, reload).
RETRY_ALONE = (
    redis.exceptions.MovedError,
    redis.exceptions.AskError,
    redis.exceptions.TryAgainError,
    redis.exceptions.NoScriptError,
)
DEFAULT_SHARDS = 16
DEFAULT_BUCKET_MS = 1000


class CountingPubSub(redis.client.PubSub):
    """A PubSub that counts its connections (redis-py reconnects and resubscribes silently,
    and a listener must know: events may have been missed meanwhile)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.connects = 0
        super().__init__(*args, **kwargs)

    def on_connect(self, connection: Any) -> None:
        self.connects += 1
        super().on_connect(connection)


class _Sent:
    """A pipeline sent ahead on a lane: how many replies it has, or its replies once read."""

    __slots__ = ("pipeline", "replies")

    def __init__(self, pipeline: C.Pipeline, replies: list[Any] | None = None) -> None:
        self.pipeline = pipeline
        self.replies = replies


class _Lane:
    """One connection an operation keeps while it has script pipelines sent ahead
    (``Send``/``Collect``): the server runs a batch while the client validates and packs
    the next (#14). One connection, so the server runs the batches in the order they were
    sent. On a cluster, or when writes wait for durability, ``send`` runs the pipeline at
    once instead. A connection error re-runs every batch not yet collected, in order,
    through the ordinary path (redis-py's retries): what a failed pipeline gets too, and
    safe because a schedule call is idempotent per id."""

    def __init__(self, client: TimerClient) -> None:
        self.client = client
        self.conn: Any = None
        self.unread: list[_Sent] = []  # sent, replies not read yet, oldest first

    def send(self, pipeline: C.Pipeline) -> _Sent:
        client = self.client
        calls = pipeline.calls
        if (client.cluster or client.settings.durability.waits or not calls
                or not isinstance(calls[0], C.ScriptCall)):  # fmt: skip
            return _Sent(pipeline, client._execute(pipeline))
        sent = _Sent(pipeline)
        self.unread.append(sent)
        try:
            if self.conn is None:
                client._load_scripts({c.script for c in calls if isinstance(c, C.ScriptCall)})
                self.conn = client.redis.connection_pool.get_connection()
            scripts = client._scripts
            # No health-check PING once replies are pending: it would read one of them.
            self.conn.send_packed_command(self.conn.pack_commands([
                ("EVALSHA", scripts[c.script].sha, len(c.keys), *c.keys, *c.args)
                for c in calls if isinstance(c, C.ScriptCall)
            ]), check_health=len(self.unread) == 1)  # fmt: skip
        except (redis.ConnectionError, redis.TimeoutError):
            self._rerun()
        return sent

    def collect(self, sent: _Sent) -> list[Any]:
        client = self.client
        if sent.replies is None:
            if not self.unread or self.unread[0] is not sent:
                raise RuntimeError("Collect the batches sent ahead in the order they were sent")
            try:
                raw: list[Any] = []
                for _ in sent.pipeline.calls:
                    try:
                        raw.append(client.redis.parse_response(self.conn, "EVALSHA"))
                    except redis.ResponseError as exc:
                        raw.append(exc)
            except (redis.ConnectionError, redis.TimeoutError):
                self._rerun()
            else:
                self.unread.pop(0)
                calls = cast("Sequence[C.ScriptCall]", sent.pipeline.calls)
                sent.replies = settle_replies(
                    client._retry_alone(calls, raw),  # NOSCRIPT: the script cache was lost
                    client.where,
                    errors_in_slots=sent.pipeline.errors_in_slots,
                )
                if not self.unread:
                    self._release()
        assert sent.replies is not None
        return sent.replies

    def _rerun(self) -> None:
        """The lane broke: every batch not yet collected runs again, in order."""
        self._release(broken=True)
        unread, self.unread = self.unread, []
        for sent in unread:
            sent.replies = self.client._execute(sent.pipeline)

    def _release(self, *, broken: bool = False) -> None:
        if self.conn is not None:
            if broken or self.unread:  # replies left on the socket: never reuse it
                self.conn.disconnect()
            self.client.redis.connection_pool.release(self.conn)
            self.conn = None

    def close(self) -> None:
        """The operation ended (or failed): give the connection back."""
        self._release()
        self.unread.clear()


class TimerClient:
    """Schedule, cancel, notify and read durable timers of one namespace.

    Thread-safe as redis-py's client is (a connection pool); ``outcomes`` iterators are
    for one thread each.
    """

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        namespace: str = "default",
        *,
        settings: ClientSettings | None = None,
        safe_url: str = "redis",
    ) -> None:
        self.namespace = K.check_namespace(namespace)
        self.redis: Any = client  # redis.Redis or RedisCluster: the calls we make are common
        self.settings = settings or ClientSettings()
        self.where = safe_url
        self.keys = K.NamespaceKeys(self.namespace)
        self.cluster = isinstance(client, RedisCluster)
        self._scripts: dict[ScriptName, Script] = {
            name: client.register_script(source(name)) for name in ScriptName
        }
        self._meta: Meta | None = None
        self._checked = False  # the server's version, once per client
        self._loaded: set[ScriptName] = set()  # scripts known to the server (_load_scripts)

    @classmethod
    def from_url(
        cls,
        url: str,
        namespace: str = "default",
        *,
        result_ttl_s: float = 24 * 3600,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD,
        socket_timeout_s: float = 5.0,
        durability: str = "none",
        durability_timeout_s: float = 1.0,
    ) -> TimerClient:
        """A client for ``redis://``, ``rediss://`` (TLS) or ``unix://`` URLs, with AUTH/ACL.

        A URL naming any node of a Redis Cluster gives a cluster client (detected with
        ``INFO cluster``); the server is contacted once here for that. ``durability``
        (``none``, ``aof``, ``replicas:N``, ``aof+replicas:N``; see
        :class:`~timer.durable.models.Durability`) says when a timer write counts as done.
        """
        K.check_namespace(namespace)  # before connecting: nothing to clean up on bad input
        settings = ClientSettings.of(
            result_ttl_s=result_ttl_s, max_payload_bytes=max_payload_bytes,
            durability=durability, durability_timeout_s=durability_timeout_s,
        )  # fmt: skip
        rs = RedisSettings.from_url(url, socket_timeout_s=socket_timeout_s)
        options = rs.options()
        with map_errors(rs.safe_url):
            client: Any = redis.Redis.from_url(rs.url, health_check_interval=30, **options)
            try:
                if rs.url.startswith(("redis://", "rediss://")):
                    hello = ops.hello_fields(client.execute_command("HELLO"))
                    if hello.get("mode") == "cluster":
                        client.close()
                        client = RedisCluster.from_url(rs.url, **options)
            except BaseException:
                client.close()  # no half-open connection left behind
                raise
        return cls(client, namespace, settings=settings, safe_url=rs.safe_url)

    def __repr__(self) -> str:
        return f"TimerClient(url={self.where!r}, namespace={self.namespace!r})"

    def reserve_connections(self, n: int) -> None:
        """Let the connection pool (each node's, on a cluster) open at least ``n``
        connections: redis-py's default is 100, and a thread holds one per call, so a
        handler runner with 200 threads needs more (it calls this itself)."""
        pools = (
            [node.redis_connection.connection_pool for node in self.redis.get_nodes()
             if node.redis_connection is not None]
            if self.cluster
            else [self.redis.connection_pool]
        )  # fmt: skip
        for pool in pools:
            if getattr(pool, "max_connections", n) < n:
                pool.max_connections = n

    # -- the driver: run an operation's steps with blocking calls ----------------------

    def _run(self, op: ops.Op[T]) -> T:
        """Run an operation to its result (it emits nothing)."""
        steps = self._drive(op)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def _drive(self, op: ops.Op[T]) -> Generator[Any, None, T]:
        """Run an operation's steps; yield what it emits; return its result."""
        reply: Any = None
        lane: _Lane | None = None  # made at the first Send (most operations never send ahead)
        try:
            while True:
                try:
                    step = op.send(reply)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
                if isinstance(step, C.Emit):
                    reply = None
                    yield step.value
                elif isinstance(step, C.Sleep):
                    reply = None
                    time.sleep(step.seconds)  # an operation polling the server with backoff
                elif isinstance(step, C.Send):
                    lane = lane or _Lane(self)
                    reply = lane.send(step.pipeline)
                elif isinstance(step, C.Collect):
                    assert lane is not None, "Collect before any Send"
                    reply = lane.collect(step.ticket)
                else:
                    reply = self._execute(step)
        finally:
            if lane is not None:
                lane.close()

    def _execute(self, step: C.ScriptCall | C.Command | C.Pipeline) -> Any:
        if isinstance(step, C.ScriptCall) and (
            self.cluster or (self.settings.durability.waits and step.wait)
        ):  # the write, then WAIT; on a cluster, loaded on its own node only (see _pipeline)
            replies = self._pipeline(C.Pipeline([step]))
            return settle_replies(replies, self.where, errors_in_slots=False)[0]
        with map_errors(self.where):
            if isinstance(step, C.ScriptCall):
                return self._scripts[step.script](keys=step.keys, args=step.args)
            if isinstance(step, C.Command) and step.every_primary:
                return self._on_every_primary(step)
            if isinstance(step, C.Command):
                return getattr(self.redis, step.name)(*step.args, **step.kwargs)
        return settle_replies(
            self._pipeline(step), self.where, errors_in_slots=step.errors_in_slots
        )

    def _on_every_primary(self, step: C.Command) -> dict[str, Any]:
        if not self.cluster:
            return {self.where: getattr(self.redis, step.name)(*step.args, **step.kwargs)}
        return {
            node.name: getattr(self.redis.get_redis_connection(node), step.name)(
                *step.args, **step.kwargs
            )
            for node in self.redis.get_primaries()
        }

    def _pipeline(self, step: C.Pipeline) -> list[Any]:
        """Replies of a pipeline in order, a redis-py error in the slot of its call (the
        caller settles them: ``settle_replies``)."""
        if step.calls and isinstance(step.calls[0], C.ScriptCall):
            scripts: list[C.ScriptCall] = [c for c in step.calls if isinstance(c, C.ScriptCall)]
            replies = self._pipelined_scripts(scripts)
        else:
            with map_errors(self.where):
                pipe = self.redis.pipeline(transaction=False)
                for c in step.calls:
                    assert isinstance(c, C.Command), "a pipeline holds one kind of call"
                    getattr(pipe, c.name)(*c.args, **c.kwargs)
                replies = pipe.execute(raise_on_error=False)
        return list(replies)

    def _load_scripts(self, names: Iterable[ScriptName]) -> None:
        """Make sure the server has these scripts (a call by SHA alone needs them), once
        per client: a cache lost since (a restart) costs the NOSCRIPT replies a re-run."""
        with map_errors(self.where):
            for name in set(names) - self._loaded:
                script = self._scripts[name]
                if not self.redis.script_exists(script.sha)[0]:
                    self.redis.script_load(script.script)
                self._loaded.add(name)

    def _pipelined_scripts(self, calls: Sequence[C.ScriptCall]) -> list[Any]:
        """Script calls in pipelines, one per node; replies (or redis errors) in order.

        On a cluster, calls are grouped by the node owning their slot (a cluster pipeline
        refuses scripts); a call redirected by a resharding is retried on its own.
        """
        groups: dict[str, tuple[Any, list[int]]] = {}
        if self.cluster:
            for i, call in enumerate(calls):
                node = self.redis.get_node_from_key(call.keys[0])
                conn = self.redis.get_redis_connection(node)
                groups.setdefault(node.name, (conn, []))[1].append(i)
        else:
            groups[""] = (self.redis, list(range(len(calls))))
        replies: list[Any] = [None] * len(calls)
        with map_errors(self.where):
            for conn, idxs in groups.values():
                for i, reply in zip(idxs, self._run_scripts(conn, calls, idxs), strict=True):
                    replies[i] = reply
        return self._retry_alone(calls, replies)

    def _retry_alone(self, calls: Sequence[C.ScriptCall], replies: list[Any]) -> list[Any]:
        """Run again, each on its own, the calls whose reply the client can fix by itself
        (a redirect after resharding, a lost script cache); the replies, updated."""
        with map_errors(self.where):
            for i, reply in enumerate(replies):
                if isinstance(reply, RETRY_ALONE):
                    replies[i] = self._run_scripts(self.redis, calls, [i])[0]
        return replies

    def _run_scripts(self, conn: Any, calls: Sequence[C.ScriptCall], idxs: list[int]) -> list[Any]:
        """One pipeline on one connection: the calls, then the durability wait if asked
        (WAIT covers the writes of its own connection), whose shortfall fails them all."""
        durability = self.settings.durability
        waits = durability.waits and any(calls[i].wait for i in idxs)
        pipe = conn.pipeline(transaction=False)
        for i in idxs:
            self._scripts[calls[i].script](keys=calls[i].keys, args=calls[i].args, client=pipe)
        if waits:
            pipe.execute_command(*durability.command())
        replies = list(pipe.execute(raise_on_error=False))
        if not waits:
            return replies
        return settle_wait(durability, replies)

    # -- namespace ------------------------------------------------------------------

    def init(
        self,
        shards: int = DEFAULT_SHARDS,
        bucket_ms: int = DEFAULT_BUCKET_MS,
        *,
        allow_eviction: bool = False,
    ) -> Meta:
        """Create the namespace once; again with the same shard count is a no-op.

        Refuses (ConfigError, nothing written) a server whose ``maxmemory-policy`` may
        evict timers unless ``allow_eviction``; warns (:class:`DurabilityWarning`) when
        AOF is off.
        """
        op = ops.init(
            self.keys, shards, bucket_ms,
            where=self.where, check=not self._checked, allow_eviction=allow_eviction,
        )  # fmt: skip
        self._meta, notes = self._run(op)
        self._checked = True
        for note in notes:
            warnings.warn(note, DurabilityWarning, stacklevel=2)
        return self._meta

    def migrate(self) -> tuple[int, int]:
        """Move the namespace to the newest data format; returns (before, after).

        New timers are then created in the compact records (format 2); existing records
        keep theirs and stay readable. Run it once every client and worker of the
        namespace runs this version: older ones cannot read the new format.
        """
        op = ops.migrate(
            self.keys, where=self.where, check=not self._checked,
            result_ttl_ms=self.settings.result_ttl_ms,
        )  # fmt: skip
        before, after = self._run(op)
        self._checked = True
        self._meta = None  # read again: the format changed
        return before, after

    def server_settings(self) -> list[ServerSettings]:
        """Each server's (each cluster primary's) eviction policy, AOF and version."""
        return self._run(ops.server_settings())

    def check_durability(self, *, allow_eviction: bool = False) -> list[str]:
        """ConfigError if a server may evict timers (unless ``allow_eviction``); else the
        warnings to show (AOF off, an allowed evicting policy). ``init`` and workers call it."""
        return ops.check_durability(
            self.server_settings(), self.where, allow_eviction=allow_eviction
        )

    @property
    def meta(self) -> Meta:
        """The namespace's shards and bucket width (read once; ConfigError if not created)."""
        if self._meta is None:
            op = ops.read_meta(self.keys, where=self.where, check=not self._checked)
            self._meta = self._run(op)
            self._checked = True
        return self._meta

    def _ns(self) -> C.Namespace:
        return C.Namespace(self.keys, self.meta, self.settings)

    def shard_of(self, name: str) -> int:
        return K.shard_of(name, self.meta.shards)

    def outcome_streams(self) -> dict[str, int]:
        """Each shard's outcome stream key -> its shard number."""
        return self._ns().outcome_streams()

    # -- schedule and decide ----------------------------------------------------------

    def schedule(
        self,
        timer_id: str,
        delay_ms: int | None = None,
        *,
        deadline_ms: int | None = None,
        payload: object = None,
        watch: Iterable[str] = (),
        need: int = 1,
        rearm: bool = False,
    ) -> Timer:
        """Schedule a timer ``delay_ms`` from now (Redis time) or at ``deadline_ms``.

        Idempotent: a pending id is returned as it is (``created=False``); a decided id
        whose outcome is retained (``result_ttl``, 24 h) returns that outcome as ``state``,
        unless ``rearm=True``, which schedules it again as a new arming with its own
        outcome (a retried job re-arming its timeout); the same id pending with other
        parameters raises DuplicateTimer.
        """
        return self._run(ops.schedule(
            self._ns(), timer_id, delay_ms=delay_ms, deadline_ms=deadline_ms,
            payload=payload, watch=watch, need=need, rearm=rearm,
        ))  # fmt: skip

    def schedule_many(
        self, items: Iterable[Mapping[str, Any]], *, origin: str = ""
    ) -> list[Timer | TimerError]:
        """Schedule many timers in pipelined batches; one result per item, in order.

        Each item is a mapping with ``id`` and ``delay_ms`` or ``deadline_ms``, and optional
        ``payload``, ``watch``, ``need``. A bad item gets its error in its slot (nothing is
        written for it); the others go on. ``origin`` is stored with each timer created
        here and reported back on a retry (``Timer.origin``), so a caller that retries a
        batch (a Spark task) can tell "created by my earlier attempt" from "already there".
        """
        return self._run(ops.schedule_many(self._ns(), items, origin))

    def cancel(self, timer_id: str) -> bool:
        """Cancel a pending timer; True if this call decided it (safe to repeat)."""
        return self._run(ops.cancel(self._ns(), timer_id))

    def complete(self, timer_id: str) -> bool:
        """Decide a pending timer as completed now; True if this call decided it."""
        return self._run(ops.complete(self._ns(), timer_id))

    def reschedule(
        self, timer_id: str, delay_ms: int | None = None, *, deadline_ms: int | None = None
    ) -> Timer | None:
        """Move a pending timer's deadline; None if it was already decided."""
        return self._run(ops.reschedule(self._ns(), timer_id, delay_ms, deadline_ms))

    def notify(self, key: str) -> int:
        """Notify a watch key; the number of timers this call completed (safe to repeat)."""
        return self._run(ops.notify(self._ns(), key))

    # -- read -------------------------------------------------------------------------

    def get(self, timer_id: str) -> TimerInfo | None:
        """The timer's state: pending with its record, or its retained outcome; else None."""
        return self._run(ops.get(self._ns(), timer_id))

    def wait(self, timer_id: str, timeout: float = 30.0) -> Outcome:
        """Block until the timer is decided; its Outcome. WaitTimeout if still pending."""
        return self._run(ops.wait(self._ns(), timer_id, timeout))

    def outcomes(
        self,
        group: str = "tickwheel",
        consumer: str = "consumer-1",
        *,
        block_ms: int = 1000,
        count: int = 100,
        reclaim_idle_ms: int = 60_000,
        stop_when_idle: bool = False,
    ) -> Iterator[Outcome]:
        """Outcomes of every shard through a consumer group (at-least-once; ``ack()`` each).

        The group is created on every shard's stream here, from the start of what the
        streams hold. This consumer's own unacknowledged entries (a restart under the same
        name) come first; entries another consumer left unacknowledged longer than
        ``reclaim_idle_ms`` are taken over then and every ``reclaim_idle_ms / 2``.
        :class:`~timer.handlers.Handlers` runs handlers on top of this with retries,
        dead letters and concurrency; prefer it to a loop of your own.
        """
        reader = ops.GroupReader.of(
            self._ns(), group, consumer, count=count, reclaim_idle_ms=reclaim_idle_ms,
            block_ms=block_ms, stop_when_idle=stop_when_idle,
            per_stream=self.cluster,
        )  # fmt: skip
        self._run(reader.ensure_groups())
        deliveries = self._drive(reader.run(block_ms=block_ms, stop_when_idle=stop_when_idle))
        return (self._ackable(d) for d in deliveries)

    def _ackable(self, delivery: ops.Delivery) -> Outcome:
        ack = functools.partial(self._run_ack, delivery)
        return dataclasses.replace(delivery.outcome, _ack=ack)

    def _run_ack(self, delivery: ops.Delivery) -> None:
        self._run(ops.ack(delivery))

    def follow(
        self, *, history: bool = False, block_ms: int = 1000, stop_when_idle: bool = False
    ) -> Iterator[Outcome]:
        """Outcomes as they land, read with no consumer group: nothing is left behind in
        Redis and nothing is acknowledged (``tail`` without ``--group``). From now on, or
        with ``history`` from the oldest outcome the streams hold."""
        op = G.follow(
            self._ns(), history=history, block_ms=block_ms, per_stream=self.cluster,
            stop_when_idle=stop_when_idle,
        )  # fmt: skip
        return self._drive(op)

    def consumer(self, group: str, consumer: str) -> ConsumerGroup:
        """One consumer of a group, as a handler runner uses it (read, claim, touch, ack,
        retry, dead-letter)."""
        group, consumer = G.check_group(group, consumer)
        return ConsumerGroup(self, group, consumer)

    def groups(self) -> list[GroupInfo]:
        """Every consumer group of the namespace: consumers, pending, retrying, lag and
        the age of the oldest outcome it still owes, summed over the shards."""
        now = self.server_time_ms()
        return self._run(G.group_infos(self._ns(), now))

    def delete_group(self, group: str) -> int:
        """Destroy a consumer group on every shard (its pending entries and retry schedule
        go with it; its dead letters stay); on how many shards it existed."""
        return self._run(G.delete_group(self._ns(), group))

    def dead_letters(self, group: str | None = None, *, limit: int = 1000) -> list[DeadLetter]:
        """Dead letters (of one group, or all), oldest first, at most ``limit``."""
        return self._run(G.dead_letters(self._ns(), group, limit=limit))

    def dead_letter(self, ref: str) -> DeadLetter | None:
        """One dead letter by its ref (``<shard>/<id>``), or None."""
        return self._run(G.get_dead_letter(self._ns(), ref))

    def dead_letters_total(self) -> int:
        return self._run(G.dead_letter_count(self._ns()))

    def redeliver(self, ref: str) -> str | None:
        """Put a dead letter back in front of its group (attempts start again at 1); the
        new stream entry's id, or None if there is no such dead letter."""
        return self._run(G.redeliver(self._ns(), ref))

    def drop_dead_letter(self, ref: str) -> bool:
        """Delete a dead letter; True if it existed."""
        return self._run(G.drop_dead_letter(self._ns(), ref))

    def all_outcomes(self, shards: Iterable[int] | None = None) -> Iterator[Outcome]:
        """Every outcome the shards' streams hold, oldest first per shard, read in pages
        (no consumer group: for audits, demos and analytics; handlers use ``outcomes``)."""
        picked = range(self.meta.shards) if shards is None else shards
        return self._drive(ops.history(self._ns(), picked))

    def server_time_ms(self) -> int:
        """The Redis server's clock, epoch ms: the one clock deadlines are computed on."""
        return self._run(ops.server_time_ms())

    def namespaces(self) -> list[str]:
        """The namespaces ``init`` created on this server or cluster (this client's one
        included, even if it was created before namespaces were listed)."""
        return sorted({*self._run(ops.namespaces()), self.namespace})

    def next_due(self, shard: int, count: int = 20) -> list[tuple[int, str]]:
        """The pending timers of one shard due first: (deadline_ms, id), soonest first."""
        return self._run(ops.next_due(self._ns(), shard, count))

    def recent_outcomes(
        self, count: int = 100, shards: Iterable[int] | None = None
    ) -> list[Outcome]:
        """The newest ``count`` outcomes of each shard's stream (all, or ``shards``),
        newest first overall, in one pipelined round trip."""
        return self._run(ops.recent(self._ns(), count, shards))

    def outcomes_total(self) -> int:
        """How many outcomes the namespace's streams hold (one pipelined XLEN per shard)."""
        return self._run(ops.outcomes_total(self._ns()))

    def trim_outcomes(
        self,
        retention_ms: int | None,
        *,
        keep_unread: bool = True,
        shards: Iterable[int] | None = None,
    ) -> list[Trimmed]:
        """Drop outcomes decided more than ``retention_ms`` ago (Redis clock), per shard.

        With ``keep_unread`` (the default) an outcome stays, whatever its age, until every
        consumer group of its stream has been handed it and has acked it. ``shards``
        limits the work to some shards (a worker trims the ones it leads). Each call also
        drops retained outcomes past their ``result_ttl`` from part of the results table
        (format 3); ``retention_ms`` None does only that.
        """
        return self._run(
            ops.trim_outcomes(self._ns(), retention_ms, keep_unread=keep_unread, shards=shards)
        )

    def stats(self, *, servers: bool = True) -> dict[str, Any]:
        """Per shard: pending, leader, epoch, outcomes, lag (ms past the oldest ended
        bucket), lease time left; with ``servers``, each server's durability settings."""
        return self._run(ops.stats(self._ns(), servers=servers))

    def memory(self, sample: int = 10) -> dict[str, Any]:
        """Redis bytes held per pending and per decided timer, estimated from
        ``MEMORY USAGE`` of each shard's keys and samples of its buckets and results."""
        return self._run(ops.memory(self._ns(), sample))

    def leaders(self) -> dict[int, str | None]:
        """Each shard's leader (worker id) now, None where no worker holds its lease."""
        return self._run(ops.leaders(self._ns()))

    # -- workers: membership, events, one shard's leader ------------------------------

    def heartbeat(self, worker_id: str, *, now_ms: int, live_window_ms: int) -> int:
        """Announce a worker at ``now_ms`` (Redis time); how many workers are live."""
        return self._run(ops.heartbeat(self.keys, worker_id, now_ms, live_window_ms))

    def workers(self) -> list[tuple[str, int]]:
        """Workers heard from recently: (worker id, last heartbeat in Redis ms), oldest
        first (a worker gone for ten live windows is forgotten)."""
        return self._run(ops.workers(self.keys))

    def leave(self, worker_id: str) -> None:
        """Take a stopping worker out of the live set at once."""
        self._run(ops.leave(self.keys, worker_id))

    def events_pubsub(self) -> CountingPubSub:
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

    def shard_of_channel(self, channel: str) -> int | None:
        """The shard whose events channel is ``channel`` (None for any other)."""
        return self.keys.shard_of_channel(channel)

    def shard_store(self, shard: int) -> ShardStore:
        """The durable side of one shard, as its leader uses it."""
        C.check_int("shard", shard, 0, self.meta.shards - 1)
        return ShardStore(self, shard)

    # -- lifetime ---------------------------------------------------------------------

    def close(self) -> None:
        self.redis.close()

    def __enter__(self) -> TimerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ShardStore:
    """One shard's durable side as its leader sees it: lease, load, fire, sweep.

    Every call is one fenced script or a bounded read; ``fire`` and ``sweep`` raise
    :class:`~timer.errors.Fenced` when the caller no longer holds the lease at ``epoch``.
    """

    def __init__(self, client: TimerClient, shard: int) -> None:
        self._client = client
        self.shard = shard
        self.keys = client.keys.shard(shard)
        self.bucket_ms = client.meta.bucket_ms

    @property
    def events_channel(self) -> str:
        return self.keys.events

    def acquire(self, worker: str, ttl_ms: int) -> LeaseGrant:
        reply = self._client._run(_one(C.lease_acquire_call(self.keys, worker, ttl_ms)))
        return C.parse_lease_acquire(reply)

    def renew(self, worker: str, epoch: int, ttl_ms: int) -> LeaseRenewal:
        reply = self._client._run(_one(C.lease_renew_call(self.keys, worker, epoch, ttl_ms)))
        return C.parse_lease_renew(reply)

    def release(self, worker: str, epoch: int) -> bool:
        reply = self._client._run(_one(C.lease_release_call(self.keys, worker, epoch)))
        return C.parse_lease_release(reply)

    def backlog(self) -> tuple[int, int | None]:
        """(timers pending in the shard, start of its oldest durable bucket or None)."""
        return self._client._run(ops.backlog(self.keys))

    def read_due(self, until_ms: int, skip: set[int], *, max_ids: int) -> DueTimers:
        op = ops.read_due(self.keys, until_ms, skip, max_ids=max_ids, bucket_ms=self.bucket_ms)
        return self._client._run(op)

    def fire(
        self, worker: str, epoch: int, ids: Sequence[str], *, ttl_ms: int, ahead: int = 0
    ) -> FireResult:
        """Expire ``ids`` if due (fenced); ``ahead``: more of the shard's timers the
        caller expects to decide soon, for which the results table grows while cheap."""
        call = C.fire_call(
            self.keys, worker, epoch, ids, bucket_ms=self.bucket_ms, ttl_ms=ttl_ms, ahead=ahead
        )
        return C.parse_fire(self._client._run(_one(call)))

    def sweep(
        self, worker: str, epoch: int, *, ttl_ms: int, limit: int, ahead: int = 0
    ) -> SweepResult:
        call = C.sweep_call(
            self.keys, worker, epoch, bucket_ms=self.bucket_ms, ttl_ms=ttl_ms, limit=limit,
            ahead=ahead,
        )  # fmt: skip
        return C.parse_sweep(self._client._run(_one(call)))


class ConsumerGroup:
    """One consumer of a consumer group, as the handler runner drives it.

    Each call is a pipelined script per shard (or a plain read); see
    ``timer.durable.groups`` for what each one guarantees.
    """

    def __init__(self, client: TimerClient, group: str, consumer: str) -> None:
        self._client = client
        self.group = group
        self.consumer = consumer

    @property
    def shards(self) -> list[int]:
        """The namespace's shards: one outcome stream each."""
        return list(range(self._client.meta.shards))

    def ensure(self, *, start: str = "0") -> None:
        """Create the group on every shard's stream unless it exists (``$``: only new)."""
        self._client._run(G.ensure_groups(self._client._ns(), self.group, start=start))

    def read(self, count: int, block_ms: int | None) -> list[G.Delivery]:
        """Outcomes never delivered to the group, up to ``count`` from each shard's
        stream, waiting up to ``block_ms`` for one (None: not at all)."""
        return self._client._run(G.read_new(
            self._client._ns(), self.group, self.consumer, count=count, block_ms=block_ms,
            per_stream=self._client.cluster,
        ))  # fmt: skip

    def claim(
        self, cursors: Mapping[int, str], *, count: int, min_idle_ms: int, own: bool = False,
        retries: bool = True,
    ) -> tuple[list[G.Delivery], dict[int, str]]:  # fmt: skip
        """Entries due for a retry, then (scanning from each shard's cursor) pending
        entries idle for ``min_idle_ms`` (``own``: only this consumer's)."""
        return self._client._run(G.claim(
            self._client._ns(), self.group, self.consumer, cursors, count=count,
            min_idle_ms=min_idle_ms, owner=self.consumer if own else "", retries=retries,
        ))  # fmt: skip

    def touch(self, deliveries: Sequence[G.Delivery]) -> list[G.Delivery]:
        """Reset the idle time of entries still being handled; those another consumer
        has taken over meanwhile."""
        return self._client._run(G.touch(self.consumer, deliveries))

    def ack(self, delivery: G.Delivery) -> None:
        self._client._run(G.ack(delivery))

    def ack_many(self, deliveries: Sequence[G.Delivery]) -> None:
        """Acknowledge many at once: one XACK per shard's stream, pipelined."""
        self._client._run(G.ack_many(deliveries))

    def retry(self, delivery: G.Delivery, delay_ms: int) -> int | None:
        """Retry the delivery in ``delay_ms``; its retry time, or None if no longer pending."""
        return self._client._run(G.retry(delivery, delay_ms))

    def dead_letter(self, delivery: G.Delivery, error: str) -> str | None:
        """Move the delivery to the dead letters; the dead letter's ref, or None."""
        dead_id = self._client._run(G.dead_letter(delivery, self.consumer, error))
        return None if dead_id is None else f"{delivery.outcome.shard}/{dead_id}"

    def retrying(self) -> int:
        """How many of the group's outcomes wait for a retry time, over every shard."""
        return self._client._run(G.retrying(self._client._ns(), self.group))

    def leave(self) -> int:
        """Remove this consumer where it owes nothing; on how many shards it stays."""
        return self._client._run(G.leave(self._client._ns(), self.group, self.consumer))


def _one(call: C.ScriptCall | C.Command) -> ops.Op[Any]:
    """An operation of one step: its raw reply."""
    return (yield call)


class DurabilityWarning(UserWarning):
    """The server keeps timers less safely than it could (AOF off, an evicting policy)."""
