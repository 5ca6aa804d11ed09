"""A Redis in the test's own process whose clock is a :class:`~timer.clock.Time`.

:class:`FakeStore` is a fakeredis server (no server process, no port) on which
tickwheel's clients, scripts and workers run as on Redis, and whose every reading of the
time (each command's time, so expiry; ``TIME``; the ids of ``XADD *``; the idle times of
pending entries) is the given clock's ``wall()``. On a :class:`~timer.clock.VirtualTime`
an hour passes in ``time.advance(3600)``, and a run replays exactly from the same start::

    from timer.clock import VirtualTime
    from timer.testing.store import FakeStore

    time = VirtualTime()
    store = FakeStore(time)
    client = store.timer_client("test")
    client.init(shards=4)
    client.schedule("job:{1}", delay_ms=3_600_000)
    time.advance(3600)

A blocking read (``XREADGROUP BLOCK``, ``BLPOP``) that finds nothing returns at once on
virtual time and its timeout passes on the clock, as ``VirtualTime.wait`` does (nothing
else can write while a stepped process waits); with no timeout it is an error.

What it cannot do faithfully it refuses: durability ``aof`` and ``replicas:N`` (a
:class:`~timer.errors.ConfigError` from :meth:`FakeStore.timer_client`, and ``WAIT`` and
``WAITAOF`` answer an error naming the limitation). INFO says AOF is off, so
``client.init()`` warns :class:`~timer.durable.models.DurabilityWarning` as on any such
server. Not a Redis Cluster, no Sentinel, no restart.

Needs the ``testing`` extra (``pip install '.[testing]'`` from the checkout: fakeredis, lupa). The
fakeredis fixes it carries are in :mod:`timer.testing.store.fixes`, the clock's patch in
:mod:`timer.testing.store.clock` (the design notes: "fakeredis, and what we patch").
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio as aioredis
from fakeredis import FakeAsyncRedis, FakeAsyncRedisConnection, FakeRedis, FakeRedisConnection
from fakeredis import _msgs as msgs
from fakeredis._clients._async import FakeReader, FakeWriter
from fakeredis._core import FakeServer

from ...aio import AsyncTimerClient
from ...client import TimerClient
from ...clock import Time
from ...durable import keys as keyspace
from ...durable import server_checks
from ...durable.codec import DEFAULT_MAX_PAYLOAD
from ...durable.models import ClientSettings
from ...durable.namespace import meta_from
from ...errors import ConfigError
from . import clock
from .fixes import REDIS_VERSION, VERSION, AsyncStoreSocket, StoreSocket

__all__ = ["REDIS_VERSION", "FakeStore"]

WHERE = "FakeStore"  # how errors name the server (a URL elsewhere)


class _StoreServer(FakeServer):
    """fakeredis's server, with the clock its store's sockets read."""

    def __init__(self, time: Time) -> None:
        super().__init__(version=VERSION, server_type="redis")
        self.store_time = time
        self.lastsave = int(time.wall())


class StoreConnection(FakeRedisConnection):
    """A blocking connection to a store: its socket is :class:`~.fixes.StoreSocket`."""

    _server: FakeServer

    def _connect(self) -> StoreSocket:
        if not self._server.connected:
            raise self._connection_error_class(msgs.CONNECTION_ERROR_MSG)
        return StoreSocket(
            self._server,
            client_class=self._client_class,
            db=self.db,
            lua_modules=self._lua_modules,
            client_info=self._client_info,
        )


class AsyncStoreConnection(FakeAsyncRedisConnection):
    """An asyncio connection to a store: its socket is :class:`~.fixes.AsyncStoreSocket`."""

    _server: FakeServer

    async def _connect(self) -> None:
        if not self._server.connected:
            raise self._connection_error_class(msgs.CONNECTION_ERROR_MSG)
        self._sock = AsyncStoreSocket(
            self._server,
            self.db,
            client_class=self._client_class,
            lua_modules=self._lua_modules,
            client_info=self._client_info,
        )
        self._reader = FakeReader(self._sock)
        self._writer = FakeWriter(self._sock)


class FakeStore:
    """One in-process Redis whose clock is ``time`` (see the module's docstring).

    Every client made here shares its data, as clients of one server do. Thread-safe as
    fakeredis is (one lock a server); on virtual time, step one thing at a time.
    """

    def __init__(self, time: Time) -> None:
        clock.install()
        self.time = time
        self.server = _StoreServer(time)

    def __repr__(self) -> str:
        return f"FakeStore(time={self.time!r})"

    # -- redis-py clients --------------------------------------------------------------

    def redis(self, *, protocol: int = 2) -> redis.Redis:
        """A blocking redis-py client of the store: bytes in replies (no decoding), RESP2
        as tickwheel's clients speak it unless ``protocol=3``."""
        return FakeRedis(
            server=self.server,
            connection_class=StoreConnection,
            decode_responses=False,
            protocol=protocol,
        )

    def async_redis(self, *, protocol: int = 2) -> aioredis.Redis:
        """An asyncio redis-py client of the store (as :meth:`redis`)."""
        return FakeAsyncRedis(
            server=self.server,
            connection_class=AsyncStoreConnection,
            decode_responses=False,
            protocol=protocol,
        )

    # -- tickwheel clients -------------------------------------------------------------

    def timer_client(
        self,
        namespace: str = "default",
        *,
        result_ttl_s: float = 24 * 3600,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD,
        durability: str = "none",
        time: Time | None = None,
    ) -> TimerClient:
        """A :class:`~timer.client.TimerClient` of ``namespace`` on the store, with
        ``TimerClient.from_url``'s settings; a ``durability`` that waits for the AOF or
        for replicas is a ConfigError (the store has neither). ``time``: the client's
        (and so its worker's and handler runner's) clock, by default the store's; a
        :class:`~timer.clock.SkewedTime` over it gives a process a clock of its own."""
        settings = self._settings(result_ttl_s, max_payload_bytes, durability)
        return TimerClient(
            self.redis(),
            namespace,
            settings=settings,
            safe_url=WHERE,
            time=self.time if time is None else time,
        )

    async def async_timer_client(
        self,
        namespace: str = "default",
        *,
        result_ttl_s: float = 24 * 3600,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD,
        durability: str = "none",
        time: Time | None = None,
    ) -> AsyncTimerClient:
        """An :class:`~timer.aio.AsyncTimerClient` of ``namespace`` (created already, as
        ``AsyncTimerClient.connect`` needs), checked and read as ``connect`` does."""
        keys = keyspace.NamespaceKeys(keyspace.check_namespace(namespace))
        chosen = self._settings(result_ttl_s, max_payload_bytes, durability)
        client: Any = self.async_redis()
        try:
            hello = server_checks.hello_fields(await client.execute_command("HELLO"))
            server_checks.check_server_version(server_checks.version_of_hello(hello), WHERE)
            meta = meta_from(await client.hgetall(keys.meta), keys.namespace, WHERE)
        except BaseException:
            await client.aclose()
            raise
        return AsyncTimerClient(
            client,
            namespace,
            meta,
            settings=chosen,
            safe_url=WHERE,
            time=self.time if time is None else time,
        )

    @staticmethod
    def _settings(result_ttl_s: float, max_payload_bytes: int, durability: str) -> ClientSettings:
        settings = ClientSettings.of(
            result_ttl_s=result_ttl_s, max_payload_bytes=max_payload_bytes, durability=durability
        )
        if settings.durability.waits:
            raise ConfigError(
                f"durability {settings.durability} cannot be had from a FakeStore: it keeps "
                "its data in memory and has no replicas. Test durability on a real server "
                "(timer.testing.RedisServer, with replicas for 'replicas:N')."
            )
        return settings

    # -- what it holds ------------------------------------------------------------------

    def snapshot(self) -> list[tuple[bytes, str, Any, int]]:
        """Every key as (key, type, value, PTTL), sorted: two runs from the same start
        compare equal when they wrote the same (a stream's groups and their pending
        entries included). Reads only; the clock does not move."""
        r: Any = self.redis()
        try:
            out = []
            for key in sorted(r.scan_iter(count=1000)):
                kind = r.type(key).decode()
                out.append((key, kind, _value(r, key, kind), r.pttl(key)))
            return out
        finally:
            r.close()


def _value(r: Any, key: bytes, kind: str) -> Any:
    if kind == "string":
        return r.get(key)
    if kind == "hash":
        return sorted(r.hgetall(key).items())
    if kind == "set":
        return sorted(r.smembers(key))
    if kind == "zset":
        return r.zrange(key, 0, -1, withscores=True)
    if kind == "list":
        return r.lrange(key, 0, -1)
    if kind == "stream":
        groups = []
        for g in r.xinfo_groups(key):
            name = g["name"]
            pending = r.xpending_range(key, name, "-", "+", 10_000)
            groups.append((name, g["last-delivered-id"], sorted(map(str, pending))))
        return (r.xrange(key), r.xinfo_stream(key)["last-generated-id"], groups)
    raise ValueError(f"a FakeStore snapshot does not read {kind} keys ({key!r})")
