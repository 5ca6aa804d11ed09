"""The dashboard's app as its own page uses it, for the tests that drive its API."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

BASE = "http://127.0.0.1:8080"


def as_page(app: Any, token: str | None = None) -> TestClient:
    """A client on a loopback host whose POSTs are same-origin and carry the CSRF token
    that loading the page set (and the token's cookie, when the app has one)."""
    http = TestClient(app, base_url=BASE)
    if token is not None:
        assert http.get(f"/login?token={token}", follow_redirects=False).status_code == 303
    page = http.get("/")
    http.headers.update({"Origin": BASE, "Sec-Fetch-Site": "same-origin",
                         "X-CSRF-Token": page.cookies.get("tickwheel_csrf") or ""})  # fmt: skip
    return http
