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

A receiver checks the signature over the raw body with :func:`verify` (or the Node code
https://tickwheel.readthedocs.io/guides/http/#webhooks shows) and refuses a timestamp older than a
few minutes (a replay). Redirects are not followed (a 3xx is a failed attempt): a
receiver that moved must be reconfigured, never silently followed to another host.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from . import __version__
from .durable.model.models import Outcome
from .durable.timers.items import url_problem
from .errors import InvalidInput
from .redis.redaction import redact_url
from .shapes import outcome_json

SIGNATURE = "Tickwheel-Signature"
IDEMPOTENCY = "Tickwheel-Idempotency-Key"
TOLERANCE_S = 300
MIN_SECRET_CHARS = 16
MAKE_SECRET = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


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
    """An http(s) URL with a host, a port that is a number and no credentials; a
    refusal never shows the URL (it may hold a password), only what is wrong with it."""
    if not isinstance(url, str):
        raise InvalidInput(f"the webhook URL must be text, got {type(url).__name__}")
    problem = url_problem(url)
    if problem is not None:
        raise InvalidInput(f"the webhook URL {problem}")
    return url


def _failed(url: str, what: str) -> WebhookFailed:
    """A failed delivery to ``url``, as the runner logs it and the dead letter keeps it:
    the one place a delivery's message names its URL. A URL the checks refuse (a
    callback_url stored before they did) is described, never shown; another is shown
    as its scheme, host and port: a token may be any piece of its path or query."""
    problem = url_problem(url)
    if problem is not None:
        return WebhookFailed(f"the URL {problem}")
    return WebhookFailed(f"{redact_url(url, path=False)} {what}")


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
        if url_problem(url) is not None:  # its host may be a user's name
            raise _failed(url, "was not sent")
        host = (urllib.parse.urlsplit(url).hostname or "").lower()
        if host not in hosts:
            raise WebhookFailed(f"callback host {host!r} is not allowed (--callback-host)")
        post(url, o)

    deliver.__qualname__ = deliver.__name__ = "callbacks"
    return deliver


def short_secret(where: str | None = None) -> InvalidInput:
    """The error for a secret too short to sign with, and how to make one; ``where``: where
    it came from (``--webhook-secret``, ``$TICKWHEEL_WEBHOOK_SECRET``), when known."""
    said = "the webhook secret" + (f" (from {where})" if where else "")
    return InvalidInput(
        f"{said} must be text of at least {MIN_SECRET_CHARS} characters; make one with: "
        f"{MAKE_SECRET}"
    )


def _poster(secret: str, timeout_s: float) -> Callable[[str, Outcome], None]:
    if not isinstance(secret, str) or len(secret) < MIN_SECRET_CHARS:
        raise short_secret()
    opener = urllib.request.build_opener(_NoRedirect)
    agent = f"tickwheel/{__version__}"

    def deliver(url: str, o: Outcome) -> None:
        if url_problem(url) is not None:
            raise _failed(url, "was not sent")
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
            raise _failed(url, f"answered {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:  # refused, unreachable, timed out
            reason = getattr(exc, "reason", exc)
            raise _failed(url, f"did not take it: {reason}") from None
        except (http.client.HTTPException, ValueError) as exc:
            # a malformed answer, or a URL http.client refuses; its message may quote
            # the URL, so only its kind is said
            raise _failed(url, f"could not be sent: {type(exc).__name__}") from None
        if not 200 <= status < 300:
            raise _failed(url, f"answered {status}")

    return deliver
