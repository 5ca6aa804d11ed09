"""Every JSON reply of the HTTP API ends with one newline (a new user's trial: ``curl`` of
any endpoint left the shell's prompt on the JSON's line): a success, each refusal of the
gate, a library error, and the 404 and 405 of the handlers the app installs; each still
one JSON value, with its Content-Length counting the newline."""

from __future__ import annotations

import json
from pathlib import Path

from starlette.testclient import TestClient

from timer import TimerClient
from timer.httpapi import create_app
from timer.httpapi.tokens import TokenFile
from timer.testing import RedisServer


def test_every_json_reply_ends_with_one_newline(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    if not redis_server.running:
        redis_server.restart()
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=2)
    tokens = TokenFile(tmp_path / "tokens.json")
    _, writer = tokens.create("write", [namespace])
    ns = f"/v1/namespaces/{namespace}"
    try:
        with TestClient(create_app(redis_server.url, tokens=tokens)) as http:
            http.headers["Authorization"] = f"Bearer {writer}"
            replies = {
                "created": (http.post(f"{ns}/timers", json={"id": "a", "delay_ms": 60_000}), 201),
                "read": (http.get(f"{ns}/timers/a"), 200),
                "health": (http.get("/healthz"), 200),
                "document": (http.get("/v1/openapi.json"), 200),
                "no timer": (http.get(f"{ns}/timers/nope"), 404),
                "bad body": (http.post(f"{ns}/timers", json={"id": "b"}), 400),
                "not JSON": (http.post(f"{ns}/timers", content=b"{"), 400),
                "no route": (http.get("/v1/nowhere"), 404),
                "no method": (http.delete(f"{ns}/timers/a"), 405),
                "no token": (http.get(f"{ns}/timers/a", headers={"Authorization": ""}), 401),
            }
    finally:
        c.close()
    for what, (r, status) in replies.items():
        assert r.status_code == status, (what, r.text)
        assert r.headers["content-type"] == "application/json", what
        assert r.content.endswith(b"\n") and not r.content.endswith(b"\n\n"), (what, r.content)
        assert int(r.headers["content-length"]) == len(r.content), what
        body = json.loads(r.content)
        assert b"\n" not in r.content[:-1], what  # one line: its strings' newlines escaped
        if status >= 400:
            assert set(body) == {"error", "kind", "exit_code"}, (what, body)
    assert json.loads(replies["no timer"][0].content)["kind"] == "TimerNotFound"
