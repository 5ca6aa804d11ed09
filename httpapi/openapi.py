"""The OpenAPI 3.1 document of the HTTP API, built from :mod:`httpapi.spec` (the objects
the server validates with). ``python -m httpapi.openapi`` prints it; the repository keeps
a copy in ``docs/openapi.json`` that a test compares with this."""

from __future__ import annotations

import json
from typing import Any

from timer import __version__

from .spec import ENDPOINTS, ERROR, Endpoint

COMMON_ERRORS = {
    400: "bad input: what is wrong and what to do (nothing was written)",
    401: "no valid token",
    403: "the token's scope or namespaces do not allow it",
    404: "no such timer",
    413: "the body is too large",
    503: "Redis is unreachable or failing",
}


def _operation(e: Endpoint) -> dict[str, Any]:
    op: dict[str, Any] = {"operationId": e.name, "summary": e.summary, "responses": {}}
    params = [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
              for n in ("namespace", "group", "shard", "entry", "timer_id")
              if f"{{{n}}}" in e.path]  # fmt: skip
    params += [{"name": n, "in": "query", "required": False, "schema": dict(s)}
               for n, s in e.query.items()]  # fmt: skip
    if params:
        op["parameters"] = params
    if e.body is not None:
        op["requestBody"] = {"required": True,
                             "content": {"application/json": {"schema": dict(e.body)}}}  # fmt: skip
    for status, (text, schema) in sorted(e.responses.items()):
        body = {"content": {"application/json": {"schema": dict(schema)}}} if schema else {}
        op["responses"][str(status)] = {"description": text, **body}
    if e.scope != "none":
        op["security"] = [{"bearer": [e.scope]}]
        for status, text in COMMON_ERRORS.items():
            op["responses"].setdefault(str(status), {
                "description": text,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            })  # fmt: skip
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
            "schemas": {"Error": ERROR},
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
