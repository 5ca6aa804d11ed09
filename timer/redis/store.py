"""The redis-py boundary: where its errors become tickwheel errors, and URLs are checked
(they lose their passwords in :mod:`.redaction`).

Used by the I/O layers only (``client``, ``aio``); the durable data model
(``timer.durable``) never imports redis-py.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import redis
import redis.cluster
import redis.sentinel
from redis._parsers.base import BaseParser
from redis.exceptions import RedisClusterException

from ..durable.model.checks import check_seconds
from ..durable.model.models import Durability
from ..durable.model.scripts import script_error
from ..errors import ConfigError, NotDurable, NotFound, StoreError, TimerError, quoted
from .redaction import URL_FORMS, no_scheme, redact_url, reserved_in_userinfo


def _url_options(*classes: type) -> frozenset[str]:
    """The query options a Redis URL may carry: the keyword arguments redis-py's
    connection classes for its scheme take (an unknown one would fail later, inside
    redis-py, as a TypeError)."""
    names: set[str] = set()
    for cls in (redis.connection.AbstractConnection, *classes):
        names.update(p for p in inspect.signature(cls).parameters if p != "self")
    names.update(("db", "connection_class", "max_connections"))
    return frozenset(names - {"args", "kwargs", "host", "port", "path"})


URL_OPTIONS = {
    "redis": _url_options(redis.connection.Connection),
    "rediss": _url_options(redis.connection.Connection, redis.connection.SSLConnection),
    "unix": _url_options(redis.connection.UnixDomainSocketConnection),
}


SENTINEL_SCHEMES = {"redis+sentinel": "redis", "rediss+sentinel": "rediss"}
SENTINEL_FORM = (
    "redis+sentinel://[user:password@]host:port[,host:port…]/<service>[/db] "
    "(rediss+sentinel:// for TLS to the data nodes)"
)
_SENTINEL_OWN = ("sentinel_username", "sentinel_password")
_DB_NUMBER = "the database must be a number from 0 (/0)"


@dataclass(frozen=True)
class SentinelTarget:
    """A Sentinel URL read: where the Sentinels are, which service's master to use, and
    how to connect to it (the URL's credentials and options are the data nodes')."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    ssl: bool
    options: dict[str, Any] = field(repr=False, hash=False, compare=False)
    sentinel_username: str | None = field(default=None, repr=False)
    sentinel_password: str | None = field(default=None, repr=False)

    def master_options(self) -> dict[str, Any]:
        """redis-py keyword arguments for the master's connections (db, auth, ssl_*)."""
        return dict(self.options)


def _number(text: str) -> bool:
    """Plain ASCII digits (``str.isdigit`` takes ``²`` and ``٣``, which ``int`` refuses)."""
    return text.isascii() and text.isdigit()


def parse_sentinel_url(url: str) -> SentinelTarget:
    """A ``redis+sentinel://`` URL read; ConfigError (no secret in it) if it is not one."""
    safe = redact_url(url)
    scheme, _, rest = url.partition("://")
    base = SENTINEL_SCHEMES[scheme]
    userinfo, at, hostpart = rest.rpartition("@")
    if not at:
        userinfo, hostpart = "", rest
    hostpart, _, query = hostpart.partition("?")
    hosts_text, _, path = hostpart.partition("/")
    sentinels: list[tuple[str, int]] = []
    for item in hosts_text.split(","):
        host, colon, port = item.strip().rpartition(":")
        host = host.strip("[]")
        if not (colon and host and _number(port) and 0 < int(port) < 65536):
            raise ConfigError(
                f"Sentinel URL {safe}: {item.strip()!r:.40} is not host:port (each Sentinel "
                f"with its port, 26379 by default); the form is {SENTINEL_FORM}"
            )
        sentinels.append((host, int(port)))
    parts = [p for p in path.split("/") if p]
    if not parts or len(parts) > 2 or (len(parts) == 2 and not _number(parts[1])):
        raise ConfigError(
            f"Sentinel URL {safe} must name the service its Sentinels monitor, and may add a "
            f"database number: the form is {SENTINEL_FORM}"
        )
    query_pairs = [q for q in query.split("&") if q]
    split = [q.partition("=") for q in query_pairs]
    own = {k: unquote(v) for k, _, v in split if k in _SENTINEL_OWN}
    rest_query = "&".join(q for q in query_pairs if q.partition("=")[0] not in _SENTINEL_OWN)
    host0, port0 = sentinels[0]
    # The data nodes' options, typed as redis-py types them, from a URL of the same
    # credentials and options (the host is a stand-in: Sentinel names the master).
    stand_in = (
        f"{base}://{userinfo}{at}{'[' + host0 + ']' if ':' in host0 else host0}:{port0}"
        f"/{parts[1] if len(parts) == 2 else 0}{'?' + rest_query if rest_query else ''}"
    )
    _check_node_url(stand_in, safe)
    options = redis.connection.parse_url(stand_in)  # type: ignore[no-untyped-call]
    for name in ("host", "port", "connection_class"):
        options.pop(name, None)
    return SentinelTarget(
        tuple(sentinels),
        unquote(parts[0]),
        base == "rediss",
        options,
        own.get("sentinel_username"),
        own.get("sentinel_password"),
    )


def check_url(url: object) -> str:
    """``url`` if redis-py can connect with it, without the blanks around it (a pasted
    " redis://…" was refused as the scheme " redis"); ConfigError (naming the URL with no
    secret in it) for a bad scheme, host, port, database or query option."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(
            f"a Redis URL must be text such as redis://localhost:6379/0, got {url!r:.40}"
        )
    url = url.strip()
    if url.partition("://")[0] in SENTINEL_SCHEMES:
        parse_sentinel_url(url)
    else:
        _check_node_url(url, redact_url(url))
    return url


def _check_node_url(url: str, safe: str) -> None:
    """``check_url`` of a URL naming one node, shown as ``safe`` in its errors."""
    scheme = url.partition("://")[0] if "://" in url else ""
    if not scheme:
        raise no_scheme(url, safe)
    if scheme.lower() in ("redis", "rediss", "unix") and scheme != scheme.lower():
        raise ConfigError(f"write the Redis URL's scheme in lower case: {scheme.lower()}://…")
    if scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(f"unsupported Redis URL scheme {quoted(scheme)} in {safe}; {URL_FORMS}")
    form = "the form is redis://[user:password@]host[:port][/db], rediss://… or unix:///path"
    try:
        parts = urlsplit(url)
    except ValueError:
        raise ConfigError(
            f"Redis URL {safe} cannot be parsed (a broken [IPv6] host?); {form}"
        ) from None
    try:
        port = parts.port  # ValueError: not a number, or out of range
    except ValueError:
        port = 0
    hint = reserved_in_userinfo(url)
    if port == 0:
        raise ConfigError(
            f"Redis URL {safe}: "
            + (
                hint
                or "the port must be a number from 1 to 65535 (what is there is not shown: "
                "it may be a password)"
            )
            + f"; {form}"
        )
    if scheme != "unix":
        if not parts.hostname:
            raise ConfigError(f"Redis URL {safe} {hint or 'names no host'}; {form}")
        db = parts.path.strip("/")
        if db and not _number(db):
            raise ConfigError(f"Redis URL {safe}: {hint or _DB_NUMBER}; {form}")
    try:
        kwargs = redis.connection.parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        reason = str(exc).replace(url, safe)  # redis-py names the option, not its value
        raise ConfigError(f"Redis URL {safe} is not valid ({reason}); {form}") from None
    if kwargs.get("db", 0) < 0:  # ?db=-1, which redis-py takes
        raise ConfigError(f"Redis URL {safe}: {_DB_NUMBER}; {form}")
    unknown = sorted(set(kwargs) - URL_OPTIONS[scheme] - {"host", "port", "path"})
    if unknown:
        raise ConfigError(
            f"Redis URL {safe} has option(s) {', '.join(unknown)} that a {scheme}:// "
            "connection does not take (ssl_* options need rediss://); e.g. ?socket_timeout=5"
        )


# How long a durability wait's reply is given to arrive after its timeout, before the
# socket timeout (RedisSettings.check_wait_fits).
WAIT_REPLY_S = 0.25


@dataclass(frozen=True)
class RedisSettings:
    """Where Redis is. Its repr never shows the password."""

    url: str = field(repr=False)
    socket_timeout_s: float = 5.0
    connect_timeout_s: float = 5.0

    @classmethod
    def from_url(cls, url: str, **kwargs: float) -> RedisSettings:
        for name, value in kwargs.items():
            check_seconds(name, value, maximum=3600, positive=True)
        return cls(check_url(url), **kwargs)

    @property
    def safe_url(self) -> str:
        return redact_url(self.url)

    @functools.cached_property
    def sentinel(self) -> SentinelTarget | None:
        """The Sentinels and service of a ``redis+sentinel://`` URL; None for any other."""
        if self.url.partition("://")[0] in SENTINEL_SCHEMES:
            return parse_sentinel_url(self.url)
        return None

    def socket_timeout_in_use(self) -> float:
        """The data nodes' socket timeout: the URL's ``?socket_timeout=`` if it has one
        (it wins, as in redis-py), else ``socket_timeout_s``."""
        target = self.sentinel
        given = (
            target.master_options() if target is not None else redis.connection.parse_url(self.url)  # type: ignore[no-untyped-call]
        ).get("socket_timeout")
        return float(given) if given is not None else self.socket_timeout_s

    def check_wait_fits(self, durability: Durability) -> None:
        """ConfigError unless a durability wait answers before the socket gives up: a
        ``WAIT`` cut by the socket timeout is retried as a lost connection (redis-py's
        retries took ~9 s on a master with no replica), where it should have been a
        :class:`~timer.errors.NotDurable` after ``durability_timeout_s``."""
        if not durability.waits:
            return
        socket_s, wait_s = self.socket_timeout_in_use(), durability.timeout_ms / 1000
        if wait_s + WAIT_REPLY_S > socket_s:
            raise ConfigError(
                f"durability_timeout_s ({wait_s:g} s) must be at least {WAIT_REPLY_S:g} s "
                f"shorter than the socket timeout ({socket_s:g} s): a wait for replicas or "
                "the AOF that outlasts the socket is cut and retried instead of answering "
                "NotDurable. Lower durability_timeout_s or raise socket_timeout_s (or the "
                "URL's ?socket_timeout=)."
            )

    def options(self) -> dict[str, Any]:
        """redis-py connection options, the same for the sync and the asyncio client."""
        return {
            "socket_timeout": self.socket_timeout_s,
            "socket_connect_timeout": self.connect_timeout_s,
        }

    def __repr__(self) -> str:
        return f"RedisSettings(url={self.safe_url!r}, socket_timeout_s={self.socket_timeout_s})"


def _error_classes() -> dict[str, type[redis.ResponseError]]:
    """redis-py's own tables of Redis error words and the class it raises for each (OOM,
    NOPERM, MOVED, TRYAGAIN…): its base parser's, and in redis-py < 6 its cluster
    parser's, which only a cluster client's connections use."""
    classes: dict[str, type[redis.ResponseError]] = {}
    tables = [BaseParser.EXCEPTION_CLASSES]
    cluster_parser = getattr(redis.cluster, "ClusterParser", None)
    if cluster_parser is not None:
        tables.append(cluster_parser.EXCEPTION_CLASSES)
    for table in tables:
        for word, cls in table.items():
            if word != "ERR" and isinstance(cls, type):  # ERR's (a table by message) say ERR
                classes.setdefault(word, cls)
    return classes


_ERROR_CLASSES = _error_classes()
_ERROR_WORDS: dict[type[BaseException], str] = {c: w for w, c in _ERROR_CLASSES.items()}


def typed_error(reply: object) -> object:
    """A reply as a cluster connection's parser would give it: a plain ResponseError
    whose first word redis-py has a class for (``MOVED 12 host:port`` on a plain node
    connection of redis-py < 6) becomes that class, its word stripped as the parser
    strips it. Anything else is returned as it is."""
    if type(reply) is not redis.ResponseError:
        return reply
    word, _, rest = str(reply).partition(" ")
    cls = _ERROR_CLASSES.get(word)
    return reply if cls is None else cls(rest)


def error_code(exc: redis.ResponseError) -> str | None:
    """The first word of Redis's error reply (``OOM``, ``NOPERM``, ``BUSYKEY``…), which
    redis-py strips from the message of the errors it has a class for."""
    code = getattr(exc, "status_code", None)  # redis-py 7.1+ keeps it
    if isinstance(code, str) and code:
        return code
    code = _ERROR_WORDS.get(type(exc))
    if code is not None:
        return code
    word = str(exc).split(" ", 1)[0]
    return word if word.isupper() and word.isalpha() else None


def node_url(url: str, host: str, port: int) -> str:
    """``url`` pointed at another node of its cluster: same scheme, user and password."""
    parts = urlsplit(url)
    auth = parts.netloc.rpartition("@")[0]
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return urlunsplit(parts._replace(netloc=f"{auth}@{where}" if auth else where))


def translate(exc: redis.RedisError, where: str) -> TimerError:
    """The TimerError for a redis-py error; ``where`` is a URL with no password in it."""
    if isinstance(exc, redis.ResponseError):
        message = str(exc)
        ours = script_error(message)
        if ours is not None:
            return ours
        code = error_code(exc)
        if code == "NOGROUP":  # a client's mistake, not Redis failing
            missing = NotFound(
                "no such consumer group on that shard: a group exists once it has read "
                "(outcomes, a handler runner)"
            )
            missing.code = code
            return missing
        if "DB index is out of range" in message:  # the URL's /N: the user's to fix
            return ConfigError(
                f"the Redis at {where} has no such database (the URL's /N: 0 to 15 on a "
                "default server); name one it has, e.g. /0"
            )
        if code and not message.startswith(code):
            message = f"{code} {message}"
        return StoreError(f"Redis at {where} answered with an error: {message}", code=code)
    if isinstance(exc, redis.sentinel.MasterNotFoundError):  # its text is a client's repr
        return StoreError(
            f"no Sentinel of {where} names a master for its service: are the Sentinels "
            "running at those addresses, and do they monitor that service (SENTINEL MASTERS)?"
        )
    if isinstance(exc, redis.AuthenticationError):  # a ConnectionError, but it was reached
        reason = str(exc).rstrip(". ")
        return StoreError(
            f"Redis at {where} refused the credentials: {reason}; check the user and "
            "password in the URL against the server's (requirepass or its ACL users)"
        )
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        reason = str(exc).rstrip(". ")  # redis-py's own ends with a period
        return StoreError(
            f"cannot reach Redis at {where}: {reason}; is the server running, and is that its "
            "address?"
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
    except Exception as exc:
        if isinstance(exc, TimerError) or not _raised_in_redis_py(exc):
            raise
        # redis-py's own code failed (an AttributeError on an ASK redirect during a
        # resharding, redis-py 8.1): the call did not complete, as with any StoreError
        raise StoreError(
            f"Redis client error at {where}: {type(exc).__name__}: {exc} "
            "(inside redis-py, during a cluster topology change?)"
        ) from exc


_REDIS_PY = str(Path(redis.__file__).parent)


def _raised_in_redis_py(exc: BaseException) -> bool:
    """True if the innermost frame of ``exc``'s traceback is redis-py's."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename.startswith(_REDIS_PY)


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
    if replies and all(isinstance(r, redis.RedisError) for r in replies):
        return replies  # no write to wait for: each call's own error says what happened
        # (a master demoted by a failover answers MOVED to the calls and refuses WAIT)
    if isinstance(waited, redis.ResponseError):
        raise durability.refused(str(waited))
    if isinstance(waited, redis.RedisError):
        raise waited
    shortfall = durability.shortfall(waited)
    if shortfall is None:
        return replies
    return [r if isinstance(r, Exception) else NotDurable(shortfall) for r in replies]
