"""tools/unasync.py: the blocking driver is the asyncio driver's generated twin, never a
copy kept by hand."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from timer import ConfigError
from timer.aio import AsyncTimerClient
from timer.durable.model.models import Meta

ROOT = Path(__file__).resolve().parents[2]


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync", ROOT / "tools" / "unasync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


unasync = load_tool()


def test_the_blocking_driver_is_what_the_tool_writes() -> None:
    """timer/client/driver.py is exactly the rewrite of timer/aio/driver.py, and every rule
    of the rewrite is used (a fix made in one driver only fails here)."""
    found = unasync.differences(unasync.SOURCE.read_text(), unasync.TWIN.read_text())
    assert not found, "".join(found) + "\nrun: python tools/unasync.py"


def test_a_twin_edited_by_hand_is_reported() -> None:
    """A line changed in the generated file alone, or one left out, is a difference."""
    source = unasync.SOURCE.read_text()
    twin = unasync.TWIN.read_text()
    edited = twin.replace("retry_budget_s = RETRY_BUDGET_S", "retry_budget_s = 2.0", 1)
    assert edited != twin
    assert any("retry_budget_s = 2.0" in line for line in unasync.differences(source, edited))
    shorter = "".join(twin.splitlines(keepends=True)[:-1])
    assert unasync.differences(source, shorter)


def test_a_rule_that_matches_nothing_is_reported() -> None:
    """A source that no longer has what a rule rewrites makes that rule stale."""
    source = unasync.SOURCE.read_text().replace("import asyncio\n", "", 1)
    twin, _ = unasync.unasync(source)
    assert unasync.differences(source, twin) == ["rule '^import asyncio\\\\n$' matches no line\n"]


def test_the_rewrite_of_asyncio_names() -> None:
    """What the rules do to lines of the kinds the source has."""
    text, _ = unasync.unasync(
        "import asyncio\n"
        "    async def run(self) -> AsyncIterator[Any]:\n"
        "        await self.time.asleep(pause)\n"
        "        client: aioredis.Redis | AsyncRedisCluster = AsyncDriver.x\n"
        "        parts = await asyncio.gather(*(send(n) for n in names))\n"
        "            await client.aclose()\n"
    )
    assert text.split("\n", 2)[2] == (
        "    def run(self) -> Iterator[Any]:\n"
        "        self.time.sleep(pause)\n"
        "        client: redis.Redis | RedisCluster = SyncDriver.x\n"
        "        parts = [send(n) for n in names]\n"
        "            client.close()\n"
    )


def test_an_asyncio_cluster_client_without_node_url_is_refused() -> None:
    """The asyncio driver sends a cluster's script pipelines on clients of its own, made
    from node_url: a cluster client made by hand without one is a ConfigError up front
    (redis.asyncio has no per-node client to fall back on), never contacted."""
    cluster = AsyncRedisCluster(host="127.0.0.1", port=1)
    with pytest.raises(ConfigError, match="node_url"):
        AsyncTimerClient(cluster, "ns", Meta(shards=1, bucket_ms=1000))
    AsyncTimerClient(redis.asyncio.Redis(port=1), "ns", Meta(shards=1, bucket_ms=1000))
