"""A Celery task that ends before its sender records the Later it waits with (the race a
task that runs in a moment wins): the task's look is kept, and the Later is due at once,
not a delivery timeout later (the outcome showed as owed for 30 s by default)."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from timer import TimerClient
from timer.durable.groups.calls import claim_call, retry_call
from timer.durable.model.steps import Op, ScriptCall

from .conftest import server_now_ms
from .test_worker import make_worker

pytest.importorskip("celery")
from timer.celery.claims import Claims

GROUP = "celery"


def _call(client: TimerClient, call: ScriptCall) -> object:
    def op() -> Op[object]:
        return (yield call)

    return client._run(op())


def _pending(client: TimerClient, r: redis.Redis) -> tuple[int, str]:
    """An outcome fired, read by the group (pending, in hand): its shard and entry id."""
    now = server_now_ms(client.redis)
    client.schedule("job:{1}", deadline_ms=now - 1_000)
    w = make_worker(client, "lw")
    try:
        assert w.run_once() == 1
    finally:
        w.close()
    shard = client.get("job:{1}").shard  # type: ignore[union-attr]
    stream = client.keys.shard(shard).outcomes
    r.xgroup_create(stream, GROUP, id="0")
    read: Any = r.xreadgroup(GROUP, "sender", {stream: ">"}, count=1)
    ((_, [(entry, _fields)]),) = read
    return shard, bytes(entry).decode()


@pytest.mark.parametrize("looked_first", [True, False])
def test_a_later_recorded_after_its_tasks_look_is_due_at_once(
    client: TimerClient, redis_client: redis.Redis, looked_first: bool
) -> None:
    shard, entry = _pending(client, redis_client)
    sk = client.keys.shard(shard)
    if looked_first:  # the task ended before the sender's Later was recorded
        Claims(client).look_now(f"{GROUP} {shard}/{entry}")
    before = server_now_ms(client.redis)
    due = int(_call(client, retry_call(sk, GROUP, entry, 600_000)))  # type: ignore[call-overload]
    if looked_first:
        assert due <= server_now_ms(client.redis), due  # looked at once, not in 10 min
    else:
        assert due >= before + 600_000, due  # no look: the Later's own delay
    assert redis_client.zscore(sk.retries(GROUP), entry) == due


def test_a_look_does_not_cut_a_failures_backoff_and_a_stale_one_is_dropped(
    client: TimerClient, redis_client: redis.Redis
) -> None:
    """A failed attempt (an error, not a Later) keeps its backoff whatever a look said;
    a look for an outcome acknowledged meanwhile is dropped by the next claim."""
    shard, entry = _pending(client, redis_client)
    sk = client.keys.shard(shard)
    Claims(client).look_now(f"{GROUP} {shard}/{entry}")
    before = server_now_ms(client.redis)
    due = _call(client, retry_call(sk, GROUP, entry, 60_000, attempt=1, error="boom"))
    due = int(due)  # type: ignore[call-overload]
    assert due >= before + 60_000, due
    redis_client.xack(sk.outcomes, GROUP, entry)
    Claims(client).look_now(f"{GROUP} {shard}/{entry}")  # a late copy's look: stale
    assert redis_client.zscore(sk.retries(GROUP), entry) == 0
    _call(client, claim_call(sk, GROUP, "other", count=10, min_idle_ms=60_000))
    assert redis_client.zscore(sk.retries(GROUP), entry) is None
