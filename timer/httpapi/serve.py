"""The app as uvicorn's workers build it (``tickwheel serve --workers N``): each process
calls :func:`app_from_env`, which reads what the command put in its environment."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from pathlib import Path

from starlette.applications import Starlette
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .app import create_app
from .tokens import TokenFile

URL_ENV = "TICKWHEEL_SERVE_URL"  # the Redis URL (may hold a password: never printed)
TOKENS_ENV = "TICKWHEEL_SERVE_TOKENS"  # the token file; empty: no authentication
CALLBACK_HOSTS_ENV = "TICKWHEEL_SERVE_CALLBACK_HOSTS"  # comma-separated


def app_from_env() -> Starlette:
    tokens = os.environ.get(TOKENS_ENV, "")
    hosts = [h for h in os.environ.get(CALLBACK_HOSTS_ENV, "").split(",") if h]
    return create_app(
        os.environ[URL_ENV],
        tokens=TokenFile(Path(tokens)) if tokens else None,
        callback_hosts=hosts,
    )


def _no_delay(transport: asyncio.BaseTransport) -> None:
    """Nagle's algorithm off on an accepted TCP socket, whatever bound the listener.

    With ``--workers N`` uvicorn binds the listening socket itself (``socket.socket()``,
    protocol 0), and asyncio sets ``TCP_NODELAY`` only on sockets whose protocol is TCP
    (6): so a response written in two sends (head, then body) waited for the client's
    delayed ACK, ~40 ms a request on a kept-alive connection."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class NoDelayH11Protocol(H11Protocol):
    """uvicorn's pure-Python HTTP/1.1 protocol (h11), with Nagle's algorithm off."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        _no_delay(transport)
        super().connection_made(transport)  # type: ignore[arg-type]


class NoDelayHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol over httptools (llhttp, node's parser, in C), with
    Nagle's algorithm off: what ``tickwheel serve`` runs (h11, in Python, is a large
    share of a request's time on a kept-alive connection)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        _no_delay(transport)
        super().connection_made(transport)  # type: ignore[arg-type]
