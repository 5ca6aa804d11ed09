"""Spark helpers: register, cancel and notify timers from DataFrames; read outcomes back.

PySpark is the optional ``spark`` extra, imported lazily: ``import timer`` never needs it.

The work runs on the executors (``foreachPartition``), through one ``TimerClient`` per
executor Python process (kept in a small per-process pool, since Spark reuses its Python
workers), in pipelined batches grouped by shard and node. Counts come back through
accumulators, which Spark applies once per successful task of an action.

**Retries keep the report true.** Every row of a job carries an origin token
``<job token>/<partition>``; Redis stores it with each timer it creates. When Spark
re-runs a partition whose first attempt died half-way, the timers that attempt created
come back as "already pending, created under my own token" and are counted as
*scheduled*, while timers that existed before the job (another token) are *duplicate*.
The failed attempt's accumulator updates are discarded by Spark, so nothing counts
twice. A replayed Structured Streaming micro-batch uses the token of its batch id, so it
creates no second timers and reports the same counts.

Cancel and notify are idempotent in Redis too; on a retried partition, cancellations or
completions already done by the failed attempt are counted as ``already_decided``
rather than ``cancelled``/``completed`` (Redis does not record who decided a timer).

The package: ``writing`` (schedule, cancel, notify, heartbeat, schedules), ``reading``
(outcomes as a DataFrame) and ``streaming`` (a micro-batch sink).
"""

from __future__ import annotations

from .reading import outcome_schema, read_outcomes, read_shard_outcomes
from .streaming import ScheduleSink, schedule_sink
from .writing import (
    ColumnOptions,
    Report,
    cancel_timers,
    create_schedules,
    heartbeat_timers,
    notify_keys,
    pooled_client,
    schedule_timers,
)

__all__ = [
    "ColumnOptions",
    "Report",
    "ScheduleSink",
    "cancel_timers",
    "create_schedules",
    "heartbeat_timers",
    "notify_keys",
    "outcome_schema",
    "pooled_client",
    "read_outcomes",
    "read_shard_outcomes",
    "schedule_sink",
    "schedule_timers",
]
