"""timer.fastapi (#44) and the example service (examples/fastapi/app.py), through
FastAPI's test client (its lifespan runs) against the real server, with a worker."""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from types import ModuleType

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.conftest import wait_for
from timer import ConfigError, TimerClient
from timer.aio import AsyncTimerClient
from timer.fastapi import TimerClientDep, lifespan, timer_client_for
from timer.testing import RedisServer
from timer.worker import Worker, WorkerSettings

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parents[2]


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
