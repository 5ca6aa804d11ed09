"""Where expired tasks run: one executor thread (Kafka's), or inline on the caller.

Hand-written rather than ``concurrent.futures.ThreadPoolExecutor``: that one creates a
Future per task, which costs more than the wheel itself when a million timers expire.
Here every bucket that expires in one ``advance_clock`` goes over as one list: one
``SimpleQueue.put`` per batch, not per task. Tasks run in expiry order, never while the
timer's lock is held; a task cancelled before its turn is skipped; an exception in
``run()`` is logged, not lost.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Sequence

from .task import TimerTask

log = logging.getLogger("timer.executor")

_STOP: list[TimerTask] = []  # a sentinel batch, told apart by identity


class InlineExecutor:
    """Runs each batch at once on the thread that hands it over.

    For tasks that only hand their work on (a ``queue.put``), where a thread hop costs
    more than the task: the worker's FireTasks. A slow ``run()`` delays the reaper.
    """

    def __init__(self) -> None:
        self.errors = 0
        self._closed = False

    def submit(self, tasks: Sequence[TimerTask]) -> None:
        for task in tasks:
            if task._cancelled:
                continue
            try:
                task.run()
            except Exception:
                self.errors += 1
                log.exception("timer task %r raised; the timer goes on", task)

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        self._closed = True
        return True

    def shutdown_now(self, timeout_s: float = 5.0) -> list[TimerTask]:
        self._closed = True
        return []

    @property
    def is_terminated(self) -> bool:
        return self._closed


class TaskExecutor(InlineExecutor):
    """One daemon thread running submitted batches in order.

    Thread-safe: ``submit`` from any thread; ``shutdown``/``shutdown_now`` once.
    """

    def __init__(self, name: str) -> None:
        super().__init__()
        self._queue: queue.SimpleQueue[Sequence[TimerTask]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=f"executor-{name}", daemon=True)
        self._thread.start()

    def submit(self, tasks: Sequence[TimerTask]) -> None:
        self._queue.put(tasks)

    def _loop(self) -> None:
        run = super().submit
        while True:
            batch = self._queue.get()
            if batch is _STOP:
                return
            run(batch)

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Run what was already submitted, then stop; True if the thread ended in time."""
        self._queue.put(_STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def shutdown_now(self, timeout_s: float = 5.0) -> list[TimerTask]:
        """Stop at once and return the submitted tasks that never ran (not cancelled)."""
        never_ran: list[TimerTask] = []
        while True:
            try:
                batch = self._queue.get_nowait()
            except queue.Empty:
                break
            never_ran += (task for task in batch if not task._cancelled)
        self.shutdown(timeout_s)
        return never_ran

    @property
    def is_terminated(self) -> bool:
        return not self._thread.is_alive()
