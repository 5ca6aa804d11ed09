"""The Overview's "Needs attention" list as the API computes it (``/api/overview``'s
``attention``, the page writes it as it is): one item a cause, each saying only what is
so. With no worker running a new user saw three bullets for that one cause (shards with no
leader, no live worker, late sweeps), and "their timers wait" with nothing pending."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import fresh_client
from tests.dashboard.page import as_page
from timer import TimerClient
from timer.dashboard import create_app
from timer.dashboard.shapes import attention
from timer.testing import RedisServer


@pytest.fixture
def client(redis_server: RedisServer, namespace: str) -> Iterator[TimerClient]:
    with fresh_client(redis_server, namespace, shards=16) as c:
        yield c


def overview(c: TimerClient) -> dict[str, Any]:
    with as_page(create_app(c)) as http:
        o: dict[str, Any] = http.get("/api/overview").json()
    return o


def texts(o: dict[str, Any]) -> list[str]:
    return [item["text"] for item in o["attention"]]


def start(c: TimerClient) -> str:
    return f"start one: tickwheel --namespace {c.namespace} worker"


def test_no_live_worker_is_one_item_saying_what_follows_from_it(client: TimerClient) -> None:
    """No worker, 16 shards, 6 timers long overdue (their shards' sweeps late): one item,
    the leaderless shards and late sweeps folded into it, not three."""
    now = client.server_time_ms()
    for i in range(6):
        client.schedule(f"job:{{{i}}}", deadline_ms=now - 60_000)
    o = overview(client)
    assert sum(1 for s in o["shards"] if s["lag_ms"] > 5000) > 1  # late sweeps, said once
    assert texts(o) == [
        f"no live worker: 16 shards have no leader and 6 pending timers wait; {start(client)}"
    ]
    [item] = o["attention"]
    assert item["kind"] == "no_worker"
    assert item["parts"][0] == {"text": "no live worker", "view": "/workers"}


def test_with_nothing_pending_no_worker_says_timers_would_wait_not_that_they_do(
    client: TimerClient,
) -> None:
    """After the README tour (its timers decided, its worker stopped), nothing pending:
    no timers wait, timers scheduled now would."""
    client.schedule("tour", 60_000)
    client.cancel("tour")
    assert texts(overview(client)) == [
        "no live worker: 16 shards have no leader; timers scheduled now will wait until "
        f"one starts; {start(client)}"
    ]
    client.schedule("one", 60_000)
    assert texts(overview(client)) == [
        f"no live worker: 16 shards have no leader and 1 pending timer waits; {start(client)}"
    ]


def test_with_a_live_worker_leaderless_shards_and_late_sweeps_are_items_of_their_own(
    client: TimerClient,
) -> None:
    """A worker heard from, no shard led yet (between leaders): each cause its item, and
    the leaderless shards' timers said to wait only when there are some."""
    now = client.server_time_ms()
    client.membership.heartbeat("w1", now_ms=now, live_window_ms=60_000)
    assert texts(overview(client)) == ["16 shards have no leader"]
    client.schedule("late:{1}", deadline_ms=now - 60_000)
    o = overview(client)
    assert texts(o) == [
        "16 shards have no leader: 1 pending timer waits",
        "1 shard sweeps more than 5 s late",
    ]
    assert [i["kind"] for i in o["attention"]] == ["leaderless", "late"]


def shard(n: int, leader: str | None, pending: int = 0, lag_ms: int = 0) -> dict[str, Any]:
    return {"shard": n, "leader": leader, "pending": pending, "lag_ms": lag_ms}


def board(**fields: Any) -> dict[str, Any]:
    """An overview with nothing to attend to, but for ``fields``."""
    base = {"namespace": "default", "dead_letters": 0, "groups": [], "pending": 0,
            "workers": [{"id": "w1"}], "shards": [shard(0, "w1")]}  # fmt: skip
    return {**base, **fields}


def test_each_item_in_the_singular_and_plural(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TICKWHEEL_NAMESPACE", raising=False)
    assert attention(board()) == []
    one = attention(board(workers=[], shards=[shard(0, None, 1, 9000)], pending=1))
    assert [i["text"] for i in one] == [
        "no live worker: 1 shard has no leader and 1 pending timer waits; "
        "start one: tickwheel worker"
    ]
    # a worker gone may hold its leases until they lapse: no shard said leaderless
    held = attention(board(workers=[], shards=[shard(0, "w1", 2)], pending=2))
    assert [i["text"] for i in held] == [
        "no live worker: 2 pending timers wait; start one: tickwheel worker"
    ]
    empty = attention(board(workers=[], shards=[shard(0, "w1")]))
    assert [i["text"] for i in empty] == [
        "no live worker: timers scheduled now will wait until one starts; "
        "start one: tickwheel worker"
    ]
    late = [shard(0, "w1", 3, 6000), shard(1, "w1", 1, 5000), shard(2, None)]
    assert [i["text"] for i in attention(board(shards=late, pending=4))] == [
        "1 shard has no leader",
        "1 shard sweeps more than 5 s late",
    ]
    paused = {"name": "a <b>", "paused_since_ms": 1, "lag": 1234}
    o = board(dead_letters=1, groups=[paused, {**paused, "name": "c", "lag": None}])
    assert [i["text"] for i in attention(o)] == [
        "1 dead letter to re-deliver or drop",
        "group a <b> is paused (1,234 waiting)",
        "group c is paused (? waiting)",
    ]
    assert attention(o)[1]["parts"][1] == {"text": "a <b>", "group": "a <b>"}


def test_the_command_names_the_namespace_a_shell_would_not_default_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    o = board(workers=[], namespace="default")
    monkeypatch.setenv("TICKWHEEL_NAMESPACE", "orders")
    assert attention(o)[0]["text"].endswith("start one: tickwheel --namespace default worker")
    odd = attention({**o, "namespace": "a b"})[0]["text"]
    assert odd.endswith("start one: tickwheel --namespace 'a b' worker")
