"""Webhook delivery of outcomes: a handler that POSTs each outcome as JSON, signed.

``tickwheel handle --webhook URL`` runs it under ``Handlers``: each outcome is POSTed
once per attempt; a 2xx answer acknowledges it, anything else (another status, a
timeout, a refused connection, a redirect) raises, so the runner retries it with its
backoff and dead-letters it after its last attempt, as any handler.

The request::

    POST <url>
    Content-Type: application/json
    Tickwheel-Idempotency-Key: <shard>/<entry id>     the same on every delivery of it
    Tickwheel-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>

    {"id": ..., "outcome": ..., "deadline_ms": ..., "decided_ms": ..., "lateness_ms": ...,
     "shard": ..., "payload": ..., "attempt": ..., "idempotency_key": ...}

A receiver checks the signature over the raw body with :func:`verify` (or the Node code in
``examples/node/``) and refuses a timestamp older than a few minutes (a replay). Redirects
are not followed (a 3xx is a failed attempt): a receiver that moved must be reconfigured,
never silently followed to another host.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from . import __version__
from .durable.model.models import Outcome
from .durable.timers.items import url_shape
from .errors import InvalidInput
from .shapes import outcome_json

SIGNATURE = "Tickwheel-Signature"
IDEMPOTENCY = "Tickwheel-Idempotency-Key"
TOLERANCE_S = 300


class WebhookFailed(Exception):
    """The receiver did not take the outcome (status, timeout, connection): retried."""


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``Tickwheel-Signature`` value of ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(
    secret: str,
    header: str,
    body: bytes,
    *,
    now: float | None = None,
    tolerance_s: int = TOLERANCE_S,
) -> bool:
    """True if ``header`` (``Tickwheel-Signature``) signs ``body`` with ``secret`` and is
    at most ``tolerance_s`` old: what a Python receiver calls on each request."""
    try:
        fields = dict(part.split("=", 1) for part in header.split(","))
        timestamp = int(fields["t"])
        given = fields["v1"]
    except (ValueError, KeyError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance_s:
        return False
    expected = sign(secret, timestamp, body).split("v1=", 1)[1]
    return hmac.compare_digest(expected, given)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a 3xx stays an error: never followed, to this host or another


def check_url(url: object) -> str:
    """An http(s) URL with a host and no credentials; a refusal never shows the URL
    (it may hold a password), only what is wrong with it."""
    if not isinstance(url, str):
        raise InvalidInput(f"the webhook URL must be text, got {type(url).__name__}")
    try:
        parts = urllib.parse.urlsplit(url)
        scheme, host = parts.scheme, parts.hostname
    except ValueError:  # an invalid port or IPv6 literal
        scheme, host = "", None
    if scheme not in ("http", "https") or not host:
        shape = url_shape(scheme, host)
        raise InvalidInput(f"the webhook URL must be http:// or https:// with a host, got {shape}")
    if parts.username or parts.password:
        raise InvalidInput("the webhook URL must not carry credentials: sign with the secret")
    return url


def webhook(url: str, secret: str, *, timeout_s: float = 10.0) -> Callable[[Outcome], None]:
    """A handler that POSTs each outcome to ``url``, signed with ``secret``; it raises
    :class:`WebhookFailed` unless the receiver answers 2xx within ``timeout_s``."""
    check_url(url)
    post = _poster(secret, timeout_s)

    def deliver(o: Outcome) -> None:
        post(url, o)

    deliver.__qualname__ = deliver.__name__ = "webhook"
    return deliver


def callbacks(
    secret: str, allowed_hosts: Iterable[str], *, timeout_s: float = 10.0
) -> Callable[[Outcome], None]:
    """A handler that POSTs each outcome to its own ``callback_url`` (given at schedule),
    signed with ``secret``, if that URL's host is one of ``allowed_hosts``; an outcome
    without one is done at once, one whose host is not allowed raises (and, once its
    attempts are spent, is dead-lettered with that reason)."""
    hosts = {h.lower() for h in allowed_hosts}
    if not hosts:
        raise InvalidInput("callbacks need at least one allowed host (--callback-host)")
    post = _poster(secret, timeout_s)

    def deliver(o: Outcome) -> None:
        url = o.callback_url
        if url is None:
            return
        host = (urllib.parse.urlsplit(url).hostname or "").lower()
        if host not in hosts:
            raise WebhookFailed(f"callback host {host!r} is not allowed (--callback-host)")
        post(url, o)

    deliver.__qualname__ = deliver.__name__ = "callbacks"
    return deliver


def _poster(secret: str, timeout_s: float) -> Callable[[str, Outcome], None]:
    if not isinstance(secret, str) or len(secret) < 16:
        raise InvalidInput("the webhook secret must be text of at least 16 characters")
    opener = urllib.request.build_opener(_NoRedirect)
    agent = f"tickwheel/{__version__}"

    def deliver(url: str, o: Outcome) -> None:
        body = json.dumps(outcome_json(o), separators=(",", ":")).encode()
        request = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "User-Agent": agent,
                IDEMPOTENCY: o.idempotency_key,
                SIGNATURE: sign(secret, int(time.time()), body),
            },
        )
        try:
            with opener.open(request, timeout=timeout_s) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            exc.close()  # its connection: not left for the collector
            raise WebhookFailed(f"{url} answered {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:  # refused, unreachable, timed out
            reason = getattr(exc, "reason", exc)
            raise WebhookFailed(f"{url} did not take it: {reason}") from None
        if not 200 <= status < 300:
            raise WebhookFailed(f"{url} answered {status}")

    return deliver
