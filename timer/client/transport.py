"""What only the blocking client does with redis-py, beside the driver it shares with the
asyncio client (``timer.client.driver``, generated from ``timer.aio.driver``): connecting
to a URL, pub/sub connections that count their reconnects, and pool sizes.
"""

from __future__ import annotations

import random
from typing import Any, cast

import redis
import redis.client
from redis.cluster import RedisCluster
from redis.retry import Retry
from redis.sentinel import SentinelConnectionPool

from ..durable.admin import server as server_checks
from ..redis import connections
from ..redis.cluster_route import CLIENT_RETRIES, client_backoff
from ..redis.store import RedisSettings, map_errors
from .driver import SyncDriver


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


def pubsub(client: redis.Redis | RedisCluster) -> CountingPubSub:
    """A new pub/sub connection for following shard events (one listener thread).

    On a Redis Cluster a PUBLISH reaches every node, so one node hears every shard's
    events; a primary that answers PING is picked at random at each call, so a
    listener that reconnects after its node died goes to a live one.
    """
    if not isinstance(client, RedisCluster):
        return CountingPubSub(client.connection_pool)
    # A node that answers PING, tried in random order: a listener reconnecting because
    # its node died must not be sent back to it by chance (each retry there costs a
    # backoff, while its shards' events are missed).
    cluster: Any = client  # RedisCluster's node methods are untyped
    nodes = list(cluster.get_primaries())
    random.shuffle(nodes)
    for node in nodes:
        conn = cluster.get_redis_connection(node)
        try:
            conn.ping()
        except redis.RedisError:
            continue
        return CountingPubSub(conn.connection_pool)
    node = nodes[0]  # none answers: the listener's own retries go on from here
    return CountingPubSub(cluster.get_redis_connection(node).connection_pool)


def reserve_connections(driver: SyncDriver, n: int) -> None:
    """Let the connection pools of the driver's client (each node's, on a cluster) open
    at least ``n`` connections: redis-py's default is 100, and a thread holds one per
    call, so a handler runner with 200 threads needs more."""
    client: Any = driver.redis
    pools = (
        [
            node.redis_connection.connection_pool
            for node in client.get_nodes()
            if node.redis_connection is not None
        ]
        if driver.cluster
        else [client.connection_pool]
    )
    driver.reserved = max(driver.reserved, n)
    pools += [c.connection_pool for c in driver.node_clients()]
    for pool in pools:
        if getattr(pool, "max_connections", n) < n:
            pool.max_connections = n
