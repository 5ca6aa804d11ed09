"""timer.fastapi (#44) and the example service (examples/fastapi/app.py), through
FastAPI's test client (its lifespan runs) against the real server, with a worker."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from types import ModuleType

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.conftest import stop_all, wait_for
from timer import ConfigError, StoreError, TimerClient, TimerNotFound
from timer.aio import AsyncTimerClient
from timer.cli import embedded
from timer.fastapi import TimerClientDep, answer_refusals, lifespan, timer_client_for
from timer.testing import RedisServer
from timer.worker import Worker, WorkerSettings

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guides" / "fastapi.md"


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "fastapi_example", ROOT / "examples/fastapi/app.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_arms_a_timeout_completes_it_and_a_worker_fires_the_other(
    client: TimerClient, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two jobs start; one reports done (its timeout completed, once however often it
    says so), the other does not and a worker fires its timeout; the service's client
    is one for the app, opened and closed by its lifespan."""
    monkeypatch.setenv("TICKWHEEL_REDIS_URL", redis_server.url)
    monkeypatch.setenv("TICKWHEEL_NAMESPACE", client.namespace)
    app = example().app
    w = Worker(TimerClient.from_url(redis_server.url, client.namespace),
               WorkerSettings(worker_id="w"))  # fmt: skip
    runner = threading.Thread(target=w.run, kwargs={"handle_signals": False}, daemon=True)
    runner.start()
    try:
        with TestClient(app) as http:
            opened = app.state.tickwheel
            assert isinstance(opened, AsyncTimerClient)
            assert http.post("/jobs/7", json={"timeout_s": 60}).json()["created"] is True
            assert http.post("/jobs/8", json={"timeout_s": 0.3}).status_code == 200
            assert http.get("/jobs/7").json()["state"] == "pending"
            assert http.post("/jobs/7/done").json()["completed"] == 1
            assert http.post("/jobs/7/done").json()["completed"] == 0  # safe to repeat
            assert http.get("/jobs/7").json()["state"] == "completed"
            wait_for(lambda: http.get("/jobs/8").json()["state"] == "expired", 10,
                     "the worker to fire job 8's timeout")  # fmt: skip
            assert http.get("/jobs/9").status_code == 404
            refused = http.post("/jobs/7", json={"timeout_s": -1})
            assert refused.status_code == 422  # FastAPI's own check: nothing scheduled
            # the library's refusal, answered as the HTTP API answers it: a 500 and a
            # traceback before (trial 34)
            long = http.post(f"/jobs/{'z' * 300}", json={"timeout_s": 2})
            assert long.status_code == 400, long.text
            said = long.json()["detail"]
            assert (said["kind"], said["exit_code"]) == ("InvalidInput", 3), said
            assert "at most 256" in said["error"], said  # refused before Redis is asked
        assert not hasattr(app.state, "tickwheel")  # closed with the app
    finally:
        w.stop()
        runner.join(20)
        w.client.close()
    assert client.wait("job:{7}", timeout=1).outcome == "completed"
    assert client.wait("job:{8}", timeout=1).outcome == "expired"


def test_an_app_with_its_own_lifespan_opens_the_client_inside_it(
    client: TimerClient, redis_server: RedisServer
) -> None:
    from collections.abc import AsyncIterator  # noqa: PLC0415
    from contextlib import asynccontextmanager  # noqa: PLC0415

    events: list[str] = []

    @asynccontextmanager
    async def own(app: FastAPI) -> AsyncIterator[None]:
        events.append("own start")
        async with timer_client_for(app, redis_server.url, client.namespace):
            yield
        events.append("own stop")

    app = FastAPI(lifespan=own)

    @app.get("/ns")
    async def ns(timers: TimerClientDep) -> str:
        return timers.namespace

    with TestClient(app) as http:
        assert http.get("/ns").json() == client.namespace
    assert events == ["own start", "own stop"]


def test_without_a_lifespan_or_a_url_it_says_what_to_do(
    client: TimerClient, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    bare = FastAPI()

    @bare.get("/ns")
    async def ns(timers: TimerClientDep) -> str:
        return timers.namespace

    with (
        TestClient(bare, raise_server_exceptions=True) as http,
        pytest.raises(ConfigError, match="lifespan"),
    ):
        http.get("/ns")
    monkeypatch.delenv("TICKWHEEL_REDIS_URL", raising=False)
    with (
        pytest.raises(ConfigError, match="TICKWHEEL_REDIS_URL"),
        TestClient(FastAPI(lifespan=lifespan())),
    ):
        pass
    never = FastAPI(lifespan=lifespan(redis_server.url, "never-initialised"))
    with pytest.raises(ConfigError, match="init"), TestClient(never):
        pass


def test_a_refusal_is_answered_with_its_status_and_a_server_error_is_the_apps(
    client: TimerClient, redis_server: RedisServer
) -> None:
    """A 4xx error of the library that an endpoint does not catch is its status and
    body; one the endpoint catches is its own to answer; a 5xx one is not turned into
    an answer (its message may name the servers): it stays the app's error."""
    app = FastAPI(lifespan=lifespan(redis_server.url, client.namespace))
    answer_refusals(app)

    @app.post("/conflict/{tid}")
    async def conflict(tid: str, timers: TimerClientDep) -> str:
        await timers.schedule(tid, 60_000, payload={"n": 1})
        await timers.schedule(tid, 60_000, payload={"n": 2})  # another payload: refused
        return "unreached"

    @app.get("/caught")
    async def caught(timers: TimerClientDep) -> str:
        try:
            await timers.reschedule("nope:{1}", 1_000)
        except TimerNotFound:
            return "mine"
        return "unreached"

    @app.get("/down")
    async def down(timers: TimerClientDep) -> str:
        raise StoreError("redis://10.0.0.7:6379 unreachable")

    with TestClient(app, raise_server_exceptions=True) as http:
        got = http.post("/conflict/c:{1}")
        assert got.status_code == 409, got.text
        assert got.json()["detail"]["kind"] == "DuplicateTimer", got.json()
        assert http.get("/caught").json() == "mine"
        with pytest.raises(StoreError):
            http.get("/down")


def page_lines() -> list[str]:
    """The page's shell lines that this test runs, without their comments."""
    from tests.docs.examples import blocks  # noqa: PLC0415

    (block,) = [b for b in blocks(PAGE, ("sh",)) if b.claim and b.claim.endswith(PAGE_TEST)]
    lines = [ln.split("#", 1)[0].strip() for ln in block.code.splitlines()]
    return [ln for ln in lines if ln]


PAGE_TEST = "test_the_fastapi_page_runs_as_written"
LONG_RUNNING = ("uvicorn ", "tickwheel worker")  # a terminal of its own, each


def test_the_fastapi_page_runs_as_written(server_binary: Path, tmp_path: Path) -> None:
    """The page's lines, as written, from the checkout, as a user runs them: the embedded
    server (no URL given), its namespace initialised, the example under uvicorn (on a
    free port in place of the page's, which is the one its curl lines use) and a worker. A job
    left alone is expired by that worker; one that reports done is completed. (Before,
    the page had no ``tickwheel init``: on a fresh server the app refused to start.)
    Its jobs are in a namespace of their own: the page ran in ``default``, where the
    README tour's ``job:{42}`` is."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items()
           if k not in {"TICKWHEEL_REDIS_URL", "TICKWHEEL_NAMESPACE"}}  # fmt: skip
    env.update(TICKWHEEL_HOME=str(tmp_path / "home"), TICKWHEEL_SERVER_BINARY=str(server_binary),
               PYTHONUNBUFFERED="1")  # fmt: skip
    modules = {"tickwheel": "timer.cli", "uvicorn": "uvicorn"}
    background: list[subprocess.Popen[bytes]] = []
    logs = tmp_path / "logs.txt"

    def run(line: str) -> None:
        words = shlex.split(line)
        if words[0] == "export":  # the reader's shell: every later line sees it
            name, _, value = words[1].partition("=")
            env[name] = value
            return
        if words[0] == "uvicorn":  # the page's port, 8002, may be taken here
            at = words.index("--port") + 1
            words[at] = str(port)
        argv = [sys.executable, "-m", modules[words[0]], *words[1:]]
        if line.startswith(LONG_RUNNING):
            with logs.open("ab") as log:
                background.append(subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log,
                                                   stderr=subprocess.STDOUT))  # fmt: skip
            return
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip
        assert done.returncode == 0, (line, done.stdout, done.stderr)

    def http(method: str, path: str, body: object = None) -> dict[str, object]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(req, timeout=10) as resp:
            answer: dict[str, object] = json.loads(resp.read())
            return answer

    def serving() -> bool:
        assert all(p.poll() is None for p in background), logs.read_text()
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/openapi.json", timeout=2).close()
        except (urllib.error.URLError, ConnectionError):
            return False
        return True

    lines = page_lines()
    (uvicorn,) = [shlex.split(ln) for ln in lines if ln.startswith("uvicorn ")]
    written = uvicorn[uvicorn.index("--port") + 1]
    assert written != "8000", "tickwheel serve's port (the HTTP guide's): they run side by side"
    assert re.findall(r"localhost:(\d+)", PAGE.read_text()) == [written] * 2
    try:
        for line in lines:
            run(line)
        wait_for(serving, 60, "the service to answer")
        assert http("POST", "/jobs/1", {"timeout_s": 0.2})["created"] is True
        assert http("POST", "/jobs/2", {"timeout_s": 60})["created"] is True
        assert http("POST", "/jobs/2/done")["completed"] == 1
        wait_for(lambda: http("GET", "/jobs/1")["state"] == "expired", 60,
                 "the page's worker to fire job 1's timeout")  # fmt: skip
        assert http("GET", "/jobs/2")["state"] == "completed"
        own = env.get("TICKWHEEL_NAMESPACE", "default")
        assert own != "default", "the page's jobs are in the README tour's namespace"
        state = embedded.status(tmp_path / "home")
        assert state is not None
        with TimerClient.from_url(state.url, own) as c:
            assert c.get("job:{2}") is not None, own
    finally:
        stop_all(background)
        if lines and lines[0] == "tickwheel server start":
            run("tickwheel server stop")
