"""Opt-in replicated durability: a write returns once replicas (or the AOF) confirm it."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import wait_for
from timer import ConfigError, InvalidInput, TimerClient
from timer.aio import AsyncTimerClient
from timer.durable.model.models import Durability, DurabilityWarning
from timer.errors import NotDurable
from timer.testing import RedisServer, free_port

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, server_binary: Path
) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A master and one replica of it (private to this module)."""
    base = tmp_path_factory.mktemp("replicated")
    master = RedisServer(base / "master", binary=server_binary, port=free_port()).start()
    replica = RedisServer(
        base / "replica",
        binary=server_binary,
        port=free_port(),
        extra_args=("--replicaof", master.host, str(master.port)),
    ).start()
    r = redis.Redis(host=master.host, port=master.port)
    try:
        wait_for(lambda: _online(r), 30, "a replica in sync")
        yield master, replica
    finally:
        r.close()
        replica.stop()
        master.stop()


def _online(r: redis.Redis) -> bool:
    replica = r.info("replication").get("slave0")
    return isinstance(replica, dict) and replica.get("state") == "online"


def test_durability_levels_parse_and_refuse_nonsense() -> None:
    """The levels read as documented; anything else is a clear InvalidInput."""
    assert Durability.parse("replicas:2").command() == ("WAIT", 2, 1000)
    assert Durability.parse("aof+replicas:1", 250).command() == ("WAITAOF", 1, 1, 250)
    assert not Durability.parse("none").waits
    with pytest.raises(InvalidInput, match="not one of none, aof, replicas:N"):
        Durability.parse("quorum")
    with pytest.raises(InvalidInput, match="not one of"):
        TimerClient.from_url("redis://127.0.0.1:1/0", durability="replicas:x")


def test_writes_wait_for_a_replica(pair: tuple[RedisServer, RedisServer], namespace: str) -> None:
    """With replicas:1 a schedule (one call or a batch) returns once the replica has it:
    reading the replica right after finds the timer."""
    master, replica = pair
    c = TimerClient.from_url(master.url, namespace, durability="replicas:1")
    c.init(shards=2)
    on_replica = redis.Redis(host=replica.host, port=replica.port)
    try:
        t = c.schedule("d:{1}", delay_ms=60_000)
        assert on_replica.hexists(c.keys.shard(t.shard).timers, "d:{1}")
        results = c.schedule_many([{"id": f"d:{{{i}}}", "delay_ms": 60_000} for i in range(50)])
        assert all(not isinstance(r, Exception) for r in results)
        assert sum(on_replica.hlen(c.keys.shard(s).timers) for s in range(2)) == 50
        assert c.cancel("d:{1}") is True
    finally:
        on_replica.close()
        c.close()


def test_a_missing_replica_is_a_clear_error_not_a_silent_ack(
    pair: tuple[RedisServer, RedisServer], namespace: str
) -> None:
    """Asking for more replicas than confirm in time raises NotDurable, saying what is
    missing; in a batch, each item carries the error."""
    master, _ = pair
    c = TimerClient.from_url(
        master.url, namespace, durability="replicas:2", durability_timeout_s=0.2
    )
    with pytest.warns(DurabilityWarning, match=r"wait for 2 replica\(s\).* has 1 connected"):
        c.init(shards=2)  # said once, up front
    try:
        with pytest.raises(NotDurable, match=r"2 replica\(s\) \(only 1 confirmed\).*may be lost"):
            c.schedule("n:{1}", delay_ms=60_000)
        results = c.schedule_many([{"id": "n:{2}", "delay_ms": 60_000}, {"id": ""}])
        assert isinstance(results[0], NotDurable) and isinstance(results[1], InvalidInput)
    finally:
        c.close()


def test_asyncio_client_waits_too(pair: tuple[RedisServer, RedisServer], namespace: str) -> None:
    """The asyncio client applies the same durability to its writes."""
    master, _ = pair
    with TimerClient.from_url(master.url, namespace, durability="replicas:1") as setup:
        setup.init(shards=2)

    async def main() -> None:
        async with await AsyncTimerClient.connect(
            master.url, namespace, durability="replicas:2", durability_timeout_s=0.2
        ) as c:
            with pytest.raises(NotDurable):
                await c.schedule("a:{1}", 60_000)
        async with await AsyncTimerClient.connect(
            master.url, namespace, durability="replicas:1"
        ) as c:
            assert (await c.schedule("a:{2}", 60_000)).created

    asyncio.run(main())


def test_aof_level_fsyncs_or_says_the_server_cannot(
    pair: tuple[RedisServer, RedisServer], namespace: str
) -> None:
    """durability='aof' waits for the master's fsync where the server can promise it
    (WAITAOF and `appendfsync always`); a server under `everysec`, or an older server
    (Redis 7.0), gets a ConfigError naming what is needed, and nothing is written."""
    master, _ = pair
    r = redis.Redis(host=master.host, port=master.port)
    info = r.info("server")
    kind = "valkey" if "valkey_version" in info else "redis"
    version = str(info.get("valkey_version") or info["redis_version"])
    has_waitaof = tuple(int(x) for x in version.split(".")[:2]) >= (7, 2)
    with TimerClient.from_url(master.url, namespace, durability="replicas:1") as setup:
        setup.init(shards=2)
    c = TimerClient.from_url(master.url, namespace, durability="aof")
    try:
        if not has_waitaof:
            with pytest.raises(ConfigError, match="needs WAITAOF"):
                c.schedule("f:{1}", delay_ms=60_000)
            return
        assert r.config_get("appendfsync")["appendfsync"] == "everysec"
        with pytest.raises(
            ConfigError, match=r"needs `appendfsync always`.*has `appendfsync everysec`"
        ):
            c.schedule("f:{1}", delay_ms=60_000)
        assert c.get("f:{1}") is None  # refused before anything was written
        r.config_set("appendfsync", "always")
        c2 = TimerClient.from_url(master.url, namespace, durability="aof")
        try:
            assert c2.schedule("f:{1}", delay_ms=60_000).created, (kind, version)
        finally:
            c2.close()
    finally:
        r.config_set("appendfsync", "everysec")
        r.close()
        c.close()


def test_a_master_with_replicas_and_writes_that_do_not_wait_is_warned_of(
    pair: tuple[RedisServer, RedisServer], namespace: str
) -> None:
    """init (and a worker's start, through check_durability) warns when the master has a
    replica that the client's writes do not wait for, and says what to use; a client
    with replicas:1 gets no such warning."""
    master, _ = pair
    with TimerClient.from_url(master.url, namespace) as c:
        with pytest.warns(DurabilityWarning, match=r"1 replica\(s\) but writes do not wait"):
            c.init(shards=2)
        assert any("use durability 'replicas:1'" in n for n in c.check_durability())
    with TimerClient.from_url(master.url, namespace, durability="replicas:1") as c:
        assert not [n for n in c.check_durability() if "do not wait" in n]
        with warnings.catch_warnings():
            warnings.simplefilter("error", DurabilityWarning)
            c.init(shards=2)


def test_writes_that_wait_for_more_replicas_than_the_master_has_are_warned_of(
    pair: tuple[RedisServer, RedisServer], namespace: str
) -> None:
    """`worker --durability replicas:2` against a master with one replica retried each
    write forever, saying only that one was not confirmed: the start says why, once."""
    master, _ = pair
    with TimerClient.from_url(master.url, namespace, durability="replicas:2") as c:
        (said,) = [n for n in c.check_durability() if "connected" in n]
        assert "writes wait for 2 replica(s)" in said and "the master has 1 connected" in said
    with TimerClient.from_url(master.url, namespace, durability="replicas:1") as c:
        assert not [n for n in c.check_durability() if "connected" in n]
