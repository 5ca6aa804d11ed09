"""The dashboard's routes: the page, its icon and the JSON API's endpoints, each doing its
work on the request's namespace in a thread; those that change state are refused in
read-only mode or to a read token, and each one done is logged once, at INFO, with who
asked, what and on what (``tickwheel.dashboard``): ``'ops' cancel timer
'job:{2}' in namespace 'default': 200``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from timer.errors import TimerError
from timer.httpapi.routing import JSONReply

from . import live
from .guard import CSRF_COOKIE, FORBIDDEN, INVALID, refusal, user_of, who
from .inputs import answer, query
from .pages import CSP

if TYPE_CHECKING:
    from timer.httpapi.tokens import Token

    from .board import Dashboard, Namespaces

log = logging.getLogger("tickwheel.dashboard")  # every action, with who asked for it


async def _call(fn: Callable[[], Any], request: Request | None = None) -> Response:
    """Run a blocking client call off the event loop; a TimerError becomes a clear 4xx/5xx
    (to a browser opening the address, a page: :func:`answer`)."""
    try:
        return JSONReply(await asyncio.to_thread(fn))
    except TimerError as exc:
        return answer(exc, request)


ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><circle cx="8" cy="8" r="7" '
    'fill="#1d2330"/><path d="M8 3v5l3 2" stroke="#fff" stroke-width="1.6" fill="none" '
    'stroke-linecap="round"/></svg>'
)


# The page's views, each at its own address: every one is the same page, whose script
# shows the view its path names (nav.js has the same list).
VIEWS = ("/", "/timers", "/groups", "/dead-letters", "/schedules", "/workers", "/shards")

STATIC_TYPES = {".js": "text/javascript", ".css": "text/css"}


class Static:
    """The page's modules and stylesheet, read once from the package (a zip install
    too): served by name only, each with its ETag, and revalidated on every load
    (``no-cache``) so a page never runs last release's module beside this one's."""

    def __init__(self) -> None:
        root = resources.files("timer.dashboard") / "static"
        self.files: dict[str, tuple[bytes, str, str]] = {}
        for entry in root.iterdir():
            kind = STATIC_TYPES.get("." + entry.name.rsplit(".", 1)[-1])
            if kind is not None:
                body = entry.read_bytes()
                tag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
                self.files[entry.name] = (body, kind, tag)

    async def serve(self, request: Request) -> Response:
        found = self.files.get(request.path_params["name"])
        if found is None:
            return refusal(404, "NotFound", "no such file")
        body, kind, tag = found
        headers = {"Cache-Control": "no-cache", "ETag": tag, "X-Content-Type-Options": "nosniff"}
        if request.headers.get("if-none-match") == tag:
            return Response(status_code=304, headers=headers)
        return Response(body, media_type=kind, headers=headers)


async def icon(_: Request) -> Response:
    """The page's icon (a clock face), so a browser's /favicon.ico is not a 404."""
    return Response(ICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


UNKNOWN = "\N{EN DASH}"  # what the page's template shows where a count is not known yet


def with_counts(page: str, overview: dict[str, Any]) -> str:
    """The page with the Overview's counts written in, as its script writes them: its
    first paint shows the numbers (the template's dashes stayed until the script's first
    fetch or live event came back)."""
    per_minute = overview["outcomes_last_minute"]
    counts = {
        "pending": overview["pending"],
        "workers-count": len(overview["workers"]),
        "pm-expired": per_minute["expired"],
        "pm-completed": per_minute["completed"],
        "pm-cancelled": per_minute["cancelled"],
        "dead-count": overview["dead_letters"],
    }
    for element, count in counts.items():
        page = page.replace(f'id="{element}">{UNKNOWN}<', f'id="{element}">{int(count)}<', 1)
    return page


class Routes:
    """The page and the API's endpoints; each does its work on the request's namespace
    in a thread (``_call``). Those that change state refuse in read-only mode. Each of
    the API's declares the query parameters it takes besides ``ns`` (``@query``): any
    other is refused, 400 naming it.

    ``anonymous``: how the log names whoever acts without a token of the file (the one
    shared token, or nobody signed in on loopback).
    """

    def __init__(
        self,
        boards: Namespaces,
        page: str,
        csrf: str,
        *,
        read_only: bool,
        anonymous: str = "the dashboard's own user",
    ) -> None:
        self.boards = boards
        self.page = page
        # served to a viewer who may only look with its actions hidden from the first
        # paint: the live overview says so too, but only a moment later
        self.page_looking = page.replace("<body>", '<body class="read-only">', 1)
        self.csrf = csrf
        self.read_only = read_only
        self.anonymous = anonymous

    def on(self, request: Request, fn: Callable[[Dashboard], Any]) -> Callable[[], Any]:
        """The work of a route, on the request's namespace (run in a thread)."""
        return lambda: fn(self.boards.of(request))

    async def run(self, request: Request, fn: Callable[[Dashboard], Any]) -> Response:
        """A route's work (:meth:`on`) done in a thread, answered as :func:`_call` does."""
        return await _call(self.on(request, fn), request)

    async def index(self, request: Request) -> Response:
        page = self.page_looking if self.looks_only(request) else self.page
        try:
            overview = await asyncio.to_thread(lambda: self.boards.of(request).overview())
        except TimerError:  # Redis away, a namespace that does not exist: the live
            pass  # stream says so; the page shows its dashes until then
        else:
            page = with_counts(page, overview)
        response = HTMLResponse(
            page, headers={"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff"}
        )
        response.set_cookie(CSRF_COOKIE, self.csrf, samesite="strict")  # read by the page
        return response

    def looks_only(self, request: Request) -> bool:
        """The user may look and not act: a read-only dashboard, or a ``read`` token."""
        user = user_of(request)
        namespace = request.query_params.get("ns") or self.boards.first.namespace
        return self.read_only or (user is not None and not user.allows("write", namespace))

    @query()
    async def overview(self, request: Request) -> Response:
        looks_only = self.looks_only(request)
        user = user_of(request)
        return await self.run(
            request,
            lambda d: _readable({**d.overview(), "read_only": d.read_only or looks_only}, user),
        )

    @query()
    async def live(self, request: Request) -> Response:
        try:
            board = await asyncio.to_thread(self.boards.of, request)
        except TimerError as exc:  # a namespace that does not exist: said once, no stream
            return answer(exc, request)
        user = user_of(request)
        looks = self.looks_only(request) and not board.read_only  # (a read-only board says so)
        return live.response(request, lambda: _shown(board.snapshot(), user, looks_only=looks))

    @query()
    async def history(self, request: Request) -> Response:
        minutes = request.path_params["minutes"]
        return await self.run(request, lambda d: d.history(minutes))

    @query()
    async def group_history(self, request: Request) -> Response:
        group, minutes = request.path_params["group"], request.path_params["minutes"]
        return await self.run(request, lambda d: d.group_history(group, minutes))

    @query("match", "state", "cursor")
    async def find(self, request: Request) -> Response:
        query = dict(request.query_params)
        return await self.run(request, lambda d: d.find(query))

    @query("cursor", "limit", "match", "field", "value", "min_priority", after="cursor")
    async def pending(self, request: Request) -> Response:
        query = dict(request.query_params)
        return await self.run(request, lambda d: d.pending(query))

    @query()
    async def bulk(self, request: Request) -> Response:
        action = request.path_params["action"]
        return await self.change(
            request,
            lambda body: f"{_verb(action)} {_many(body.get('ids'), 'timer')}",
            lambda d, body: d.bulk(action, body),
        )

    @query()
    async def timer(self, request: Request) -> Response:
        tid = request.path_params["timer_id"]
        return await self.run(request, lambda d: d.timer(tid))

    def refused(self) -> Response | None:
        if self.read_only:
            return refusal(403, FORBIDDEN, "this dashboard is read-only (started with --read-only)")
        return None

    async def change(
        self,
        request: Request,
        what: Callable[[dict[str, Any]], str],
        work: Callable[[Dashboard, dict[str, Any]], Any],
    ) -> Response:
        """A route that changes state: refused read-only; its JSON body, then the work,
        logged once when done (``what``: the action and its target, from the body too)
        with who asked and the answer's status (200, or the library's refusal)."""
        user = user_of(request)
        by = who(user) if user is not None else self.anonymous
        no = self.refused()
        if no is not None:  # a read-only dashboard: who tried is logged all the same
            log.info("%s %s %s: 403 refused (a read-only dashboard)", by, request.method,
                     request.url.path)  # fmt: skip
            return no
        body = await _body_of(request)
        if isinstance(body, Response):
            return body
        namespace = request.query_params.get("ns") or self.boards.first.namespace
        status = "failed"
        try:
            response = await self.run(request, lambda d: work(d, body))
            status = f"{response.status_code}{_what_it_did(response)}"
            return response
        finally:  # one line, whatever the answer: who tried what is the point
            log.info(
                "%s %s in namespace %s: %s",
                by,
                what(body),
                _said(namespace),
                status,
                extra={"namespace": namespace, "user": by},
            )

    @query()
    async def act(self, request: Request) -> Response:
        tid, action = request.path_params["timer_id"], request.path_params["action"]
        return await self.change(
            request,
            lambda _: f"{_verb(action)} timer {_said(tid)}",
            lambda d, body: d.act(tid, action, body),
        )

    @query()
    async def due(self, request: Request) -> Response:
        shard = request.path_params["shard"]
        return await self.run(request, lambda d: d.due(shard))

    @query()
    async def dead(self, request: Request) -> Response:
        return await self.run(request, lambda d: d.dead())

    @query()
    async def schedules(self, request: Request) -> Response:
        return await self.run(request, lambda d: d.schedules())

    @query()
    async def schedule_act(self, request: Request) -> Response:
        name, action = request.path_params["name"], request.path_params["action"]
        return await self.change(
            request,
            lambda _: f"{_verb(action)} schedule {_said(name)}",
            lambda d, body: d.schedule_act(name, action, body),
        )

    @query()
    async def schedule_create(self, request: Request) -> Response:
        return await self.change(
            request,
            lambda body: f"create schedule {_said(body.get('name'))}",
            lambda d, body: d.schedule_create(body),
        )

    @query("kind", "match", "field", "value", "since_ms", "until_ms", "shard", "group", "state")
    async def outcomes(self, request: Request) -> Response:
        query = dict(request.query_params)
        return await self.run(request, lambda d: d.outcomes(query))

    @query("id")
    async def worker(self, request: Request) -> Response:
        worker = request.query_params.get("id", "")  # any id: a query keeps its / and \n
        return await self.run(request, lambda d: d.worker(worker))

    @query()
    async def group_act(self, request: Request) -> Response:
        action = request.path_params["action"]
        user = user_of(request)  # a pause says who: the token's name, on the dashboard
        by = f"{user.name[:200]} (dashboard)" if user is not None and user.name else "dashboard"
        return await self.change(
            request,
            lambda body: f"{_verb(action)} group {_said(body.get('group'))}",
            lambda d, body: d.group_act(action, body, by),
        )

    @query("group", "error", "match")
    async def dead_matching(self, request: Request) -> Response:
        query = dict(request.query_params)
        return await self.run(request, lambda d: d.dead_matching(query))

    @query()
    async def dead_bulk(self, request: Request) -> Response:
        action = request.path_params["action"]
        return await self.change(
            request,
            lambda body: f"{_verb(action)} {_dead_selection(body)}",
            lambda d, body: d.dead_bulk(action, body),
        )

    @query()
    async def dead_one(self, request: Request) -> Response:
        ref = f"{request.path_params['shard']}/{request.path_params['entry']}"
        return await self.run(request, lambda d: d.dead_one(ref))

    @query()
    async def dead_act(self, request: Request) -> Response:
        ref = f"{request.path_params['shard']}/{request.path_params['entry']}"
        action = request.path_params["action"]
        return await self.change(
            request,
            lambda _: f"{_verb(action)} dead letter {_said(ref)}",
            lambda d, body: d.dead_act(ref, action, body),
        )


async def _body_of(request: Request) -> dict[str, Any] | Response:
    """The request's JSON object (an empty body: {}), or the 400 to answer."""
    if not await request.body():
        return {}
    try:
        data = await request.json()
    except ValueError:
        return refusal(400, INVALID, "the body must be JSON")
    if not isinstance(data, dict):
        return refusal(400, INVALID, "the body must be a JSON object")
    return data


def _said(value: object, most: int = 200) -> str:
    """A value as the log line quotes it: its repr (an id's newline stays ``\\n``, so no
    id can forge a line of its own), cut at ``most`` characters."""
    text = repr(value)
    return text if len(text) <= most else text[:most] + "…"


def _what_it_did(response: Response) -> str:
    """What an answer says was done, for the log line after its status: a 200 that did
    nothing (a cancel of a timer decided already, a bulk action none of whose timers was
    pending) was logged as a plain 200, read as done; a refusal says it was one, and why."""
    try:
        said = json.loads(bytes(response.body))
    except ValueError:
        return ""
    if response.status_code >= 400:  # nothing done: it read as the action taken (trial 33)
        why = said.get("error") if isinstance(said, dict) else None
        return f" refused: {_said(why, 160)}" if isinstance(why, str) else " refused"
    if not isinstance(said, dict) or "done" not in said:
        return ""
    done, state = said["done"], said.get("state")
    if said.get("already") is True:
        return ", already so"
    if done is False or done == 0:
        return f", nothing done (already {state})" if isinstance(state, str) else ", nothing done"
    if isinstance(done, int) and not isinstance(done, bool):
        return f", {done} done"
    return ""


def _verb(action: str) -> str:
    """An action from the path as the log line says it: bare when it is a word (cancel,
    redeliver), quoted otherwise (a path's %0A is a newline by then)."""
    return action if re.fullmatch(r"[a-z_-]{1,40}", action) else _said(action)


def _many(items: object, noun: str, shown: int = 5) -> str:
    """A bulk action's list as the log line says it: how many, and the first few."""
    if not isinstance(items, list):
        return f"{noun}s {_said(items)}"  # refused by the library; logged as sent
    head = ", ".join(_said(i) for i in items[:shown])
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return f"{len(items)} {noun}{'' if len(items) == 1 else 's'} ({head}{more})"


def _dead_selection(body: dict[str, Any]) -> str:
    """The dead letters a bulk action names: its refs, or its filter and the count confirmed."""
    if "refs" in body:
        return _many(body["refs"], "dead letter")
    parts = [f"{k} {_said(body[k])}" for k in ("group", "error", "match") if body.get(k)]
    expect = _said(body.get("expect"))
    return f"all dead letters matching {', '.join(parts) or 'anything'} (expect {expect})"


def _readable(overview: dict[str, Any], user: Token | None) -> dict[str, Any]:
    """The overview as ``user`` is shown it: its namespace menu lists only those the token
    may read (it offered every one, and picking another's dropped the user at the sign-in
    page); with the shared token, or none, every namespace."""
    if user is None:
        return overview
    names = [ns for ns in overview["namespaces"] if user.allows("read", ns)]
    return {**overview, "namespaces": names}


def _shown(snapshot: dict[str, Any], user: Token | None, *, looks_only: bool) -> dict[str, Any]:
    """A live event as ``user`` is shown it (:func:`_readable`); for a user who may only
    look, its overview says read-only (the page hides the actions by it; an event that did
    not say so showed them again each second)."""
    overview = _readable(snapshot["overview"], user)
    if looks_only:
        overview = {**overview, "read_only": True}
    return {**snapshot, "overview": overview}
