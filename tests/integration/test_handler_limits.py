"""Per-key limits of the handler runner (#43): ``Handlers(limits=[Limit(key, N)])`` runs
at most N handlers at once per value of the key across every runner of the group; an
outcome over its limit waits its turn (not an attempt, not a dead letter)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import wait_for
from timer import Handlers, InvalidInput, Limit, Outcome, TimerClient
from timer.handler_limits import parse_limit

from .test_fuzz_api import anything
from .test_handlers import running

__all__ = ["running"]  # a fixture, used by name

pytestmark = pytest.mark.redis


class Overlap:
    """Each key's handlers running now, and the most seen at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.done: list[str] = []
        self.go = threading.Event()

    def handler(self, o: Outcome) -> None:
        key = o.payload.get("tenant") if isinstance(o.payload, dict) else None
        with self.lock:
            self.now[str(key)] += 1
            self.most[str(key)] = max(self.most[str(key)], self.now[str(key)])
        self.go.wait(0.02)  # the handler's work: long enough for others to start beside it
        with self.lock:
            self.now[str(key)] -= 1
            self.done.append(o.id)


def test_two_runners_never_run_more_than_n_at_once_per_key(
    client: TimerClient, running: Callable[..., threading.Thread]
) -> None:
    """Two runners of one group, 8 handler threads each, outcomes of 4 tenants and some
    with no tenant: at most 2 at once per tenant over both runners (reached: the limit
    is what holds them), the untenanted ones not limited, every outcome handled once,
    none failed or dead."""
    ids = []
    for i in range(160):
        payload = {"tenant": f"t{i % 4}"} if i < 120 else {"other": i}
        tid = f"lim{i}"
        client.schedule(tid, 60_000, payload=payload)
        client.cancel(tid)
        ids.append(tid)
    seen = Overlap()
    runners = []
    for name in ("a", "b"):
        h = Handlers(client, group="lim", consumer=name, limits=[Limit("payload.tenant", 2)])
        h.add("cancelled", seen.handler)
        runners.append(h)
        running(h, concurrency=8)
    wait_for(lambda: len(seen.done) >= len(ids), 60, "every outcome handled")
    assert sorted(seen.done) == sorted(ids)  # each once
    tenants = {f"t{k}" for k in range(4)}
    assert all(seen.most[t] == 2 for t in tenants), seen.most  # at the limit, never past it
    assert seen.most["None"] > 2  # the ones without a tenant ran unlimited
    assert sum(h.stats.limit_waits for h in runners) > 0
    assert all(h.stats.failed == h.stats.dead_lettered == 0 for h in runners)
    wait_for(lambda: all(h.in_flight == 0 for h in runners), 10, "nothing left in hand")
    assert all(h.waiting_for_limit == 0 for h in runners)
    # every slot given back: no key of the limit is left holding one
    left = list(client.redis.scan_iter(match=f"{{tw:{client.namespace}}}:lim:*"))
    assert all(client.redis.zcard(k) == 0 for k in left), left


def test_an_async_handler_keeps_the_limit_too(
    client: TimerClient, running: Callable[..., threading.Thread]
) -> None:
    import asyncio  # noqa: PLC0415

    for i in range(30):
        client.schedule(f"as{i}", 60_000, payload={"tenant": "only"})
        client.cancel(f"as{i}")
    now, most, done = [0], [0], []

    async def handler(o: Outcome) -> None:
        now[0] += 1
        most[0] = max(most[0], now[0])
        await asyncio.sleep(0.01)  # the handler's work
        now[0] -= 1
        done.append(o.id)

    h = Handlers(client, group="alim", limits=[Limit("payload.tenant", 3)])
    h.add("cancelled", handler)
    running(h, concurrency=10)
    wait_for(lambda: len(done) == 30, 30, "every outcome handled")
    assert most[0] == 3


@settings(max_examples=200, deadline=None)
@given(key=st.one_of(st.sampled_from(["id", "payload.x", "payload", "outcome"]), anything),
       n=st.one_of(st.integers(-3, 20_000), anything))  # fmt: skip
def test_any_limit_is_a_limit_or_a_clear_refusal(key: object, n: object) -> None:
    """Whatever the key and N, Limit (and --limit's KEY=N) makes a limit or raises
    InvalidInput; nothing else."""
    try:
        limit = Limit(key, n)  # type: ignore[arg-type]
    except InvalidInput:
        pass
    else:
        assert 1 <= limit.at_most <= 10_000 and isinstance(limit.label, str)
    try:
        parse_limit(f"{key}={n}")
    except InvalidInput as exc:
        assert "limit" in str(exc)


def test_handlers_refuse_what_is_not_a_list_of_limits(client: TimerClient) -> None:
    for bad in ("payload.x=2", [("payload.x", 2)], [Limit("id", 1), Limit("id", 2)]):
        with pytest.raises(InvalidInput, match="limit"):
            Handlers(client, limits=bad)  # type: ignore[arg-type]
