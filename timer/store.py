"""The redis-py boundary: where its errors become tickwheel errors, and URLs lose passwords.

Used by the I/O layers only (``client``, ``aio``); the durable data model
(``timer.durable``) never imports redis-py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.exceptions import RedisClusterException

from .durable.models import Durability
from .durable.scripts import script_error
from .errors import ConfigError, NotDurable, StoreError, TimerError


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (safe to print and log)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    netloc = f"{user}:***@{host}" if user else f":***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@dataclass(frozen=True)
class RedisSettings:
    """Where Redis is. Its repr never shows the password."""

    url: str = field(repr=False)
    socket_timeout_s: float = 5.0
    connect_timeout_s: float = 5.0

    @classmethod
    def from_url(cls, url: str, **kwargs: float) -> RedisSettings:
        scheme = urlsplit(url).scheme
        if scheme not in ("redis", "rediss", "unix"):
            raise ConfigError(
                f"unsupported Redis URL scheme {scheme!r} in {redact_url(url)}; use "
                "redis://host:port/db, rediss:// for TLS, or unix:///path/to.sock"
            )
        return cls(url, **kwargs)

    @property
    def safe_url(self) -> str:
        return redact_url(self.url)

    def options(self) -> dict[str, Any]:
        """redis-py connection options, the same for the sync and the asyncio client."""
        return {
            "socket_timeout": self.socket_timeout_s,
            "socket_connect_timeout": self.connect_timeout_s,
        }

    def __repr__(self) -> str:
        return f"RedisSettings(url={self.safe_url!r}, socket_timeout_s={self.socket_timeout_s})"


def translate(exc: redis.RedisError, where: str) -> TimerError:
    """The TimerError for a redis-py error; ``where`` is a URL with no password in it."""
    if isinstance(exc, redis.ResponseError):
        message = str(exc)
        ours = script_error(message)
        if ours is not None:
            return ours
        code = message.split(" ", 1)[0]
        return StoreError(
            f"Redis at {where} answered with an error: {message}",
            code=code if code.isupper() else None,
        )
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return StoreError(
            f"cannot reach Redis at {where}: {exc}; is the server running? "
            "(tickwheel server start runs a local one)"
        )
    return StoreError(f"Redis error at {where}: {exc}")


@contextlib.contextmanager
def map_errors(where: str) -> Iterator[None]:
    """Turn redis-py exceptions raised inside the block into TimerError subclasses."""
    try:
        yield
    except redis.RedisError as exc:
        raise translate(exc, where) from None
    except RedisClusterException as exc:
        raise StoreError(f"Redis Cluster at {where}: {exc}") from None


def settle_replies(raw: Sequence[Any], where: str, *, errors_in_slots: bool) -> list[Any]:
    """A pipeline's replies as the clients answer them (both use it): each redis-py error
    translated into its slot, and the first one raised unless errors stay in slots."""
    replies = [translate(r, where) if isinstance(r, redis.RedisError) else r for r in raw]
    if not errors_in_slots:
        for reply in replies:
            if isinstance(reply, TimerError):
                raise reply
    return replies


def settle_wait(durability: Durability, replies: list[Any]) -> list[Any]:
    """The replies of a pipeline whose last call was the durability wait, without it:
    each write's reply, or NotDurable where the wait fell short (both clients use it)."""
    waited = replies.pop()
    if isinstance(waited, redis.ResponseError):
        raise durability.refused(str(waited))
    if isinstance(waited, redis.RedisError):
        raise waited
    shortfall = durability.shortfall(waited)
    if shortfall is None:
        return replies
    return [r if isinstance(r, Exception) else NotDurable(shortfall) for r in replies]
