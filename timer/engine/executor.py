"""The single thread that runs expired tasks (Kafka's one-thread task executor).

Hand-written rather than ``concurrent.futures.ThreadPoolExecutor``: that one creates a
Future per task, which costs more than the wheel itself when a million timers expire;
here a submit is one ``SimpleQueue.put``. Tasks run in expiry order, never while the
timer's lock is held, and an exception in ``run()`` is logged, not lost.
"""

from __future__ import annotations

import logging
import queue
import threading

from .task import TimerTask

log = logging.getLogger("timer.executor")

_STOP = object()


class TaskExecutor:
    """One daemon thread running submitted tasks in order.

    Thread-safe: ``submit`` from any thread; ``shutdown``/``shutdown_now`` once.
    """

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.errors = 0
        self._thread = threading.Thread(target=self._loop, name=f"executor-{name}", daemon=True)
        self._thread.start()

    def submit(self, task: TimerTask) -> None:
        self._queue.put(task)

    def _loop(self) -> None:
        while True:
            task = self._queue.get()
            if task is _STOP:
                return
            try:
                task.run()  # type: ignore[attr-defined]
            except Exception:
                self.errors += 1
                log.exception("timer task %r raised; the timer goes on", task)

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Run what was already submitted, then stop; True if the thread ended in time."""
        self._queue.put(_STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def shutdown_now(self, timeout_s: float = 5.0) -> list[TimerTask]:
        """Stop at once and return the submitted tasks that never ran."""
        never_ran: list[TimerTask] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                never_ran.append(item)  # type: ignore[arg-type]
        self.shutdown(timeout_s)
        return never_ran

    @property
    def is_terminated(self) -> bool:
        return not self._thread.is_alive()
