"""The in-memory engine: Kafka's hierarchical timing wheel and delayed-operation purgatory.

It needs no Redis and no msgpack, and imports neither (a test checks ``sys.modules`` in a
fresh interpreter): usable alone, in-process. The durable layer (``timer.durable`` and
the clients) and the worker build on it; it builds on nothing but ``timer.errors``.

    task        TimerTask (override run; cancel in O(1))
    bucket      TimerTaskList: one bucket, a dict of task -> expiration
    wheel       TimingWheel: one level of the hierarchy, overflow wheels on demand
    delay_queue DelayQueue: the heap of buckets the reaper sleeps on
    executor    TaskExecutor: the thread that runs expired tasks (or InlineExecutor)
    interface   TaskTimer: the interface (add, advance_clock, size, close)
    system_timer SystemTimer: the TaskTimer the rest of tickwheel uses
    reaper      SystemTimerReaper: the thread that drives a SystemTimer
    purgatory   DelayedOperation and DelayedOperationPurgatory, over any TaskTimer
    clock       Clock, MonotonicClock, ManualClock
"""

from .bucket import TimerTaskList
from .clock import Clock, ManualClock, MonotonicClock
from .interface import TaskTimer
from .purgatory import DelayedOperation, DelayedOperationPurgatory
from .reaper import SystemTimerReaper
from .system_timer import DEFAULT_WHEEL_SIZE, MAX_EXPIRATION_MS, SystemTimer
from .task import TimerTask
from .wheel import TimingWheel

__all__ = [
    "DEFAULT_WHEEL_SIZE",
    "MAX_EXPIRATION_MS",
    "Clock",
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "ManualClock",
    "MonotonicClock",
    "SystemTimer",
    "SystemTimerReaper",
    "TaskTimer",
    "TimerTask",
    "TimerTaskList",
    "TimingWheel",
]
