"""Schedules: a client's recurring schedules (``client.schedules``), over its driver.

::

    client.schedules.create("nightly-report", cron="0 2 * * *", tz="Europe/Paris",
                            payload={"report": "daily"})
    client.schedules.create("heartbeat", every="30s", missed="skip")

Each occurrence is an ordinary durable timer with id ``{<name>}@<nominal ms>``: fired
by the workers, handled, retried and dead-lettered like any other, exactly once; the
next is armed in the same script call that fires it. See ``timer.durable.schedules.records``
for the catch-up policies and ``timer.durable.schedules.recurrence`` for the time rules.
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable
from typing import Any, Unpack

from .durable.model.fields import ScheduleOptions
from .durable.model.models import Timer
from .durable.model.namespace import Namespace
from .durable.model.steps import Op, Run
from .durable.schedules import ops as sched_ops
from .durable.schedules.records import ScheduleInfo
from .errors import TimerError


class Schedules:
    """The recurring schedules of one namespace (``TimerClient.schedules``)."""

    def __init__(self, run: Run, namespace: Callable[[], Namespace]) -> None:
        self._run = run  # the client's driver: runs an operation to its result
        self._ns = namespace

    def create(self, name: str, **spec: Unpack[ScheduleOptions]) -> ScheduleInfo:
        """Create a schedule and arm its first occurrence after now (Redis time).

        Exactly one of ``cron`` (5 fields, or 6 with the seconds first, in ``tz``) or
        ``every`` (ms or ``"30s"``, with ``offset``); ``start``/``end`` bound it (epoch
        ms or aware datetimes); ``jitter`` delays each occurrence by up to that much.
        ``missed``: after an outage, fire the ``latest`` missed occurrence, ``all``
        (oldest first, at most 1,000) or ``skip`` them; none older than ``catch_up``.
        ``overlap``: when an occurrence falls due while handler group ``group`` has not
        yet handled the previous one's outcome, ``allow`` fires it anyway, ``skip``
        passes it over (counted), ``buffer-one`` holds it until the previous one is
        handled (what falls due meanwhile follows ``missed``).
        DuplicateTimer if the name exists (``update`` changes one).
        """
        return self._run(sched_ops.put(self._ns(), name, mode="create", **spec))

    def update(self, name: str, **spec: Unpack[ScheduleOptions]) -> ScheduleInfo:
        """Change a schedule (the arguments of ``create``; all of them, as a new spec):
        from its next occurrence on. An occurrence already due still fires once."""
        return self._run(sched_ops.put(self._ns(), name, mode="update", **spec))

    def get(self, name: str) -> ScheduleInfo | None:
        """The schedule: its spec, state, next occurrence and counts; None if none."""
        return self._run(sched_ops.get(self._ns(), name))

    def list(self) -> list[ScheduleInfo]:
        """Every schedule of the namespace, by name."""
        return self._run(sched_ops.listing(self._ns()))

    def trigger(self, name: str) -> Timer:
        """Fire it once now, beside its series (a timer ``{name}@<now>-manual`` with its
        payload); ScheduleNotFound if there is no such schedule."""
        return self._run(sched_ops.trigger(self._ns(), name))

    def backfill(
        self, name: str, start_ms: int, end_ms: int, *, limit: int = 1000
    ) -> builtins.list[Timer | TimerError]:
        """Fire now, once each, the occurrences from ``start_ms`` to ``end_ms`` (epoch ms,
        up to now; at most ``limit``, 1,000), under their own ids: one that fired and is
        still retained is not fired again (``created`` False)."""
        return self._run(sched_ops.backfill(self._ns(), name, start_ms, end_ms, limit=limit))

    def pause(self, name: str) -> bool:
        """Stop firing: its armed occurrence is taken out, unless its time has come (then
        it fires, once, and nothing after it); False if there is no such schedule."""
        return self._run(sched_ops.stop(self._ns(), name, "pause"))

    def resume(self, name: str) -> ScheduleInfo | None:
        """Fire again from the next occurrence after now (those while paused are not
        fired); None if there is no such schedule."""
        return self._run(sched_ops.resume(self._ns(), name))

    def delete(self, name: str, *, keep_armed: bool = False) -> bool:
        """Delete it and its armed occurrence (``keep_armed``, or an occurrence whose
        time has come: that one still fires, once); False if there is no such schedule."""
        return self._run(
            sched_ops.stop(self._ns(), name, "delete-keep" if keep_armed else "delete")
        )


class AsyncSchedules:
    """``AsyncTimerClient.schedules``: the same operations as :class:`Schedules`, awaited."""

    def __init__(
        self, run: Callable[[Op[Any]], Awaitable[Any]], namespace: Callable[[], Namespace]
    ) -> None:
        self._run = run
        self._ns = namespace

    async def create(self, name: str, **spec: Unpack[ScheduleOptions]) -> ScheduleInfo:
        """As :meth:`Schedules.create` (the same keyword arguments)."""
        info: ScheduleInfo = await self._run(sched_ops.put(self._ns(), name, mode="create", **spec))
        return info

    async def update(self, name: str, **spec: Unpack[ScheduleOptions]) -> ScheduleInfo:
        info: ScheduleInfo = await self._run(sched_ops.put(self._ns(), name, mode="update", **spec))
        return info

    async def get(self, name: str) -> ScheduleInfo | None:
        info: ScheduleInfo | None = await self._run(sched_ops.get(self._ns(), name))
        return info

    async def list(self) -> list[ScheduleInfo]:
        found: list[ScheduleInfo] = await self._run(sched_ops.listing(self._ns()))
        return found

    async def trigger(self, name: str) -> Timer:
        timer: Timer = await self._run(sched_ops.trigger(self._ns(), name))
        return timer

    async def backfill(
        self, name: str, start_ms: int, end_ms: int, *, limit: int = 1000
    ) -> builtins.list[Timer | TimerError]:
        done: builtins.list[Timer | TimerError] = await self._run(
            sched_ops.backfill(self._ns(), name, start_ms, end_ms, limit=limit)
        )
        return done

    async def pause(self, name: str) -> bool:
        """As :meth:`Schedules.pause`."""
        return bool(await self._run(sched_ops.stop(self._ns(), name, "pause")))

    async def resume(self, name: str) -> ScheduleInfo | None:
        info: ScheduleInfo | None = await self._run(sched_ops.resume(self._ns(), name))
        return info

    async def delete(self, name: str, *, keep_armed: bool = False) -> bool:
        """As :meth:`Schedules.delete`."""
        mode = "delete-keep" if keep_armed else "delete"
        return bool(await self._run(sched_ops.stop(self._ns(), name, mode)))
