"""Script calls on a Redis Cluster under failover and resharding: what a reply means.

Script calls cannot go through the cluster client's own command path in a pipeline
(redis-py's cluster pipeline refuses ``EVALSHA``), so both drivers send them in one
pipeline per master, on that master's own connection (``timer.client.driver`` and
``timer.aio``). A reply on such a connection never reaches redis-py's slot map, so this
module decides, for every reply, what the cluster client would have done with it, and the
drivers do it: the routing is here, with no I/O; only the sending differs (blocking or
awaited). A confirmed read (a group's XREADGROUP, then the durability wait, on one
connection to its stream's master) is routed the same way.

What a reply means (:func:`verdict`):

- ``MOVED slot host:port`` — the slot has a new owner: the call goes there at once, and
  the slot map is refreshed (rate-limited, :class:`Refresh`).
- ``ASK``, ``TRYAGAIN`` and a script stopped by its guard ("non local key") — the
  shard's slot is being migrated. A script is never sent with ``ASKING`` to the
  importing node: there, a key that has not arrived yet reads as missing, and the script
  would decide on half a shard. It waits (backoff) until the slot has moved whole, then
  follows the ``MOVED``.
- ``CLUSTERDOWN``, "cluster is down" — a failover in progress: the call is retried
  with backoff.
- A refused or lost connection — the master is gone: the slot map is read again, and
  the call goes at once to the new owner it names (a promoted replica is found within
  a refresh of its promotion), else waits with backoff.
- A timeout — the node may be paused or partitioned, and the call may have run: it is
  tried again only if a refreshed map names another owner (never the same node twice
  after a timeout, so a paused master costs one timeout, not several).
- ``NOSCRIPT`` — the node lost its script cache (a restart, a promoted replica): the
  script is loaded there and the call sent again.

A retry after a backoff is bounded by a budget (:data:`RETRY_BUDGET_S` for a client, a
worker's much shorter) from the call's first send, and all retries by
:data:`MAX_ROUNDS`: past them the error stays in the call's slot, and the caller (a
worker's next tick, a user's call) decides.
The scripts' guard (``lua/prelude/guard.lua``) makes a call that meets a migrating slot
fail before it writes anything, so any of these retries re-runs a script that did not
run, except after a timeout or a lost connection, where the scripts' own idempotence
(per id, per epoch) makes a second run answer what the first did.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisClusterException

from ..clock import SYSTEM_TIME
from .store import typed_error

# How long a call may go on being retried after a backoff, from its first send (then its
# error stays): a user's call rides out a slot's move; a worker sets its own, short (its
# next tick tries again, and one shard's wait must not hold the others' calls).
RETRY_BUDGET_S = 1.5
MAX_ROUNDS = 12
# Backoff between rounds of retries (s): doubled from the first, capped.
BACKOFF_FIRST_S = 0.02
BACKOFF_MAX_S = 0.25
# The slot map is read from the cluster at most this often (s), whatever the callers.
REFRESH_EVERY_S = 0.1

# The cluster client's own retries of a plain command whose node failed (it reads the
# slot map between them): a few, briefly. redis-py's default (10, backing off to 1 s each)
# could hold a worker's tick for seconds while a dead master is replaced, and with it the
# renewals of shards on healthy masters.
CLIENT_RETRIES = 3


def client_backoff() -> ExponentialBackoff:
    """The pause between those retries: 10 ms doubling to 100 ms."""
    return ExponentialBackoff(cap=0.1, base=0.01)


# The text of a script stopped by the guard (or by a key access) on a migrating slot,
# and of a script refused while the cluster is down: Redis 7.0 and Valkey 7.2+ alike.
_MIGRATING = ("non local key",)
_DOWN = ("cluster is down",)


class Verdict(enum.Enum):
    """What to do with one call's reply."""

    DONE = "done"  # a result, or an error the caller must see
    LOAD = "load"  # NOSCRIPT: load the script on that node, send again at once
    MOVED = "moved"  # the slot moved: send to the node the reply names, at once
    WAIT = "wait"  # migrating or failing over: send again after a backoff
    GONE = "gone"  # the node refused the connection: the map is read again
    TIMEOUT = "timeout"  # no answer: send again only to another owner (it may have run)


def verdict(reply: object) -> Verdict:
    """What the reply of one script call (or the error of its whole pipeline) asks for."""
    if not isinstance(reply, redis.RedisError):
        return Verdict.DONE
    if isinstance(reply, redis.exceptions.NoScriptError):
        return Verdict.LOAD
    if isinstance(reply, redis.exceptions.MovedError):
        return Verdict.MOVED
    if isinstance(reply, redis.TimeoutError):
        return Verdict.TIMEOUT
    if isinstance(reply, redis.ConnectionError):
        return Verdict.GONE
    if isinstance(
        reply,
        (
            redis.exceptions.AskError,
            redis.exceptions.TryAgainError,
            redis.exceptions.ClusterDownError,
            redis.exceptions.MasterDownError,
            redis.exceptions.BusyLoadingError,  # a restarted master loading its AOF
        ),
    ):
        return Verdict.WAIT
    text = str(reply)
    if any(s in text for s in _MIGRATING + _DOWN):
        return Verdict.WAIT
    return Verdict.DONE


def owner(client: Any, key: str) -> str:
    """The name (host:port) of the master a cluster client's slot map (sync or asyncio)
    gives for ``key``; "" when none is known (a slot not covered: the call waits)."""
    try:
        return str(client.get_node_from_key(key).name)
    except (redis.RedisError, RedisClusterException, AttributeError, KeyError):
        return ""


def moved_to(reply: redis.exceptions.MovedError) -> str:
    """The ``host:port`` name of the node a MOVED reply sends the call to."""
    return f"{reply.host}:{reply.port}"


def backoff_s(round_: int) -> float:
    """The pause before backoff round ``round_`` (1, 2, …)."""
    return float(min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (round_ - 1)))


class Routing:
    """One batch of script calls through a cluster: which node each goes to, round after
    round, until each has a reply to keep. No I/O: a driver asks :meth:`groups`, sends
    each node its calls, gives the replies to :meth:`record`, reads the slot map again
    if :attr:`refresh` says so, sleeps :meth:`pause_s`, and asks again. A round is sent
    at once for what a reply tells where to go (MOVED, a new owner after a failure) and
    after a backoff for what must wait (a migration, a failover), the latter only within
    ``budget_s`` of the first send; at most :data:`MAX_ROUNDS` rounds in all."""

    def __init__(
        self,
        keys: Sequence[str],
        owner: Callable[[str], str],
        *,
        budget_s: float,
        clock: Callable[[], float] = SYSTEM_TIME.monotonic,
    ) -> None:
        self.keys = keys  # each call's first key (its shard's slot)
        self.owner = owner  # key -> the name of the master the slot map gives ("" if none)
        self.clock = clock
        self.deadline = clock() + budget_s
        self.replies: list[Any] = [None] * len(keys)
        self.refresh = False  # read the slot map before the next round
        self._todo = list(range(len(keys)))
        self._target: dict[int, str] = {}  # the node a MOVED named, until the map agrees
        self._failed_on: dict[int, str] = {}  # the node that refused or timed out
        self._again: dict[int, Verdict] = {}
        self._rounds = 0
        self._backoffs = 0

    def groups(self) -> dict[str, list[int]]:
        """This round's calls by node name (empty: every reply is final)."""
        out: dict[str, list[int]] = {}
        for i in self._todo:
            out.setdefault(self._target.get(i) or self.owner(self.keys[i]), []).append(i)
        self._todo = []
        self._rounds += 1
        return out

    def record(self, node: str, idxs: Sequence[int], replies: Sequence[Any]) -> None:
        """The replies of one node's calls (or the error that stopped its pipeline)."""
        for i, raw in zip(idxs, replies, strict=True):
            self.replies[i] = reply = typed_error(raw)
            v = verdict(reply)
            if v is Verdict.DONE:
                continue
            self._again[i] = v
            if isinstance(reply, redis.exceptions.MovedError):
                self._target[i] = moved_to(reply)
            else:
                self._target.pop(i, None)
            if v in (Verdict.GONE, Verdict.TIMEOUT):
                self._failed_on[i] = node
            if v is not Verdict.LOAD:
                self.refresh = True

    def pause_s(self) -> float:
        """Plan the next round (after the map was read again, if asked); the pause before
        it. :meth:`groups` then names the calls to send, if any."""
        self.refresh = False
        again, self._again = self._again, {}
        if self._rounds >= MAX_ROUNDS:
            return 0.0
        now: list[int] = []
        later: list[int] = []
        for i, v in again.items():
            moved_away = i in self._failed_on and self.owner(self.keys[i]) != self._failed_on[i]
            if v in (Verdict.MOVED, Verdict.LOAD) or moved_away:
                now.append(i)
            elif v in (Verdict.WAIT, Verdict.GONE):
                later.append(i)  # a timeout's call may have run: only another owner
        pause = 0.0
        if later:
            pause = backoff_s(self._backoffs + 1)
            if self.clock() + pause > self.deadline:
                later = []
            elif not now:
                self._backoffs += 1
            else:
                pause = 0.0  # sent along with the calls that go at once
        self._todo = sorted(now + later)
        return pause if self._todo else 0.0


class Refresh:
    """When the slot map may be read again: at most once every :data:`REFRESH_EVERY_S`,
    whichever thread or task asks (a failover makes every in-flight call ask at once).
    The caller reads the map itself when :meth:`due` says so; thread-safe."""

    def __init__(
        self,
        every_s: float = REFRESH_EVERY_S,
        *,
        clock: Callable[[], float] = SYSTEM_TIME.monotonic,
    ) -> None:
        self.every_s = every_s
        self.clock = clock
        self._last = float("-inf")
        self._lock = threading.Lock()
        self.count = 0  # refreshes made (tests and metrics read it)

    def due(self) -> bool:
        """True (and the refresh counted as made now) if none was made recently."""
        now = self.clock()
        with self._lock:
            if now - self._last < self.every_s:
                return False
            self._last = now
            self.count += 1
            return True
