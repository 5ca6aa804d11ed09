"""One led shard: its lease epoch, its timers inside the horizon, its loaded buckets."""

from __future__ import annotations

import queue
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from timer import TimerTask
from timer.client.shard_store import ShardStore
from timer.clock import SYSTEM_TIME


class Sink(Protocol):
    """Where an expired FireTask goes (a queue the firer takes from)."""

    def put(self, item: FireTask, /) -> None: ...


class RaisedSink:
    """Where a task of a raised priority expires to: a queue of its own, which
    the firer takes whole before the flood's, and a wake-up on ``fire_queue`` (None)
    for a firer waiting there."""

    __slots__ = ("raised", "wake")

    def __init__(
        self, raised: queue.SimpleQueue[FireTask], wake: queue.SimpleQueue[FireTask | None]
    ) -> None:
        self.raised = raised
        self.wake = wake

    def put(self, item: FireTask, /) -> None:
        self.raised.put(item)
        self.wake.put(None)


class FireTask(TimerTask):
    """A durable timer's entry in the worker's wheel: when it expires, queue it to fire
    (``released``: when the wheel let it go, monotonic ns; 0 until then; ``priority``:
    the timer's, higher fired first from a backlog; ``kept``: the firer has it in hand,
    taken early by its deadline or off its queue, so a second arrival is dropped)."""

    __slots__ = (
        "deadline_ms",
        "epoch",
        "kept",
        "now_ns",
        "priority",
        "released",
        "shard",
        "sink",
        "timer_id",
    )

    def __init__(  # noqa: PLR0917 - built on the hot path: positional is cheaper
        self,
        delay_ms: int,
        shard: int,
        epoch: int,
        timer_id: str,
        deadline_ms: int,
        sink: Sink,
        now_ns: Callable[[], int] = SYSTEM_TIME.monotonic_ns,  # the worker's clock
    ) -> None:
        super().__init__(delay_ms)
        self.now_ns = now_ns
        self.shard = shard
        self.epoch = epoch
        self.timer_id = timer_id
        self.deadline_ms = deadline_ms
        self.sink = sink
        self.released = 0
        self.priority = 0
        self.kept = False

    def run(self) -> None:
        self.released = self.now_ns()
        self.sink.put(self)


@dataclass
class ShardState:
    shard: int
    epoch: int
    store: ShardStore  # the shard's durable side: lease, load, fire, sweep
    renewed_mono_ms: float
    tasks: dict[str, FireTask] = field(default_factory=dict)
    loaded: set[int] = field(default_factory=set)
    last_sweep_mono_ms: float = 0.0
    last_load_mono_ms: float = 0.0
    last_trim_mono_ms: float | None = None  # None: not yet trimmed since it was acquired
    trim_left: int = 0  # results-table hashes the last trim's round has left (a call a tick)
    needs_reload: bool = True
    more_to_load: bool = False
    # Recurring schedules whose next occurrence waits to be planned (worker/planning.py):
    # checked at once after acquiring, after a fire or sweep that queued one, and every
    # few seconds.
    replan: bool = True
    last_replan_mono_ms: float = 0.0
    # Read from Redis every few seconds for metrics: all its pending timers (not only
    # those in the wheel) and the start of its oldest durable bucket.
    pending: int | None = None
    oldest_bucket_ms: int | None = None
    last_backlog_mono_ms: float | None = None
