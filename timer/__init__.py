"""tickwheel's library: Kafka's hierarchical timing wheel and purgatory, made durable.

The in-memory engine (this package's ``task``, ``task_list``, ``wheel``, ``delay_queue``,
``system_timer``, ``reaper``, ``purgatory`` modules) needs no Redis and never imports it.
"""

from .clock import Clock, ManualClock, MonotonicClock
from .delay_queue import DelayQueue
from .errors import (
    ConfigError,
    DuplicateTimer,
    Fenced,
    InvalidInput,
    StoreError,
    TimerClosed,
    TimerError,
    TimerFull,
    TimerNotFound,
)
from .purgatory import DelayedOperation, DelayedOperationPurgatory
from .reaper import SystemTimerReaper
from .system_timer import MAX_EXPIRATION_MS, SystemTimer
from .task import TimerTask, TimerTaskEntry
from .task_list import TaskCounter, TimerTaskList
from .wheel import TimingWheel

__version__ = "0.1.0"

__all__ = [
    "MAX_EXPIRATION_MS",
    "Clock",
    "ConfigError",
    "DelayQueue",
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "DuplicateTimer",
    "Fenced",
    "InvalidInput",
    "ManualClock",
    "MonotonicClock",
    "StoreError",
    "SystemTimer",
    "SystemTimerReaper",
    "TaskCounter",
    "TimerClosed",
    "TimerError",
    "TimerFull",
    "TimerNotFound",
    "TimerTask",
    "TimerTaskEntry",
    "TimerTaskList",
    "TimingWheel",
    "__version__",
]
