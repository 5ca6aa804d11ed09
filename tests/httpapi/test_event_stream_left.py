"""A client that leaves a group's event stream mid-send (``curl … | head -c 300``): the
stream stops at once, says so in one line, and gives back what it read and did not send,
so another consumer takes it now, not after reclaim_idle_ms (60 s here)."""

from __future__ import annotations

import logging
import socket
import struct
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.httpapi.test_serve import serving
from timer.testing import RedisServer

N = 120  # outcomes, read by the stream's first poll (count=1000) all at once
PAYLOAD = "x" * 16_000  # N of them fill every buffer between the server and a slow client


def _leave_after_first_event(base: str, path: str, token: str) -> None:
    """Read the stream's first event through a small receive buffer, then reset the
    connection (what a reader that exits does with unread data in its socket)."""
    host, port = urllib.parse.urlsplit(base).netloc.split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect((host, int(port)))
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
    )
    got = b""
    while b"event: outcome" not in got:
        chunk = sock.recv(1024)
        assert chunk, got
        got += chunk
    assert got.startswith(b"HTTP/1.1 200"), got[:200]
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_a_client_that_leaves_gets_its_unsent_outcomes_given_back_at_once(
    redis_server: RedisServer, namespace: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tickwheel.httpapi")
    group = f"/v1/namespaces/{namespace}/groups/sse"
    with serving(redis_server, namespace, tmp_path, worker=True) as (api, c, _):
        assert api.token is not None
        c.schedule_many([{"id": f"d:{i}", "delay_ms": 50, "payload": PAYLOAD} for i in range(N)])
        for i in range(N):
            c.wait(f"d:{i}", timeout=20)
        _leave_after_first_event(api.base, f"{group}/events?consumer=c1&count=1000", api.token)

        def said() -> list[str]:
            return [r.getMessage() for r in caplog.records if r.name == "tickwheel.httpapi"]

        # well inside reclaim_idle_ms (60 s): given back, not reclaimed
        wait_for(lambda: any("the client left" in m for m in said()), 15, "the stream to stop")

        def pending_of(name: str) -> int:
            g = next(g for g in c.groups() if g.name == "sse")
            return sum(x.pending for x in g.consumers if x.name == name)

        taken: list[dict[str, Any]] = []

        def reconciled() -> bool:
            status, body = api.call("GET", f"{group}/outcomes?consumer=c2&count=1000&wait_ms=100")
            assert status == 200, body
            taken.extend(body["outcomes"])
            return bool(taken) and pending_of("c1") + len(taken) == N

        # what was given back is c1's (waiting for a retry at once) until c2 claims it
        wait_for(reconciled, 15, "c2 to take what c1's stream read and did not send")
        sent = pending_of("c1")
        assert sent >= 1 and len(taken) == N - sent, (sent, len(taken))
        # each one c2 got was given back unsent: not an attempt (it counted one, so a
        # client that kept reconnecting used attempts up: trial 24)
        assert all(o["attempt"] == 1 for o in taken), [o["attempt"] for o in taken]
        assert len({o["ref"] for o in taken}) == len(taken)
    send_errors = [r for r in caplog.records if "socket.send() raised" in r.getMessage()]
    assert len(send_errors) <= 1, len(send_errors)
    left = [m for m in said() if "the client left" in m]
    assert len(left) == 1, said()
    assert all(w in left[0] for w in ('"sse"', '"c1"', f'"{namespace}"', f"{N - sent} outcomes")), (
        left,
        sent,
    )
