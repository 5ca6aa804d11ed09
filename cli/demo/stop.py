"""How SIGTERM stops the demo: raised as :class:`Terminated` where the demo is, so its
finally blocks stop the processes it started (they run in sessions of their own, and a
Python process killed by SIGTERM runs no finally block). While a process is being
started the signal waits: raised inside ``Popen`` after the fork, it would leave a child
that no finally block knows of."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


class Terminated(BaseException):
    """SIGTERM arrived (raised where the demo is)."""


_state = {"starting": 0, "pending": False}


@contextlib.contextmanager
def stopped_by(signum: signal.Signals) -> Iterator[None]:
    """Within: ``signum`` raises :class:`Terminated`, once (a second one must not cut the
    clean-up short), or when the process being started is known (see :func:`starting`)."""

    def raise_terminated(_signum: int, _frame: object) -> None:
        signal.signal(signum, signal.SIG_IGN)
        if _state["starting"]:
            _state["pending"] = True
            return
        raise Terminated

    previous = signal.signal(signum, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signum, previous)
        _state["pending"] = False


@contextlib.contextmanager
def starting() -> Iterator[None]:
    """Around starting a process and recording it where a finally block will stop it: a
    SIGTERM in between is raised on the way out, not inside."""
    _state["starting"] += 1
    try:
        yield
    finally:
        _state["starting"] -= 1
        if not _state["starting"] and _state["pending"]:
            _state["pending"] = False
            raise Terminated
