"""A Redis URL made into a redis-py client: one server, a Redis Cluster, or a master
found through Sentinels; blocking or asyncio. The one place the library opens a client
from a URL (the drivers, the HTTP API's readiness, the CLI's hints), so every door takes
the same URLs.

- ``redis://``, ``rediss://`` (TLS), ``unix://``: one server, or a Redis Cluster when
  the node named says it is one (``HELLO``'s ``mode``; the callers ask).
- ``redis+sentinel://[user:pass@]host:port[,host:port…]/<service>[/db]`` (and
  ``rediss+sentinel://`` for TLS to the data nodes): the master the Sentinels name for
  ``<service>``, asked again after every lost connection and every ``READONLY`` reply,
  so a failover is followed without a restart (redis-py's ``SentinelConnectionPool``),
  never back to a master being replaced (``FollowingSentinel``).
  The URL's credentials are the data nodes'; ``?sentinel_username=&sentinel_password=``
  are the Sentinels' own, if they have any.

Health checks: a connection idle for 30 s sends ``PING`` before its next command (a
connection a firewall or a failover dropped is found before it is used). A server that
cannot write its AOF (a full disk) refuses ``PING`` with ``MISCONF``, as it refuses
writes; redis-py would then fail every read on an idle connection too. Here a refused
``PING`` is an answer: the link is alive, and reads go on while writes are refused.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, cast

import redis
import redis.asyncio as aioredis
import redis.asyncio.connection as aconn
import redis.asyncio.sentinel as asentinel
import redis.connection as conn
from redis import sentinel
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

from .store import RedisSettings

HEALTH_CHECK_S = 30
# A Sentinel master's client retries a command whose connection failed (the master died,
# or was demoted: READONLY) after 50 ms doubling to 500 ms, six times (~1.8 s): what the
# Sentinels take to agree on a master they have just promoted (seen: ~1 s after the
# first names it). A longer failover is the caller's to retry; the calls are idempotent.
SENTINEL_BACKOFF = ExponentialBackoff(cap=0.5, base=0.05)
SENTINEL_RETRIES = 6


# -- health checks that count a refusal as an answer ----------------------------------------


class _AnsweredHealth:
    def check_health(self) -> None:
        # MISCONF & co: the server answered, so the link is up
        with contextlib.suppress(redis.ResponseError):
            super().check_health()  # type: ignore[misc]


class _AsyncAnsweredHealth:
    async def check_health(self) -> None:
        with contextlib.suppress(redis.ResponseError):
            await super().check_health()  # type: ignore[misc]


class Connection(_AnsweredHealth, conn.Connection):
    pass


class SSLConnection(_AnsweredHealth, conn.SSLConnection):
    pass


class UnixConnection(_AnsweredHealth, conn.UnixDomainSocketConnection):
    pass


class SentinelConnection(_AnsweredHealth, sentinel.SentinelManagedConnection):
    pass


class SentinelSSLConnection(_AnsweredHealth, sentinel.SentinelManagedSSLConnection):
    pass


class AsyncConnection(_AsyncAnsweredHealth, aconn.Connection):
    pass


class AsyncSSLConnection(_AsyncAnsweredHealth, aconn.SSLConnection):
    pass


class AsyncUnixConnection(_AsyncAnsweredHealth, aconn.UnixDomainSocketConnection):
    pass


class AsyncSentinelConnection(_AsyncAnsweredHealth, asentinel.SentinelManagedConnection):
    pass


class AsyncSentinelSSLConnection(_AsyncAnsweredHealth, asentinel.SentinelManagedSSLConnection):
    pass


# -- Sentinel: follow the master the Sentinels name -------------------------------------------

# How often a Sentinel master's pool asks the Sentinels which master is current (when a
# connection is taken): a SENTINEL FAILOVER leaves the old master writable for several
# seconds before the Sentinels demote it, and redis-py's pool asks again only after an
# error, so idle connections would go on writing to the old master meanwhile (seen: the
# writes of 8 s after a failover, lost when it was demoted).
MASTER_CHECK_S = 0.5


class SentinelPool(sentinel.SentinelConnectionPool):
    """redis-py's Sentinel pool that also asks the Sentinels, at most every
    ``MASTER_CHECK_S`` as connections are taken, whether the master moved; redis-py then
    closes the idle connections to the old one, and they reconnect to the new."""

    _asked = 0.0

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        now = time.monotonic()
        if now - self._asked > MASTER_CHECK_S:
            self._asked = now
            with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                self.get_master_address()  # type: ignore[no-untyped-call]
        return super().get_connection(*args, **kwargs)


class AsyncSentinelPool(asentinel.SentinelConnectionPool):
    """The asyncio form of :class:`SentinelPool`."""

    _asked = 0.0

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        now = time.monotonic()
        if now - self._asked > MASTER_CHECK_S:
            self._asked = now
            with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                await self.get_master_address()  # type: ignore[no-untyped-call]
        return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]


# -- Sentinel: which Sentinel's answer to follow ---------------------------------------------

# redis-py follows the first Sentinel whose answer names a master it does not flag down.
# Two answers pass that check and name a master that is being replaced:
# - the Sentinel leading a failover names the old master until the failover ends, flagged
#   ``failover_in_progress``; once the old master answers it again (a partition healed, or
#   a SENTINEL FAILOVER, where it never stopped), no down flag either. Seen: for ~1 s after
#   a split healed, a client asking that Sentinel first went back to the old master; the
#   acknowledgements it sent there were lost and the outcomes they acknowledged were
#   handled again.
# - a Sentinel that missed the failover (partitioned, restarted from an old config) names
#   the old master at the old ``config-epoch``.
# So an answer flagged ``failover_in_progress`` is not followed, nor one at an epoch older
# than the newest this client has seen, unless a majority of the Sentinels answer and all
# name the same master (they were redeployed and their epochs began again).


@dataclass
class _Answers:
    """The answers of one discovery, in the order the Sentinels were asked."""

    newest: int  # the newest config-epoch the client had seen
    older: list[tuple[int, tuple[Any, Any]]]  # (epoch, address) of good answers set aside
    others: int = 0  # answers with nothing to follow (a flag, another epoch's failover)

    def offer(self, state: dict[str, Any], good: bool) -> tuple[Any, Any] | None:
        """The address to follow now, or None to ask the next Sentinel."""
        epoch = int(state.get("config-epoch") or 0)
        if "failover_in_progress" in str(state.get("flags", "")).split(","):
            good = False
        if epoch < self.newest:
            if good:
                self.older.append((epoch, (state["ip"], state["port"])))
            else:
                self.others += 1
            return None
        self.newest = epoch
        if not good:
            self.others += 1
            return None
        return state["ip"], state["port"]

    def agreed(self, sentinels: int) -> tuple[tuple[Any, Any], int] | None:
        """A majority of the ``sentinels`` answered, every one naming the same master at
        an older epoch (they were redeployed); else None (one that missed a failover may
        be the only one this client reaches)."""
        if self.others or len(self.older) <= sentinels // 2:
            return None
        if len({a for _, a in self.older}) > 1:
            return None
        return self.older[0][1], max(e for e, _ in self.older)


def _masters(reply: Any) -> dict[str, dict[str, Any]]:
    """SENTINEL MASTERS as redis-py parses it (RESP2: by name)."""
    return cast("dict[str, dict[str, Any]]", reply)


class _FollowsTheNewestEpoch:
    """The discovery both managers share; each only asks the Sentinels in its own way."""

    _newest_epoch = -1
    sentinels: list[Any]

    def _heard(self, answers: _Answers, i: int, state: Any, service: str) -> tuple[Any, Any] | None:
        """The i-th Sentinel's answer (None: it knows no such service): the address to
        follow now (that Sentinel asked first next time, as redis-py does), or None."""
        if not state:
            return None
        good = self.check_master_state(state, service)  # type: ignore[attr-defined]
        address = answers.offer(state, good)
        if address is None:
            return None
        self.sentinels[0], self.sentinels[i] = self.sentinels[i], self.sentinels[0]
        return self._chosen(address, answers.newest)

    def _last_word(self, answers: _Answers, errors: list[str], service: str) -> tuple[Any, Any]:
        """After every Sentinel was asked: what a majority agree on, else not found."""
        agreed = answers.agreed(len(self.sentinels))
        if agreed is not None:
            return self._chosen(*agreed)
        said = f" : {', '.join(errors)}" if errors else ""
        if answers.older or answers.others:
            said += " (a failover is under way, or a Sentinel has not heard of the last one)"
        raise sentinel.MasterNotFoundError(f"No master found for {service!r}{said}")

    def _chosen(self, address: tuple[Any, Any], epoch: int) -> tuple[Any, Any]:
        self._newest_epoch = epoch
        force = getattr(self, "_force_master_ip", None)
        return (force if force is not None else address[0]), address[1]


class FollowingSentinel(_FollowsTheNewestEpoch, sentinel.Sentinel):
    """redis-py's Sentinel manager that does not follow a Sentinel's answer naming a
    master being replaced (see the comment above)."""

    def discover_master(self, service_name: str) -> tuple[Any, Any]:
        answers, errors = _Answers(self._newest_epoch, []), []
        for i, s in enumerate(self.sentinels):
            try:
                state = _masters(s.sentinel_masters()).get(service_name)
            except (redis.ConnectionError, redis.TimeoutError) as e:
                errors.append(f"{s} - {e!r}")
                continue
            if (address := self._heard(answers, i, state, service_name)) is not None:
                return address
        return self._last_word(answers, errors, service_name)


class AsyncFollowingSentinel(_FollowsTheNewestEpoch, asentinel.Sentinel):
    """The asyncio form of :class:`FollowingSentinel`."""

    async def discover_master(self, service_name: str) -> tuple[Any, Any]:
        answers, errors = _Answers(self._newest_epoch, []), []
        for i, s in enumerate(self.sentinels):
            try:
                state = _masters(await s.sentinel_masters()).get(service_name)
            except (redis.ConnectionError, redis.TimeoutError) as e:
                errors.append(f"{s} - {e!r}")
                continue
            if (address := self._heard(answers, i, state, service_name)) is not None:
                return address
        return self._last_word(answers, errors, service_name)


# -- the clients ------------------------------------------------------------------------------


class SentinelRedis(redis.Redis):
    """The master's client that also closes its connections to the Sentinels."""

    def close(self) -> None:
        super().close()
        manager = getattr(self.connection_pool, "sentinel_manager", None)
        for s in getattr(manager, "sentinels", ()):
            s.close()


class AsyncSentinelRedis(aioredis.Redis):
    """The master's asyncio client that also closes its connections to the Sentinels."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        manager = getattr(self.connection_pool, "sentinel_manager", None)
        for s in getattr(manager, "sentinels", ()):
            await s.aclose()


@dataclass(frozen=True)
class _Kind:
    """redis-py's classes for one kind of client (blocking or asyncio)."""

    plain: type[Any]  # redis.Redis or its asyncio twin
    connections: dict[str, type[Any]]  # per URL scheme
    sentinel: type[Any]
    master: type[Any]
    pool: type[Any]
    managed: type[Any]
    managed_ssl: type[Any]
    retry: type[Any]


BLOCKING = _Kind(
    redis.Redis,
    {"redis": Connection, "rediss": SSLConnection, "unix": UnixConnection},
    FollowingSentinel,
    SentinelRedis,
    SentinelPool,
    SentinelConnection,
    SentinelSSLConnection,
    Retry,
)
ASYNCIO = _Kind(
    aioredis.Redis,
    {"redis": AsyncConnection, "rediss": AsyncSSLConnection, "unix": AsyncUnixConnection},
    AsyncFollowingSentinel,
    AsyncSentinelRedis,
    AsyncSentinelPool,
    AsyncSentinelConnection,
    AsyncSentinelSSLConnection,
    AsyncRetry,
)


def _make(rs: RedisSettings, extra: dict[str, Any], kind: _Kind) -> Any:
    options = {**rs.options(), "health_check_interval": HEALTH_CHECK_S, **extra}
    target = rs.sentinel
    if target is None:
        scheme = rs.url.partition("://")[0]
        return kind.plain.from_url(rs.url, connection_class=kind.connections[scheme], **options)
    # The Sentinels themselves: the timeouts, their own credentials, and no retry of
    # redis-py's (it would wait seconds on each dead Sentinel; discovery tries the next).
    to_sentinels = {k: v for k, v in options.items() if k.startswith("socket_")}
    to_sentinels["retry"] = kind.retry(NoBackoff(), 0)
    if target.sentinel_username is not None:
        to_sentinels["username"] = target.sentinel_username
    if target.sentinel_password is not None:
        to_sentinels["password"] = target.sentinel_password
    manager = kind.sentinel(target.sentinels, sentinel_kwargs=to_sentinels)
    return manager.master_for(
        target.service,
        redis_class=kind.master,
        connection_pool_class=kind.pool,
        retry=kind.retry(SENTINEL_BACKOFF, SENTINEL_RETRIES),
        connection_class=kind.managed_ssl if target.ssl else kind.managed,
        **{**options, **target.master_options()},  # the URL's own options win, as from_url's
    )


def client(rs: RedisSettings, **extra: Any) -> redis.Redis:
    """A blocking client of the URL's server (of the master, for a Sentinel URL)."""
    return cast("redis.Redis", _make(rs, extra, BLOCKING))


def async_client(rs: RedisSettings, **extra: Any) -> aioredis.Redis:
    """An asyncio client of the URL's server (of the master, for a Sentinel URL)."""
    return cast("aioredis.Redis", _make(rs, extra, ASYNCIO))
