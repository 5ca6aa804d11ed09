"""The demo's reaction to a job timeout, run by ``tickwheel handle`` in its own process.

``tickwheel demo`` starts ``tickwheel handle timer.cli.demo.handlers:on_timeout`` as a
deployment would. Every 10th job's first attempt fails (a flaky downstream: retried)
and one job always fails (a poison outcome: dead-lettered after its last attempt). Each
first start is logged with its lateness (wall clock minus deadline, ms) for the summary,
and each outcome handled by its id: handlers run at least once, and an acknowledgement a
failover lost brings its outcome again, so the summary counts outcomes, not runs.
"""

from __future__ import annotations

import os
import time

from timer import Outcome

LOG = os.environ.get("TICKWHEEL_DEMO_HANDLER_LOG", "")
HANDLED = os.environ.get("TICKWHEEL_DEMO_HANDLED_LOG", "")
POISON = os.environ.get("TICKWHEEL_DEMO_POISON", "")


def on_timeout(o: Outcome) -> None:
    if o.attempt == 1 and LOG:
        with open(LOG, "a") as f:  # one short line per write: appends do not interleave
            f.write(f"{o.id} {int(time.time() * 1000) - o.deadline_ms}\n")
    if o.id == POISON:
        raise RuntimeError(f"{o.id}: the job's owner is gone (a poison outcome)")
    if o.payload["job"] % 10 == 0 and o.attempt == 1:
        raise ConnectionError(f"{o.id}: downstream briefly unavailable")
    if HANDLED:  # each outcome handled, by id: one delivered again is counted once
        with open(HANDLED, "a") as f:
            f.write(f"{o.id}\n")
