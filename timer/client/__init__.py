"""TimerClient: durable timers in Redis, with blocking redis-py calls (https://tickwheel.readthedocs.io/data-model/
says what is stored where; https://tickwheel.readthedocs.io/design-notes/ why).

Every call is an operation of ``timer.durable.timers.ops`` (validation, script calls, parsing)
run by the blocking driver (``timer.client.driver``), the only code of this client that talks
to Redis. The asyncio client runs the same operations with awaited calls. The worker's
view of one shard is ``ShardStore`` (``client.shard_store(n)``), a handler runner's of
one consumer ``ConsumerGroup`` (``client.consumer(group, name)``); both run on this
client's driver.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import Any, TypeVar, Unpack

import redis
import redis.client
from redis.cluster import RedisCluster

from ..clock import SYSTEM_TIME, Time
from ..durable.admin import history, setup
from ..durable.groups import streams as group_ops
from ..durable.groups.follow import follow as follow_op
from ..durable.groups.reader import GroupReader, Held, check_options
from ..durable.model import keys as keyspace
from ..durable.model import steps
from ..durable.model.checks import check_seconds
from ..durable.model.codec import DEFAULT_MAX_PAYLOAD
from ..durable.model.fields import TimerOptions, TimerSpec
from ..durable.model.models import (
    ClientSettings,
    DurabilityWarning,
    Meta,
    Outcome,
    Timer,
    TimerInfo,
)
from ..durable.model.namespace import Namespace
from ..durable.shards import ops as shard_ops
from ..durable.timers import ops
from ..durable.timers.items import timer_spec
from ..errors import TimerError
from ..redis.local_server import default_url
from ..redis.store import RedisSettings, node_url
from ..schedules import Schedules
from ..timers import Timers
from . import transport
from .consumer import ConsumerGroup
from .driver import SyncDriver
from .operator import OperatorCalls
from .shard_store import Membership, Shards, ShardStore

T = TypeVar("T")

DEFAULT_SHARDS = 16
DEFAULT_BUCKET_MS = 1000


class TimerClient(OperatorCalls):
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
        node_url: Callable[[str, int], str] | None = None,
        node_options: Mapping[str, Any] | None = None,
        time: Time = SYSTEM_TIME,
    ) -> None:
        """``time``: where its operations read the clock and sleep, and what a worker or
        a handler runner on this client is given (:mod:`timer.clock`; the system's unless
        a test or a simulation gives another)."""
        self.namespace = keyspace.check_namespace(namespace)
        self.time = time
        self.redis: Any = client  # redis.Redis or RedisCluster: the calls we make are common
        self.settings = settings or ClientSettings()
        self.where = safe_url
        self.keys = keyspace.NamespaceKeys(self.namespace)
        self.cluster = isinstance(client, RedisCluster)
        # node_url (host, port -> a URL with the same auth): on a cluster, script
        # pipelines go to each master on a client of the driver's own
        self._driver = SyncDriver(
            client,
            where=safe_url,
            durability=self.settings.durability,
            node_url=node_url,
            node_options=node_options,
            time=time,
        )
        self._meta: Meta | None = None
        self._checked = False  # the server's version, once per client

    @classmethod
    def from_url(
        cls,
        url: str | None = None,
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
        :class:`~timer.durable.model.models.Durability`) says when a timer write counts as done.
        No URL: ``$TICKWHEEL_REDIS_URL``, else your running embedded server (``tickwheel
        server start``), said in the log; neither is a ConfigError saying what to do.
        """
        keyspace.check_namespace(namespace)  # before connecting: nothing to clean up on bad input
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
        return cls(
            transport.connect(rs),
            namespace,
            settings=settings,
            safe_url=rs.safe_url,
            node_url=functools.partial(node_url, rs.url),
            node_options=rs.options(),
        )

    def __repr__(self) -> str:
        return f"TimerClient(url={self.where!r}, namespace={self.namespace!r})"

    @property
    def cluster_retry_s(self) -> float:
        """On a Redis Cluster, how long a script call goes on being retried after a
        backoff (a slot being migrated, a failover) before its error is answered;
        redirects and a new owner are followed at once whatever this is."""
        return self._driver.retry_budget_s

    @cluster_retry_s.setter
    def cluster_retry_s(self, seconds: float) -> None:
        self._driver.retry_budget_s = check_seconds("cluster_retry_s", seconds, maximum=60)

    def reserve_connections(self, n: int) -> None:
        """Let the connection pool (each node's, on a cluster) open at least ``n``
        connections: redis-py's default is 100, and a thread holds one per call, so a
        handler runner with 200 threads needs more (it calls this itself)."""
        transport.reserve_connections(self._driver, n)

    # -- the driver: run an operation's steps with blocking calls ----------------------

    def _run(self, op: steps.Op[T]) -> T:
        """Run an operation to its result (it emits nothing)."""
        return self._driver.run(op)

    def _drive(self, op: steps.Op[T]) -> Generator[Any, None, T]:
        """Run an operation's steps; yield what it emits; return its result."""
        result: list[T] = []
        yield from self._driver.drive(op, result)
        return result[0]

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
        op = setup.init(
            self.keys,
            shards,
            bucket_ms,
            where=self.where,
            check=not self._checked,
            allow_eviction=allow_eviction,
            durability=self.settings.durability,
        )
        self._meta, notes = self._run(op)
        self._checked = True
        for note in notes:
            warnings.warn(note, DurabilityWarning, stacklevel=2)
        return self._meta

    @property
    def meta(self) -> Meta:
        """The namespace's shards and bucket width (read once; ConfigError if not created)."""
        if self._meta is None:
            op = setup.read_meta(self.keys, where=self.where, check=not self._checked)
            self._meta = self._run(op)
            self._checked = True
        return self._meta

    def _ns(self) -> Namespace:
        return Namespace(self.keys, self.meta, self.settings)

    def shard_of(self, name: str) -> int:
        return keyspace.shard_of(name, self.meta.shards)

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
        **options: Unpack[TimerOptions],
    ) -> Timer:
        """Schedule a timer ``delay_ms`` from now (Redis time) or at ``deadline_ms``.

        Idempotent: a pending id is returned as it is (``created=False``); a decided id
        whose outcome is retained (``result_ttl``, 24 h) returns that outcome as ``state``,
        unless ``rearm=True``, which schedules it again as a new arming with its own
        outcome (a retried job re-arming its timeout); the same id pending with other
        parameters raises DuplicateTimer, which names the fields that differ (``differ``)
        and what to do instead (``reschedule`` a deadline, ``cancel`` and schedule again
        for the rest, or ``debounce=True`` to push it back with each call).

        ``options`` are the timer's optional fields, each declared once with its type,
        default and help in :class:`timer.durable.model.fields.TimerOptions` (``payload``,
        ``watch`` and ``need``, ``rearm``, a W3C ``traceparent`` its fire and handler run
        continue — ``timer.tracing.current()`` gives the active span's —, ...).
        """
        spec = timer_spec(timer_id, delay_ms, deadline_ms, options)
        return self._run(ops.schedule(self._ns(), spec))

    def schedule_many(
        self, items: Iterable[TimerSpec | Mapping[str, Any]], *, origin: str = ""
    ) -> list[Timer | TimerError]:
        """Schedule many timers in pipelined batches; one result per item, in order.

        Each item is a :class:`~timer.durable.model.fields.TimerSpec`: a mapping with ``id``,
        ``delay_ms`` or ``deadline_ms``, and any of ``schedule``'s options. A bad
        item gets its error in its slot (nothing is written for it); the others go on.
        ``origin`` is stored with each timer created here and reported back on a retry
        (``Timer.origin``), so a caller that retries a batch (a Spark task) can tell
        "created by my earlier attempt" from "already there".
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
        """Move a pending timer's deadline; None if it was already decided. A move past
        the timer's cap (created + ``max_total_ms``) raises :class:`Capped` and moves
        nothing."""
        return self._run(ops.reschedule(self._ns(), timer_id, delay_ms, deadline_ms))

    def heartbeat(self, timer_id: str, extend_ms: int, *, earlier: bool = False) -> Timer:
        """A heartbeat: push a pending timer's deadline to ``extend_ms`` from now (Redis
        time), never earlier than it is. One round trip. A timer scheduled with
        ``max_total_ms`` never falls due after created + max_total_ms: a heartbeat past
        that raises HeartbeatCapped (the timer now falls due at its cap). With
        ``earlier=True`` the deadline becomes now + extend_ms even if that is earlier: a
        job that started trades its queue-wait deadline for its run deadline (the
        Temporal mapping in the job-timeouts guide). A decided timer is returned as it
        ended (``state``); an unknown id raises TimerNotFound."""
        return self._run(ops.heartbeat(self._ns(), timer_id, extend_ms, earlier))

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
        check_options(count=count, block_ms=block_ms, stop_when_idle=stop_when_idle)
        reader = GroupReader.of(
            self._ns(), group, consumer, reclaim_idle_ms=reclaim_idle_ms, per_stream=self.cluster
        )
        self._run(reader.ensure())
        deliveries = self._drive(
            reader.run(count=count, block_ms=block_ms, stop_when_idle=stop_when_idle)
        )
        return (self._ackable(d) for d in deliveries)

    def _ackable(self, delivery: group_ops.Delivery) -> Outcome:
        ack = functools.partial(self._run_ack, delivery)
        return dataclasses.replace(delivery.outcome, _ack=ack)

    def _run_ack(self, delivery: group_ops.Delivery) -> None:
        self._run(group_ops.ack(delivery))

    def follow(
        self, *, history: bool = False, block_ms: int = 1000, stop_when_idle: bool = False
    ) -> Iterator[Outcome]:
        """Outcomes as they land, read with no consumer group: nothing is left behind in
        Redis and nothing is acknowledged (``tail`` without ``--group``). From now on, or
        with ``history`` from the oldest outcome the streams hold."""
        op = follow_op(
            self._ns(),
            history=history,
            block_ms=block_ms,
            per_stream=self.cluster,
            stop_when_idle=stop_when_idle,
        )
        return self._drive(op)

    @property
    def schedules(self) -> Schedules:
        """The namespace's recurring schedules: create, update, list, pause, resume,
        delete (see :class:`~timer.schedules.Schedules`)."""
        return Schedules(self._run, self._ns)

    @property
    def timers(self) -> Timers:
        """Timers in bulk: find by id pattern, state and deadline; cancel, complete,
        notify or reschedule a selection (see :class:`~timer.timers.Timers`)."""
        return Timers(self._run, self._ns)

    def consumer(
        self, group: str, consumer: str, *, reclaim_idle_ms: int = 60_000, held: Held | None = None
    ) -> ConsumerGroup:
        """One consumer of a group, as a handler runner uses it (the reading policy of
        ``outcomes()``; ack, retry, dead-letter)."""
        group, consumer = group_ops.check_group(group, consumer)
        return ConsumerGroup(
            self._run,
            self._ns,
            group,
            consumer,
            per_stream=self.cluster,
            reclaim_idle_ms=reclaim_idle_ms,
            held=held,
            time=self.time,
        )

    def add_history(
        self, counts: Mapping[str, int], gauges: Mapping[str, int] | None = None
    ) -> None:
        """Add ``counts`` to this minute's history and set ``gauges`` (what workers and
        handler runners write every few seconds; ``history()`` reads it back)."""
        self._run(history.add(self.keys, counts, gauges))

    def server_time_ms(self) -> int:
        """The Redis server's clock, epoch ms: the one clock deadlines are computed on."""
        return self._run(steps.server_time_ms())

    def server_time_us(self) -> int:
        """The Redis server's clock, epoch microseconds (what a worker aligns its wheel's
        milliseconds with)."""
        return self._run(steps.server_time_us())

    # -- workers: membership, events, one shard's leader ------------------------------

    def workers(self) -> list[tuple[str, int]]:
        """Workers heard from recently: (worker id, last heartbeat in Redis ms), oldest
        first (a worker gone for ten live windows is forgotten)."""
        return self._run(shard_ops.workers(self.keys))

    @property
    def membership(self) -> Membership:
        """A worker's side of the namespace: heartbeat, leave, the shards' events."""
        return Membership(self._run, self.keys, functools.partial(transport.pubsub, self.redis))

    @property
    def shards(self) -> Shards:
        """Every shard as its leaders see them: one's store, several fired together."""
        return Shards(self._run, self.keys, self.meta.shards, self.meta.bucket_ms)

    def shard_store(self, shard: int) -> ShardStore:
        """The durable side of one shard, as its leader uses it."""
        return self.shards.store(shard)

    # -- lifetime ---------------------------------------------------------------------

    def close(self) -> None:
        self._driver.close()
        self.redis.close()

    def __enter__(self) -> TimerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
