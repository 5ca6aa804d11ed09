"""SystemTimer: Kafka's TimerTest on a 1 ms x 3 wheel, plus Netty's max_pending and stop()."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator
from typing import cast

import pytest

from timer import (
    MAX_EXPIRATION_MS,
    InvalidInput,
    ManualClock,
    SystemTimer,
    TimerClosed,
    TimerFull,
    TimerTask,
)

from .helpers import Marker, NoopTask, RecordingTask


@pytest.fixture
def timer() -> Iterator[SystemTimer]:
    t = SystemTimer("test", tick_ms=1, wheel_size=3)
    yield t
    t.close()
    assert t.is_terminated


def drain(timer: SystemTimer) -> None:
    """Expire everything that is due, then wait until the executor ran it all."""
    while timer.advance_clock(0):
        pass
    marker = Marker()  # due already: it runs after everything submitted before it
    timer.add(marker)
    assert marker.done.wait(10), "executor did not catch up"


def test_already_expired_tasks_run_at_once(timer: SystemTimer) -> None:
    """Tasks with negative delays run as soon as they are added."""
    out: list[object] = []
    tasks = [RecordingTask(i, i, out) for i in range(-5, 0)]
    for t in tasks:
        timer.add(t)
    timer.advance_clock(0)
    for t in tasks:
        assert t.done.wait(3), "already expired tasks should run immediately"
    assert sorted(out) == [-5, -4, -3, -2, -1]  # type: ignore[type-var]
    assert timer.size == 0


def test_task_expiration_through_many_levels(timer: SystemTimer) -> None:
    """Tasks of 0..500 ms on a 1 ms x 3 wheel (six levels) all run exactly once."""
    out: list[object] = []
    tasks: list[RecordingTask] = []
    ids: list[int] = []
    for i in range(0, 5):
        tasks.append(RecordingTask(i, i, out))
        ids.append(i)
    for i in range(10, 100):
        tasks += [RecordingTask(i, i, out), RecordingTask(i, i, out)]
        ids += [i, i]
    for i in range(100, 500):
        tasks.append(RecordingTask(i, i, out))
        ids.append(i)
    for t in tasks:
        timer.add(t)
    while timer.advance_clock(2000):
        pass
    for t in tasks:
        assert t.done.wait(10)
    assert sorted(out) == ids  # type: ignore[type-var]
    assert all(t.runs == 1 for t in tasks)
    assert len(timer.wheel.levels()) >= 5


def test_never_runs_before_expiration_with_manual_clock() -> None:
    """With a manual clock a task runs at the first advance at or past its expiration."""
    clock = ManualClock(10_000)
    timer = SystemTimer("manual", tick_ms=1, wheel_size=3, clock=clock)
    try:
        out: list[object] = []
        for delay in (1, 2, 7, 30, 31, 250):
            timer.add(RecordingTask(delay, 10_000 + delay, out, now=clock.now_ms))
        for _ in range(300):
            clock.advance(1)
            drain(timer)
        assert cast("list[tuple[int, int]]", out) == [
            (e, e) for e in (10_001, 10_002, 10_007, 10_030, 10_031, 10_250)
        ]
    finally:
        timer.close()


def test_cancelled_task_never_runs() -> None:
    """A cancelled task leaves the timer at once and never runs."""
    clock = ManualClock(0)
    timer = SystemTimer("cancel", tick_ms=1, wheel_size=3, clock=clock)
    try:
        out: list[object] = []
        keep, drop = RecordingTask(5, "keep", out), RecordingTask(5, "drop", out)
        timer.add(keep)
        timer.add(drop)
        drop.cancel()
        assert timer.size == 1
        clock.advance(10)
        drain(timer)
        assert out == ["keep"]
    finally:
        timer.close()


def test_max_pending_rejects_with_clear_error() -> None:
    """Adding past max_pending raises TimerFull naming the limit; the task is not added."""
    timer = SystemTimer("bounded", max_pending=2)
    try:
        timer.add(NoopTask(60_000))
        timer.add(NoopTask(60_000))
        with pytest.raises(TimerFull, match="max_pending"):
            timer.add(NoopTask(60_000))
        assert timer.size == 2
    finally:
        timer.close()


def test_stop_returns_tasks_that_never_ran() -> None:
    """stop() returns every pending task (not the cancelled ones) and closes the timer."""
    timer = SystemTimer("stopping")
    tasks = [NoopTask(60_000 + i) for i in range(5)]
    for t in tasks:
        timer.add(t)
    tasks[0].cancel()
    left = timer.stop()
    assert set(map(id, left)) == set(map(id, tasks[1:]))
    assert timer.size == 0
    with pytest.raises(TimerClosed):
        timer.add(NoopTask(1))


def test_overflowing_delay_saturates() -> None:
    """An absurd delay saturates at MAX_EXPIRATION_MS instead of building endless levels."""
    timer = SystemTimer("huge")
    try:
        task = NoopTask(10**30)
        timer.add(task)
        assert timer.size == 1
        assert task._bucket is not None and task._bucket[task] == MAX_EXPIRATION_MS
        assert len(timer.wheel.levels()) <= 16
        assert timer.advance_clock(0) is False
    finally:
        timer.close()


def test_exception_in_task_is_logged_and_timer_goes_on(
    timer: SystemTimer, caplog: pytest.LogCaptureFixture
) -> None:
    """A task that raises is logged with its traceback; later tasks still run."""

    class Boom(TimerTask):
        def run(self) -> None:
            raise RuntimeError("boom")

    out: list[object] = []
    after = RecordingTask(-1, "after", out)
    with caplog.at_level(logging.ERROR, logger="timer.executor"):
        timer.add(Boom(-1))
        timer.add(after)
        assert after.done.wait(5)
    assert out == ["after"]
    assert timer.task_errors == 1
    assert any("boom" in (r.exc_text or "") or r.exc_info for r in caplog.records)


def test_run_is_not_under_the_timer_lock(timer: SystemTimer) -> None:
    """run() may add to and cancel in the same timer without deadlocking (KAFKA-3994)."""
    done = threading.Event()

    class Reentrant(TimerTask):
        def run(self) -> None:
            other = NoopTask(60_000)
            timer.add(other)
            other.cancel()
            done.set()

    timer.add(Reentrant(1))
    while not done.is_set():
        timer.advance_clock(100)
    assert done.wait(5)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"tick_ms": 0}, "tick_ms"), ({"wheel_size": 1}, "wheel_size"), ({"max_pending": -1}, "max")],
)
def test_bad_settings_are_rejected(kwargs: dict[str, int], match: str) -> None:
    """Nonsense settings fail at construction with the name of the setting."""
    with pytest.raises(InvalidInput, match=match):
        SystemTimer("bad", **kwargs)  # type: ignore[arg-type]


def test_add_rejects_non_tasks(timer: SystemTimer) -> None:
    """add() takes TimerTask instances only."""
    with pytest.raises(InvalidInput, match="TimerTask"):
        timer.add(lambda: None)  # type: ignore[arg-type]


def test_inline_runs_tasks_on_the_thread_that_expires_them() -> None:
    """inline=True: no executor thread; run() is called by advance_clock's caller."""
    clock = ManualClock(0)
    timer = SystemTimer("inline", clock=clock, inline=True)
    ran_on: list[int] = []

    class Where(TimerTask):
        def run(self) -> None:
            ran_on.append(threading.get_ident())

    timer.add(Where(5))
    timer.add(Where(-1))  # due already: runs inside add, on this thread
    assert ran_on == [threading.get_ident()]
    clock.advance(5)
    assert timer.advance_clock(0) is True
    assert ran_on == [threading.get_ident()] * 2
    timer.close()
    assert timer.is_terminated


def test_a_task_cancelled_after_it_expired_but_before_it_ran_is_skipped() -> None:
    """The executor checks the flag just before run(): a late cancel still wins."""
    clock = ManualClock(0)
    timer = SystemTimer("late-cancel", clock=clock)
    release = threading.Event()
    started = threading.Event()

    class Blocker(TimerTask):
        def run(self) -> None:
            started.set()
            release.wait(10)

    out: list[object] = []
    timer.add(Blocker(-1))  # holds the executor thread
    assert started.wait(5)
    target = RecordingTask(3, "target", out)
    timer.add(target)
    clock.advance(3)
    assert timer.advance_clock(0) is True  # expired and handed over, not yet run
    target.cancel()
    release.set()
    drain(timer)
    assert out == [] and target.runs == 0
    timer.close()


def test_lock_free_cancels_racing_cascades() -> None:
    """Threads cancel while the clock steps through cascades; a cancel never runs a task.

    On a 2-bucket wheel, tasks due in [1000, 1024) cascade at 512, 768, 896, 960 and 992
    ms, each cascade a Python loop over all of them under the lock, while two threads
    cancel every third task without it. Every cancel lands before 1000 ms, so no cancelled
    task was due yet: none may run; every other task runs exactly once; nothing is left.
    """
    clock = ManualClock(0)
    timer = SystemTimer("race", tick_ms=1, wheel_size=2, clock=clock, inline=True)
    out: list[object] = []
    tasks = [RecordingTask(1_000 + i % 24, i, out) for i in range(6_000)]
    for task in tasks:
        timer.add(task)
    cancelled = {i for i in range(6_000) if i % 3 == 0}
    go = threading.Event()

    def canceller(part: list[RecordingTask]) -> None:
        go.wait(10)
        mine = [task for task in part if task.ident in cancelled]
        deadline = time.monotonic() + 10
        for k, task in enumerate(mine):
            # Spread the cancels over 500..990 ms of the clock, across the cascades.
            while clock.now_ms() < 500 + 490 * k // len(mine) and time.monotonic() < deadline:
                pass
            task.cancel()

    threads = [threading.Thread(target=canceller, args=(tasks[k::2],)) for k in range(2)]
    for t in threads:
        t.start()
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython allows: more races
    try:
        go.set()
        while clock.now_ms() < 999:
            clock.advance(1)
            timer.advance_clock(0)
        for t in threads:
            t.join(10)
    finally:
        sys.setswitchinterval(switch)
    clock.advance(100)
    timer.advance_clock(0)
    assert sorted(out) == sorted(set(range(6_000)) - cancelled)  # type: ignore[type-var]
    assert all(t.runs == (0 if t.ident in cancelled else 1) for t in tasks)
    assert timer.size == 0
    timer.close()


def test_each_run_uses_the_core_it_names(engine_core: str) -> None:
    """The engine tests run on the compiled core and on the Python one (conftest)."""
    compiled = type(SystemTimer.__dict__["add"]).__name__ == "method_descriptor"
    assert compiled == (engine_core == "compiled")
    assert (type(TimerTask.__dict__["cancel"]).__name__ == "method_descriptor") == compiled


def test_an_add_that_fails_midway_releases_the_lock() -> None:
    """A clock that raises inside add: the error reaches the caller, the lock is free
    again (the next add and advance_clock go on), and nothing was placed."""

    class FailingClock(ManualClock):
        fail = False

        def now_ms(self) -> int:
            if self.fail:
                raise RuntimeError("clock broke")
            return super().now_ms()

    clock = FailingClock(0)
    timer = SystemTimer("failing", clock=clock, inline=True)
    task = RecordingTask(5, "late", out := cast("list[object]", []))
    clock.fail = True
    with pytest.raises(RuntimeError, match="clock broke"):
        timer.add(task)
    assert task._bucket is None and timer.size == 0
    clock.fail = False
    assert timer._lock.acquire(timeout=1), "add left the timer's lock held"
    timer._lock.release()
    timer.add(task)
    clock.advance(5)
    assert timer.advance_clock(0) is True
    assert out == ["late"]
    timer.close()


def test_a_delay_ms_property_of_a_subclass_is_honoured() -> None:
    """add reads delay_ms by name: a subclass may compute it."""

    class Computed(TimerTask):
        __slots__ = ("base",)

        def __init__(self, base: int) -> None:
            super().__init__(0)
            self.base = base

        @property
        def delay_ms(self) -> int:
            return self.base * 2

        @delay_ms.setter
        def delay_ms(self, value: int) -> None:
            pass

        def run(self) -> None:
            pass

    clock = ManualClock(0)
    timer = SystemTimer("computed", clock=clock, inline=True)
    task = Computed(50)
    timer.add(task)
    assert task._bucket is not None and task._bucket[task] == 100
    timer.close()


class HeldTask(TimerTask):
    """Runs until ``go`` is set (a reaper in the middle of handing a release over)."""

    def __init__(self, delay_ms: int, out: list[object], name: str) -> None:
        super().__init__(delay_ms)
        self.out, self.name = out, name
        self.running, self.go = threading.Event(), threading.Event()

    def run(self) -> None:
        self.running.set()
        assert self.go.wait(10)
        self.out.append(self.name)


def test_expire_due_waits_for_a_release_another_thread_has_under_way() -> None:
    """``expire_due`` returns only once every task due has run (inline): what it expires
    itself, and what another thread took out of the wheel before and is still handing
    over (that thread's tasks are not due again, so a plain advance_clock(0) returns at
    once without them)."""
    clock = ManualClock(0)
    timer = SystemTimer("held", tick_ms=1, wheel_size=8, clock=clock, inline=True)
    out: list[object] = []
    held = HeldTask(5, out, "held")
    timer.add(held)
    timer.add(RecordingTask(7, "later", out))
    clock.advance(5)
    reaper = threading.Thread(target=timer.advance_clock, args=(0,))
    reaper.start()
    assert held.running.wait(10)  # taken out of the wheel, being handed over
    clock.advance(2)
    returned = threading.Event()

    def expire_due() -> None:
        timer.expire_due()
        returned.set()

    waiter = threading.Thread(target=expire_due)
    waiter.start()
    # it expired its own (the later one) and waits for the held one's hand-over
    deadline = time.monotonic() + 10
    while out != ["later"] and time.monotonic() < deadline:
        time.sleep(0.001)
    assert out == ["later"]
    assert not returned.wait(0.2)  # a wrong one returns at once: given a moment to
    held.go.set()
    assert returned.wait(10)
    assert sorted(map(str, out)) == ["held", "later"]
    reaper.join(10)
    waiter.join(10)
    timer.close()
