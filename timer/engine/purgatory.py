"""Delayed operations and their purgatory (Kafka's DelayedOperation/DelayedOperationPurgatory).

An operation waits, watched under one or more keys, until either something makes it
completable (a ``check_and_complete(key)`` after the state it waits for changed) or its
delay passes and it expires. Whichever comes first wins, exactly once: ``force_complete``
is a compare-and-set, and ``on_complete`` runs only for the winner.

No lost wake-ups: ``try_complete_else_watch`` tries once, watches every key, then tries
again, all under the operation's lock; ``check_and_complete`` tries under the same lock.
A state change that lands after the first try is seen either by the second try or by a
``check_and_complete`` that finds the operation already watched.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Iterable

from ..errors import InvalidInput
from .interface import TaskTimer
from .system_timer import SystemTimer
from .task import TimerTask

log = logging.getLogger("timer.purgatory")


class DelayedOperation(TimerTask):
    """Override ``try_complete``, ``on_complete`` and ``on_expiration``.

    Thread-safe: ``force_complete`` is a compare-and-set under the operation's lock, so
    exactly one caller (a completer or the timer's expiry) wins; ``on_complete`` runs
    once, outside any purgatory lock.
    """

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.lock = threading.RLock()
        self._completed = False
        self._completed_lock = threading.Lock()

    def force_complete(self) -> bool:
        """Complete now if nobody has; True only for the one caller that did it."""
        with self._completed_lock:
            if self._completed:
                return False
            self._completed = True
        self.cancel()  # out of the timer: it must not expire as well
        self.on_complete()
        return True

    @property
    def is_completed(self) -> bool:
        return self._completed

    def try_complete(self) -> bool:
        """Check whether the operation can complete; if so call ``force_complete``."""
        raise NotImplementedError("subclass DelayedOperation and override try_complete()")

    def on_complete(self) -> None:
        """The operation's work, run exactly once, on completion or expiration."""

    def on_expiration(self) -> None:
        """Called after ``on_complete`` when the operation completed by expiring."""

    def safe_try_complete(self) -> bool:
        """``try_complete`` under the operation's lock; False if already completed."""
        with self.lock:
            if self._completed:
                return False
            return self.try_complete()

    def safe_try_complete_or_else(self, fn: Callable[[], object]) -> bool:
        """Try; if that fails call ``fn`` (e.g. start watching) and try once more."""
        with self.lock:
            if self.try_complete():
                return True
            fn()
            return self.try_complete()

    def run(self) -> None:
        if self.force_complete():
            self.on_expiration()


class _Watchers:
    """The operations watching one key, in watch order."""

    __slots__ = ("key", "lock", "ops")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.ops: dict[DelayedOperation, None] = {}
        self.lock = threading.Lock()

    def watch(self, op: DelayedOperation) -> None:
        with self.lock:
            self.ops[op] = None

    def snapshot(self) -> list[DelayedOperation]:
        with self.lock:
            return list(self.ops)

    def discard(self, ops: Iterable[DelayedOperation]) -> None:
        with self.lock:
            for op in ops:
                self.ops.pop(op, None)


class DelayedOperationPurgatory:
    """Operations that complete early when a watched key is checked, or expire.

    Thread-safe. The story about locks (Kafka's): each operation has its own lock, taken
    by ``try_complete_else_watch`` and ``check_and_complete`` around ``try_complete``;
    the purgatory's map lock guards only the watch lists and is never held while an
    operation's lock is taken. So a caller must not hold a lock that ``try_complete`` or
    ``on_complete`` also takes when it calls ``check_and_complete`` (KAFKA-3994: a
    deadlock). ``timer`` is any :class:`~timer.engine.TaskTimer`; by default a
    ``SystemTimer`` the purgatory owns.
    """

    def __init__(
        self,
        name: str,
        timer: TaskTimer | None = None,
        purge_interval: int = 1000,
        reaper_enabled: bool = True,
        timer_enabled: bool = True,
    ) -> None:
        self.name = name
        self.purge_interval = purge_interval
        self.timer: TaskTimer = timer if timer is not None else SystemTimer(name)
        self._timer_enabled = timer_enabled
        self._map_lock = threading.Lock()
        self._watchers: dict[Hashable, _Watchers] = {}
        # How many operations were watched since the last purge, completed or not.
        self._estimated_total = 0
        self._shutdown = threading.Event()
        self._reaper: threading.Thread | None = None
        if reaper_enabled:
            self._reaper = threading.Thread(
                target=self._reap, name=f"expiration-reaper-{name}", daemon=True
            )
            self._reaper.start()

    # -- watching -------------------------------------------------------------------

    def _watch_for_operation(self, key: Hashable, op: DelayedOperation) -> None:
        with self._map_lock:
            watchers = self._watchers.get(key)
            if watchers is None:
                watchers = self._watchers[key] = _Watchers(key)
            watchers.watch(op)

    def _remove_key_if_empty(self, watchers: _Watchers) -> None:
        # Keys come and go with their operations: a key whose list empties is dropped.
        with self._map_lock:
            if self._watchers.get(watchers.key) is watchers and not watchers.ops:
                del self._watchers[watchers.key]

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Complete ``op`` now if it can; else watch it under every key and time it.

        Returns True if it completed here. The operation is added to the timer only if it
        is still incomplete after watching, so an early completion never lingers there.
        """
        keys = list(keys)
        if not keys:
            raise InvalidInput("try_complete_else_watch needs at least one key to watch")

        def watch() -> None:
            for key in keys:
                if op.is_completed:
                    return
                self._watch_for_operation(key, op)
            with self._map_lock:
                self._estimated_total += 1

        if op.safe_try_complete_or_else(watch):
            return True
        if not op.is_completed:
            if self._timer_enabled:
                self.timer.add(op)
            if op.is_completed:  # completed meanwhile by another thread: leave the timer
                op.cancel()
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Try to complete the operations watching ``key``; the number completed now."""
        with self._map_lock:
            watchers = self._watchers.get(key)
        if watchers is None:
            return 0
        completed = 0
        done: list[DelayedOperation] = []
        for op in watchers.snapshot():
            if op.is_completed:
                done.append(op)
            elif op.safe_try_complete():
                completed += 1
                done.append(op)
        watchers.discard(done)
        self._remove_key_if_empty(watchers)
        return completed

    def cancel_for_key(self, key: Hashable) -> list[DelayedOperation]:
        """Stop watching ``key``: cancel and return its operations (not completed)."""
        with self._map_lock:
            watchers = self._watchers.pop(key, None)
        if watchers is None:
            return []
        with watchers.lock:
            ops = list(watchers.ops)
            watchers.ops.clear()
        for op in ops:
            op.cancel()
        return ops

    @property
    def watched(self) -> int:
        """Operations in all watch lists (one per key watched; O(number of keys))."""
        with self._map_lock:
            lists = list(self._watchers.values())
        return sum(len(w.ops) for w in lists)

    @property
    def num_delayed(self) -> int:
        """Operations waiting in the timer."""
        return self.timer.size

    @property
    def keys(self) -> int:
        """How many keys are watched."""
        return len(self._watchers)

    # -- purge and expiry ------------------------------------------------------------

    def purge_completed(self) -> int:
        """Drop completed operations from every watch list; the number dropped."""
        with self._map_lock:
            lists = list(self._watchers.values())
        purged = 0
        for watchers in lists:
            done = [op for op in watchers.snapshot() if op.is_completed]
            watchers.discard(done)
            purged += len(done)
            self._remove_key_if_empty(watchers)
        return purged

    def advance_clock(self, timeout_ms: float | None) -> bool:
        """Expire what is due, then purge watch lists if too many completed ops linger."""
        advanced = self.timer.advance_clock(timeout_ms)
        with self._map_lock:
            due = self._estimated_total - self.timer.size > self.purge_interval
            if due:
                self._estimated_total = self.timer.size
        if due:
            self.purge_completed()
        return advanced

    def _reap(self) -> None:
        # 200 ms like Kafka's reaper: the purge check must run even when nothing expires.
        while not self._shutdown.is_set():
            try:
                self.advance_clock(200)
            except Exception:
                log.exception("purgatory %r: expiration reaper failed", self.name)
                self._shutdown.wait(0.1)

    def shutdown(self) -> None:
        """Stop the reaper and close the timer."""
        self._shutdown.set()
        # A SystemTimer can be woken from its wait; any other Timer is waited out (<200 ms).
        if isinstance(self.timer, SystemTimer):
            self.timer.wake()
        if self._reaper is not None and self._reaper is not threading.current_thread():
            self._reaper.join()
        self.timer.close()
