"""The ``tickwheel`` command line (click)."""

# This folder is the package timer.cli (timer/cli links here). From the repository's root
# it is also importable as plain `cli`: a second copy of the package, so that name refuses.
if __name__ != "timer.cli":
    raise ImportError(
        f"{__name__!r} is the repository's cli/ folder imported by its own name: import it "
        "as timer.cli (run the command line as `tickwheel` or `python -m timer.cli`)"
    )

import sys

from .starting import stop_quietly_while_starting

stop_quietly_while_starting(sys.argv)
