"""tickwheel's library: Kafka's hierarchical timing wheel and purgatory, made durable.

The layers, each importing only those above it in this list:

    timer.errors    the one error hierarchy (TimerError and its subclasses)
    timer.engine    the in-memory engine: SystemTimer, its reaper, the purgatory (no Redis)
    timer.durable   the data model: keys, records, Lua scripts with their call builders and
                    reply parsers, and every operation as steps (no I/O)
    timer.client    TimerClient: runs the operations with redis-py (sync); timer.aio: the
                    asyncio peer; timer.redis.store: the redis-py error and URL boundary
    timer.handlers  Handlers: run user code per outcome (retries, dead letters, concurrency)
    timer.spark     Spark helpers over TimerClient;  timer.testing  a private server

The client names below are imported on first use, so ``import timer.engine`` (and the
engine names here) work without redis-py or msgpack installed.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from .engine import (
    MAX_EXPIRATION_MS,
    Clock,
    DelayedOperation,
    DelayedOperationPurgatory,
    ManualClock,
    MonotonicClock,
    SystemTimer,
    SystemTimerReaper,
    TimerTask,
)
from .errors import (
    Capped,
    ConfigError,
    CorruptRecord,
    DuplicateTimer,
    Fenced,
    HeartbeatCapped,
    InvalidInput,
    NotFound,
    ScheduleNotFound,
    SelectionChanged,
    StoreError,
    TimerClosed,
    TimerError,
    TimerFull,
    TimerNotFound,
    WaitTimeout,
)

if TYPE_CHECKING:
    from .client import TimerClient
    from .durable.model.models import (
        ClientSettings,
        DeadBatch,
        DeadLetter,
        GroupInfo,
        Outcome,
        Timer,
        TimerInfo,
        Trimmed,
    )
    from .handlers import Backoff, Handlers, HandlerTimedOut, Later, Limit, Retry
    from .redis.local_server import default_url

# timer/worker and timer/cli are symbolic links to the repository's worker/ and cli/; a
# checkout made with core.symlinks=false (Windows' default) has each as a text file
# holding its target, and timer.worker and timer.cli would be missing with nothing saying
# why. setup.py refuses to build such a checkout for the same reason.
for _link in ("worker", "cli"):
    if os.path.isfile(os.path.join(os.path.dirname(__file__), _link)):
        raise ImportError(
            f"timer/{_link} in this checkout is a text file, not a link to ../{_link}: it was "
            "checked out with core.symlinks=false (Windows' default). Clone again with "
            "`git clone -c core.symlinks=true` (on Windows, with Developer Mode on), or "
            "run `git config core.symlinks true && git checkout -- timer/worker timer/cli`"
        )

# name -> the module that defines it, imported when the name is first used
_LAZY = {
    "TimerClient": "timer.client",
    "ClientSettings": "timer.durable.model.models",
    "Outcome": "timer.durable.model.models",
    "Timer": "timer.durable.model.models",
    "TimerInfo": "timer.durable.model.models",
    "Trimmed": "timer.durable.model.models",
    "DeadLetter": "timer.durable.model.models",
    "DeadBatch": "timer.durable.model.models",
    "GroupInfo": "timer.durable.model.models",
    "Handlers": "timer.handlers",
    "Backoff": "timer.handlers",
    "Retry": "timer.handlers",
    "Later": "timer.handlers",
    "HandlerTimedOut": "timer.handlers",
    "Limit": "timer.handlers",
    "default_url": "timer.redis.local_server",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name == "spark":  # `from timer import spark`: the optional helpers, imported lazily
        return importlib.import_module("timer.spark")
    raise AttributeError(f"module 'timer' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "MAX_EXPIRATION_MS",
    "Backoff",
    "Capped",
    "ClientSettings",
    "Clock",
    "ConfigError",
    "CorruptRecord",
    "DeadBatch",
    "DeadLetter",
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "DuplicateTimer",
    "Fenced",
    "GroupInfo",
    "HandlerTimedOut",
    "Handlers",
    "HeartbeatCapped",
    "InvalidInput",
    "Later",
    "Limit",
    "ManualClock",
    "MonotonicClock",
    "NotFound",
    "Outcome",
    "Retry",
    "ScheduleNotFound",
    "SelectionChanged",
    "StoreError",
    "SystemTimer",
    "SystemTimerReaper",
    "Timer",
    "TimerClient",
    "TimerClosed",
    "TimerError",
    "TimerFull",
    "TimerInfo",
    "TimerNotFound",
    "TimerTask",
    "Trimmed",
    "WaitTimeout",
    "__version__",
    "default_url",
]
