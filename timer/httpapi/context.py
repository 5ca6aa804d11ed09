"""What every HTTP API route is handed and answers with: the one error shape, the
process's metrics, the per-namespace clients, and one checked request (``Call``).
Its own module so that the app (``timer.httpapi.app``) and the handlers
(``timer.httpapi.handlers``) both import it, and neither imports the other's caller.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import prometheus_client
from starlette.requests import Request

from timer import InvalidInput, TimerClient, TimerError
from timer.aio import AsyncTimerClient
from timer.aio.group import AsyncConsumer
from timer.durable.timers.items import check_callback_url

from .routing import JSONReply
from .spec import Endpoint
from .words import shown


def error(status: int, kind: str, message: str, exit_code: int) -> JSONReply:
    return JSONReply({"error": message, "kind": kind, "exit_code": exit_code}, status_code=status)


def error_of(exc: TimerError) -> tuple[int, dict[str, Any]]:
    """The HTTP status and the one error body of a library error."""
    return exc.http_status, exc.body()


def from_exception(exc: TimerError) -> JSONReply:
    status, body = error_of(exc)
    return JSONReply(body, status_code=status)


# this process's; under `serve --workers N` each worker writes its values to files in
# the directory MULTIPROC_ENV names (set before the workers start), summed at a scrape
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
METRICS = prometheus_client.CollectorRegistry()
REQUESTS = prometheus_client.Counter(
    "tickwheel_http_requests", "HTTP API requests answered", ["route", "status"], registry=METRICS
)
LATENCY = prometheus_client.Histogram(
    "tickwheel_http_request_seconds",
    "HTTP API request time (to the first byte)",
    ["route"],
    buckets=(0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60),
    registry=METRICS,
)


class Clients:
    """One AsyncTimerClient per namespace, made on the event loop at first use, and the
    group consumers the HTTP handlers poll (kept, so their reading timers go on)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._clients: dict[str, AsyncTimerClient] = {}
        self._lock = asyncio.Lock()
        self.consumers: dict[tuple[str, str, str, int], AsyncConsumer] = {}
        self._sync: dict[str, TimerClient] = {}
        self.callback_hosts: frozenset[str] = frozenset()

    def check_callback(self, item: Mapping[str, Any]) -> None:
        """InvalidInput unless the item's callback_url (if any) names an allowed host."""
        url = item.get("callback_url")
        if url is None:
            return
        # first the URL itself: the host of one it refuses may be a user's name
        host = (urllib.parse.urlsplit(check_callback_url(url)).hostname or "").lower()
        if host not in self.callback_hosts:
            raise InvalidInput(
                f"callback_url host {shown(host)} is not one this server allows; its operator "
                "lists them with tickwheel serve --callback-host"
            )

    def consumer(
        self, client: AsyncTimerClient, group: str, name: str, reclaim_idle_ms: int
    ) -> AsyncConsumer:
        key = (client.namespace, group, name, reclaim_idle_ms)
        found = self.consumers.get(key)
        if found is None:
            found = client.consumer(group, name, reclaim_idle_ms=reclaim_idle_ms)
            self.consumers[key] = found
        return found

    async def of(self, namespace: str) -> AsyncTimerClient:
        client = self._clients.get(namespace)
        if client is None:
            async with self._lock:
                client = self._clients.get(namespace)
                if client is None:
                    client = await AsyncTimerClient.connect(self.url, namespace)
                    self._clients[namespace] = client
        return client

    def sync(self, client: AsyncTimerClient) -> TimerClient:
        """A blocking client of the same namespace, for the admin reads (stats, groups,
        dead letters) the asyncio client does not have; run them in a thread."""
        found = self._sync.get(client.namespace)
        if found is None:
            found = TimerClient.from_url(self.url, client.namespace)
            self._sync[client.namespace] = found
        return found

    async def close(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
        for sync in self._sync.values():
            sync.close()
        self._sync.clear()


Handler = Callable[["Call"], Awaitable[Any]]


class Call:
    """One checked request: its endpoint, path parameters, query, body and client."""

    def __init__(  # noqa: PLR0917 - what one request brings
        self,
        request: Request,
        endpoint: Endpoint,
        body: Any,
        query: dict[str, Any],
        client: Any,
        clients: Clients,
    ) -> None:
        self.request = request
        self.endpoint = endpoint
        self.params = request.path_params
        self.query = query  # the endpoint's query parameters, checked and typed
        self.body = body
        self.client: AsyncTimerClient = client
        self.clients = clients


# What the server's log says once a process: an input an earlier release took, still taken
# (a client relying on it keeps working), that a later one may refuse
SAID_ONCE: set[str] = set()


def first_time(what: str) -> bool:
    """True the first time ``what`` is asked of this process (it is then said)."""
    if what in SAID_ONCE:
        return False
    SAID_ONCE.add(what)
    return True
