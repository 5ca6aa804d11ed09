"""A network partition on loopback: a TCP proxy in front of a real server that a test can
cut, for everyone or only for some peers, while other clients still get through.

A link is known by what its peer sends (its *labels*), so one proxy in front of a master
can cut the Sentinels and the replicas off while the clients keep writing to it: the
side of a partition Jepsen found Redis loses acknowledged writes on.

- ``sentinels``: Sentinels name themselves on every connection they open (``CLIENT
  SETNAME sentinel-<id>-cmd`` / ``-pubsub``, in the first bytes they send).
- ``replicas``: a replica's link sends ``REPLCONF`` right after its first ``PING`` (a
  replica that reconnects during a cut is dropped there, before it syncs).
- ``node:<id>``: a cluster bus link, by the sender named in its first message's header
  (:func:`bus_sender`); a proxy in front of every node's bus can so cut one node off
  the bus in both directions.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

from timer.testing import free_port

SENTINEL_MARK = b"sentinel-"
REPLICA_MARK = b"REPLCONF"
# A cluster bus message: "RCmb", then its header; the sender's 40-character node id is
# at bytes 40..80 (after totlen, ver, port, type, count, currentEpoch, configEpoch and
# offset), in Redis 3 to 7 and Valkey alike.
BUS_SIGNATURE = b"RCmb"
BUS_SENDER = slice(40, 80)


def bus_sender(first: bytes) -> str | None:
    """The node id that sent the first message of a cluster bus link (None: not one)."""
    if not first.startswith(BUS_SIGNATURE) or len(first) < BUS_SENDER.stop:
        return None
    return first[BUS_SENDER].decode("ascii", "replace")


def labels_of(first: bytes) -> set[str]:
    """The labels a link gets from the first bytes its peer sends."""
    out = set()
    if SENTINEL_MARK in first:
        out.add("sentinels")
    if REPLICA_MARK in first:
        out.add("replicas")
    sender = bus_sender(first)
    if sender is not None:
        out.add(f"node:{sender}")
    return out


class _Link:
    def __init__(self, client: socket.socket, upstream: socket.socket, labels: set[str]):
        self.client, self.upstream, self.labels = client, upstream, labels

    def close(self) -> None:
        _close(self.client, self.upstream)


class Proxy:
    """``127.0.0.1:port`` forwarding to ``target``; :meth:`cut` drops and refuses the
    connections it names until :meth:`heal`. ``target`` may be set again (a server that
    moved to another port as it started): new links follow it."""

    def __init__(self, target: tuple[str, int], host: str = "127.0.0.1") -> None:
        self.target = target
        self.host, self.port = host, free_port(host)
        self._listener = socket.create_server((host, self.port))
        self._lock = threading.Lock()
        self._links: list[_Link] = []
        self._cut: set[str] = set()  # "all" or labels (sentinels, replicas, node:<id>)
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _refused(self, labels: set[str]) -> bool:
        return "all" in self._cut or bool(self._cut & labels)

    def cut(self, *who: str) -> None:
        """Drop and refuse every connection (``all``, the default) or those with one of
        these labels (``sentinels``, ``replicas``, ``node:<id>``), until :meth:`heal`."""
        with self._lock:
            self._cut |= set(who or ("all",))
            doomed = [link for link in self._links if self._refused(link.labels)]
        for link in doomed:
            link.close()

    def heal(self) -> None:
        with self._lock:
            self._cut = set()

    def links(self, label: str) -> int:
        """How many open links carry ``label`` (a harness checks its traffic goes here)."""
        with self._lock:
            return sum(label in link.labels for link in self._links)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.close()

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
            # a bus message's header may come in two reads: its sender is at 40..80
            while first.startswith(BUS_SIGNATURE) and len(first) < BUS_SENDER.stop:
                more = client.recv(65536)
                if not more:
                    break
                first += more
            client.settimeout(None)
        except OSError:
            _close(client)
            return
        labels = labels_of(first)
        with self._lock:
            refused = self._refused(labels)
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
        link = _Link(client, upstream, labels)
        with self._lock:
            self._links.append(link)
        threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
        self._pump_in(link)

    def _pump_in(self, link: _Link) -> None:
        """The peer's bytes to the server; a replica is known (and cut, if replicas are)
        by its ``REPLCONF``, which comes after its first ``PING``."""
        try:
            while data := link.client.recv(65536):
                if REPLICA_MARK in data and "replicas" not in link.labels:
                    with self._lock:
                        link.labels.add("replicas")
                        refused = self._refused(link.labels)
                    if refused:
                        break
                link.upstream.sendall(data)
        except OSError:
            pass
        link.close()


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
