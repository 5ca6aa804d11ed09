"""``tickwheel probe``: ask a running worker whether it is ready (or live), for healthchecks."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import click

from .app import App, pass_app
from .durations import SECONDS
from .output import emit


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="The worker's metrics host.")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=9100,
    show_default=True,
    help="The worker's --metrics-port.",
)
@click.option(
    "--live",
    is_flag=True,
    help="Ask /healthz (is the process alive?) instead of /ready (can it fire timers?).",
)
@click.option("--timeout", type=SECONDS, default=3.0, show_default=True, help="Seconds to wait.")
@pass_app
def probe(app: App, host: str, port: int, live: bool, timeout: float) -> None:
    """Exit 0 if the worker serving metrics on HOST:PORT is ready (or, with --live, alive).

    For container healthchecks (the image's HEALTHCHECK runs it) and scripts: not ready
    or unreachable exits 1 with the reasons. It talks to the worker, not to Redis.
    """
    path = "/healthz" if live else "/ready"
    url = f"http://{host}:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            code, body = r.status, _json(r.read())
    except urllib.error.HTTPError as exc:
        with exc:
            code, body = exc.code, _json(exc.read())
    except OSError as exc:
        code, body = 0, {"reasons": [f"no worker answers at {url}: {exc}"]}
    ok = code == 200
    reasons = body.get("reasons") or []
    text = "ok" if ok else "not " + ("live" if live else "ready") + ": " + "; ".join(reasons)
    emit(app.json, {"ok": ok, "url": url, "status": code, **body}, text)
    if not ok:
        raise SystemExit(1)


def _json(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError:
        return {"reasons": [data.decode(errors="replace")[:200]]}
    return value if isinstance(value, dict) else {"reasons": [str(value)]}
