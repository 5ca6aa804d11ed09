"""The event loop side of a runner: ``async def`` handlers run as tasks on one loop, in
a thread of its own (``handler-loop``), at most ``concurrency`` at once, each within its
handler's timeout (cancelled past it). A mixin of :class:`~timer.handlers.loop.HandlerLoop`,
which starts the loop and hands each read's coroutines over in one call."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from .. import tracing
from ..clock import Killed
from ..durable.groups.streams import Delivery
from .policy import Handler, HandlerTimedOut, span_fields

if TYPE_CHECKING:
    from .limits import Slots
    from .policy import InHand, Registry
    from .settle import Settler


class CoroutineRunner:
    """Runs a runner's ``async def`` handlers on its event loop."""

    loop: asyncio.AbstractEventLoop | None
    async_slots: asyncio.Semaphore | None  # made on the loop, by its first task
    running_tasks: set[asyncio.Task[None]]  # the loop holds tasks weakly

    if TYPE_CHECKING:  # the loop's own, which these run with
        h: Registry
        hand: InHand
        concurrency: int
        slots: Slots | None
        settler: Settler

        def _give_back(self, d: Delivery) -> None: ...

        def _started(self, d: Delivery) -> float: ...

    def _start_async(self, coros: list[tuple[Handler, Delivery]]) -> None:
        """On the event loop: a task for each of a read's ``async def`` handlers, the
        highest priorities first (the slots' semaphore lets them in in this order)."""
        coros.sort(key=lambda c: -c[1].outcome.priority)
        for fn, d in coros:
            assert self.loop is not None
            task = self.loop.create_task(self._run_async(fn, d))
            self.running_tasks.add(task)
            task.add_done_callback(self.running_tasks.discard)

    async def _run_all_async(self, coros: list[tuple[Handler, Delivery]]) -> None:
        """Inline: a read's ``async def`` handlers, the highest priorities first, each to
        its end (at most ``concurrency`` at once, as on the loop's own thread)."""
        coros.sort(key=lambda c: -c[1].outcome.priority)
        await asyncio.gather(*(self._run_async(fn, d) for fn, d in coros))

    async def _run_async(self, fn: Handler, d: Delivery) -> None:
        if self.async_slots is None:
            self.async_slots = asyncio.Semaphore(self.concurrency)
        async with self.async_slots:  # a read may bring more than the free slots (per stream)
            await self._run_async_now(fn, d)

    async def _run_async_now(self, fn: Handler, d: Delivery) -> None:
        if self.hand.stopping.is_set():
            if self.slots is not None:
                await asyncio.to_thread(self._give_back, d)
            self.settler.forget(d)
            return
        started = self._started(d)
        timeout = self.h.timeout_of(d.outcome.outcome)
        error: BaseException | None = None
        try:
            async with asyncio.timeout(timeout) as within:
                with tracing.span(
                    "tickwheel.handle", d.outcome.traceparent, span_fields(self.h, d.outcome)
                ):
                    await fn(d.outcome)
        except TimeoutError as exc:
            error = exc
            if within.expired():  # ours, not the handler's own TimeoutError
                self.h.stats.timed_out += 1
                error = HandlerTimedOut(
                    f"the handler ran past its {timeout:g}s timeout and was cancelled"
                )
        except Killed:
            raise  # the process is gone: nothing is settled (a simulation's kill -9)
        except BaseException as exc:
            error = exc
        if self.slots is not None:
            await asyncio.to_thread(self._give_back, d)
        if error is None:  # acknowledged by the acker thread: nothing here waits on Redis
            self.settler.settle(d, None, started)
        else:  # a retry or a dead letter is a Redis call: off the loop
            await asyncio.to_thread(self.settler.settle, d, error, started)
