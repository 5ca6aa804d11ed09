"""Pausing a consumer group (#57) on a real server: its runner reads and claims nothing
new while paused (outcomes wait in the streams), takes up again on resume, and a pause
names who did it; bad input and unknown groups are refused writing nothing."""

from __future__ import annotations

import threading

import pytest
import redis

from tests.conftest import wait_for
from timer import Handlers, InvalidInput, NotFound, Outcome, TimerClient

from .conftest import namespace_keys

pytestmark = pytest.mark.redis


def _decide(client: TimerClient, ids: list[str]) -> None:
    for tid in ids:
        client.schedule(tid, 60_000)
        client.cancel(tid)


def test_a_paused_group_reads_nothing_new_until_resumed(client: TimerClient) -> None:
    seen: list[str] = []
    h = Handlers(client, group="mailer")

    def handle(o: Outcome) -> None:
        seen.append(o.id)

    h.add("cancelled", handle)
    runner = threading.Thread(target=h.run, kwargs={"handle_signals": False}, daemon=True)
    runner.start()
    try:
        _decide(client, ["a:1", "a:2"])
        wait_for(lambda: len(seen) == 2, 20, "the runner to handle the first two")

        assert client.pause_group("mailer", by="ops@night") is True
        assert client.pause_group("mailer", by="someone else") is False  # the first stays
        (g,) = client.groups()
        assert g.paused and g.paused_by == "ops@night" and g.paused_since_ms
        wait_for(lambda: h.stats.paused, 10, "the runner to see the pause")

        _decide(client, ["b:1", "b:2", "b:3"])
        wait_for(lambda: any(g.lag == 3 for g in client.groups()), 10, "three outcomes waiting")
        asked = h.stats.pause_checks
        # two more looks at the pause, each a round in which a running runner would read
        wait_for(lambda: h.stats.pause_checks >= asked + 2, 10, "two more rounds")
        assert sorted(seen) == ["a:1", "a:2"] and client.groups()[0].lag == 3

        assert client.resume_group("mailer") is True
        assert client.resume_group("mailer") is False
        wait_for(lambda: len(seen) == 5, 20, "the three handled after the resume")
        assert not h.stats.paused and not client.groups()[0].paused
    finally:
        h.stop()
        runner.join(15)


def test_a_paused_group_with_idle_exit_ends_holding_nothing(
    client: TimerClient, redis_client: redis.Redis
) -> None:
    """`tickwheel handle --idle-exit` on a paused group: it reads nothing and ends. A
    deleted group's pause goes with it."""
    _decide(client, ["c:1"])
    client.consumer("g", "first").ensure()
    assert client.pause_group("g")
    h = Handlers(client, group="g")
    h.add("cancelled", lambda o: None)
    assert h.run(stop_when_idle=True, handle_signals=False)
    assert h.stats.handled == 0 and client.groups()[0].lag == 1
    assert client.delete_group("g") == 4
    assert not redis_client.hexists(client.keys.paused, "g")
    with pytest.raises(NotFound):
        client.pause_group("g")


def test_pause_refuses_bad_input_and_unknown_groups_writing_nothing(
    client: TimerClient, redis_client: redis.Redis
) -> None:
    before = namespace_keys(redis_client, client.namespace)
    with pytest.raises(NotFound, match=r'no consumer group "nobody" in .*\(groups: none\)'):
        client.pause_group("nobody")
    for bad in ("", "x" * 300, 42, None):
        with pytest.raises(InvalidInput):
            client.pause_group(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            client.resume_group(bad)  # type: ignore[arg-type]
    with pytest.raises(NotFound, match='no consumer group "nobody"'):  # as pause says
        client.resume_group("nobody")
    assert namespace_keys(redis_client, client.namespace) == before
