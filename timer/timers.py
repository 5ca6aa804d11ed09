"""Timers in bulk: find them by id pattern, state and deadline, and act on a selection
(``client.timers``), over the client's driver.

::

    page = client.timers.find("job:*", state="pending", count=1000)
    stuck = client.timers.count("job:*", deadline_to_ms=client.server_time_ms())
    client.timers.cancel("tenant-7:*", dry_run=True).selected   # how many it would cancel
    client.timers.reschedule("batch:*", shift_ms=600_000)        # each 10 minutes later

Every call does bounded work on the server: a page is about ``count`` entries scanned
(see :mod:`timer.durable.timers.finding`); the iterating calls go page by page and can report
progress after each.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from typing import Any, Unpack

from .durable.model.models import TimerInfo
from .durable.model.namespace import Namespace
from .durable.model.steps import Op, Run
from .durable.timers import finding as find_ops
from .durable.timers.finding import (
    ActOptions,
    Bulk,
    BulkOptions,
    FindOptions,
    MoveOptions,
    Page,
    Selection,
)
from .errors import InvalidInput, quoted

Progress = Callable[[Bulk], None]


def _selection(
    match: object, state: object, deadline_from_ms: object, deadline_to_ms: object
) -> Selection:
    return Selection.of(match, state, deadline_from_ms, deadline_to_ms)


class Timers:
    """Finding and acting on many timers of one namespace (``TimerClient.timers``)."""

    def __init__(self, run: Run, namespace: Callable[[], Namespace]) -> None:
        self._run = run  # the client's driver: runs an operation to its result
        self._ns = namespace

    def find(
        self,
        match: str = "*",
        *,
        state: str | list[str] = "pending",
        deadline_from_ms: int | None = None,
        deadline_to_ms: int | None = None,
        cursor: str | None = None,
        count: int = 1000,
    ) -> Page:
        """One page of the timers whose id matches ``match`` (a Redis glob), in ``state``
        (``pending``, ``expired``, ``cancelled``, ``completed``, ``decided``, ``any``,
        or a list), with a deadline in [``deadline_from_ms``, ``deadline_to_ms``]:
        about ``count`` entries scanned from ``cursor`` (None: the start). Pass the
        page's ``cursor`` back, with the same selection, for the next; it is None after
        the last. A page may be empty before the end."""
        sel = _selection(match, state, deadline_from_ms, deadline_to_ms)
        page: Page = self._run(find_ops.find(self._ns(), sel, cursor, count))
        return page

    def scan(
        self,
        match: str = "*",
        *,
        state: str | list[str] = "pending",
        deadline_from_ms: int | None = None,
        deadline_to_ms: int | None = None,
        count: int = 1000,
    ) -> Iterator[TimerInfo]:
        """Every timer ``find`` selects, page by page."""
        sel = _selection(match, state, deadline_from_ms, deadline_to_ms)
        cursor: str | None = None
        while True:
            page: Page = self._run(find_ops.find(self._ns(), sel, cursor, count))
            yield from page.timers
            if page.cursor is None:
                return
            cursor = page.cursor

    def count(
        self,
        match: str = "*",
        *,
        state: str | list[str] = "pending",
        deadline_from_ms: int | None = None,
        deadline_to_ms: int | None = None,
    ) -> int:
        """How many timers ``find`` selects (a whole scan, page by page)."""
        found = self.scan(
            match, state=state, deadline_from_ms=deadline_from_ms, deadline_to_ms=deadline_to_ms
        )
        return sum(1 for _ in found)

    def cancel(self, match: str = "*", **kw: Unpack[BulkOptions]) -> Bulk:
        """Cancel every pending timer selected (``match``, ``deadline_from_ms``,
        ``deadline_to_ms``); with ``dry_run=True`` only count them. ``progress`` is
        called with the running totals after each page."""
        return self._act("cancel", match, **kw)

    def complete(self, match: str = "*", **kw: Unpack[BulkOptions]) -> Bulk:
        """Complete every pending timer selected (as ``cancel``)."""
        return self._act("complete", match, **kw)

    def notify(self, match: str = "*", **kw: Unpack[BulkOptions]) -> Bulk:
        """Notify every watch key of the pending timers selected (as ``cancel``): ``done``
        is how many timers that completed, ``keys`` how many keys were notified."""
        return self._act("notify", match, **kw)

    def reschedule(
        self,
        match: str = "*",
        *,
        delay_ms: int | None = None,
        deadline_ms: int | None = None,
        shift_ms: int | None = None,
        **kw: Unpack[BulkOptions],
    ) -> Bulk:
        """Move every pending timer selected: to ``delay_ms`` from now, to
        ``deadline_ms``, or by ``shift_ms`` from its own deadline (each timer once, even
        if the scan meets it again)."""
        find_ops.check_move(delay_ms, deadline_ms, shift_ms)
        return self._act(
            "reschedule", match, delay_ms=delay_ms, deadline_ms=deadline_ms, shift_ms=shift_ms, **kw
        )

    def act_on(self, ids: list[str], action: str, **move: Unpack[MoveOptions]) -> Bulk:
        """``action`` (``cancel``, ``complete``, ``notify``, ``reschedule`` with
        ``delay_ms``, ``deadline_ms`` or ``shift_ms``) on the timers named in ``ids`` (at
        most 10,000), as the selection calls do; ids not pending are not selected."""
        if action not in find_ops.ACTIONS:
            raise InvalidInput(
                f"unknown action {quoted(action)}: one of {', '.join(find_ops.ACTIONS)}"
            )
        if action == "reschedule":
            find_ops.check_move(move.get("delay_ms"), move.get("deadline_ms"), move.get("shift_ms"))
        elif move:
            raise InvalidInput(f"{action} takes no new deadline: {', '.join(move)}")
        found: list[TimerInfo] = self._run(find_ops.infos(self._ns(), ids))
        pending = [t for t in found if t.state == "pending"]
        done: Bulk = self._run(find_ops.act(self._ns(), action, pending, **move))
        return done

    def _act(
        self,
        action: str,
        match: str,
        *,
        deadline_from_ms: int | None = None,
        deadline_to_ms: int | None = None,
        dry_run: bool = False,
        progress: Progress | None = None,
        count: int = 1000,
        **move: Unpack[MoveOptions],
    ) -> Bulk:
        sel = _selection(match, "pending", deadline_from_ms, deadline_to_ms)
        total = Bulk(action)
        seen: set[str] = set()  # a shift moves each timer once, however often it is met
        cursor: str | None = None
        while True:
            page: Page = self._run(find_ops.find(self._ns(), sel, cursor, count))
            timers = page.timers
            if move.get("shift_ms") is not None:
                timers = [t for t in timers if t.id not in seen]
                seen.update(t.id for t in timers)
            if dry_run:
                total.selected += len(timers)
            else:
                _add(total, self._run(find_ops.act(self._ns(), action, timers, **move)))
            if progress is not None:
                progress(replace(total, errors=list(total.errors)))
            if page.cursor is None:
                return total
            cursor = page.cursor


def _add(total: Bulk, page: Bulk) -> None:
    total.selected += page.selected
    total.done += page.done
    total.skipped += page.skipped
    total.keys += page.keys
    total.errors.extend(page.errors)


class AsyncTimers:
    """``AsyncTimerClient.timers``: :class:`Timers`' finding and bulk actions, awaited."""

    def __init__(
        self, run: Callable[[Op[Any]], Awaitable[Any]], namespace: Callable[[], Namespace]
    ) -> None:
        self._run = run
        self._ns = namespace

    async def find(
        self,
        match: str = "*",
        *,
        cursor: str | None = None,
        count: int = 1000,
        **selection: Unpack[FindOptions],
    ) -> Page:
        """As :meth:`Timers.find` (``state``, ``deadline_from_ms``, ``deadline_to_ms``)."""
        sel = Selection.of(match, **_known(dict(selection)))
        page: Page = await self._run(find_ops.find(self._ns(), sel, cursor, count))
        return page

    async def act(
        self,
        action: str,
        match: str = "*",
        *,
        dry_run: bool = False,
        count: int = 1000,
        **kw: Unpack[ActOptions],
    ) -> Bulk:
        """``cancel``, ``complete``, ``notify`` or ``reschedule`` (with ``delay_ms``,
        ``deadline_ms`` or ``shift_ms``) over the pending timers selected, page by page
        (as :class:`Timers`' methods of those names)."""
        _known(dict(kw), MOVE | DEADLINES)  # an untyped caller's extras are refused
        move = MoveOptions(
            delay_ms=kw.get("delay_ms"),
            deadline_ms=kw.get("deadline_ms"),
            shift_ms=kw.get("shift_ms"),
        )
        if action == "reschedule":
            find_ops.check_move(move.get("delay_ms"), move.get("deadline_ms"), move.get("shift_ms"))
        sel = Selection.of(match, "pending", kw.get("deadline_from_ms"), kw.get("deadline_to_ms"))
        total, seen, cursor = Bulk(action), set[str](), None
        while True:
            page: Page = await self._run(find_ops.find(self._ns(), sel, cursor, count))
            timers = [t for t in page.timers if t.id not in seen]
            if move.get("shift_ms") is not None:
                seen.update(t.id for t in timers)
            if dry_run:
                total.selected += len(timers)
            else:
                _add(total, await self._run(find_ops.act(self._ns(), action, timers, **move)))
            if page.cursor is None:
                return total
            cursor = page.cursor


MOVE = frozenset(MoveOptions.__annotations__)
DEADLINES = frozenset({"deadline_from_ms", "deadline_to_ms"})


def _known(
    given: dict[str, Any], allowed: frozenset[str] = DEADLINES | {"state"}
) -> dict[str, Any]:
    """``given``, or TypeError for a keyword the call does not take (a caller mypy does
    not check may pass anything)."""
    unknown = set(given) - allowed
    if unknown:
        raise TypeError(f"unexpected arguments: {', '.join(sorted(unknown))}")
    return given
