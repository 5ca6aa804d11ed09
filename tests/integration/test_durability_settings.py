"""The server's durability settings are checked: an evicting policy is refused, no AOF warned."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from timer import ConfigError, TimerClient
from timer.aio import AsyncTimerClient
from timer.cli.main import main
from timer.durable.model.models import DurabilityWarning
from timer.testing import RedisServer
from timer.worker import Worker, WorkerSettings

pytestmark = pytest.mark.redis


@pytest.fixture
def evicting(redis_client: redis.Redis) -> Iterator[redis.Redis]:
    """The session server with maxmemory-policy allkeys-lru for the test (then restored)."""
    before = redis_client.config_get("maxmemory-policy")["maxmemory-policy"]
    assert before is not None
    redis_client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        yield redis_client
    finally:
        redis_client.config_set("maxmemory-policy", before)


@pytest.fixture
def no_aof(redis_client: redis.Redis) -> Iterator[redis.Redis]:
    """The session server with appendonly no for the test (then restored)."""
    redis_client.config_set("appendonly", "no")
    try:
        yield redis_client
    finally:
        redis_client.config_set("appendonly", "yes")


def test_init_refuses_an_evicting_server_and_writes_nothing(
    redis_server: RedisServer, evicting: redis.Redis, namespace: str
) -> None:
    """init on a server that may evict keys fails with a clear ConfigError; no namespace."""
    c = TimerClient.from_url(redis_server.url, namespace)
    with pytest.raises(ConfigError, match=r"maxmemory-policy allkeys-lru.*noeviction") as no:
        c.init(shards=4)
    assert str(no.value).count(f"127.0.0.1:{redis_server.port}") == 1  # the address once
    assert not evicting.exists(c.keys.meta)
    with pytest.warns(DurabilityWarning, match="may evict timers"):
        assert c.init(shards=4, allow_eviction=True).shards == 4
    c.close()


def test_worker_refuses_an_evicting_server_unless_allowed(
    client: TimerClient, evicting: redis.Redis
) -> None:
    """A worker does not start on an evicting server unless told it may."""
    refused = Worker(client, WorkerSettings(worker_id="ev"))
    with pytest.raises(ConfigError, match="allow_eviction"):
        refused.run(handle_signals=False)  # raised at start-up, before taking any shard
    assert set(client.leaders().values()) == {None}
    allowed = Worker(client, WorkerSettings(worker_id="ev", allow_eviction=True))
    allowed.run_once()
    assert set(client.leaders().values()) == {"ev"}
    allowed.close()


def test_cli_init_and_worker_say_what_to_do(
    redis_server: RedisServer, evicting: redis.Redis, namespace: str
) -> None:
    """`tickwheel init` and `tickwheel worker` exit 4 with the setting to change."""
    base = ["--redis-url", redis_server.url, "--namespace", namespace]
    runner = CliRunner()
    init = runner.invoke(main, [*base, "init", "--shards", "2"])
    assert init.exit_code == 4 and "noeviction" in init.output
    assert runner.invoke(main, [*base, "init", "--shards", "2", "--allow-eviction"]).exit_code == 0
    worker = runner.invoke(main, [*base, "worker", "--lease", "1s"])
    assert worker.exit_code == 4 and "--allow-eviction" in worker.output


def test_a_worker_on_an_evicting_server_is_refused_before_it_says_ready(
    redis_server: RedisServer, evicting: redis.Redis, namespace: str
) -> None:
    """`tickwheel worker` on a server with maxmemory-policy allkeys-lru said `worker …
    ready: …` and then `Error: … allkeys-lru …` (exit 4): nothing says ready that then
    refuses to run. `python -m timer.worker` likewise."""
    with pytest.warns(DurabilityWarning), TimerClient.from_url(redis_server.url, namespace) as c:
        c.init(shards=2, allow_eviction=True)
    base = ["--redis-url", redis_server.url, "--namespace", namespace]
    worker = CliRunner().invoke(main, [*base, "worker", "--lease", "1s", "--id", "w1"])
    assert worker.exit_code == 4, worker.output
    assert "maxmemory-policy allkeys-lru" in worker.stderr, worker.stderr
    assert "ready" not in worker.output, worker.output
    bare = subprocess.run(
        [sys.executable, "-m", "timer.worker", *base, "--id", "w2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bare.returncode == 1 and "allkeys-lru" in bare.stderr, bare.stderr
    assert "ready" not in bare.stderr, bare.stderr


def test_aof_off_is_warned_and_shown_in_stats(
    redis_server: RedisServer, no_aof: redis.Redis, namespace: str
) -> None:
    """init warns when AOF is off; stats shows each server's policy and AOF."""
    c = TimerClient.from_url(redis_server.url, namespace)
    with pytest.warns(DurabilityWarning, match="AOF is off"):
        c.init(shards=2)
    servers = c.stats()["servers"]
    assert [(s["maxmemory_policy"], s["aof"]) for s in servers] == [("noeviction", False)]
    result = CliRunner().invoke(
        main, ["--redis-url", redis_server.url, "--namespace", namespace, "init", "--shards", "2"]
    )
    assert (
        result.exit_code == 0 and "Warning:" in result.output and "appendonly yes" in result.output
    )
    c.close()


@pytest.mark.parametrize(
    ("url_tail", "options"),
    [
        ("", {"durability": "replicas:1", "socket_timeout_s": 1.0}),
        ("", {"durability": "aof", "durability_timeout_s": 4.9}),  # the default socket: 5 s
        ("?socket_timeout=1", {"durability": "aof+replicas:1"}),  # the URL's wins
    ],
)
def test_a_durability_wait_longer_than_the_socket_allows_is_refused(
    redis_server: RedisServer, redis_client: redis.Redis, url_tail: str, options: dict[str, Any]
) -> None:
    """A WAIT cut by the socket timeout was retried as a lost connection: a master with no
    replica answered a TimeoutError after ~9 s of retries instead of NotDurable after the
    durability timeout. Both clients refuse the settings before connecting."""
    url = redis_server.url + ("/" + url_tail if url_tail else "")
    keys = redis_client.dbsize()
    with pytest.raises(ConfigError, match=r"must be at least 0\.25 s shorter than the socket"):
        TimerClient.from_url(url, "x", **options)
    with pytest.raises(ConfigError, match="Lower durability_timeout_s or raise socket_timeout_s"):
        asyncio.run(AsyncTimerClient.connect(url, "x", **options))
    assert redis_client.dbsize() == keys
    fits = {**options, "durability_timeout_s": 0.5, "socket_timeout_s": 1.0}
    TimerClient.from_url(redis_server.url, "x", **fits).close()
