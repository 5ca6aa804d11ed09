"""A network partition on loopback: a TCP proxy in front of a real server that a test can
cut, for everyone or only for Sentinels, while other clients still get through.

Sentinels name themselves on every connection they open (``CLIENT SETNAME
sentinel-<id>-cmd`` / ``-pubsub``, in the first bytes they send), so one proxy in front
of a master can cut the Sentinels off while the clients the Sentinels sent there keep
writing to it: the side of a partition Jepsen found Redis loses acknowledged writes on.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

from timer.testing import free_port

SENTINEL_MARK = b"sentinel-"


class Proxy:
    """``127.0.0.1:port`` forwarding to ``target``; :meth:`cut` drops and refuses the
    connections it names until :meth:`heal`."""

    def __init__(self, target: tuple[str, int], host: str = "127.0.0.1") -> None:
        self.target = target
        self.host, self.port = host, free_port(host)
        self._listener = socket.create_server((host, self.port))
        self._lock = threading.Lock()
        self._links: list[tuple[socket.socket, socket.socket, bool]] = []  # (in, out, sentinel)
        self._cut: str | None = None  # None, "all" or "sentinels"
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _refused(self, sentinel: bool) -> bool:
        return self._cut == "all" or (self._cut == "sentinels" and sentinel)

    def cut(self, who: str = "all") -> None:
        """Drop and refuse every connection (``all``) or the Sentinels' (``sentinels``)."""
        with self._lock:
            self._cut = who
            doomed = [link for link in self._links if self._refused(link[2])]
        for a, b, _ in doomed:
            _close(a, b)

    def heal(self) -> None:
        with self._lock:
            self._cut = None

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            links, self._links = self._links, []
        for a, b, _ in links:
            _close(a, b)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._link, args=(client,), daemon=True).start()

    def _link(self, client: socket.socket) -> None:
        try:
            client.settimeout(5)
            first = client.recv(65536)
            client.settimeout(None)
        except OSError:
            _close(client)
            return
        sentinel = SENTINEL_MARK in first
        with self._lock:
            refused = self._refused(sentinel)
        if refused or not first:
            _close(client)
            return
        try:
            upstream = socket.create_connection(self.target, timeout=5)
            upstream.settimeout(None)
            upstream.sendall(first)
        except OSError:
            _close(client)
            return
        with self._lock:
            self._links.append((client, upstream, sentinel))
        threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
        _pump(client, upstream)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    _close(src, dst)


def _close(*socks: socket.socket) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            s.close()


@contextlib.contextmanager
def proxy(target: tuple[str, int]) -> Iterator[Proxy]:
    p = Proxy(target)
    try:
        yield p
    finally:
        p.close()
