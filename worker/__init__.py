"""The tickwheel worker process: membership, shard leases, per-shard reaper, recovery."""

from .settings import WorkerSettings
from .worker import Worker, WorkerStats

__all__ = ["Worker", "WorkerSettings", "WorkerStats"]
