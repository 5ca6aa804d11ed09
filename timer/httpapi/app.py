"""The HTTP API's Starlette app: every endpoint of :mod:`timer.httpapi.spec`, over the public
asyncio client (``AsyncTimerClient``, one per namespace, made at first use).

A request is checked in this order, and refused with the one JSON error shape
(``error``, ``kind``, ``exit_code``: the library's error class and the CLI's code) before
anything is written: that no other site's page sent it (403), the bearer token (401) and
its scope and namespaces (403), the query (400), the body's type (415) and size (413),
that the body is JSON (400) and matches the endpoint's schema (400), then the library's
own checks (400, 404, 409, ...).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import jsonschema
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from timer import TimerError
from timer.durable.model.codec import MAX_PAYLOAD_DEPTH, jsonable
from timer.errors import ConfigError

from . import handlers, openapi
from .context import (
    LATENCY,
    REQUESTS,
    Call,
    Clients,
    Handler,
    error,
    first_time,
    from_exception,
)
from .routing import JSONReply, RawRoute, cross_site
from .schemas import whole_numbers
from .spec import ENDPOINTS, MAX_BODY_BYTES, Endpoint
from .tokens import TokenFile
from .words import Schema, action_route, nearest_route, say, shown, unknown_query

log = logging.getLogger("tickwheel.httpapi")


def create_app(
    url: str, *, tokens: TokenFile | None, callback_hosts: Iterable[str] = ()
) -> Starlette:
    """The API for the Redis at ``url``; ``tokens`` None: no authentication (loopback
    only: ``tickwheel serve`` refuses otherwise); ``callback_hosts``: the hosts a timer's
    ``callback_url`` may name (none: no timer may have one)."""
    clients = Clients(url)
    clients.callback_hosts = frozenset(h.lower() for h in callback_hosts)
    document = openapi.document()
    validators = {e.name: Schema(e.body) for e in ENDPOINTS if e.body is not None}

    def route(endpoint: Endpoint, handler: Handler) -> Route:
        async def run(request: Request) -> Response:
            started = time.perf_counter()
            response = await _serve(request, endpoint, handler, clients, tokens, validators)
            LATENCY.labels(endpoint.name).observe(time.perf_counter() - started)
            REQUESTS.labels(endpoint.name, str(response.status_code)).inc()
            return response

        # matched on the raw path (timer.httpapi.routing): an id's %2F, %0A, ... are its own
        return RawRoute(endpoint.path, run, methods=[endpoint.method], name=endpoint.name)

    async def openapi_json(_: Request) -> Response:
        return JSONReply(document)

    table = handlers.table(clients)
    # a route that ends at {timer_id} (greedy: ids may hold '/') goes after those that
    # go on past it (.../outcome, .../cancel)
    ordered = sorted(ENDPOINTS, key=lambda e: e.path.endswith("{timer_id}"))
    routes = [route(e, table[e.name]) for e in ordered if e.name != "openapi"]
    routes.append(Route("/v1/openapi.json", openapi_json, methods=["GET"]))

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await clients.close()

    return Starlette(
        routes=routes, lifespan=lifespan, exception_handlers={404: _no_route, 405: _no_method}
    )


async def _no_route(request: Request, _exc: Exception) -> Response:
    """An unknown path answers the one error shape too (not Starlette's plain text),
    with the route it was likely meant for."""
    path = request.url.path
    routes = [r.path for r in request.app.routes if isinstance(r, Route)]
    meant = nearest_route(path, routes)
    hint = f"did you mean {shown(meant, 200)}? " if meant else ""
    return error(
        404,
        "NotFound",
        f"no route {shown(path, 200)}; {hint}the routes are in /v1/openapi.json",
        6,
    )


async def _no_method(request: Request, exc: Exception) -> Response:
    """The methods the path takes, and for a DELETE the route that does it (a timer is
    cancelled, a dead letter dropped, a schedule deleted: ``POST …/cancel``, ``POST
    …/drop``, ``POST …/delete``)."""
    path = request.url.path
    allow = (getattr(exc, "headers", None) or {}).get("Allow", "")
    methods = sorted({m.strip() for m in allow.split(",") if m.strip()} - {"HEAD"})
    takes = f"; it takes {', '.join(methods)}" if methods else ""  # HEAD goes with GET
    routes = {r.path for r in request.app.routes if isinstance(r, Route)}
    action = next(
        (
            f"{path.rstrip('/')}/{verb}"
            for verb in ("cancel", "drop", "delete")
            if request.method == "DELETE" and action_route(f"{path}/{verb}", routes)
        ),
        None,
    )
    hint = f"; to remove it: POST {shown(action, 200)}" if action else ""
    meant = nearest_route(path, routes) if request.method == "POST" else None
    if meant is not None:  # …/w10/pasue: a schedule named so, or the action mistyped
        hint = f"; did you mean POST {shown(meant, 200)}?"
    response = error(
        405,
        "MethodNotAllowed",
        f"{request.method} is not a method of {shown(path, 200)}{takes}{hint}; "
        "see /v1/openapi.json",
        3,
    )
    response.headers.update(getattr(exc, "headers", None) or {})  # Allow: what is
    return response


async def _serve(  # noqa: PLR0917 - the request and what the app hands every route
    request: Request,
    endpoint: Endpoint,
    handler: Handler,
    clients: Clients,
    tokens: TokenFile | None,
    validators: Mapping[str, Schema],
) -> Response:
    namespace = request.path_params.get("namespace")
    refused = _cross_site(request, endpoint) or _authorize(request, endpoint, namespace, tokens)
    if refused is not None:
        return refused
    query = _query(request, endpoint)
    if isinstance(query, Response):
        return query
    body: Any = None
    if endpoint.body is not None:
        parsed = await _body(request, validators[endpoint.name], endpoint.empty)
        if isinstance(parsed, Response):
            return parsed
        body = parsed
    try:
        client = await clients.of(namespace) if namespace is not None else None
        result = await handler(Call(request, endpoint, body, query, client, clients))
    except TimerError as exc:
        return from_exception(exc)
    if isinstance(result, Response):
        return result
    return JSONReply(jsonable(result))


def _cross_site(request: Request, endpoint: Endpoint) -> Response | None:
    """403 for a request a browser sent on behalf of another site's page to an endpoint
    that changes state (or reads a group, which moves it on), whatever the token: with
    ``--no-auth`` on loopback, any page the user opens could otherwise schedule, cancel
    or consume. A browser says where a request comes from (``Sec-Fetch-Site``,
    ``Origin``); curl, the clients and the Node example send neither."""
    if endpoint.scope not in ("write", "admin"):
        return None
    why = cross_site(request, "server", navigation=True)
    if not why:
        return None
    return error(
        403,
        "Forbidden",
        f"refused a cross-site request ({why}): this API takes "
        "requests from programs, not from another site's page",
        4,
    )


def _authorize(
    request: Request, endpoint: Endpoint, namespace: str | None, tokens: TokenFile | None
) -> Response | None:
    if endpoint.scope == "none" or tokens is None:
        return None
    header = request.headers.get("authorization", "")
    bearer = header[7:].strip() if header.lower().startswith("bearer ") else ""
    try:
        token = tokens.check(bearer) if bearer else None
    except ConfigError as exc:
        return from_exception(exc)
    if token is None:
        return error(
            401,
            "Unauthorized",
            "a valid token is required: Authorization: Bearer tw_… (tickwheel tokens create)",
            4,
        )
    if not token.allows(endpoint.scope, namespace):
        where = f" on namespace {shown(namespace)}" if namespace else ""
        return error(
            403,
            "Forbidden",
            f"token {token.id} may not {endpoint.scope}{where} "
            f"(it has {token.scope} on {', '.join(token.namespaces)})",
            4,
        )
    return None


async def _body(request: Request, schema: Schema, empty: str | None) -> Any:
    """The request's JSON body, checked against its schema; or the 4xx to answer. No
    body is ``{}``, unless the route requires one (``empty`` says what to send)."""
    kind = request.headers.get("content-type")
    if kind is not None and kind.split(";", 1)[0].strip().lower() != "application/json":
        return error(
            415,
            "InvalidInput",
            f"the body must be application/json, not "
            f"{shown(kind, 80)} (Content-Type: application/json, or none)",
            3,
        )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return _too_large(schema)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():  # never more than the limit held in memory
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return _too_large(schema)
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw and empty is not None:
        return error(400, "InvalidInput", f"the body is missing: {empty}", 3)
    try:
        data = strict_json(raw) if raw else {}
    except UnicodeDecodeError as exc:
        return error(
            400,
            "InvalidInput",
            f"the body is not UTF-8 (byte {exc.start} is 0x{raw[exc.start]:02x}): "
            "send JSON in UTF-8",
            3,
        )
    except RecursionError:  # deeper than Python's parser goes
        return _too_deep("too deep")
    except ValueError as exc:
        return error(400, "InvalidInput", f"the body is not JSON: {exc}"[:300], 3)
    depth = json_depth(data)
    if depth > MAX_BODY_DEPTH:
        return _too_deep(f"{depth} levels deep")
    problem = schema.problem(data)
    if problem is not None:
        where = "/".join(str(p) for p in problem.absolute_path) or "the body"
        return error(400, "InvalidInput", f"{where}: {say(problem)}", 3)
    return whole_numbers(data, schema.schema)


def _too_deep(how: str) -> JSONReply:
    return error(
        400,
        "InvalidInput",
        f"the body nests {how}; at most {MAX_BODY_DEPTH} levels (a payload at most "
        f"{MAX_PAYLOAD_DEPTH})",
        3,
    )


# A body's JSON nests at most this deep: a payload's own limit (the library's) plus the
# levels a batch puts around it ({"timers": [{"payload": …}]}).
MAX_BODY_DEPTH = MAX_PAYLOAD_DEPTH + 3


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity); send a number")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {shown(key, 80)} appears twice in one object; send it once")
        out[key] = value
    return out


def strict_json(raw: bytes) -> Any:
    """JSON as RFC 8259 has it: UTF-8 (Python's parser also guesses UTF-16 and UTF-32;
    a byte order mark is let by, as the RFC allows); NaN, Infinity and -Infinity (which
    it takes) and a key twice in one object (whose last value it keeps silently) are
    refused. UnicodeDecodeError, RecursionError (nested past the parser) or ValueError.
    A body in UTF-16 or UTF-32, which earlier releases took, is still taken (a client
    sending it keeps working), and the server's log says once to send UTF-8."""
    wide = json.detect_encoding(raw)  # as json.loads guesses it (its nulls, its BOM)
    if not wide.startswith(("utf-16", "utf-32")):
        text = raw.decode("utf-8-sig")
    else:
        text = raw.decode(wide)  # its own UnicodeDecodeError if it is not that either
        if first_time("wide"):
            log.warning(
                "a request body came in %s: taken, as earlier releases took it; JSON is "
                "UTF-8 (RFC 8259), and a later release may refuse another encoding",
                wide.upper(),
            )
    return json.loads(text, parse_constant=_constant, object_pairs_hook=_object)


def json_depth(value: Any) -> int:
    """How deep a parsed JSON value nests (a scalar 0, ``[]`` and ``{}`` 1), iteratively."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            todo.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def _query(request: Request, endpoint: Endpoint) -> dict[str, Any] | Response:
    """The endpoint's query parameters, typed as their schemas say and checked against
    them; one without a default is required. Any other is refused: a misspelt one
    (``?limt=5``) would otherwise be ignored without a word."""
    for name in request.query_params:
        if len(request.query_params.getlist(name)) > 1:  # which one would count?
            return error(400, "InvalidInput", f"{shown(name)} is given twice: give it once", 3)
        if name not in endpoint.query:
            said = unknown_query(name, request.query_params[name], endpoint.query)
            return error(400, "InvalidInput", said, 3)
    out: dict[str, Any] = {}
    for name, schema in endpoint.query.items():
        raw = request.query_params.get(name)
        if raw is None:
            if "default" not in schema:
                return error(400, "InvalidInput", f"the query needs {name}=", 3)
            out[name] = schema["default"]
            continue
        try:
            kind = schema.get("type")
            value: Any = int(raw) if kind == "integer" else float(raw) if kind == "number" else raw
        except ValueError:
            wanted = "an integer" if kind == "integer" else "a number"
            return error(400, "InvalidInput", f"{name}: expected {wanted}, got {shown(raw)}", 3)
        if isinstance(value, float) and not math.isfinite(value):  # nan passes any bound
            return error(
                400, "InvalidInput", f"{name}: expected a finite number, got {shown(raw)}", 3
            )
        problem = jsonschema.exceptions.best_match(_validator(name, schema).iter_errors(value))
        if problem is not None:
            return error(400, "InvalidInput", f"{name}: {say(problem)}", 3)
        out[name] = value
    return out


_QUERY_VALIDATORS: dict[tuple[int, str], jsonschema.Draft202012Validator] = {}


def _validator(name: str, schema: Mapping[str, Any]) -> jsonschema.Draft202012Validator:
    """A query parameter's validator, made once per schema (not per request)."""
    key = (id(schema), name)
    found = _QUERY_VALIDATORS.get(key)
    if found is None:
        found = _QUERY_VALIDATORS[key] = jsonschema.Draft202012Validator(schema)
    return found


def _too_large(schema: Schema) -> JSONReply:
    """413, with what to do: fewer timers a request where the body is a batch of them,
    else a smaller body (a schedule's create said to send fewer timers: trial 30)."""
    batch = "items" in schema.schema.get("properties", {})
    do = "send fewer timers a request" if batch else "send a smaller body"
    return error(413, "InvalidInput", f"the body is larger than {MAX_BODY_BYTES} bytes; {do}", 3)
