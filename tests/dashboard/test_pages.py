"""What a person in a browser is shown where the dashboard's API would answer JSON (a new
user's trial: a link to a timer that does not exist, followed after signing in, showed
the raw JSON 404): a page in the dashboard's look saying what was not found, with a link
back to the timers list; the page's own scripts, and anyone asking for JSON, keep the
JSON. Every JSON reply ends with a newline, as the HTTP API's do."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.conftest import fresh_client
from tests.dashboard.page import BASE
from timer import TimerClient
from timer.dashboard import create_app
from timer.httpapi.tokens import TokenFile
from timer.testing import RedisServer

# What a browser sends opening an address, and what the page's fetch() sends
BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
FETCH = {"Accept": "*/*", "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}


@pytest.fixture
def client(redis_server: RedisServer, namespace: str) -> Iterator[TimerClient]:
    with fresh_client(redis_server, namespace, shards=2) as c:
        yield c


def said(page: str) -> str:
    """The page's message, as the browser shows it."""
    found = re.search(r'<div id="message" class="error" role="alert">(.*?)</div>', page, re.S)
    assert found, page
    return html.unescape(found.group(1))


def test_a_browser_is_shown_a_page_for_a_timer_not_found_and_a_script_the_json(
    client: TimerClient, redis_server: RedisServer, tmp_path: Path
) -> None:
    other = TimerClient.from_url(redis_server.url, client.namespace + "-b")
    other.init(shards=2)
    client.schedule("job:{1}", 3_600_000)
    tokens = TokenFile(tmp_path / "tokens.json")
    _, token = tokens.create("read", ["*"], name="viewer")
    ns = client.namespace
    try:
        with TestClient(create_app(client, tokens=tokens), base_url=BASE) as http:
            signed_in = http.get(f"/login?token={token}", follow_redirects=False)
            assert signed_in.status_code == 303
            page = http.get("/api/timers/nope", headers=BROWSER)
            assert (page.status_code, page.headers["content-type"]) == (
                404,
                "text/html; charset=utf-8",
            ), page.text
            assert said(page.text).startswith(f'No timer "nope" in namespace "{ns}"'), page.text
            assert '<a id="back" href="/timers">Back to the timers list</a>' in page.text
            assert '<link rel="stylesheet" href="/static/dashboard.css">' in page.text
            assert "default-src 'none'" in page.headers["content-security-policy"]
            assert "{" not in page.text.split("<body>")[1]  # no template's field left

            # another namespace: named, and every link keeps it
            there = http.get(f"/api/timers/job:%7B1%7D?ns={other.namespace}", headers=BROWSER)
            assert there.status_code == 404, there.text
            assert said(there.text).startswith(
                f'No timer "job:{{1}}" in namespace "{other.namespace}"'
            )
            assert f'<a id="back" href="/timers?ns={other.namespace}">' in there.text

            # a namespace that does not exist: said on a page too, with its own status
            none = http.get("/api/timers/x?ns=never-made", headers=BROWSER)
            assert none.status_code == 400 and none.headers["content-type"].startswith("text/html")
            assert said(none.text).startswith('Namespace "never-made" is not initialised')

            # an id is text on the page, never markup
            odd = http.get("/api/timers/%3Cb%3Ehi%3C%2Fb%3E", headers=BROWSER)
            assert odd.status_code == 404 and "<b>hi" not in odd.text
            assert said(odd.text).startswith('No timer "<b>hi</b>"')

            # a path that is none of the dashboard's
            guessed = http.get("/timers/nope", headers=BROWSER)
            assert guessed.status_code == 404, guessed.text
            assert said(guessed.text) == 'No such page or endpoint: "/timers/nope"'

            # the page's scripts, a script asking for JSON, one with a Bearer token: JSON
            scripts = [
                ("/api/timers/nope", FETCH),
                ("/api/timers/nope", {"Accept": "application/json"}),
                ("/api/timers/nope", {**BROWSER, "Authorization": f"Bearer {token}"}),
                ("/api/timers/nope", {"Accept": "text/html, application/json"}),
                ("/timers/nope", FETCH),
            ]
            for path, headers in scripts:
                r = http.get(path, headers=headers)
                assert (r.status_code, r.headers["content-type"]) == (
                    404,
                    "application/json",
                ), (path, headers, r.text)
                assert r.content.endswith(b"}\n"), r.content
                assert json.loads(r.content)["kind"] in ("TimerNotFound", "NotFound")
            # a timer that is there: its JSON, whoever asks
            found = http.get("/api/timers/job:%7B1%7D", headers=BROWSER)
            assert found.status_code == 200 and found.json()["state"] == "pending"
    finally:
        other.close()


def test_every_json_reply_of_the_dashboard_ends_with_one_newline(client: TimerClient) -> None:
    with TestClient(create_app(client), base_url=BASE) as http:
        replies = [
            http.get("/api/overview"),
            http.get("/api/timers/nope"),
            http.get("/api/nothing"),
            http.get("/api/bulk/cancel"),  # 405
            http.post("/api/bulk/cancel", json={"ids": []}),  # 403: no page's CSRF token
        ]
    for r in replies:
        assert r.headers["content-type"] == "application/json", r.text
        assert r.content.endswith(b"\n") and not r.content.endswith(b"\n\n"), r.content
        json.loads(r.content)
    assert [r.status_code for r in replies] == [200, 404, 404, 405, 403]
