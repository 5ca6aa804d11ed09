"""Send-ahead for asyncio: a pipeline an operation sends before it reads the replies of
the ones before (``steps.Send`` / ``steps.Collect``) runs as a task while the operation
prepares the next. The blocking client's twin (``timer.client.lanes``) keeps one
connection instead; the driver both share (``timer.aio.driver``) calls either the same.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol

from ..durable.model import steps


class LaneDriver(Protocol):
    """What a lane needs of the driver whose operation it serves (``AsyncDriver``, which
    imports this module: so a protocol, not an import)."""

    async def execute(self, step: steps.Pipeline) -> Any: ...


class Lane:
    """The pipelines one operation has sent ahead, each a task started after the one sent
    before it ran (the server sees them in the order sent, as the blocking client's one
    connection does); ``collect`` awaits a task. An operation that ended early leaves
    none running."""

    def __init__(self, driver: LaneDriver) -> None:
        self.driver = driver
        self.sent: list[asyncio.Task[Any]] = []

    async def send(self, pipeline: steps.Pipeline) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(self._after(self.sent[-1] if self.sent else None, pipeline))
        self.sent.append(task)
        return task

    async def collect(self, ticket: asyncio.Task[Any]) -> Any:
        return await ticket

    async def _after(self, before: asyncio.Task[Any] | None, pipeline: steps.Pipeline) -> Any:
        """``pipeline``'s replies, sent once ``before`` (the pipeline sent ahead of it) ran."""
        if before is not None:
            with contextlib.suppress(Exception):  # its own Collect reports its error
                await before
        return await self.driver.execute(pipeline)

    def close(self) -> None:
        """The operation ended (or failed): no task of it goes on."""
        for task in self.sent:
            if not task.done():
                task.cancel()
