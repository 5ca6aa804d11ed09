"""The interface the engine is written against: Kafka's ``Timer``, named ``TaskTimer``
here, because ``timer.Timer`` is the durable timer a client schedules.

``SystemTimer`` is the implementation; the purgatory takes any ``TaskTimer``, so a test can
hand it a manual one (Kafka's ``MockTimer``), and a caller can wrap one (metrics, tracing)
without subclassing.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .task import TimerTask


@runtime_checkable
class TaskTimer(Protocol):
    """Tasks that run once their delay has passed, on a clock the caller advances.

    Implementations must be safe to call from several threads: ``add`` (and a task's
    ``cancel``) from any thread while one thread drives ``advance_clock``.
    """

    def add(self, task: TimerTask) -> None:
        """Schedule ``task`` to run ``task.delay_ms`` from now (at once if already due)."""
        ...

    def advance_clock(self, timeout_ms: float | None) -> bool:
        """Wait up to ``timeout_ms`` (None: until woken) for due tasks and run them.

        True if any bucket of tasks came due; False if none did in time.
        """
        ...

    @property
    def size(self) -> int:
        """Tasks added and neither run nor cancelled."""
        ...

    def close(self) -> None:
        """Accept no more tasks; release the timer's threads."""
        ...
