"""SystemTimerReaper: Kafka's SystemTimerReaperTest, and that an idle reaper does not spin."""

from __future__ import annotations

import threading
import time

import pytest

from timer import InvalidInput, SystemTimer, SystemTimerReaper

from .helpers import NoopTask, RecordingTask


def test_reaper_expires_tasks() -> None:
    """Tasks added through the reaper expire without anyone calling advance_clock."""
    out: list[object] = []
    with SystemTimerReaper(SystemTimer("timer")) as reaper:
        tasks = [RecordingTask(d, d, out) for d in (100, 200, 300)]
        for t in tasks:
            reaper.add(t)
        for t in tasks:
            assert t.done.wait(10)
    assert sorted(out) == [100, 200, 300]  # type: ignore[type-var]


def test_reaper_close_stops_thread_and_closes_timer_once() -> None:
    """close() wakes the blocked reaper, joins it and closes the timer; twice is harmless."""
    timer = SystemTimer("t")
    closes = 0
    original = timer.close

    def counting_close() -> None:
        nonlocal closes
        closes += 1
        original()

    timer.close = counting_close  # type: ignore[method-assign]
    reaper = SystemTimerReaper(timer)
    reaper.close()
    reaper.close()
    assert reaper.is_shutdown
    assert closes == 1


def test_shared_timer_between_consumers() -> None:
    """Two producers share one reaper; one finishing does not stop the other's tasks."""
    out: list[object] = []
    with SystemTimerReaper(SystemTimer("shared")) as reaper:
        a, b = RecordingTask(100, "a", out), RecordingTask(200, "b", out)
        reaper.add(a)
        reaper.add(b)
        assert a.done.wait(10) and b.done.wait(10)
        late = RecordingTask(100, "late", out)
        reaper.add(late)
        assert late.done.wait(10)


def test_rejects_missing_timer() -> None:
    """A reaper needs a timer."""
    with pytest.raises(InvalidInput):
        SystemTimerReaper(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("pending", [0, 1])
def test_idle_reaper_does_not_spin(pending: int) -> None:
    """Over a second with nothing due, the reaper thread uses almost no CPU time."""
    with SystemTimerReaper(SystemTimer("idle")) as reaper:
        for _ in range(pending):
            reaper.add(NoopTask(3_600_000))  # due in an hour: must not wake it now
        ident = reaper.thread.ident
        assert ident is not None
        clock_id = time.pthread_getcpuclockid(ident)
        start = time.clock_gettime(clock_id)
        threading.Event().wait(1.0)  # the measurement window, not synchronisation
        used = time.clock_gettime(clock_id) - start
    assert used < 0.1, f"idle reaper used {used:.3f} CPU-seconds in 1 s"
