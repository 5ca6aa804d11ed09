"""Fixtures for the integration tier: a TimerClient on the session's real server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
import redis

from tests.conftest import fresh_client
from timer import TimerClient
from timer.durable.model.codec import text
from timer.durable.model.keys import ShardKeys, results_part_of
from timer.testing import RedisServer

SHARDS = 4


@pytest.fixture
def client(redis_server: RedisServer, namespace: str) -> Iterator[TimerClient]:
    """A client on a fresh, initialised namespace of 4 shards."""
    with fresh_client(redis_server, namespace, SHARDS) as c:
        yield c


def namespace_keys(r: redis.Redis, namespace: str) -> dict[bytes, object]:
    """Every key of the namespace with a dump of its value (to prove nothing changed)."""
    out: dict[bytes, object] = {}
    for key in r.scan_iter(match=f"{{tw:{namespace}*", count=1000):
        out[key] = r.dump(key)
    return out


T = TypeVar("T")


def done_or_refused(
    url: str,
    namespace: str,
    call: Callable[[TimerClient], T],
    refusals: tuple[type[BaseException], ...],
) -> T | None:
    """``call`` on a new namespace of 2 shards: its result, or None if it raised one of
    ``refusals``; either way the namespace's keys are as before (a fuzzed door writes
    nothing it should not)."""
    r = redis.Redis.from_url(url)
    try:
        with TimerClient.from_url(url, namespace) as c:
            c.init(shards=2)
            before = namespace_keys(r, namespace)
            try:
                return call(c)
            except refusals:
                return None
            finally:
                assert namespace_keys(r, namespace) == before
    finally:
        r.close()


def server_now_ms(r: redis.Redis) -> int:
    secs, micros = r.time()
    return int(secs) * 1000 + int(micros) // 1000


def retained(r: redis.Redis, sk: ShardKeys, timer_id: str) -> tuple[bytes | None, int | None]:
    """(the retained outcome of ``timer_id``, when it may be dropped in epoch ms), read
    from the shard's results table as the scripts do."""
    level, split = r.hmget(sk.results_table, "L", "S")
    assert level is not None and split is not None  # written together, by init
    part = results_part_of(timer_id, int(level), int(split))
    value = as_bytes(r.hget(sk.results_part(part), timer_id))
    if value is None:
        return None, None
    return value[4:], int.from_bytes(value[:4], "big") * 1000


def as_bytes(reply: object) -> bytes | None:
    """A reply of a client made without decode_responses: bytes, or None (typed so)."""
    assert reply is None or isinstance(reply, bytes), reply
    return reply


def bucket_members(r: redis.Redis, key: str) -> list[str]:
    """The ids a durable bucket holds (a list: it may repeat an id, or hold one no longer
    there: see the lazy buckets in lua/include/buckets.lua)."""
    assert r.type(key) in (b"list", b"none"), (key, r.type(key))
    return [text(m) for m in r.lrange(key, 0, -1)]
