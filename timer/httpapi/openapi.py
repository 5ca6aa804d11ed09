"""The OpenAPI 3.1 document of the HTTP API, built from :mod:`timer.httpapi.spec` (the objects
the server validates with). ``python -m timer.httpapi.openapi`` prints it; the documentation site's
API reference is built from a copy of it, which a test compares with this."""

from __future__ import annotations

import json
from typing import Any

from timer import __version__
from timer.shapes import SCHEMAS

from .schemas import ERROR, SCHEDULE
from .spec import ENDPOINTS, Endpoint

GATE = {
    400: "bad input: what is wrong and what to do (nothing was written)",
    401: "no valid token",
    403: "the token's scope or namespaces do not allow it, or another site's page sent it",
    413: "the body is larger than 4 MiB",
    415: "the body is not application/json",
    503: "Redis is unreachable or failing, or the server is stopping",
}
PATH = {
    "namespace": {"type": "string", "pattern": "^[A-Za-z0-9_.\\-]{1,64}$"},
    "group": {
        "type": "string",
        "minLength": 1,
        "description": "Percent-encoded whole, '/' as %2F (any text of 1-256 bytes).",
    },
    "timer_id": {
        "type": "string",
        "minLength": 1,
        "description": "Percent-encoded whole, '/' as %2F (any text of 1-256 bytes).",
    },
    "schedule": {
        "type": "string",
        "minLength": 1,
        "pattern": "^[^{}@]+$",
        "description": "Percent-encoded whole, '/' as %2F (1-200 bytes, no '{', '}' or '@').",
    },
    "shard": {"type": "integer", "minimum": 0},
    "entry": {"type": "string", "minLength": 1, "description": "A stream entry id."},
}


def errors(e: Endpoint) -> dict[int, str]:
    """Every error status ``e`` can answer: the gate's, by what the request carries,
    then the endpoint's own."""
    out: dict[int, str] = {}
    if e.namespaced or e.body is not None or e.query:
        out[400] = GATE[400]
    if e.scope != "none":
        out |= {401: GATE[401], 403: GATE[403]}
    if e.body is not None:
        out |= {413: GATE[413], 415: GATE[415]}
    if e.namespaced:
        out[503] = GATE[503]
    return out | dict(e.errors)


def _body_required(e: Endpoint) -> bool:
    """A body must be sent: ``empty`` says so, or its schema requires a field (any other
    route takes none as ``{}``, as the guides' curl lines send it)."""
    body = e.body or {}
    return e.empty is not None or "required" in body or "oneOf" in body


def _operation(e: Endpoint) -> dict[str, Any]:
    op: dict[str, Any] = {"operationId": e.name, "summary": e.summary, "responses": {}}
    params = [
        {"name": n, "in": "path", "required": True, "schema": schema}
        for n, schema in PATH.items()
        if f"{{{n}}}" in e.path
    ]
    params += [
        {"name": n, "in": "query", "required": "default" not in s, "schema": dict(s)}
        for n, s in e.query.items()
    ]
    if params:
        op["parameters"] = params
    if e.body is not None:
        op["requestBody"] = {
            "required": _body_required(e),
            "content": {"application/json": {"schema": dict(e.body)}},
        }
    for status, (text, schema) in sorted(e.responses.items()):
        body = {"content": {"application/json": {"schema": dict(schema)}}} if schema else {}
        op["responses"][str(status)] = {"description": text, **body}
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for status, text in sorted(errors(e).items()):
        op["responses"][str(status)] = {"description": text, "content": error}
    if e.scope != "none":
        op["security"] = [{"bearer": [e.scope]}]
    return op


def document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for e in ENDPOINTS:
        paths.setdefault(e.path, {})[e.method.lower()] = _operation(e)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "tickwheel",
            "version": __version__,
            "description": "Durable distributed timers: schedule, decide and wait for "
            "them from any language.",
        },
        "paths": paths,
        "components": {
            "schemas": {"Error": ERROR, "TimerRequest": SCHEDULE, **SCHEMAS},
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "tickwheel tokens create",
                }
            },
        },
    }


if __name__ == "__main__":
    print(json.dumps(document(), indent=1, sort_keys=True))
