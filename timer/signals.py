"""SIGTERM and SIGINT as a graceful stop, acted on outside the signal handler.

A Python signal handler runs on the main thread between two bytecodes, wherever that
thread is: inside ``Event.wait`` holding the event's own lock, say. A handler that then
calls ``event.set()`` waits for a lock its own thread holds, and the process never stops
(a worker hung this way once in CI, a SIGTERM after start-up). So the handler here only
sets a flag and wakes a watcher thread, through an event the main thread never touches;
the watcher calls ``stop`` on a thread of its own, where taking any lock is safe.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_on_signals(
    stop: Callable[[signal.Signals], None], *, name: str, second_as_before: bool = False
) -> Iterator[None]:
    """Inside the block, SIGTERM and SIGINT call ``stop(signal)`` on a watcher thread.

    Main thread only (where Python runs signal handlers); elsewhere the block changes
    nothing. ``second_as_before``: the first signal puts back the handlers there were, so
    a second Ctrl-C does what it did before (interrupts). The old handlers are put back
    when the block ends.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[signal.Signals] = []
    wake = threading.Event()  # set by the handler; never waited on by the main thread
    closing = False
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        # No lock, no logging, no I/O here: see the module's doc.
        if closing or received:
            return
        received.append(signal.Signals(signum))
        if second_as_before:
            restore()
        wake.set()

    def watch() -> None:
        wake.wait()
        if received and not closing:
            stop(received[0])

    watcher = threading.Thread(target=watch, name=f"{name}-signals", daemon=True)
    watcher.start()
    for sig in SIGNALS:
        signal.signal(sig, on_signal)
    try:
        yield
    finally:
        restore()
        closing = True
        wake.set()
        watcher.join(5)
