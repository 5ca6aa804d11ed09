"""SIGTERM while a long-running command is still starting.

``worker``, ``handle``, ``serve``, ``dashboard`` and ``tail`` stop on SIGTERM and exit 0 once what
they hold is released; they install that handling when they start running. Before then
(Python importing, the embedded server starting) a SIGTERM killed the process outright
(status -15, 143 in a shell) though it held nothing yet: a supervisor that stops a
process as soon as it started saw a crash. From the first line of this package on, such
a command exits 0 on SIGTERM, saying so; the command's own handling replaces this one.

A server that put this handling back once it stopped, and raises the SIGTERM it stopped
on again so that the process ends (uvicorn does: ``serve`` exited 143 after a clean
stop), ends with 0 and without a word once the command said it is :func:`running`.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

SERVES = ("worker", "handle", "serve", "dashboard", "tail")
_VALUED = ("--redis-url", "--namespace")  # the global options that take a value


def command_of(argv: list[str]) -> str | None:
    """The subcommand ``argv`` runs (its first word that is not an option or a global
    option's value), or None when ``argv`` is not the ``tickwheel`` command line."""
    program = os.path.basename(argv[0]) if argv else ""
    if program != "tickwheel" and argv[:1] != ["-m"] and not program.endswith("__main__.py"):
        return None
    words = iter(argv[1:])
    for word in words:
        if word in _VALUED:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


_running: list[bool] = []


def running() -> None:
    """The command runs now: its own SIGTERM handling is in place, or about to be."""
    _running.append(True)


def _stop_while_starting(signum: int, _frame: FrameType | None) -> None:
    if not _running:
        name = command_of(sys.argv)
        sys.stderr.write(f"tickwheel {name}: stopped by SIGTERM while starting (it held nothing)\n")
    raise SystemExit(0)


def stop_quietly_while_starting(argv: list[str]) -> None:
    """For a long-running command only: a SIGTERM from now until it installs its own
    handling exits 0. Any other command keeps the default (a SIGTERM ends it, 143)."""
    if command_of(argv) in SERVES and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _stop_while_starting)
