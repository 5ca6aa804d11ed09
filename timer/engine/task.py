"""Timer tasks (Kafka's TimerTask).

Kafka binds a task to its bucket through a ``TimerTaskEntry`` node of a doubly linked
list. Here the bucket is a ``dict`` mapping each task to its expiration, so the "entry"
is the dict slot itself: no node object per task, O(1) insert and delete at C speed. The
task keeps a pointer to the bucket holding it, for O(1) ``cancel``.
"""

from __future__ import annotations

from ..errors import InvalidInput
from . import core


def check_delay(delay_ms: object) -> int:
    """Return ``delay_ms`` if it is a whole number of milliseconds, else raise InvalidInput."""
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int):
        raise InvalidInput(
            f"delay_ms must be a whole number of milliseconds (int), got {delay_ms!r}"
        )
    return delay_ms


class TimerTask:
    """Work to run once its delay has passed. Subclass it and override :meth:`run`.

    A task lives in at most one bucket at a time: adding it again moves it, and
    :meth:`cancel` removes it in O(1). A negative delay means "already expired": the task
    runs as soon as it is added. A task cancelled after it expired but before ``run``
    began is skipped.

    Thread-safe: ``cancel`` may be called from any thread, at any time.
    """

    # _bucket may be stale (a bucket that has since expired or cascaded the task): it is
    # only ever used to pop the task, which does nothing if the task is not there.
    __slots__ = ("_bucket", "_cancelled", "delay_ms")

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = check_delay(delay_ms)
        self._bucket: dict[TimerTask, int] | None = None
        self._cancelled = False

    def run(self) -> None:
        """Called once when the task expires (on the executor, or inline: see SystemTimer)."""
        raise NotImplementedError("subclass TimerTask and override run()")

    def _python_cancel(self) -> None:
        """Remove the task from its bucket (if any); it will never run.

        Takes no lock. The flag is set first, and every path that moves or runs a task
        checks it under the timer's lock or just before ``run``; the pop is one atomic
        dict operation (under the GIL, and under free-threaded CPython's per-dict lock).
        If a cascade is moving the task right now, the pop misses it and the task leaves
        its new bucket when that one is flushed, without running.
        """
        self._cancelled = True
        bucket = self._bucket
        if bucket is not None:
            bucket.pop(self, None)

    # The C one when built (timer/engine/core.py says when and why), else the above.
    cancel = core.pick("cancel", _python_cancel)

    @property
    def is_cancelled(self) -> bool:
        return self._cancelled

    def __repr__(self) -> str:
        return f"<{type(self).__name__} delay_ms={self.delay_ms}>"
