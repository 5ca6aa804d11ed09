"""A consumer that asks for durability takes an outcome only once the outcome is on its
replicas: a read from a master that has none (cut off from them, about to be replaced
and its writes lost) raises NotDurable instead of handing the outcome to a handler, so
the timer is not handled twice when the new side decides it again. The entry stays
pending for the group, so it is delivered once the read can be confirmed."""

from __future__ import annotations

import asyncio

import pytest

from timer import TimerClient
from timer.aio import AsyncTimerClient
from timer.errors import NotDurable
from timer.testing import RedisServer

pytestmark = [pytest.mark.redis]


def test_a_read_from_a_master_with_no_replica_is_not_handed_out(
    redis_server: RedisServer, namespace: str
) -> None:
    """The session server has no replica: what a consumer with replicas:1 reads there
    could be lost with it, so the read raises NotDurable (sync and asyncio), where a
    consumer without durability gets the outcome."""
    plain = TimerClient.from_url(redis_server.url, namespace)
    durable = TimerClient.from_url(
        redis_server.url, namespace, durability="replicas:1", durability_timeout_s=0.05
    )
    try:
        plain.init(shards=2)
        for name in ("a", "b"):
            plain.schedule(name, delay_ms=3_600_000)
            assert plain.cancel(name) is True  # an outcome in its shard's stream
        for group in ("g", "h"):
            plain.consumer(group, "c1").ensure()
        with pytest.raises(NotDurable, match="1 replica"):
            durable.consumer("g", "c1").read(10, None)

        async def read_async() -> None:
            a = await AsyncTimerClient.connect(
                redis_server.url, namespace, durability="replicas:1", durability_timeout_s=0.05
            )
            try:
                with pytest.raises(NotDurable, match="1 replica"):
                    await a.consumer("h", "c1").poll(10, 0)
            finally:
                await a.aclose()

        asyncio.run(read_async())
        got = plain.consumer("g", "c2").read(10, None)
        assert got == [], "the refused read took the entries for its consumer (pending)"
        pending = plain.consumer("g", "c2").claim({0: "0-0", 1: "0-0"}, count=10, min_idle_ms=0)
        assert sorted(d.outcome.id for d in pending[0]) == ["a", "b"]
    finally:
        plain.close()
        durable.close()
