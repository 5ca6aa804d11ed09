"""The test server fixture is a real server that persists across a kill -9."""

from __future__ import annotations

import pytest
import redis

from timer.testing import RedisServer

pytestmark = pytest.mark.redis


def test_server_answers_and_runs_lua(redis_client: redis.Redis) -> None:
    """The fixture's server answers PING and runs Lua (every state change is a script)."""
    assert redis_client.ping() is True
    assert redis_client.eval("return redis.call('TIME')[1] + 0", 0) > 1_600_000_000


def test_acknowledged_write_survives_kill_9(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str
) -> None:
    """With appendfsync always, a write acknowledged before SIGKILL is there after restart."""
    key = f"{namespace}:durable"
    redis_client.set(key, b"kept")
    old_pid = redis_server.pid
    redis_server.kill()
    assert not redis_server.running
    redis_server.restart()
    assert redis_server.pid != old_pid
    fresh = redis.Redis.from_url(redis_server.url)
    try:
        assert fresh.get(key) == b"kept"
    finally:
        fresh.close()
