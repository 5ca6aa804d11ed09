"""Outcome retention: trim_outcomes drops old outcomes, never one a consumer group owes."""

from __future__ import annotations

import pytest
import redis

from timer import InvalidInput, TimerClient

from .conftest import namespace_keys

pytestmark = pytest.mark.redis


def decided_in_shard(c: TimerClient, shard: int, n: int, tag: str = "t") -> list[bytes]:
    """n outcomes in one shard's stream (scheduled then cancelled); their entry ids."""
    ids = [f"{tag}:{i}" for i in range(100 * n) if c.shard_of(f"{tag}:{i}") == shard][:n]
    for tid in ids:
        c.schedule(tid, delay_ms=3_600_000)
        assert c.cancel(tid)
    stream = c.keys.shard(shard).outcomes
    entries = c.redis.xrange(stream)
    assert len(entries) == n
    return [eid for eid, _ in entries]


def test_age_alone_drops_every_old_outcome_and_keeps_recent_ones(client: TimerClient) -> None:
    decided_in_shard(client, 0, 5)
    decided_in_shard(client, 1, 3)
    kept = client.trim_outcomes(3_600_000)  # all decided well within the hour
    assert [t.removed for t in kept] == [0, 0, 0, 0]
    assert client.outcomes_total() == 8
    done = {t.shard: t for t in client.trim_outcomes(0)}
    assert done[0].removed == 5 and done[1].removed == 3 and done[2].removed == 0
    assert not any(t.held_by_group for t in done.values())
    assert client.outcomes_total() == 0


def test_a_group_keeps_what_it_has_not_acked(client: TimerClient) -> None:
    entries = decided_in_shard(client, 0, 10)
    stream = client.keys.shard(0).outcomes
    r = client.redis
    r.xgroup_create(stream, "handlers", id="0")
    got = r.xreadgroup("handlers", "h1", {stream: ">"}, count=5)[0][1]
    assert [eid for eid, _ in got] == entries[:5]
    r.xack(stream, "handlers", entries[0], entries[1], entries[3])  # 2 and 4 still pending
    (t,) = client.trim_outcomes(0, shards=[0])
    assert (t.removed, t.held_by_group) == (2, True)  # below the oldest pending only
    assert [eid for eid, _ in r.xrange(stream)] == entries[2:]
    r.xack(stream, "handlers", entries[2], entries[4])  # read 5, acked 5: 5..9 unread
    (t,) = client.trim_outcomes(0, shards=[0])
    assert (t.removed, t.held_by_group) == (3, True)
    assert [eid for eid, _ in r.xrange(stream)] == entries[5:]


def test_the_slowest_group_sets_the_bound_and_a_new_group_holds_all(
    client: TimerClient,
) -> None:
    entries = decided_in_shard(client, 2, 6)
    stream = client.keys.shard(2).outcomes
    r = client.redis
    for group in ("fast", "slow"):
        r.xgroup_create(stream, group, id="0")
    r.xreadgroup("fast", "f", {stream: ">"})  # everything
    r.xack(stream, "fast", *entries)
    (t,) = client.trim_outcomes(0, shards=[2])
    assert (t.removed, t.held_by_group) == (0, True)  # 'slow' has read nothing
    r.xreadgroup("slow", "s", {stream: ">"}, count=4)
    r.xack(stream, "slow", *entries[:4])
    (t,) = client.trim_outcomes(0, shards=[2])
    assert t.removed == 4
    assert [eid for eid, _ in r.xrange(stream)] == entries[4:]


def test_keep_unread_false_trims_by_age_even_past_groups(client: TimerClient) -> None:
    decided_in_shard(client, 3, 4)
    stream = client.keys.shard(3).outcomes
    client.redis.xgroup_create(stream, "idle", id="0")
    (t,) = client.trim_outcomes(0, keep_unread=False, shards=[3])
    assert (t.removed, t.held_by_group) == (4, False)
    assert client.redis.xlen(stream) == 0


@pytest.mark.parametrize(
    ("retention", "shards", "message"),
    [
        (-1, None, "retention_ms must be >= 0"),
        (1.5, None, "retention_ms must be a whole number"),
        (0, [4], "shard must be between 0 and 3"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_trimmed(
    client: TimerClient,
    redis_client: redis.Redis,
    retention: object,
    shards: list[int] | None,
    message: str,
) -> None:
    decided_in_shard(client, 0, 2)
    before = namespace_keys(redis_client, client.namespace)
    with pytest.raises(InvalidInput, match=message):
        client.trim_outcomes(retention, shards=shards)  # type: ignore[arg-type]
    assert namespace_keys(redis_client, client.namespace) == before
