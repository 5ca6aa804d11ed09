"""The tickwheel worker process: membership, shard leases, per-shard reaper, recovery."""

from .handing import fire_and_handle
from .settings import WorkerSettings
from .stats import Health, WorkerStats
from .worker import Worker

__all__ = ["Health", "Worker", "WorkerSettings", "WorkerStats", "fire_and_handle"]
