"""Send-ahead lanes: script pipelines an operation sends before it reads the replies of
the ones before (``steps.Send`` / ``steps.Collect``), on one connection it keeps
meanwhile, so the server runs a batch while the client packs the next."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, cast

import redis
import redis.exceptions

from ..durable.model import steps
from ..durable.model.models import Durability
from ..durable.model.scripts import ScriptName
from ..redis.store import settle_replies


class LaneDriver(Protocol):
    """What a lane needs of the driver whose operation it serves (``timer.client.driver``'s
    ``SyncDriver``, which imports this module: so a protocol, not an import). The asyncio
    client's twin is ``timer.aio.lanes``: the driver both share calls either the same."""

    @property
    def cluster(self) -> bool: ...

    @property
    def durability(self) -> Durability: ...

    @property
    def redis(self) -> Any: ...

    @property
    def scripts(self) -> Mapping[ScriptName, Any]: ...

    @property
    def where(self) -> str: ...

    def execute(self, step: steps.Pipeline) -> Any: ...

    def pipeline(self, calls: Sequence[steps.ScriptCall]) -> list[Any]: ...

    def load_scripts(self, names: Iterable[ScriptName]) -> None: ...


class Sent:
    """A pipeline sent ahead on a lane: how many replies it has, or its replies once read."""

    __slots__ = ("pipeline", "replies")

    def __init__(self, pipeline: steps.Pipeline, replies: list[Any] | None = None) -> None:
        self.pipeline = pipeline
        self.replies = replies


class Lane:
    """One connection an operation keeps while it has script pipelines sent ahead
    (``Send``/``Collect``): the server runs a batch while the client validates and packs
    the next. One connection, so the server runs the batches in the order they were
    sent. On a cluster, or when writes wait for durability, ``send`` runs the pipeline at
    once instead. A connection error re-runs every batch not yet collected, in order,
    through the ordinary path (redis-py's retries): what a failed pipeline gets too, and
    safe because a schedule call is idempotent per id."""

    def __init__(self, driver: LaneDriver) -> None:
        self.driver = driver
        self.conn: Any = None
        self.unread: list[Sent] = []  # sent, replies not read yet, oldest first

    def send(self, pipeline: steps.Pipeline) -> Sent:
        driver = self.driver
        calls = pipeline.calls
        if (
            driver.cluster
            or driver.durability.waits
            or not calls
            or not isinstance(calls[0], steps.ScriptCall)
        ):
            return Sent(pipeline, driver.execute(pipeline))
        sent = Sent(pipeline)
        self.unread.append(sent)
        try:
            if self.conn is None:
                driver.load_scripts({c.script for c in calls if isinstance(c, steps.ScriptCall)})
                self.conn = driver.redis.connection_pool.get_connection()
            scripts = driver.scripts
            # No health-check PING once replies are pending: it would read one of them.
            self.conn.send_packed_command(
                self.conn.pack_commands(
                    [
                        ("EVALSHA", scripts[c.script].sha, len(c.keys), *c.keys, *c.args)
                        for c in calls
                        if isinstance(c, steps.ScriptCall)
                    ]
                ),
                check_health=len(self.unread) == 1,
            )
        except (redis.ConnectionError, redis.TimeoutError):
            self._rerun()
        return sent

    def collect(self, sent: Sent) -> list[Any]:
        driver = self.driver
        if sent.replies is None:
            if not self.unread or self.unread[0] is not sent:
                raise RuntimeError("Collect the batches sent ahead in the order they were sent")
            try:
                raw: list[Any] = []
                for _ in sent.pipeline.calls:
                    try:
                        raw.append(driver.redis.parse_response(self.conn, "EVALSHA"))
                    except redis.ResponseError as exc:
                        raw.append(exc)
            except (redis.ConnectionError, redis.TimeoutError):
                self._rerun()
            else:
                self.unread.pop(0)
                calls = cast("Sequence[steps.ScriptCall]", sent.pipeline.calls)
                sent.replies = settle_replies(
                    self._retry_lost(calls, raw),  # NOSCRIPT: the script cache was lost
                    driver.where,
                    errors_in_slots=sent.pipeline.errors_in_slots,
                )
                if not self.unread:
                    self._release()
        assert sent.replies is not None
        return sent.replies

    def _retry_lost(self, calls: Sequence[steps.ScriptCall], raw: list[Any]) -> list[Any]:
        """Run again, through the ordinary path, the calls whose script the server lost
        (a NOSCRIPT call did not run); the replies, updated."""
        lost = [i for i, r in enumerate(raw) if isinstance(r, redis.exceptions.NoScriptError)]
        if lost:
            again = self.driver.pipeline([calls[i] for i in lost])
            for i, reply in zip(lost, again, strict=True):
                raw[i] = reply
        return raw

    def _rerun(self) -> None:
        """The lane broke: every batch not yet collected runs again, in order."""
        self._release(broken=True)
        unread, self.unread = self.unread, []
        for sent in unread:
            sent.replies = self.driver.execute(sent.pipeline)

    def _release(self, *, broken: bool = False) -> None:
        if self.conn is not None:
            if broken or self.unread:  # replies left on the socket: never reuse it
                self.conn.disconnect()
            self.driver.redis.connection_pool.release(self.conn)
            self.conn = None

    def close(self) -> None:
        """The operation ended (or failed): give the connection back."""
        self._release()
        self.unread.clear()
