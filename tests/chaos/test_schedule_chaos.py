"""Chaos for recurring schedules (#29): real worker processes killed with SIGKILL every
few seconds and a Redis killed and restarted; every occurrence of every schedule fires
exactly once, none early, none missing."""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import wait_for
from timer import TimerClient
from timer.durable.schedules.records import occurrence_name
from timer.testing import RedisServer

from .conftest import Workers, read_all_outcomes

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

SCHEDULES = [f"every-second-{i}" for i in range(6)]
# rounds of 5 s (a worker killed each, the Redis half-way): 4 in make test (20 s, within
# its 12-minute budget); TICKWHEEL_CHAOS_ROUNDS=60 runs five minutes
ROUNDS = max(2, int(os.environ.get("TICKWHEEL_CHAOS_ROUNDS", "4")))


def reached(clock: TimerClient, ms: int) -> Callable[[], bool]:
    """A condition: Redis time is at ``ms`` (or past it)."""
    return lambda: clock.server_time_ms() >= ms


def test_each_occurrence_once_across_kill_9_of_leaders_and_a_redis_restart(
    namespace: str, workers_factory: list[Workers], tmp_path: Path, server_binary: Path
) -> None:
    server = RedisServer(tmp_path / "redis", binary=server_binary, appendfsync="always").start()
    try:
        c = TimerClient.from_url(server.url, namespace)
        c.init(shards=4, bucket_ms=200)
        for name in SCHEDULES:  # all: what a takeover delays still fires, oldest first
            c.schedules.create(name, every="1s", missed="all", payload={"s": name})
        pool = Workers(server.url, namespace, tmp_path, lease_ms=1_000, horizon_ms=3_000)
        workers_factory.append(pool)
        procs = [pool.start("a"), pool.start("b")]
        clock = TimerClient.from_url(server.url, namespace)  # reads Redis time only
        start = clock.server_time_ms()
        for round_ in range(1, ROUNDS + 1):  # kill -9 a worker every 5 s; the Redis half-way
            wait_for(reached(clock, start + 5_000 * round_), 30, f"round {round_}")
            if round_ == ROUNDS // 2:
                server.kill()
                server.restart()
                c.close()
                c = TimerClient.from_url(server.url, namespace)
            procs.pop(0).kill9()
            procs.append(pool.start(f"r{round_}"))
        # Healthy again: let every schedule fire a few more, then stop them all.
        wait_for(reached(clock, clock.server_time_ms() + 3_000), 30, "a healthy stretch")
        for name in SCHEDULES:
            assert c.schedules.pause(name)
        # an occurrence already due when paused still fires, once: then none is armed
        wait_for(
            lambda: all(c.schedules.get(n).armed is None for n in SCHEDULES),  # type: ignore[union-attr]
            30,
            "the occurrences due at the pause to fire",
        )
        final = {name: c.schedules.get(name) for name in SCHEDULES}
        fired: dict[str, list[int]] = defaultdict(list)
        outcomes = read_all_outcomes(c)
        for o in outcomes:
            found = occurrence_name(o.id)
            assert found is not None, o.id
            fired[found[0]].append(found[1])
            assert o.decided_ms >= found[1] and o.outcome == "expired", o  # never early
            assert o.payload == {"s": found[0]}
        doubled = {i: n for i, n in Counter(o.id for o in outcomes).items() if n > 1}
        assert not doubled, f"fired twice: {list(doubled.items())[:5]}"
        for name in SCHEDULES:
            times = sorted(fired[name])
            info = final[name]
            assert info is not None and info.state == "paused"
            assert len(times) >= 5 * ROUNDS, (name, len(times))  # one a second throughout
            assert times == list(range(times[0], times[-1] + 1000, 1000)), f"{name}: a gap"
            assert info.fired == len(times) and info.last_ms == times[-1] and info.missed == 0
        assert all(p.alive() for p in procs[-2:]), [p.log_text()[-1500:] for p in procs]
        c.close()
        clock.close()
    finally:
        server.stop()
