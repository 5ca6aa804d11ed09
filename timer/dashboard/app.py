"""The dashboard's web app: a page and a small JSON API over the public ``TimerClient``.

Starlette, served by uvicorn (``tickwheel dashboard``). The page is plain HTML, a
stylesheet and a few ES modules (``static/``, served as they are: no build step) that
follow ``/api/live``, a Server-Sent Events stream of what it
shows (:mod:`timer.dashboard.live`); every action is a POST that goes through the client's own
calls (``cancel``, ``complete``, ``reschedule``, ``client.timers``' bulk actions,
``redeliver``, ``drop_dead_letter``, the schedules'), so validation and errors are the
library's. No key is built here and no raw Redis command is sent.

``read_only`` refuses every POST (403) and the page hides every control that would send
one (as it does for a ``read`` token). Each action done is logged once, at INFO, on
``tickwheel.dashboard``: who (the token's name), what, on what, and the answer. ``token``, when
set, is required on every request: ``Authorization: Bearer <token>``, or the cookie
the sign-in page sets (``/login?token=<token>`` too). Every request must name an
allowed host, and every POST must come from the dashboard's own page (:class:`Guard`).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from timer import TimerClient
from timer.errors import quoted
from timer.httpapi.routing import RawRoute
from timer.httpapi.tokens import TokenFile

from .board import Namespaces
from .guard import LOOPBACK_HOSTS, Guard, host_name, refusal
from .pages import error_page, wants_page
from .routes import VIEWS, Routes, Static, icon


def create_app(
    client: TimerClient,
    *,
    read_only: bool = False,
    token: str | None = None,
    allowed_hosts: Iterable[str] = LOOPBACK_HOSTS,
    tokens: TokenFile | None = None,
) -> Any:
    """The Starlette app for ``client``'s namespace (others with ``?ns=<name>``).

    ``allowed_hosts``: the names it answers for (``Host``), loopback ones by default;
    ``"*"`` answers any (only behind a proxy that checks it). ``tokens``: each user
    signs in with a token of the HTTP API's file instead of one shared ``token`` (a
    ``read`` token sees everything and changes nothing). See :class:`Guard`.
    """
    page = (resources.files("timer.dashboard") / "static" / "index.html").read_text()
    csrf = secrets.token_urlsafe(32)  # per process: a restart asks the page to reload
    anonymous = "the shared token" if token is not None else "anyone (no token set)"
    boards = Namespaces(client, read_only=read_only)
    api = Routes(boards, page, csrf, read_only=read_only, anonymous=anonymous)
    routes = [
        *(Route(path, api.index) for path in VIEWS),
        Route("/static/{name:str}", Static().serve),
        Route("/favicon.svg", icon),
        Route("/favicon.ico", icon),  # asked for by browsers whatever the page says
        Route("/api/overview", api.overview),
        Route("/api/live", api.live),
        Route("/api/history/{minutes:int}", api.history),
        Route("/api/history/{minutes:int}/group/{group:path}", api.group_history),
        Route("/api/find", api.find),
        Route("/api/pending", api.pending),
        Route("/api/bulk/{action:str}", api.bulk, methods=["POST"]),
        # an id is matched on the raw path: its %2F and %0A are its own (timer.httpapi.routing)
        RawRoute("/api/timers/{timer_id}/{action}", api.act, methods=["POST"], name="act"),
        RawRoute("/api/timers/{timer_id}", api.timer, methods=["GET"], name="timer"),
        Route("/api/shards/{shard:int}/due", api.due),
        Route("/api/dead", api.dead),
        Route("/api/groups/{action:str}", api.group_act, methods=["POST"]),
        Route("/api/worker", api.worker),
        Route("/api/outcomes", api.outcomes),
        Route("/api/dead/matching", api.dead_matching),
        Route("/api/dead/bulk/{action:str}", api.dead_bulk, methods=["POST"]),
        Route("/api/dead/{shard:int}/{entry:str}", api.dead_one),
        Route("/api/dead/{shard:int}/{entry:str}/{action:str}", api.dead_act, methods=["POST"]),
        Route("/api/schedules", api.schedules, methods=["GET"]),
        Route("/api/schedules", api.schedule_create, methods=["POST"]),
        Route("/api/schedules/{name:str}/{action:str}", api.schedule_act, methods=["POST"]),
    ]
    hosts = frozenset(host_name(h) if h != "*" else h for h in allowed_hosts)
    guard = Middleware(
        Guard,
        token=token,
        csrf=csrf,
        allowed_hosts=hosts,
        tokens=tokens,
        namespace=client.namespace,
    )
    middleware = [guard]
    handlers = {404: _no_route, 405: _no_method}
    return Starlette(routes=routes, middleware=middleware, exception_handlers=handlers)


async def _no_route(request: Request, _exc: Exception) -> Response:
    """An unknown path answers the API's one error shape too, not Starlette's plain text;
    a browser opening it, a page saying so (:mod:`timer.dashboard.pages`)."""
    said = f"no such page or endpoint: {quoted(request.url.path, 200)}"
    return error_page(request, 404, said) if wants_page(request) else refusal(404, "NotFound", said)


async def _no_method(request: Request, exc: Exception) -> Response:
    said = f"{quoted(request.method, 20)} is not a method of {quoted(request.url.path, 200)}"
    response = refusal(405, "MethodNotAllowed", said)
    response.headers.update(getattr(exc, "headers", None) or {})  # Allow: what is
    return response
