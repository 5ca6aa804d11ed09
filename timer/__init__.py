"""tickwheel's library: Kafka's hierarchical timing wheel and purgatory, made durable.

The in-memory engine (this package's ``task``, ``task_list``, ``wheel``, ``delay_queue``,
``system_timer``, ``reaper``, ``purgatory`` modules) needs no Redis and never imports it;
``client`` (with ``keys``, ``scripts``, ``store``, ``outcomes``) is the durable layer.
"""

from .client import ClientSettings, Meta, TimerClient
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
    WaitTimeout,
)
from .models import Outcome, Timer, TimerInfo, Trimmed
from .purgatory import DelayedOperation, DelayedOperationPurgatory
from .reaper import SystemTimerReaper
from .system_timer import MAX_EXPIRATION_MS, SystemTimer
from .task import TimerTask, TimerTaskEntry
from .task_list import TaskCounter, TimerTaskList
from .wheel import TimingWheel

__version__ = "0.1.0"

__all__ = [
    "MAX_EXPIRATION_MS",
    "ClientSettings",
    "Clock",
    "ConfigError",
    "DelayQueue",
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "DuplicateTimer",
    "Fenced",
    "InvalidInput",
    "ManualClock",
    "Meta",
    "MonotonicClock",
    "Outcome",
    "StoreError",
    "SystemTimer",
    "SystemTimerReaper",
    "TaskCounter",
    "Timer",
    "TimerClient",
    "TimerClosed",
    "TimerError",
    "TimerFull",
    "TimerInfo",
    "TimerNotFound",
    "TimerTask",
    "TimerTaskEntry",
    "TimerTaskList",
    "TimingWheel",
    "Trimmed",
    "WaitTimeout",
    "__version__",
]
