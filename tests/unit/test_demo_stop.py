"""SIGTERM stops the demo where it is, except while a process is being started: raised
inside ``Popen`` after the fork, it would leave a child no finally block knows of."""

from __future__ import annotations

import os
import signal

import pytest

from timer.cli.demo.stop import Terminated, starting, stopped_by


def test_sigterm_is_raised_where_the_demo_is() -> None:
    with pytest.raises(Terminated), stopped_by(signal.SIGTERM):
        os.kill(os.getpid(), signal.SIGTERM)
        signal.sigtimedwait([], 0)  # a point where the handler runs
        pytest.fail("not raised")


def test_sigterm_while_a_process_starts_waits_until_it_is_recorded() -> None:
    recorded: list[str] = []
    with pytest.raises(Terminated), stopped_by(signal.SIGTERM):
        with starting():
            os.kill(os.getpid(), signal.SIGTERM)
            with starting():  # nested: still held
                recorded.append("w0")
            recorded.append("w1")
        pytest.fail("not raised on the way out")
    assert recorded == ["w0", "w1"]


def test_a_second_sigterm_does_not_cut_the_clean_up_short() -> None:
    cleaned = False
    with pytest.raises(Terminated), stopped_by(signal.SIGTERM):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            pytest.fail("not raised")
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # ignored now
            cleaned = True
    assert cleaned
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
