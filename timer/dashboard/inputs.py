"""What the dashboard's JSON API checks of a request before it acts: its query
parameters (:func:`query`) and a body's fields (one a route does not take is refused,
naming it), a query's whole numbers; and how a refusal is answered (:func:`answer`)."""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from timer.errors import InvalidInput, TimerError, quoted, unknown_field, unknown_parameter
from timer.httpapi.routing import JSONReply

from .pages import error_page, wants_page

Handler = Callable[[Any, Request], Awaitable[Response]]  # a route of routes.Routes


def answer(exc: TimerError, request: Request | None = None) -> Response:
    """A library error as the HTTP API says it: its own status and exit code (errors.py);
    to a browser opening the address (:func:`wants_page`), a page saying it."""
    if request is not None and wants_page(request):
        return error_page(request, exc.http_status, str(exc))
    body = {"error": str(exc), "kind": type(exc).__name__, "exit_code": exc.exit_code}
    return JSONReply(body, status_code=exc.http_status)


def query(*names: str, **renamed: str) -> Callable[[Handler], Handler]:
    """Declares the query parameters a route takes besides ``ns`` (every route's
    namespace): any other is refused before the route runs, 400 naming it, those it
    takes and the nearest (:func:`timer.errors.unknown_parameter`), as the HTTP API
    refuses one. It was ignored: ``/api/pending?after=…`` answered page 1. ``renamed``:
    a name said elsewhere for one of them, said so (``after="cursor"``)."""
    takes = (*names, "ns")

    def declare(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def checked(routes: Any, request: Request) -> Response:
            said = unknown_parameter(request.query_params, takes, _route(request), renamed)
            if said is not None:
                return answer(InvalidInput(said), request)
            return await handler(routes, request)

        return checked

    return declare


def _route(request: Request) -> str:
    """The route a request is for, as its refusal names it: ``GET /api/dead/{shard}/{entry}``
    (the path's pieces named, not the id given: it may be anything)."""
    path = getattr(request.scope.get("route"), "path", "/api")
    return f"{request.method} {re.sub(r':[a-z]+}', '}', path)}"


def takes(body: dict[str, Any], fields: tuple[str, ...], what: str) -> None:
    """InvalidInput, before anything is written, for a field of ``body`` that ``what``
    does not take (:func:`timer.errors.unknown_field`'s words). A field dropped unsaid
    was an option lost (a schedule's ``jitter``) while the answer said done."""
    said = unknown_field(body, fields, what)
    if said:
        raise InvalidInput(said)


def whole_ms(value: Any) -> Any:
    """A body's number of ms as the library takes it: JSON has one number type, so 1000.0
    is 1000 (the HTTP API takes it so); anything else as it came, for the library to
    refuse in its words."""
    if type(value) is float and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value


def either(names: tuple[str, ...]) -> str:
    """``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def whole(name: str, text: str | None) -> int | None:
    """A query's whole number (empty: None); InvalidInput for anything else."""
    if not text:
        return None
    if not text.isdigit() or not text.isascii() or len(text) > 18:
        raise InvalidInput(f"{name} must be a whole number, got {quoted(text, 40)}")
    return int(text)


def signed(name: str, text: str) -> int:
    """A query's whole number that may be negative; InvalidInput for anything else."""
    digits = text[1:] if text.startswith("-") else text
    if not digits.isdigit() or not digits.isascii() or len(digits) > 18:
        raise InvalidInput(f"{name} must be a whole number, got {quoted(text, 40)}")
    return int(text)
