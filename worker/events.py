"""The pub/sub listener: schedule / reschedule / decide events for the shards a worker leads.

Pub/sub is for speed, never for correctness (a missed event is caught by ``sweep``).
After any reconnect the worker reloads its horizon, since events may have been missed.
redis-py's PubSub is not thread-safe, so only the listener thread touches it; other
threads change the wanted channel set and the listener applies the difference. A shard's
horizon is reloaded once its channel's subscription is confirmed, so nothing scheduled
between the first load and the subscription is left to the sweep.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import redis

from timer.client.transport import CountingPubSub
from timer.clock import SYSTEM_TIME, Time

# How often a listener on a Sentinel master asks the Sentinels whether the master moved
# (a SENTINEL FAILOVER demotes the old one without closing its subscribers' connections).
MASTER_CHECK_S = 1.0

log = logging.getLogger("worker.events")


class EventListener:
    """One daemon thread following the led shards' event channels.

    Thread-safe: ``want`` from any thread; the callbacks run on the listener's thread.
    """

    def __init__(
        self,
        new_pubsub: Callable[[], CountingPubSub],
        on_message: Callable[[str, str], None],
        on_reconnect: Callable[[], None],
        on_subscribed: Callable[[str], None],
        *,
        time: Time = SYSTEM_TIME,
        stopping: threading.Event | None = None,
    ) -> None:
        self.time = time
        # the process's stop request: once it is set, a lost connection is the server
        # going away with the worker (a tour's `server stop` right after `kill`), and
        # the worker's own shutdown follows, so it is no warning
        self._stopping = stopping
        self._new_pubsub = new_pubsub
        self._on_message = on_message
        self._on_reconnect = on_reconnect
        self._on_subscribed = on_subscribed
        self._wanted: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None  # ``start``'s (a stepped worker: none)
        self._pumped: tuple[CountingPubSub, set[str]] | None = None  # a stepped worker's
        # a simulation's lost messages: pump reads them and drops those this says to
        self.drop: Callable[[str], bool] | None = None
        self.reconnects = 0

    def start(self) -> None:
        self._thread = self.time.thread(self._loop, name="worker-events")
        self._thread.start()

    def want(self, channels: set[str]) -> None:
        with self._lock:
            self._wanted = set(channels)

    def pump(self, *, drop: Callable[[str], bool] | None = None) -> int:
        """A stepped worker's turn of the listener (no thread; on virtual time): follow
        the wanted channels and handle every message waiting now, never waiting for one.
        ``drop`` (else :attr:`drop`): a simulation's lost message (read, not handled).
        Returns how many messages were handled."""
        drop = drop or self.drop
        if self._pumped is None:
            self._pumped = (self._new_pubsub(), set())
        pubsub, subscribed = self._pumped
        with self._lock:
            wanted = set(self._wanted)
        if wanted - subscribed:
            pubsub.subscribe(*(wanted - subscribed))
        if subscribed - wanted:
            pubsub.unsubscribe(*(subscribed - wanted))  # type: ignore[no-untyped-call]
        self._pumped = (pubsub, wanted)
        handled = 0
        while (message := pubsub.get_message(timeout=0.0)) is not None:
            kind = message.get("type")
            if kind == "message":
                data = _text(message["data"])
                if drop is not None and drop(data):
                    continue
                self._on_message(_text(message["channel"]), data)
                handled += 1
            elif kind == "subscribe":
                self._on_subscribed(_text(message["channel"]))
        return handled

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(5)
        if self._pumped is not None:
            with contextlib.suppress(Exception):
                self._pumped[0].close()
            self._pumped = None

    def _loop(self) -> None:
        pubsub: CountingPubSub | None = None
        subscribed: set[str] = set()
        backoff = 0.05
        checked = self.time.monotonic()  # when the Sentinels were last asked for the master
        while not self._stop.is_set():
            try:
                with self._lock:
                    wanted = set(self._wanted)
                if pubsub is None:
                    if not wanted:
                        self.time.wait(self._stop, 0.1)
                        continue
                    pubsub = self._new_pubsub()
                    subscribed = set()
                subscribed = _resubscribe(pubsub, subscribed, wanted)
                if self.time.monotonic() - checked > MASTER_CHECK_S:
                    checked = self.time.monotonic()
                    if pubsub.master_moved():
                        raise redis.ConnectionError("the Sentinels name a new master")
                connects = pubsub.connects
                message = pubsub.get_message(timeout=0.2)
                if pubsub.connects > connects > 0:
                    self._reconnected()
                self._deliver(message)
                backoff = 0.05
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                if self._stopping is not None and self._stopping.is_set():
                    log.info("pub/sub connection lost while stopping (%s)", exc)
                else:
                    log.warning("pub/sub connection lost (%s); reconnecting", exc)
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        pubsub.close()
                pubsub = None
                self.time.wait(self._stop, backoff)
                backoff = min(backoff * 2, 2.0)
                self._reconnected()
            except Exception:
                log.exception("pub/sub listener error")
                self.time.wait(self._stop, 0.2)
        if pubsub is not None:
            with contextlib.suppress(Exception):
                pubsub.close()

    def _deliver(self, message: dict[str, Any] | None) -> None:
        kind = message.get("type") if message else None
        if kind == "message":
            assert message is not None
            self._on_message(_text(message["channel"]), _text(message["data"]))
        elif kind == "subscribe":
            assert message is not None
            # Events flow from here on: whatever was read before may have missed some.
            self._on_subscribed(_text(message["channel"]))

    def _reconnected(self) -> None:
        self.reconnects += 1
        try:
            self._on_reconnect()
        except Exception:
            log.exception("reload after pub/sub reconnect failed")


def _resubscribe(pubsub: CountingPubSub, subscribed: set[str], wanted: set[str]) -> set[str]:
    """Subscribe to the channels newly wanted, leave the ones no longer; the new set."""
    if wanted - subscribed:
        pubsub.subscribe(*(wanted - subscribed))
    if subscribed - wanted:
        pubsub.unsubscribe(*(subscribed - wanted))  # type: ignore[no-untyped-call]
    return wanted


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else str(value)
