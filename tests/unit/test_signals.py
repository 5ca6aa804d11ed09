"""SIGTERM/SIGINT as a graceful stop (timer.signals), in a process of their own: a
handler that waits for a lock its own thread holds hangs, and must not hang the suite."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(script: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_a_signal_while_the_main_thread_holds_the_stop_lock_still_stops() -> None:
    """The moment a handler calling ``event.set()`` waits on its own thread forever: the
    signal lands while the main thread holds the event's lock (as inside ``Event.wait``)."""
    out = run("""
        import signal, threading
        from timer.signals import stop_on_signals
        stopped = threading.Event()
        calls = []
        def stop(sig):
            calls.append((sig.name, threading.current_thread().name))
            stopped.set()
        with stop_on_signals(stop, name="t"):
            with stopped._cond:  # what Event.wait holds between two bytecodes
                signal.raise_signal(signal.SIGTERM)
            assert stopped.wait(10), "stop was never called"
            signal.raise_signal(signal.SIGINT)  # a second signal: ignored, no KeyboardInterrupt
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        print(calls)
    """)
    assert out.strip() == "[('SIGTERM', 't-signals')]"


def test_second_as_before_gives_the_second_signal_its_old_meaning() -> None:
    out = run("""
        import signal, threading
        from timer.signals import stop_on_signals
        stopped = threading.Event()
        try:
            with stop_on_signals(lambda sig: stopped.set(), name="t", second_as_before=True):
                signal.raise_signal(signal.SIGINT)
                assert stopped.wait(10)
                signal.raise_signal(signal.SIGINT)
                print("not interrupted")
        except KeyboardInterrupt:
            print("interrupted")
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    """)
    assert out.strip() == "interrupted"


def test_off_the_main_thread_it_changes_nothing() -> None:
    out = run("""
        import signal, threading
        from timer.signals import stop_on_signals
        seen = []
        def body():
            with stop_on_signals(lambda sig: None, name="t"):
                seen.append(signal.getsignal(signal.SIGTERM))
        t = threading.Thread(target=body); t.start(); t.join()
        print(seen == [signal.SIG_DFL])
    """)
    assert out.strip() == "True"
