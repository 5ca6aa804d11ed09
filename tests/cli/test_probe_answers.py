"""`tickwheel probe` where something other than a worker's metrics port answers: one line
saying so, not an empty reason or a whole HTML page."""

from __future__ import annotations

import json
from collections.abc import Generator

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from timer.cli.main import main
from timer.httpapi.app import create_app

from .stub_http import answering

PAGE = b"<!DOCTYPE HTML>\n<html lang='en'><head><title>Directory listing</title></head>\n" + (
    b"<body>" + b"<li>file</li>\n" * 200 + b"</body></html>\n"
)


def serve(code: int, body: bytes, kind: str = "text/html") -> Generator[int, None, None]:
    with answering(lambda _: (code, body, kind)) as port:
        yield port


@pytest.mark.parametrize(
    ("code", "body"),
    [(404, b""), (404, PAGE), (200, PAGE), (503, b"Service Unavailable"), (500, b'{"x": 1}')],
)
def test_another_server_is_said_in_one_line(workdir: object, code: int, body: bytes) -> None:
    """An empty 404 printed `not ready: ` (no reason) and `"reasons": [""]`; an HTML
    page was printed whole."""
    port = next(gen := serve(code, body))
    try:
        url = f"http://127.0.0.1:{port}/ready"
        said = (
            f"{url} answered HTTP {code}",
            "not a tickwheel worker's metrics port? (start the worker with --metrics-port",
        )
        result = CliRunner().invoke(main, ["probe", "--port", str(port), "--timeout", "5"])
        assert result.exit_code == 1, result.output
        assert result.output.count("\n") == 1, result.output
        assert all(part in result.output for part in said), result.output
        assert "DOCTYPE" not in result.output and "<li>" not in result.output
        assert "not ready" not in result.output
        shown = CliRunner().invoke(main, ["--json", "probe", "--port", str(port)])
        answer = json.loads(shown.stdout)
        assert shown.exit_code == 1 and answer["ok"] is False and answer["status"] == code
        [reason] = answer["reasons"]
        assert reason.startswith(said[0]) and "\n" not in reason and len(reason) < 250
        assert "<" not in reason
    finally:
        gen.close()


def test_a_plain_text_answer_is_shown_cut_to_a_line(workdir: object) -> None:
    gen = serve(404, b"no such\npage " + b"x" * 500, "text/plain")
    port = next(gen)
    try:
        result = CliRunner().invoke(main, ["--json", "probe", "--port", str(port)])
        [reason] = json.loads(result.stdout)["reasons"]
        assert "HTTP 404 (no such page xxx" in reason and "x" * 101 not in reason
    finally:
        gen.close()


def test_a_handler_runners_port_says_to_ask_it_live(workdir: object) -> None:
    """A handler runner's metrics port has no /ready (404): said, with --live to ask."""
    gen = serve(404, b"try /metrics, /healthz or /ready\n", "text/plain")
    port = next(gen)
    try:
        result = CliRunner().invoke(main, ["probe", "--port", str(port)])
        assert result.exit_code == 1
        assert "a handler runner's metrics port" in result.output, result.output
        assert "`tickwheel probe --live`" in result.output
    finally:
        gen.close()


@pytest.mark.parametrize(
    ("code", "body", "exit_code", "says"),
    [
        (
            503,
            {"ready": False, "reasons": ["redis unreachable"]},
            1,
            "not ready: redis unreachable",
        ),
        (200, {"ready": True, "reasons": []}, 0, "ok"),
    ],
)
def test_a_workers_own_answer_reads_as_before(
    workdir: object, code: int, body: object, exit_code: int, says: str
) -> None:
    gen = serve(code, json.dumps(body).encode(), "application/json")
    port = next(gen)
    try:
        result = CliRunner().invoke(main, ["probe", "--port", str(port)])
        assert (result.exit_code, result.output) == (exit_code, says + "\n")
    finally:
        gen.close()


def test_the_http_apis_port_says_where_its_readiness_is(workdir: object) -> None:
    """`tickwheel serve`'s port answers /ready with its 404 (a route it lacks): said as
    the HTTP API, with its /readyz, not as "not a tickwheel worker's metrics port?"."""
    # the HTTP API's own answer to the probe's path (a 404 needs no Redis)
    answer = TestClient(create_app("redis://127.0.0.1:1", tokens=None)).get("/ready")
    assert answer.status_code == 404
    gen = serve(404, answer.content, "application/json")
    port = next(gen)
    try:
        result = CliRunner().invoke(main, ["probe", "--port", str(port)])
        assert result.exit_code == 1
        assert "`tickwheel serve`'s HTTP API" in result.output, result.output
        assert f"http://127.0.0.1:{port}/readyz" in result.output, result.output
        assert "not a tickwheel worker's metrics port?" not in result.output
    finally:
        gen.close()
