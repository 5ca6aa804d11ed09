"""The dashboard's routes: the page, its icon and the JSON API's endpoints, each doing its
work on the request's namespace in a thread; those that change state are refused in
read-only mode or to a read token, and logged with who asked (``tickwheel.dashboard``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from timer.errors import TimerError

from . import live
from .guard import CSRF_COOKIE, user_of, who

if TYPE_CHECKING:
    from .board import Dashboard, Namespaces

log = logging.getLogger("tickwheel.dashboard")  # every action, with who asked for it


def _error(exc: TimerError) -> JSONResponse:
    """A library error as the HTTP API says it: its own status and exit code (errors.py)."""
    body = {"error": str(exc), "kind": type(exc).__name__, "exit_code": exc.exit_code}
    return JSONResponse(body, status_code=exc.http_status)


async def _call(fn: Callable[[], Any]) -> Response:
    """Run a blocking client call off the event loop; a TimerError becomes a clear 4xx/5xx."""
    try:
        return JSONResponse(await asyncio.to_thread(fn))
    except TimerError as exc:
        return _error(exc)


ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><circle cx="8" cy="8" r="7" '
    'fill="#1d2330"/><path d="M8 3v5l3 2" stroke="#fff" stroke-width="1.6" fill="none" '
    'stroke-linecap="round"/></svg>'
)


async def icon(_: Request) -> Response:
    """The page's icon (a clock face), so a browser's /favicon.ico is not a 404."""
    return Response(ICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


class Routes:
    """The page and the API's endpoints; each does its work on the request's namespace
    in a thread (``_call``). Those that change state refuse in read-only mode."""

    def __init__(self, boards: Namespaces, page: str, csrf: str, *, read_only: bool) -> None:
        self.boards = boards
        self.page = page
        self.csrf = csrf
        self.read_only = read_only

    def on(self, request: Request, fn: Callable[[Dashboard], Any]) -> Callable[[], Any]:
        """The work of a route, on the request's namespace (run in a thread)."""
        return lambda: fn(self.boards.of(request))

    async def index(self, request: Request) -> Response:
        response = HTMLResponse(self.page)
        response.set_cookie(CSRF_COOKIE, self.csrf, samesite="strict")  # read by the page
        return response

    def looks_only(self, request: Request) -> bool:
        """The user may look and not act: a read-only dashboard, or a ``read`` token."""
        user = user_of(request)
        namespace = request.query_params.get("ns") or self.boards.first.namespace
        return self.read_only or (user is not None and not user.allows("write", namespace))

    async def overview(self, request: Request) -> Response:
        looks_only = self.looks_only(request)
        return await _call(
            self.on(request, lambda d: {**d.overview(), "read_only": d.read_only or looks_only})
        )

    async def live(self, request: Request) -> Response:
        try:
            board = await asyncio.to_thread(self.boards.of, request)
        except TimerError as exc:  # a namespace that does not exist: said once, no stream
            return _error(exc)
        if not self.looks_only(request) or board.read_only:
            return live.response(request, board.snapshot)
        return live.response(request, lambda: _looking_only(board.snapshot()))

    async def history(self, request: Request) -> Response:
        minutes = request.path_params["minutes"]
        return await _call(self.on(request, lambda d: d.history(minutes)))

    async def group_history(self, request: Request) -> Response:
        group, minutes = request.path_params["group"], request.path_params["minutes"]
        return await _call(self.on(request, lambda d: d.group_history(group, minutes)))

    async def find(self, request: Request) -> Response:
        query = dict(request.query_params)
        return await _call(self.on(request, lambda d: d.find(query)))

    async def bulk(self, request: Request) -> Response:
        action = request.path_params["action"]
        return await self.change(request, lambda d, body: d.bulk(action, body))

    async def timer(self, request: Request) -> Response:
        tid = request.path_params["timer_id"]
        return await _call(self.on(request, lambda d: d.timer(tid)))

    def refused(self) -> Response | None:
        if self.read_only:
            return JSONResponse(
                {"error": "this dashboard is read-only (started with --read-only)"}, status_code=403
            )
        return None

    async def change(
        self, request: Request, work: Callable[[Dashboard, dict[str, Any]], Any]
    ) -> Response:
        """A route that changes state: refused read-only; its JSON body, then the work."""
        no = self.refused()
        if no is not None:
            return no
        body = await _body_of(request)
        if isinstance(body, Response):
            return body
        namespace = request.query_params.get("ns") or self.boards.first.namespace
        user = who(user_of(request))
        log.info(
            "dashboard: %s %s by %s",
            request.method,
            request.url.path,
            user,
            extra={"namespace": namespace, "user": user},
        )
        return await _call(self.on(request, lambda d: work(d, body)))

    async def act(self, request: Request) -> Response:
        tid, action = request.path_params["timer_id"], request.path_params["action"]
        return await self.change(request, lambda d, body: d.act(tid, action, body))

    async def due(self, request: Request) -> Response:
        shard = request.path_params["shard"]
        return await _call(self.on(request, lambda d: d.due(shard)))

    async def dead(self, request: Request) -> Response:
        return await _call(self.on(request, lambda d: d.dead()))

    async def schedules(self, request: Request) -> Response:
        return await _call(self.on(request, lambda d: d.schedules()))

    async def schedule_act(self, request: Request) -> Response:
        name, action = request.path_params["name"], request.path_params["action"]
        return await self.change(request, lambda d, body: d.schedule_act(name, action, body))

    async def schedule_create(self, request: Request) -> Response:
        return await self.change(request, lambda d, body: d.schedule_create(body))

    async def outcomes(self, request: Request) -> Response:
        query = dict(request.query_params)
        return await _call(self.on(request, lambda d: d.outcomes(query)))

    async def worker(self, request: Request) -> Response:
        worker = request.query_params.get("id", "")  # any id: a query keeps its / and \n
        return await _call(self.on(request, lambda d: d.worker(worker)))

    async def group_act(self, request: Request) -> Response:
        action = request.path_params["action"]
        user = user_of(request)  # a pause says who: the token's name, on the dashboard
        by = f"{user.name[:200]} (dashboard)" if user is not None and user.name else "dashboard"
        return await self.change(request, lambda d, body: d.group_act(action, body, by))

    async def dead_matching(self, request: Request) -> Response:
        query = dict(request.query_params)
        return await _call(self.on(request, lambda d: d.dead_matching(query)))

    async def dead_bulk(self, request: Request) -> Response:
        action = request.path_params["action"]
        return await self.change(request, lambda d, body: d.dead_bulk(action, body))

    async def dead_one(self, request: Request) -> Response:
        ref = f"{request.path_params['shard']}/{request.path_params['entry']}"
        return await _call(self.on(request, lambda d: d.dead_one(ref)))

    async def dead_act(self, request: Request) -> Response:
        ref = f"{request.path_params['shard']}/{request.path_params['entry']}"
        action = request.path_params["action"]
        return await self.change(request, lambda d, _: d.dead_act(ref, action))


async def _body_of(request: Request) -> dict[str, Any] | Response:
    """The request's JSON object (an empty body: {}), or the 400 to answer."""
    if not await request.body():
        return {}
    try:
        data = await request.json()
    except ValueError:
        return JSONResponse({"error": "the body must be JSON"}, status_code=400)
    if not isinstance(data, dict):
        return JSONResponse({"error": "the body must be a JSON object"}, status_code=400)
    return data


def _looking_only(snapshot: dict[str, Any]) -> dict[str, Any]:
    """A live event for a user who may only look: its overview says read-only (the page
    hides the actions by it; an event that did not say so showed them again each second)."""
    return {**snapshot, "overview": {**snapshot["overview"], "read_only": True}}
