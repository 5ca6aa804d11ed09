"""A stand-in HTTP server on a free loopback port, for what `tickwheel probe` asks: each
GET is answered by ``answer(path)`` as (status, body, content type)."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Callable, Iterator

Answer = Callable[[str], tuple[int, bytes, str]]


@contextlib.contextmanager
def answering(answer: Answer) -> Iterator[int]:
    """The port of a server answering every GET with ``answer(path)``, for the block."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code, body, kind = answer(self.path)
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
