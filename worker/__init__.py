"""The tickwheel worker process: membership, shard leases, the two timing wheels that
hold all its shards' timers (the default and lower priorities, the raised ones), recovery."""

# This folder is the package timer.worker (timer/worker links here). From the repository's
# root it is also importable as plain `worker`: a second copy whose classes are not
# timer.worker's, so that name refuses.
if __name__ != "timer.worker":
    raise ImportError(
        f"{__name__!r} is the repository's worker/ folder imported by its own name: import "
        "it as timer.worker (run a worker with `tickwheel worker` or `python -m timer.worker`)"
    )

from .handing import fire_and_handle
from .settings import WorkerSettings
from .stats import Health, WorkerStats
from .worker import Worker

__all__ = ["Health", "Worker", "WorkerSettings", "WorkerStats", "fire_and_handle"]
