"""timer.testing.TimeSkipping: tickwheel on virtual time in the test's process. Each test
pins what a user's test relies on: a timer fires at its deadline and not a ms before,
handlers are retried after their backoff and dead-lettered after their last attempt at
the times a deployment would, limits and priorities hold, and bad input is refused."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from timer.durable.model.models import Outcome
from timer.errors import HeartbeatCapped, InvalidInput
from timer.handlers import Backoff, Handlers, Limit
from timer.testing import NotIdle, TimeSkipping

ROOT = Path(__file__).resolve().parents[2]
HOUR_MS = 3_600_000


def test_a_job_timeout_fires_at_its_deadline_after_heartbeats_and_at_its_cap() -> None:
    """Heartbeats push the deadline; past the cap a heartbeat is refused and the timer
    fires at the cap, to the ms."""
    with TimeSkipping() as env:
        fired: list[tuple[str, int]] = []
        h = env.handle(Handlers(group="t"))
        h.on("expired")(lambda o: fired.append((o.id, o.decided_ms)))
        began = env.now_ms
        env.client.schedule("job:{1}", delay_ms=HOUR_MS, max_total_ms=2 * HOUR_MS)
        env.advance(3_000)
        env.client.heartbeat("job:{1}", extend_ms=HOUR_MS)  # now due at 6,600 s
        env.advance(3_599)
        with pytest.raises(HeartbeatCapped):
            env.client.heartbeat("job:{1}", extend_ms=HOUR_MS)  # past the cap: 7,200 s
        assert fired == []
        env.advance(7_200 - 6_599 - 1)
        assert fired == []
        env.advance(1)
        assert fired == [("job:{1}", began + 2 * HOUR_MS)]


def test_retries_wait_their_backoff_and_the_last_attempt_dead_letters() -> None:
    """Two failed attempts then a third: started at the deadline, +60 s, +180 s."""
    with TimeSkipping() as env:
        starts: list[tuple[int, int]] = []
        h = env.handle(Handlers(group="t", max_attempts=3, backoff=Backoff(initial_s=60, jitter=0)))

        @h.on("expired")
        def fail(o: Outcome) -> None:
            starts.append((o.attempt, env.now_ms))
            raise RuntimeError("down")

        began = env.now_ms
        env.client.schedule("job:{2}", delay_ms=HOUR_MS)
        assert env.run_until_idle() == pytest.approx(3_780)
        assert [(a, t - began) for a, t in starts] == [
            (1, HOUR_MS),
            (2, HOUR_MS + 60_000),
            (3, HOUR_MS + 180_000),
        ]
        [dead] = env.client.dead_letters("t")
        assert dead.attempts == 3 and "down" in dead.error


def test_an_eager_celery_task_runs_at_its_time_and_its_failure_is_retried() -> None:
    """A Celery app under task_always_eager: send_later's task runs in place at its
    countdown, with the timer's id; one whose exception propagates is retried on the
    sender's backoff and dead-lettered after its last attempt, and no broker is touched
    (the app's broker is an address nothing listens on)."""
    from celery import Celery  # noqa: PLC0415 - the celery extra

    from timer.celery import send_later, sender  # noqa: PLC0415

    app = Celery("t", broker="redis://127.0.0.1:9/0")
    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True
    ran: list[tuple[str, int]] = []

    @app.task(name="t.ok", bind=True)  # type: ignore[untyped-decorator]
    def ok(self: object, n: int) -> None:
        ran.append((self.request.id, n))  # type: ignore[attr-defined]

    @app.task(name="t.fails")  # type: ignore[untyped-decorator]
    def fails() -> None:
        ran.append(("fails", env.now_ms - began))
        raise RuntimeError("downstream down")

    with TimeSkipping() as env:
        env.handle(sender(app, max_attempts=2, backoff=Backoff(initial_s=60, jitter=0)))
        began = env.now_ms
        t = send_later(env.client, "t.ok", args=[7], countdown=3600)
        send_later(env.client, "t.fails", countdown=60)
        env.advance(3_599)
        assert ran == [("fails", 60_000), ("fails", 120_000)]
        env.advance(1)
        assert ran[2:] == [(t.id, 7)]
        env.run_until_idle()
        [dead] = env.client.dead_letters("celery")
        assert dead.attempts == 2 and "downstream down" in dead.error
        assert env.client.get(t.id).state == "expired"  # type: ignore[union-attr]


def test_a_rate_spaces_a_keys_starts_on_the_virtual_clock() -> None:
    """per_s=1 for a tenant: three outcomes due at once start a second apart; another
    tenant's is not held back."""
    with TimeSkipping() as env:
        starts: list[tuple[str, int]] = []
        h = env.handle(Handlers(group="t", limits=[Limit("payload.tenant", per_s=1)]))
        h.on("expired")(lambda o: starts.append((o.id, env.now_ms)))
        began = env.now_ms
        for n in range(3):
            env.client.schedule(f"a:{{{n}}}", delay_ms=1_000, payload={"tenant": "a"})
        env.client.schedule("b:{0}", delay_ms=1_000, payload={"tenant": "b"})
        env.run_until_idle()
        a_times = sorted(t - began for tid, t in starts if tid.startswith("a:"))
        assert a_times == [1_000, 2_000, 3_000]
        assert [t - began for tid, t in starts if tid.startswith("b:")] == [1_000]


def test_higher_priorities_are_handled_first() -> None:
    """Timers due at the same ms: every priority-5 one is handled before any 0."""
    with TimeSkipping(shards=2) as env:
        order: list[int] = []
        h = env.handle(Handlers(group="t"))
        h.on("expired")(lambda o: order.append(o.priority))
        for n in range(20):
            env.client.schedule(f"p:{{{n}}}", delay_ms=500, priority=5 if n % 4 == 0 else 0)
        env.advance(1)
        assert order == [5] * 5 + [0] * 15


def test_each_occurrence_of_a_schedule_fires_once_at_its_time() -> None:
    """Every 10 minutes for an hour: six occurrences, each handled once, on the dot."""
    with TimeSkipping() as env:
        at: list[int] = []
        h = env.handle(Handlers(group="t"))
        h.on("expired")(lambda o: at.append(o.decided_ms))
        env.client.schedules.create("tick", every=600_000)
        env.advance(3_600)
        assert len(at) == 6 == len(set(at))
        assert all(t % 600_000 == 0 for t in at)
        at_end = env.now_ms
        with pytest.raises(NotIdle, match="would never end: schedule 'tick' "):
            env.run_until_idle(limit=3_600)  # a schedule is never done: said at once
        assert env.now_ms == at_end


def test_the_asyncio_client_and_advance_from_a_coroutine() -> None:
    with TimeSkipping() as env:

        async def main() -> str:
            client = await env.aclient()
            await client.schedule("a:{1}", delay_ms=90_000)
            await env.aadvance(dt.timedelta(seconds=89))
            early = await client.get("a:{1}")
            await env.aadvance(1)
            late = await client.get("a:{1}")
            await client.aclose()
            assert early is not None and late is not None
            return f"{early.state} {late.state}"

        assert asyncio.run(main()) == "pending expired"


def test_two_runs_from_the_same_start_end_the_same() -> None:
    """Deterministic: the same calls give the same outcomes, to the ms."""

    def once() -> list[tuple[str, str, int]]:
        with TimeSkipping(start=dt.datetime(2026, 6, 1, tzinfo=dt.UTC)) as env:
            seen: list[tuple[str, str, int]] = []
            h = env.handle(Handlers(group="t"))
            h.on()(lambda o: seen.append((o.id, o.outcome, o.decided_ms)))
            for n in range(30):
                env.client.schedule(f"j:{{{n}}}", delay_ms=1_000 * (n % 7) + n)
            env.client.cancel("j:{3}")
            env.run_until_idle()
            return seen

    assert once() == once()


def test_advance_and_the_limit_take_durations_written_as_the_librarys_others() -> None:
    """ "1h30m" as schedules' ``every`` takes it: the same as 5_400 seconds."""
    with TimeSkipping() as env:
        seen: list[str] = []
        handlers = env.handle(Handlers(group="g"))
        handlers.on("expired")(lambda o: seen.append(o.id))
        env.client.schedule("job:{1}", delay_ms=5_400_000)
        began = env.now_ms
        env.advance("1h29m59s")
        assert seen == [] and env.now_ms - began == 5_399_000
        env.advance("1s")
        assert seen == ["job:{1}"]
        env.client.schedule("job:{2}", delay_ms=60_000)
        assert env.run_until_idle(limit="2m") == 60
        with pytest.raises(NotIdle):
            env.client.schedule("job:{3}", delay_ms=60_000)
            env.run_until_idle(limit="59s")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: TimeSkipping(start=dt.datetime(2026, 1, 1)), "aware datetime"),
        (lambda: TimeSkipping().advance(-1), "0 to 100 years"),
        (lambda: TimeSkipping().advance(float("nan")), "0 to 100 years"),
        (lambda: TimeSkipping().advance([1]), r'a duration such as "1h30m", got \[1\]'),  # type: ignore[arg-type]
        (lambda: TimeSkipping().advance("1 hour"), r'advance\(\): "1 hour" is not a duration'),
        (lambda: TimeSkipping().advance("-5s"), "is negative"),
        (lambda: TimeSkipping().run_until_idle(limit="1y"), 'limit: "1y" is not a duration'),
        (lambda: TimeSkipping().handle(lambda o: None), "takes a Handlers"),  # type: ignore[arg-type]
    ],
)
def test_bad_input_is_refused_with_what_to_do(call: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        call()  # type: ignore[operator]


def test_the_pytest_fixture_gives_a_fresh_env_per_test(tmp_path: Path) -> None:
    """The testing page's conftest and test, run by pytest as a user's project would, with
    a second test that sees none of the first's timers."""
    page = (ROOT / "docs" / "guides" / "testing.md").read_text()
    block = page.split('pytest_plugins = ["timer.testing.fixtures"]', 1)[1].split("```", 1)[0]
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["timer.testing.fixtures"]\n')
    (tmp_path / "test_user.py").write_text(
        block
        + "\n\ndef test_a_second_test_starts_afresh(time_skipping):\n"
        + '    assert time_skipping.client.get("job:{1}") is None\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


ANYTHING = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),  # up to 11.6 days taken: a few turns of the worker
    st.floats(-1e6, 1e6),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e300, 10**12]),  # refused
    st.text(max_size=20),
    st.timedeltas(min_value=dt.timedelta(days=-2), max_value=dt.timedelta(days=2)),
    st.datetimes(),
    st.lists(st.integers(), max_size=3),
)


@settings(max_examples=int(os.environ.get("TICKWHEEL_FUZZ_EXAMPLES", "60")), deadline=None)
@given(value=ANYTHING)
def test_any_duration_is_taken_or_refused_with_invalid_input_and_nothing_written(
    value: object,
) -> None:
    """advance() and run_until_idle(limit=) take seconds or a timedelta from 0 to 100
    years, or a duration as text ("1h30m"); anything else is InvalidInput, and the clock
    and the store are as they were."""
    with TimeSkipping() as env:
        env.client.schedule("keep:{1}", delay_ms=3 * 86_400_000)  # due after any value here
        before, keys = env.now_ms, env.store.snapshot()
        for call in (
            lambda: env.advance(value),  # type: ignore[arg-type]
            lambda: env.run_until_idle(limit=value),  # type: ignore[arg-type]
        ):
            try:
                call()
            except InvalidInput:
                assert env.now_ms == before and env.store.snapshot() == keys
            except NotIdle:
                pass  # a limit taken, with the timer still pending after it
            before, keys = env.now_ms, env.store.snapshot()
