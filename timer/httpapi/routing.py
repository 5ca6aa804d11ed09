"""Routes matched on the path as the client sent it, so that every id is reachable.

Starlette matches a route against the *decoded* path, where ``odd%2Foutcome`` and
``odd/outcome`` are the same text and ``.`` stops at a newline. Here the raw path is cut
at each ``/`` first and each piece decoded after: an id's ``%2F`` stays part of the id,
``%0A`` is a newline in it, and any text the library accepts as an id (at most 256 UTF-8
bytes, anything but a lone surrogate) round-trips through every route that takes one.

A template's one *greedy* parameter (a timer id, a group or schedule name) takes every piece
between the template's fixed start and fixed end, joined by ``/``: an id sent with a
plain ``/`` works too, unless its tail is a route's own last word (``a/outcome``); sent
as ``%2F`` it is never ambiguous. ``{shard}`` matches digits only. The HTTP API and the
dashboard both route this way, both ask :func:`cross_site` where a request came from, and
both send each JSON reply as :class:`JSONReply` (one line, ending in a newline).
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Match, Route
from starlette.types import Scope

from .words import shown

GREEDY = frozenset({"timer_id", "group", "schedule"})


PIECES = "tickwheel.pieces"  # the scope key a request's pieces are kept under


def raw_pieces(scope: Scope) -> list[str] | None:
    """The request path's pieces, each decoded from percent-encoding after the split;
    None when a piece is not UTF-8 (no id can be such text). Worked out once a request:
    every route the router tries reads them from the scope."""
    if PIECES not in scope:
        scope[PIECES] = _pieces(scope)
    found: list[str] | None = scope[PIECES]
    return found


def _pieces(scope: Scope) -> list[str] | None:
    raw = scope.get("raw_path")
    if isinstance(raw, bytes | bytearray):
        text = bytes(raw).split(b"?", 1)[0].decode("latin-1")
    else:  # a server without raw_path: the decoded path is all there is
        text = urllib.parse.quote(scope["path"], safe="/")
    root = scope.get("root_path", "")
    if root and text.startswith(root):
        text = text[len(root) :]
    try:
        return [
            urllib.parse.unquote_to_bytes(piece).decode("utf-8")
            for piece in text.lstrip("/").split("/")
        ]
    except UnicodeDecodeError:
        return None


def match(template: list[str], pieces: list[str]) -> dict[str, Any] | None:
    """The parameters of ``pieces`` under ``template`` (its pieces, ``{name}`` for a
    parameter), or None when it does not match."""
    greedy = next((i for i, t in enumerate(template) if t[1:-1] in GREEDY), None)
    if greedy is None:
        if len(pieces) != len(template):
            return None
        pairs = list(zip(template, pieces, strict=True))
    else:
        tail = len(template) - greedy - 1
        if len(pieces) < len(template):
            return None
        middle = "/".join(pieces[greedy : len(pieces) - tail])
        pairs = [
            *zip(template[:greedy], pieces[:greedy], strict=True),
            (template[greedy], middle),
            *zip(template[greedy + 1 :], pieces[len(pieces) - tail :], strict=True),
        ]
    params: dict[str, Any] = {}
    for want, got in pairs:
        if not (want.startswith("{") and want.endswith("}")):
            if want != got:
                return None
            continue
        name = want[1:-1]
        if not got:
            return None
        if name == "shard":
            if not (got.isascii() and got.isdigit()):
                return None
            params[name] = int(got)
        else:
            params[name] = got
    return params


class JSONReply(JSONResponse):
    """A JSON reply as every route, refusal and error handler of the HTTP API and the
    dashboard sends it: Starlette's compact JSON, then one newline, so that ``curl`` of
    it leaves the shell's prompt on a line of its own (the JSON is one line: its strings'
    newlines are escaped)."""

    def render(self, content: Any) -> bytes:
        return super().render(content) + b"\n"


class RawRoute(Route):
    """A Starlette route whose path is matched by :func:`match` on the raw path."""

    def __init__(self, path: str, endpoint: Any, *, methods: list[str], name: str) -> None:
        super().__init__(path, endpoint, methods=methods, name=name)
        # "{timer_id:path}" is "{timer_id}" here: the name says how a piece matches
        self.template = [
            p.split(":", 1)[0].rstrip("}") + "}" if p.startswith("{") else p
            for p in path.lstrip("/").split("/")
        ]

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http":
            return Match.NONE, {}
        pieces = raw_pieces(scope)
        params = None if pieces is None else match(self.template, pieces)
        if params is None:
            return Match.NONE, {}
        child = {
            "endpoint": self.endpoint,
            "path_params": {**scope.get("path_params", {}), **params},
        }
        if self.methods and scope["method"] not in self.methods:
            return Match.PARTIAL, child
        return Match.FULL, child


def cross_site(request: Request, this: str, *, navigation: bool) -> str:
    """Why the browser that sent ``request`` says another site's page sent it: its
    ``Origin`` is not this server's, or its ``Sec-Fetch-Site`` is not ``same-origin``
    (``none``, a request the user made by hand, counts as its own with ``navigation``);
    '' when it does not say so (programs send neither header). ``this`` names the
    server in the reason."""
    origin = request.headers.get("origin")
    site = request.headers.get("sec-fetch-site")
    if origin is None and site is None:
        return ""
    own = f"{request.scope.get('scheme', 'http')}://{request.headers.get('host', '')}"
    if origin is not None and origin != own:
        return f"Origin {shown(origin, 100)} is not this {this} ({own[:100]})"
    if site is not None and site != "same-origin" and not (navigation and site == "none"):
        return f"Sec-Fetch-Site is {shown(site, 40)}"
    return ""
