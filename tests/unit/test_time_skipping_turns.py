"""What new users' trials (31, 33) of the time-skipping kit found: a client's wait moved the
clock and fired nothing, advance() from a handler nested the handlers and moved the
clock past what was asked, run_until_idle() ran a year of a schedule's occurrences before
saying it never ends, a closed env kept working, refusals wrote Python's values as
JSON's; and (33) a wait of an hour took a minute of real time."""

from __future__ import annotations

import asyncio
import datetime as dt
import subprocess
import sys
from typing import Any

import pytest

from timer import InvalidInput, TimerClosed, TimerError, WaitTimeout
from timer.handlers import Handlers
from timer.testing import NotIdle, TimeSkipping

pytest.importorskip("fakeredis")


def test_a_clients_wait_fires_what_falls_due_meanwhile() -> None:
    """`client.wait` on a timer due in 60 s returns its outcome, fired at its deadline
    and handled then; the clock moved to the decision, not by the whole timeout."""
    with TimeSkipping() as env:
        seen: list[tuple[str, int]] = []
        h = env.handle(Handlers(group="g"))
        h.on("expired")(lambda o: seen.append((o.id, o.decided_ms)))
        began = env.now_ms
        t = env.client.schedule("w:{1}", delay_ms=60_000)
        outcome = env.client.wait("w:{1}", timeout=120)
        assert outcome.outcome == "expired" and outcome.decided_ms == t.deadline_ms
        assert seen == [("w:{1}", t.deadline_ms)]  # handled at its instant, too
        assert 60_000 <= env.now_ms - began < 120_000, env.now_ms - began


def test_advance_from_a_handler_is_refused_and_the_clock_moves_as_asked() -> None:
    """A handler calling env.advance(10) nested the handlers, and advance(5) ended 13 s on;
    it is refused now (the handler sees why), and the clock moves by the 5 s asked."""
    with TimeSkipping() as env:
        said: list[str] = []
        h = env.handle(Handlers(group="g", max_attempts=1))

        @h.on("expired")
        def inner(o: object) -> None:
            try:
                env.advance(10)
            except InvalidInput as exc:
                said.append(str(exc))

        env.client.schedule("re:{1}", delay_ms=1_000)
        env.client.schedule("re:{2}", delay_ms=3_000)
        began = env.now_ms
        env.advance(5)
        assert env.now_ms - began == 5_000
        assert len(said) == 2, said
        assert said[0].startswith("advance() from inside a handler"), said
        assert "env.time.sleep(seconds)" in said[0], said


def test_a_schedule_with_no_end_is_said_at_once_and_one_with_an_end_runs_to_idle() -> None:
    with TimeSkipping() as env:
        fired: list[int] = []
        h = env.handle(Handlers(group="g"))
        h.on("expired")(lambda o: fired.append(o.decided_ms))
        env.client.schedules.create("beat", every="1h")
        began = env.now_ms
        with pytest.raises(NotIdle) as caught:
            env.run_until_idle()
        assert str(caught.value).startswith(
            "run_until_idle() would never end: schedule 'beat' (every 1h in UTC) is active"
        ), caught.value
        assert env.now_ms == began and fired == []  # nothing ran a year of it first
        env.client.schedules.pause("beat")
        env.client.schedules.create("three", every="1h", end=began + 3 * 3_600_000)
        assert env.run_until_idle() == 3 * 3_600
        assert len(fired) == 3, fired


def test_not_idle_writes_its_limit_as_a_duration_and_its_count_in_words() -> None:
    with TimeSkipping() as env:
        env.client.schedule("late:{1}", delay_ms=86_400_000)
        with pytest.raises(NotIdle, match=r"^still busy after 1h: 1 timer pending$"):
            env.run_until_idle(limit="1h")


def test_a_closed_env_refuses_to_move_and_its_client_writes_nothing() -> None:
    env = TimeSkipping()
    client = env.client
    env.close()
    for call in (lambda: env.advance(1), env.run_until_idle, env.settle_now):
        with pytest.raises(TimerClosed, match=r"closed .*make another"):
            call()
    with pytest.raises(TimerError):
        client.schedule("after:{1}", delay_ms=1_000)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (None, "got None"),
        (float("nan"), "got nan"),
        (float("inf"), "got inf"),
        (dt.timedelta(seconds=-5), "got -1 day, 23:59:55"),
    ],
)
def test_a_refused_duration_is_written_as_python_writes_it(value: object, said: str) -> None:
    with TimeSkipping() as env, pytest.raises(InvalidInput) as caught:
        env.advance(value)  # type: ignore[arg-type]
    assert str(caught.value).endswith(said), caught.value


def test_the_pytest_plugin_without_the_testing_extra_says_how_to_install_it() -> None:
    """`pytest_plugins = ["timer.testing.fixtures"]` without fakeredis was a bare
    ModuleNotFoundError; `TimeSkipping` itself named the install line (trial 31)."""
    code = (
        "import sys; sys.modules['fakeredis'] = None\n"
        "try:\n    import timer.testing.fixtures\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert out.startswith("timer.testing.fixtures needs the testing extra: pip install"), out


class _Counted(TimeSkipping):
    """An env that counts the turns it takes (each :meth:`advance`, a client's poll's)."""

    turns = 0

    def advance(self, seconds: float | dt.timedelta | str) -> None:
        self.turns += 1
        super().advance(seconds)


@pytest.mark.parametrize("aio", [False, True], ids=["client", "aclient"])
def test_a_wait_of_an_hour_is_a_few_turns_and_ends_at_the_decision(aio: bool) -> None:
    """Trial 33: `client.wait` of a timer an hour out took a turn of the worker and the
    runners every 100 ms of virtual time (36,000 turns, a minute of real time; the
    guide says a fraction of a second). A poll now goes straight to the next instant
    anything is due: a handful of turns, and the clock stops at the decision exactly
    (it overran by up to a poll)."""
    env = _Counted()
    with env:
        began = env.now_ms
        env.client.schedule("h:{1}", delay_ms=3_600_000)
        if aio:

            async def waited() -> Any:
                c = await env.aclient()
                try:
                    return await c.wait("h:{1}", timeout=7_200)
                finally:
                    await c.aclose()

            outcome = asyncio.run(waited())
        else:
            outcome = env.client.wait("h:{1}", timeout=7_200)
        assert (outcome.outcome, outcome.decided_ms - began) == ("expired", 3_600_000)
        assert env.now_ms - began == 3_600_000
        assert env.turns <= 10, env.turns


def test_a_wait_that_times_out_moves_the_clock_by_its_timeout_in_a_few_turns() -> None:
    """With nothing due before its timeout, a wait jumps to it: WaitTimeout, the clock
    moved by the timeout exactly, and a timer due later is still pending."""
    env = _Counted()
    with env:
        began = env.now_ms
        env.client.schedule("late:{1}", delay_ms=7_200_000)
        with pytest.raises(WaitTimeout):
            env.client.wait("late:{1}", timeout=3_600)
        assert env.now_ms - began == 3_600_000
        assert env.client.get("late:{1}").state == "pending"  # type: ignore[union-attr]
        assert env.turns <= 10, env.turns
