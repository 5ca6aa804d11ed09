"""Live updates for the page: one Server-Sent Events stream instead of polling.

``GET /api/live`` answers ``text/event-stream``: every ``period_s`` the server reads the
namespace's overview, dead letters and schedules (what the page shows) and sends them as
one event; the browser's ``EventSource`` renders each and reconnects by itself if the
stream breaks. A stream ends when its client goes, or after ``max_life_s`` (the page
reconnects at once), so a server that stops never waits long for an open page.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse

from timer.errors import TimerError

PERIOD_S = 1.0
MAX_LIFE_S = 60.0


async def events(
    request: Request,
    snapshot: Callable[[], dict[str, Any]],
    *,
    period_s: float = PERIOD_S,
    max_life_s: float = MAX_LIFE_S,
) -> AsyncIterator[str]:
    """The stream's text: a retry hint, then one ``data:`` event per period."""
    yield "retry: 1000\n\n"
    ends = time.monotonic() + max_life_s
    while time.monotonic() < ends and not await request.is_disconnected():
        try:
            data: dict[str, Any] = await asyncio.to_thread(snapshot)
        except TimerError as exc:  # Redis away: say so, and keep trying
            data = {"error": str(exc)}
        yield f"data: {json.dumps(data, separators=(',', ':'))}\n\n"
        await asyncio.sleep(period_s)  # pacing of a push stream, not a wait for a condition


def response(request: Request, snapshot: Callable[[], dict[str, Any]]) -> StreamingResponse:
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(
        events(request, snapshot), media_type="text/event-stream", headers=headers
    )
