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
``client.init()`` warns :class:`~timer.durable.model.models.DurabilityWarning` as on any such
server. Not a Redis Cluster, no Sentinel.

Faults, for a simulation or a test of what a client does when the store fails:
:meth:`FakeStore.fsync` keeps a copy of the data (what the last fsync of an append-only
file would hold) and :meth:`FakeStore.restart` brings the store back from it, every
connection cut, every script and subscription forgotten (a power cut loses what came
after the last fsync; call ``fsync()`` first for a restart that loses nothing).
:attr:`FakeStore.cut` decides, command by command, whether the connection fails before
the command runs (nothing done) or after it ran (its reply lost); :attr:`FakeStore.sent`
is told of each round trip as it arrives (a simulation stalls a process between two of
its round trips there). The clients' retries
are redis-py's own (as many as a client from a URL makes), their backoff waited on the
store's clock and without jitter, so a run on virtual time replays exactly.

Needs the ``testing`` extra (``pip install '.[testing]'`` from the checkout: fakeredis, lupa). The
fakeredis fixes it carries are in :mod:`timer.testing.store.fixes` (the scripts' cmsgpack in
:mod:`timer.testing.store.cmsgpack`), the clock's patch in :mod:`timer.testing.store.clock`
(the design notes: "fakeredis, and what we patch").
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any, Literal

import redis
import redis.asyncio as aioredis
from fakeredis import FakeAsyncRedis, FakeAsyncRedisConnection, FakeRedis, FakeRedisConnection
from fakeredis import _msgs as msgs
from fakeredis._clients._async import FakeReader, FakeWriter
from fakeredis._core import FakeServer
from redis.backoff import AbstractBackoff
from redis.retry import Retry

from ...aio import AsyncTimerClient
from ...client import TimerClient
from ...clock import Time
from ...durable.admin import server as server_checks
from ...durable.model import keys as keyspace
from ...durable.model.codec import DEFAULT_MAX_PAYLOAD
from ...durable.model.models import ClientSettings
from ...durable.model.namespace import meta_from
from ...errors import ConfigError
from . import clock
from .fixes import REDIS_VERSION, VERSION, AsyncStoreSocket, StoreSocket

__all__ = ["REDIS_VERSION", "Cut", "FakeStore"]

WHERE = "FakeStore"  # how errors name the server (a URL elsewhere)

Cut = Literal["before", "after"]
"""Where a connection fails around a command: ``before`` it ran (nothing done), or
``after`` it ran (its effect done, its reply lost)."""


def _default_retries() -> int:
    """How many times redis-py's client from a URL sends a command again after a lost
    connection (10 in redis-py 6+, none before): the store's clients do the same."""
    default = inspect.signature(redis.Redis.__init__).parameters["retry"].default
    return int(getattr(default, "_retries", 0) or 0)


class _ClockBackoff(AbstractBackoff):
    """redis-py's exponential backoff between its retries (10 ms doubling to 1 s), waited
    on the store's clock and without jitter: on virtual time the wait moves the clock
    and a run replays exactly."""

    def __init__(self, time: Time, base_s: float = 0.01, cap_s: float = 1.0) -> None:
        self.time = time
        self.base_s = base_s
        self.cap_s = cap_s

    def __deepcopy__(self, memo: dict[int, Any]) -> _ClockBackoff:
        return self  # redis-py copies its Retry a connection: the clock stays the store's

    def compute(self, failures: int) -> float:
        self.time.sleep(min(self.cap_s, self.base_s * 2**failures))
        return 0.0  # waited already


class _StoreServer(FakeServer):
    """fakeredis's server, with the clock its store's sockets read."""

    def __init__(self, time: Time) -> None:
        super().__init__(version=VERSION, server_type="redis")
        self.store_time = time
        self.lastsave = int(time.wall())
        self.store_cut: Callable[[list[bytes]], Cut | None] | None = None
        self.store_sent: Callable[[], None] | None = None


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

    def _store_dead(self) -> bool:
        return bool(self._sock is not None and getattr(self._sock, "_store_dead", False))

    def can_read(self, timeout: float | None = 0) -> bool:
        if self._store_dead():  # a read finds the connection closed (the store restarted)
            return True
        return super().can_read(timeout)

    def read_response(self, **kwargs: Any) -> Any:  # type: ignore[override]
        if self._store_dead():
            self.disconnect()  # type: ignore[no-untyped-call]
            raise self._connection_error_class(msgs.CONNECTION_ERROR_MSG)
        return super().read_response(**kwargs)


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
        self._synced: dict[int, tuple[dict[bytes, Any], list[Any]]] = {}
        self._retries = _default_retries()

    def __repr__(self) -> str:
        return f"FakeStore(time={self.time!r})"

    # -- redis-py clients --------------------------------------------------------------

    def redis(self, *, protocol: int = 2) -> redis.Redis:
        """A blocking redis-py client of the store: bytes in replies (no decoding), RESP2
        as tickwheel's clients speak it unless ``protocol=3``."""
        client = FakeRedis(
            server=self.server,
            connection_class=StoreConnection,
            decode_responses=False,
            protocol=protocol,
        )
        # fakeredis passes no retry to its connections (they send a command once);
        # a client from a URL sends it again after a lost connection, so these do
        client.connection_pool.connection_kwargs["retry"] = Retry(
            _ClockBackoff(self.time), self._retries
        )
        return client

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

    # -- faults -------------------------------------------------------------------------

    @property
    def cut(self) -> Callable[[list[bytes]], Cut | None] | None:
        """Asked before each command any connection sends (its fields, the command's name
        first, as sent): ``"before"`` fails the connection before the command runs,
        ``"after"`` after it ran (the reply lost), None lets it be. None (the default):
        nothing is cut. Steps run one at a time, so a simulation arms it for one step."""
        return self.server.store_cut

    @cut.setter
    def cut(self, decide: Callable[[list[bytes]], Cut | None] | None) -> None:
        self.server.store_cut = decide

    @property
    def sent(self) -> Callable[[], None] | None:
        """Called as each write of a connection reaches the store, before its commands
        run: a round trip's (a pipeline's, all its commands at once), or a part of a
        large one's. A simulation stalls the sending process there (it moves the clock):
        what it does next, the store sees that much later. None (the default): nothing."""
        return self.server.store_sent

    @sent.setter
    def sent(self, hook: Callable[[], None] | None) -> None:
        self.server.store_sent = hook

    def fsync(self) -> None:
        """Keep a copy of the data as it is now: what :meth:`restart` comes back to (the
        append-only file as its last fsync left it)."""
        with self.server.lock:
            self._synced = {
                n: (copy.deepcopy(db._dict), list(db._expiry_heap))
                for n, db in self.server.dbs.items()
            }

    def restart(self) -> None:
        """The server restarts from its last :meth:`fsync` (the store's start if none):
        what was written after it is lost; every connection is cut (its next command or
        read fails, and redis-py connects again), every subscription and every script
        forgotten (a script is loaded again on NOSCRIPT)."""
        server = self.server
        with server.lock:
            for sock in list(server.sockets):
                sock._store_dead = True
                sock.kill()  # off the server: no more published messages
            server.script_cache.clear()
            getattr(server, "_store_scripts", {}).clear()
            for n, db in server.dbs.items():
                data, heap = self._synced.get(n, ({}, []))
                db._dict = copy.deepcopy(data)
                db._expiry_heap = list(heap)
                db._watches.clear()

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
