"""The dashboard's web app: a page and a small JSON API over the public ``TimerClient``.

Starlette, served by uvicorn (``tickwheel dashboard``). The page is plain HTML with a
little JavaScript that follows ``/api/live``, a Server-Sent Events stream of what it
shows (:mod:`timer.dashboard.live`); every action is a POST that goes through the client's own
calls (``cancel``, ``complete``, ``reschedule``, ``client.timers``' bulk actions,
``redeliver``, ``drop_dead_letter``, the schedules'), so validation and errors are the
library's. No key is built here and no raw Redis command is sent.

``read_only`` refuses every POST (403) and the page hides the buttons. ``token``, when
set, is required on every request: ``Authorization: Bearer <token>``, or the cookie
``/login?token=<token>`` sets. Every request must name an allowed host, and every POST
must come from the dashboard's own page (:class:`Guard`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Iterable
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from timer import TimerClient
from timer.durable.entries import parse_ref
from timer.durable.keys import check_namespace
from timer.durable.shapes import dead_letter_json, group_json, outcome_json, schedule_json
from timer.errors import InvalidInput, ScheduleNotFound, TimerError, TimerNotFound
from timer.handlers.limits import limits_in_use
from timer.httpapi.routing import RawRoute
from timer.httpapi.tokens import TokenFile

from . import live
from .guard import CSRF_COOKIE, LOOPBACK_HOSTS, Guard, host_name, user_of, who
from .shapes import info_shape, lateness_histogram

log = logging.getLogger("tickwheel.dashboard")  # every action, with who asked for it

RECENT = 200  # outcomes per shard read for the lateness histogram and the live list
FIND_PAGE, FIND_PAGES, FIND_SHOWN = 1000, 20, 100  # the search box: scan bounds, rows


class Dashboard:
    """What the routes read and do, synchronously (run in a thread by each route), for
    one namespace; :class:`Namespaces` hands out one per namespace."""

    def __init__(self, client: TimerClient, *, read_only: bool) -> None:
        self.client = client
        self.read_only = read_only

    def overview(self) -> dict[str, Any]:
        c = self.client
        st = c.stats(servers=False)  # every 2 s: no INFO of every server
        now = int(st["now_ms"])
        recent = c.recent_outcomes(RECENT)  # the newest of each shard, newest first
        minute_ago = now - 60_000
        per_minute: dict[str, int] = {"expired": 0, "completed": 0, "cancelled": 0}
        expired_by_shard: dict[int, int] = {}
        for o in recent:
            if o.decided_ms >= minute_ago:
                per_minute[o.outcome] = per_minute.get(o.outcome, 0) + 1
                if o.outcome == "expired":
                    expired_by_shard[o.shard] = expired_by_shard.get(o.shard, 0) + 1
        led: dict[str, int] = {}
        fired: dict[str, int] = {}
        for s in st["shards"]:
            if s["leader"]:
                led[s["leader"]] = led.get(s["leader"], 0) + 1
                fired[s["leader"]] = fired.get(s["leader"], 0) + expired_by_shard.get(s["shard"], 0)
        return {
            "namespace": c.namespace,
            "namespaces": c.namespaces(),
            "server": c.where,  # never a password: the client keeps a redacted URL
            "read_only": self.read_only,
            "now_ms": now,
            "pending": st["pending"],
            "shards": [{**s, "lease": s["leader"] is not None} for s in st["shards"]],
            "workers": [
                {
                    "id": w,
                    "heartbeat_age_ms": max(0, now - ms),
                    "shards_led": led.get(w, 0),
                    # timers expired on the shards it leads, per second over the last minute
                    "expired_per_s": round(fired.get(w, 0) / 60, 2),
                }
                for w, ms in c.workers()
            ],
            "groups": [group_json(g) for g in c.groups()],
            "limits": limits_in_use(c),  # per-key handler limits' slots held now
            "dead_letters": c.dead_letters_total(),
            "outcomes_last_minute": per_minute,
            "lateness": lateness_histogram(recent),
            "recent": [outcome_json(o) for o in recent[:20]],
        }

    def timer(self, timer_id: str) -> dict[str, Any]:
        info = self.client.get(timer_id)
        if info is None:
            raise TimerNotFound.of(timer_id, self.client.namespace)
        return info_shape(info, self.client.server_time_ms())

    def act(self, timer_id: str, action: str, body: dict[str, Any]) -> dict[str, Any]:
        c = self.client
        if action == "cancel":
            return {"done": c.cancel(timer_id), **self.timer(timer_id)}
        if action == "complete":
            return {"done": c.complete(timer_id), **self.timer(timer_id)}
        if action == "reschedule":
            delay = body.get("delay_ms")
            if isinstance(delay, bool) or not isinstance(delay, int):
                raise InvalidInput(f"delay_ms must be a whole number of ms, got {delay!r}")
            moved = c.reschedule(timer_id, delay)
            return {"done": moved is not None, **self.timer(timer_id)}
        raise InvalidInput(f"unknown action {action!r}: cancel, complete or reschedule")

    def snapshot(self) -> dict[str, Any]:
        """What the page shows, in one event of the live stream."""
        return {"overview": self.overview(), "dead": self.dead(), "schedules": self.schedules()}

    def find(self, query: dict[str, str]) -> dict[str, Any]:
        """Up to about FIND_SHOWN timers matching ``match`` and ``state`` from ``cursor``,
        a few bounded pages at most; the cursor to go on with (None: no more)."""
        shown: list[dict[str, Any]] = []
        cursor = query.get("cursor") or None
        now = self.client.server_time_ms()
        for _ in range(FIND_PAGES):
            page = self.client.timers.find(
                query.get("match") or "*",
                state=query.get("state") or "pending",
                cursor=cursor,
                count=FIND_PAGE,
            )
            shown += [info_shape(t, now) for t in page.timers]
            cursor = page.cursor
            if cursor is None or len(shown) >= FIND_SHOWN:
                break
        shown.sort(key=lambda t: t["deadline_ms"])  # soonest first, whatever the shard
        return {"timers": shown, "cursor": cursor}

    def bulk(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        """``action`` on the timers the page selected (``ids``); reschedule by ``delay_ms``."""
        move = {"delay_ms": body.get("delay_ms")} if action == "reschedule" else {}
        done = self.client.timers.act_on(body.get("ids"), action, **move)  # type: ignore[arg-type]
        return {
            "action": action,
            "selected": done.selected,
            "done": done.done,
            "skipped": done.skipped,
            "errors": done.errors,
        }

    def due(self, shard: int) -> dict[str, Any]:
        now = self.client.server_time_ms()
        timers = self.client.next_due(shard, 20)
        return {
            "shard": shard,
            "due": [{"id": tid, "deadline_ms": d, "time_left_ms": d - now} for d, tid in timers],
        }

    def dead(self) -> list[dict[str, Any]]:
        return [dead_letter_json(d) for d in self.client.dead_letters(limit=200)]

    def dead_act(self, ref: str, action: str) -> dict[str, Any]:
        parse_ref(ref, self.client.meta.shards)
        if action == "redeliver":
            return {"ref": ref, "done": self.client.redeliver(ref) is not None}
        if action == "drop":
            return {"ref": ref, "done": self.client.drop_dead_letter(ref)}
        raise InvalidInput(f"unknown action {action!r}: redeliver or drop")

    def schedules(self) -> list[dict[str, Any]]:
        return [schedule_json(s) for s in self.client.schedules.list()]

    def schedule_create(self, body: dict[str, Any]) -> dict[str, Any]:
        """A new schedule from the page's form: name, cron or every, tz, payload."""
        spec = {k: body[k] for k in ("cron", "every", "tz") if body.get(k) not in (None, "")}
        made = self.client.schedules.create(body.get("name"), payload=body.get("payload"), **spec)  # type: ignore[arg-type]
        return schedule_json(made)

    def schedule_act(self, name: str, action: str, body: dict[str, Any]) -> dict[str, Any]:
        """pause, resume, trigger, backfill (``start_ms``, ``end_ms``) or delete."""
        s = self.client.schedules
        if action == "backfill":
            ran = s.backfill(name, body.get("start_ms"), body.get("end_ms"))  # type: ignore[arg-type]
            created = [t.id for t in ran if not isinstance(t, Exception) and t.created]
            return {"name": name, "action": action, "done": True, "created": created}
        if action == "pause":
            done = s.pause(name)
        elif action == "resume":
            done = s.resume(name) is not None
        elif action == "trigger":
            done = s.trigger(name).created
        elif action == "delete":
            done = s.delete(name)
        else:
            raise InvalidInput(
                f"unknown action {action!r}: pause, resume, trigger, backfill or delete"
            )
        if not done and action != "trigger":
            raise ScheduleNotFound.of(name, self.client.namespace)
        return {"name": name, "action": action, "done": done}


class Namespaces:
    """A Dashboard per namespace, each with a client sharing the first one's connections."""

    def __init__(self, client: TimerClient, *, read_only: bool) -> None:
        self.first = client
        self.read_only = read_only
        self.boards = {client.namespace: Dashboard(client, read_only=read_only)}

    def of(self, request: Request) -> Dashboard:
        name = request.query_params.get("ns") or self.first.namespace
        if name not in self.boards:
            check_namespace(name)
            c = TimerClient(
                self.first.redis, name, settings=self.first.settings, safe_url=self.first.where
            )
            c.meta  # noqa: B018 - a namespace that does not exist fails here (ConfigError)
            self.boards[name] = Dashboard(c, read_only=self.read_only)
        return self.boards[name]


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
    api = _Routes(Namespaces(client, read_only=read_only), page, csrf, read_only=read_only)
    routes = [
        Route("/", api.index),
        Route("/favicon.svg", _icon),
        Route("/favicon.ico", _icon),  # asked for by browsers whatever the page says
        Route("/api/overview", api.overview),
        Route("/api/live", api.live),
        Route("/api/find", api.find),
        Route("/api/bulk/{action:str}", api.bulk, methods=["POST"]),
        # an id is matched on the raw path: its %2F and %0A are its own (timer.httpapi.routing)
        RawRoute("/api/timers/{timer_id}/{action}", api.act, methods=["POST"], name="act"),
        RawRoute("/api/timers/{timer_id}", api.timer, methods=["GET"], name="timer"),
        Route("/api/shards/{shard:int}/due", api.due),
        Route("/api/dead", api.dead),
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
    return Starlette(routes=routes, middleware=middleware)


ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><circle cx="8" cy="8" r="7" '
    'fill="#1d2330"/><path d="M8 3v5l3 2" stroke="#fff" stroke-width="1.6" fill="none" '
    'stroke-linecap="round"/></svg>'
)


async def _icon(_: Request) -> Response:
    """The page's icon (a clock face), so a browser's /favicon.ico is not a 404."""
    return Response(ICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


class _Routes:
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
        return live.response(request, lambda: {**board.snapshot(), "read_only": True})

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
        return await _call(self.on(request, Dashboard.dead))

    async def schedules(self, request: Request) -> Response:
        return await _call(self.on(request, Dashboard.schedules))

    async def schedule_act(self, request: Request) -> Response:
        name, action = request.path_params["name"], request.path_params["action"]
        return await self.change(request, lambda d, body: d.schedule_act(name, action, body))

    async def schedule_create(self, request: Request) -> Response:
        return await self.change(request, Dashboard.schedule_create)

    async def dead_act(self, request: Request) -> Response:
        no = self.refused()
        if no is not None:
            return no
        ref = f"{request.path_params['shard']}/{request.path_params['entry']}"
        action = request.path_params["action"]
        return await _call(self.on(request, lambda d: d.dead_act(ref, action)))


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
