"""React to job timeouts: ``tickwheel handle timer.examples.handlers:on_timeout`` runs this.

A handler gets an :class:`~timer.Outcome` and returns once the reaction is done; the
runner acknowledges it then. If it raises, the runner retries it with backoff and, after
the last attempt, moves the outcome to the dead letters (``tickwheel dead list``). It
runs at least once: record ``o.idempotency_key`` with its effect to skip a repeat.
"""

from __future__ import annotations

import json
import logging

from timer import Handlers, Outcome
from timer.durable.model.codec import jsonable
from timer.durable.model.durations import format_duration_ms

log = logging.getLogger("timer.examples.handlers")


def on_timeout(o: Outcome) -> None:
    """A job's timeout fired: the job did not report in time. Mark it failed."""
    log.info(
        "timer %s timed out (%s after its deadline, attempt %d, key %s): payload %s",
        o.id,
        format_duration_ms(o.lateness_ms),
        o.attempt,
        o.idempotency_key,
        json.dumps(jsonable(o.payload)),  # as `tickwheel tail` shows it
    )


# The same as a Handlers object, with its own group and retry policy:
#   tickwheel handle timer.examples.handlers:app
app = Handlers(group="job-timeouts", max_attempts=5)
app.add("expired", on_timeout)


@app.on("cancelled")
async def on_cancelled(o: Outcome) -> None:
    """async def handlers run on the runner's event loop."""
    log.info("job %s was cancelled", o.id)
