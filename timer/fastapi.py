"""tickwheel in a FastAPI app: one :class:`~timer.aio.AsyncTimerClient` per app,
opened by the app's lifespan and given to each endpoint that asks for it.

::

    from fastapi import FastAPI
    from timer.fastapi import TimerClientDep, answer_refusals, lifespan

    app = FastAPI(lifespan=lifespan("redis://localhost:6379/0", "default"))
    answer_refusals(app)

    @app.post("/jobs/{job_id}")
    async def start(job_id: str, timers: TimerClientDep) -> dict[str, int]:
        t = await timers.schedule(f"job:{{{job_id}}}", 30_000)
        return {"deadline_ms": t.deadline_ms}

``answer_refusals(app)`` answers a refusal of the library an endpoint does not catch (a
4xx: an id too long, a timer not found) with its status and ``{"detail": {"error",
"kind", "exit_code"}}``, not a 500. An app with a lifespan of its own opens the client
inside it with ``async with timer_client_for(app, url, namespace):``. Install with
``pip install '.[fastapi]'`` from the checkout. The namespace must exist (``tickwheel init`` or
``TimerClient.init``); the lifespan fails at start-up, before any request, if it does not.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Unpack

from .errors import install_line

try:
    from fastapi import Depends, FastAPI, Request, Response
    from fastapi.responses import JSONResponse
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError(f"timer.fastapi needs FastAPI: {install_line('fastapi')}") from exc

from .aio import AsyncTimerClient
from .durable.model.models import ConnectOptions
from .errors import ConfigError, TimerError

STATE = "tickwheel"  # where the client lives: app.state.tickwheel


@asynccontextmanager
async def timer_client_for(
    app: FastAPI,
    url: str | None = None,
    namespace: str = "default",
    **options: Unpack[ConnectOptions],
) -> AsyncIterator[AsyncTimerClient]:
    """Connect an :class:`AsyncTimerClient` (``url``, else ``$TICKWHEEL_REDIS_URL``, else
    your running embedded server) and give it to the app's endpoints
    (:func:`timer_client`) until the block ends; then close it. ``options`` are
    :meth:`AsyncTimerClient.connect`'s (``durability``...)."""
    client = await AsyncTimerClient.connect(url, namespace, **options)
    setattr(app.state, STATE, client)
    try:
        yield client
    finally:
        delattr(app.state, STATE)
        await client.aclose()


def lifespan(
    url: str | None = None, namespace: str = "default", **options: Unpack[ConnectOptions]
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """A lifespan for ``FastAPI(lifespan=...)`` that holds one client for the app."""

    @asynccontextmanager
    async def run(app: FastAPI) -> AsyncIterator[None]:
        async with timer_client_for(app, url, namespace, **options):
            yield

    return run


def timer_client(request: Request) -> AsyncTimerClient:
    """The app's client, for ``Depends``; a clear error if no lifespan opened one."""
    client = getattr(request.app.state, STATE, None)
    if not isinstance(client, AsyncTimerClient):
        raise ConfigError(
            "no tickwheel client on this app: create it with "
            "FastAPI(lifespan=timer.fastapi.lifespan(url, namespace)), or open one in your "
            "own lifespan with `async with timer.fastapi.timer_client_for(app, url, ns):`"
        )
    return client


TimerClientDep = Annotated[AsyncTimerClient, Depends(timer_client)]
"""An endpoint's parameter typed so receives the app's client."""


def answer_refusals(app: FastAPI) -> None:
    """Answer a refusal of the library that an endpoint does not catch (a 4xx error: an
    id too long, a payload too big, a timer not found, one pending with other
    parameters) with its status and ``{"detail": {"error", "kind", "exit_code"}}``, as
    the HTTP API answers it, where it was a 500 and a traceback (trial 34: a job id of
    300 characters). A 5xx one (Redis unreachable, a bug) stays the app's error: its
    message may name the servers, not for its callers. Call it once, after
    ``FastAPI(...)``."""

    async def answer(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, TimerError) or not 400 <= exc.http_status < 500:
            raise exc
        return JSONResponse({"detail": exc.body()}, status_code=exc.http_status)

    app.add_exception_handler(TimerError, answer)
