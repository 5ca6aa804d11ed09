"""Kept-alive connections at full speed under ``tickwheel serve --workers N`` (#40): the
listening socket uvicorn binds for its workers has protocol 0, on which asyncio leaves
Nagle's algorithm on, and each response waited ~40 ms for a delayed ACK."""

from __future__ import annotations

import asyncio
import socket

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from timer.httpapi.serve import NoDelayH11Protocol, NoDelayHttpToolsProtocol


async def _ok(_: object) -> JSONResponse:
    return JSONResponse({"ok": True})


Protocol = type[H11Protocol] | type[HttpToolsProtocol]


async def nodelay_of(protocol: Protocol) -> int:
    """TCP_NODELAY on the server's side of a connection accepted on a socket bound as
    uvicorn binds one for its workers (``socket.socket()``, protocol 0), after a request."""
    config = uvicorn.Config(Starlette(routes=[Route("/", _ok)]), log_level="warning")
    config.load()
    state = ServerState()
    made: list[H11Protocol | HttpToolsProtocol] = []

    def factory() -> H11Protocol | HttpToolsProtocol:
        made.append(protocol(config=config, server_state=state, app_state={}))
        return made[-1]

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # protocol 0, as uvicorn
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    server = await asyncio.get_running_loop().create_server(factory, sock=listener)
    try:
        reader, writer = await asyncio.open_connection(*listener.getsockname()[:2])
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        assert b"200 OK" in await reader.readuntil(b"\r\n\r\n")
        sock = made[0].transport.get_extra_info("socket")
        value = int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()
        await writer.wait_closed()
        return value
    finally:
        for p in made:  # the server side of each connection (server.close() leaves them)
            p.transport.close()
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(("protocol", "nodelay"), [
    (H11Protocol, 0), (NoDelayH11Protocol, 1),
    (HttpToolsProtocol, 0), (NoDelayHttpToolsProtocol, 1),
])  # fmt: skip
def test_serve_turns_nagle_off_on_every_accepted_socket(protocol: Protocol, nodelay: int) -> None:
    """uvicorn's own protocol leaves Nagle on for such a socket (the stall); serve's
    turns it off."""
    assert asyncio.run(nodelay_of(protocol)) == nodelay
