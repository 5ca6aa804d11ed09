"""A worker and its handlers in one process (``timer.worker.fire_and_handle``, #55): the
fire calls hand the outcomes they decide to the handlers, and every promise of a runner
still holds where it crosses this path (a key's limit, a pause). Real server, real
worker; a kill -9 of such a process is in tests/chaos/test_handler_processes.py."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from tests.conftest import most_at_once, wait_for
from timer import Handlers, Outcome, TimerClient
from timer.handlers import Limit
from timer.worker import WorkerSettings, fire_and_handle

pytestmark = pytest.mark.redis


@pytest.fixture
def together(client: TimerClient) -> Iterator[Callable[[Handlers], None]]:
    """Start ``fire_and_handle`` for a Handlers in a thread, once its loop is up; each
    one started is stopped at the end."""
    started: list[tuple[Handlers, threading.Thread]] = []

    def start(h: Handlers) -> None:
        settings = WorkerSettings(worker_id=f"w{len(started)}", lease_ms=2_000)
        t = threading.Thread(
            target=fire_and_handle, args=(client, h, settings), kwargs={"concurrency": 4}
        )
        t.start()
        started.append((h, t))
        wait_for(lambda: h.hand_off() is not None, 30, "the handlers to start")

    yield start
    for h, t in started:
        h.stop()
        t.join(30)
        assert not t.is_alive()


def groups_of(client: TimerClient) -> dict[str, tuple[int, int | None]]:
    """Each group's (pending, lag)."""
    return {g.name: (g.pending, g.lag) for g in client.groups()}


def test_the_outcomes_a_worker_fires_go_to_its_own_handlers(
    client: TimerClient, together: Callable[[Handlers], None]
) -> None:
    """Every timer's handler runs once, most of them handed by the fire call that
    decided them (no read between), and the group owes nothing after."""
    seen: Counter[str] = Counter()
    h = Handlers(client, group="g", consumer="me")

    @h.on("expired")
    def handler(o: Outcome) -> None:
        seen[o.id] += 1

    together(h)
    ids = [f"j{i}" for i in range(200)]
    client.schedule_many([{"id": t, "delay_ms": 300 + i} for i, t in enumerate(ids)])
    wait_for(lambda: h.stats.handled == len(ids), 30, "every handler to run")
    assert seen == Counter(dict.fromkeys(ids, 1))
    assert h.stats.handed_at_fire > len(ids) // 2  # read by the fire calls, not the runner
    wait_for(lambda: groups_of(client) == {"g": (0, 0)}, 10, "the group to owe nothing")


def test_a_key_limit_holds_for_outcomes_handed_at_fire(
    client: TimerClient, together: Callable[[Handlers], None]
) -> None:
    """Outcomes handed at fire wait for their key's slot as read ones do: at most one
    handler of a key at once, however many the fire calls hand together."""
    spans: list[tuple[float, float]] = []
    lock = threading.Lock()
    h = Handlers(client, group="g", consumer="me", limits=[Limit("payload.k", 1)])

    @h.on("expired")
    def handler(o: Outcome) -> None:
        start = time.monotonic()
        time.sleep(0.02)  # the handler's work, long enough for two to overlap
        with lock:
            spans.append((start, time.monotonic()))

    together(h)
    client.schedule_many(
        [{"id": f"k{i}", "delay_ms": 300, "payload": {"k": "a"}} for i in range(8)]
    )
    wait_for(lambda: h.stats.handled == 8, 30, "every handler to run")
    assert h.stats.handed_at_fire > 0
    assert most_at_once(spans) == 1


def test_a_paused_group_is_handed_nothing_until_resumed(
    client: TimerClient, together: Callable[[Handlers], None]
) -> None:
    """While an operator pauses the group, the fire calls read nothing for it: the
    outcomes wait in the streams as lag, and run after the resume."""
    h = Handlers(client, group="g", consumer="me")
    handled: list[str] = []

    @h.on("expired")
    def handler(o: Outcome) -> None:
        handled.append(o.id)

    together(h)
    assert client.pause_group("g", by="test")
    wait_for(lambda: h.stats.paused, 10, "the runner to see the pause")
    client.schedule_many([{"id": f"p{i}", "delay_ms": 200} for i in range(20)])
    wait_for(lambda: groups_of(client)["g"] == (0, 20), 30, "the 20 outcomes to wait as lag")
    assert handled == [] and h.stats.handed_at_fire == 0
    assert client.resume_group("g")
    wait_for(lambda: len(handled) == 20, 30, "the outcomes to run after the resume")
