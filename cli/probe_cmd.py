"""``tickwheel probe``: ask a running worker whether it is ready (or live), for healthchecks."""

from __future__ import annotations

import ipaddress
import json
import re
import urllib.error
import urllib.request
from typing import Any

import click

from timer.errors import quoted

from .app import App, pass_app, takes_globals
from .durations import SECONDS
from .output import emit


@takes_globals("--json", why="`tickwheel probe` asks the worker at HOST:PORT, never Redis")
@click.command()
@click.argument("address", required=False, metavar="[HOST:PORT]")
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
@click.option(
    "--timeout",
    type=SECONDS,
    default="3s",
    show_default=True,
    help="How long to wait, e.g. 10s (a bare number is seconds).",
)
@pass_app
def probe(app: App, address: str | None, host: str, port: int, live: bool, timeout: float) -> None:
    """Exit 0 if the worker serving metrics on HOST:PORT is ready (or, with --live, alive).

    \b
    Examples: tickwheel probe localhost:9100
              tickwheel probe :9101            (on 127.0.0.1)
              tickwheel probe http://localhost:9100/metrics   (its metrics URL)
              tickwheel probe --host 10.0.0.5 --port 9100

    For container healthchecks (the image's HEALTHCHECK runs it) and scripts: not ready
    or unreachable exits 1 with the reasons. It talks to the worker, not to Redis.
    """
    if address is not None:
        ctx = click.get_current_context()
        given = [
            f"--{name}"
            for name in ("host", "port")
            if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
        ]
        if given:
            raise click.UsageError(f"give HOST:PORT or {' and '.join(given)}, not both")
        host, port = parse_address(address, default_host=host, default_port=port)
    else:
        try:
            check_host(host)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--host") from None
    path = "/healthz" if live else "/ready"
    shown = f"[{host}]" if ":" in host else host  # an IPv6 address, as a URL writes it
    url = f"http://{shown}:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            code, (worker, body) = r.status, _answer(url, r.status, r.read(), port)
    except urllib.error.HTTPError as exc:
        with exc:
            code, (worker, body) = exc.code, _answer(url, exc.code, exc.read(), port)
    except OSError as exc:
        why = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        said = why.strerror if isinstance(why, OSError) and why.strerror else str(why)
        code, worker, body = 0, False, {"reasons": [f"no worker answers at {url}: {said.lower()}"]}
    ok = code == 200 and worker
    reasons = body.get("reasons") or []
    text = "ok" if ok else "; ".join(reasons)
    if not ok and (worker or code == 0):  # not another server's answer: said as before
        text = "not " + ("live" if live else "ready") + ": " + text
    emit(app.json, {"ok": ok, "url": url, "status": code, **body}, text)
    if not ok:
        raise SystemExit(1)


def parse_address(given: str, *, default_host: str, default_port: int) -> tuple[str, int]:
    """HOST:PORT, [IPV6]:PORT, :PORT (the default host), PORT alone (digits), HOST alone
    (the default port) or the worker's metrics URL, http://HOST:PORT[/metrics], as
    (host, port); anything else is a usage error."""
    text = _host_port_of(given) if "://" in given else given
    host, port_text = text, ""
    if text.startswith("["):  # [::1]:9100
        inside, bracket, rest = text[1:].partition("]")
        if not bracket or not _is_ipv6(inside) or (rest and not rest.startswith(":")):
            raise _bad(given, "an IPv6 address goes in brackets: [::1]:9100")
        host, port_text = inside, rest[1:]
        if rest and not port_text:
            raise _bad(given, "no port after the colon")
    elif text.isdigit():
        host, port_text = "", text
    elif text.count(":") == 1:
        host, port_text = text.split(":")
        if not port_text:
            raise _bad(given, "no port after the colon")
    elif ":" in text and not _is_ipv6(text):
        raise _bad(given, "more than one colon: an IPv6 address goes in brackets, [::1]:9100")
    if not port_text:
        port = default_port
    elif not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise _bad(given, f"the port must be a number from 1 to 65535, not {quoted(port_text)}")
    else:
        port = int(port_text)
    try:
        check_host(host)
    except ValueError as exc:
        raise _bad(given, str(exc)) from None
    return host or default_host, port


# what a worker serves at the address, as a user may paste it from a browser or a scrape
# config: the root or its /metrics
_PASTED_PATHS = ("", "/", "/metrics")
_GIVE = "give HOST:PORT (e.g. localhost:9100) or http://HOST:PORT/metrics"


def _host_port_of(url: str) -> str:
    """HOST:PORT of a worker's metrics URL (http://HOST:PORT, http://HOST:PORT/metrics):
    a usage error for another scheme, another path or no port."""
    scheme, _, rest = url.partition("://")
    host_port = re.split(r"[/?#]", rest, maxsplit=1)[0]
    path = rest[len(host_port) :]
    if scheme.lower() != "http":
        why = f"a worker serves its metrics over http://, not {scheme}://"
        raise _bad(url, f"{why}; {_GIVE}", form="")
    if path not in _PASTED_PATHS:
        raise _bad(
            url,
            f"probe asks the worker's /ready (or /healthz) itself, not {quoted(path)}; {_GIVE}",
            form="",
        )
    if host_port.isdigit() or host_port.endswith("]") or ":" not in host_port:
        raise _bad(url, f"no port in the URL; {_GIVE}", form="")
    return host_port


def check_host(host: str) -> None:
    """A host name or an IP address a URL can carry, else ValueError saying why."""
    if any(c.isspace() or c in "/?#@[]" for c in host) or (":" in host and not _is_ipv6(host)):
        raise ValueError(f"not a host name or address: {quoted(host)}")


def _is_ipv6(text: str) -> bool:
    try:
        return ipaddress.ip_address(text).version == 6
    except ValueError:
        return False


def _bad(
    text: str, why: str, *, form: str = " (HOST:PORT, e.g. localhost:9100)"
) -> click.BadParameter:
    return click.BadParameter(f"{quoted(text)}: {why}{form}", param_hint="HOST:PORT")


_HANDLER_404 = "try /metrics, /healthz or /ready"  # timer.worker.metrics: a path it lacks
_API_404 = "the routes are in /v1/openapi.json"  # timer.httpapi.app: a path it lacks


def _answer(url: str, code: int, data: bytes, port: int) -> tuple[bool, dict[str, Any]]:
    """(True, the worker's JSON answer): 200, or 503 with its reasons. Anything else, as
    another server answers (a 404, an HTML page): (False, one line saying so), with at
    most 100 characters of a plain text body and none of a page."""
    try:
        value = json.loads(data)
    except ValueError:
        value = None
    if isinstance(value, dict):
        reasons = value.get("reasons")
        if code == 200 or (
            code == 503 and isinstance(reasons, list) and all(isinstance(r, str) for r in reasons)
        ):
            return True, value
    text = " ".join(data.decode(errors="replace").split())
    if code == 404 and text == _HANDLER_404:
        why = (
            f"{url} answered HTTP 404: a handler runner's metrics port (`tickwheel handle`), "
            "which answers /healthz only: `tickwheel probe --live` asks it"
        )
        return False, {"reasons": [why]}
    if code == 404 and _API_404 in text:
        why = (
            f"{url} answered HTTP 404: `tickwheel serve`'s HTTP API, not a worker's metrics "
            f"port; the API's own readiness is {url.rsplit('/', 1)[0]}/readyz (curl it), a "
            "worker's is on its --metrics-port (9100 by default)"
        )
        return False, {"reasons": [why]}
    said = "" if not text or text.startswith("<") else f" ({text[:100]})"
    why = (
        f"{url} answered HTTP {code}{said}: not a tickwheel worker's metrics port? "
        f"(start the worker with --metrics-port {port})"
    )
    return False, {"reasons": [why]}
