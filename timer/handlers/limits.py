"""Per-key concurrency limits for a handler runner: at most N handlers at once for
each value of a key (a tenant, a domain), across every runner process of the group.

::

    handlers = Handlers(group="billing", limits=[Limit("payload.tenant", 2)])
    # tickwheel handle --limit payload.tenant=2 ...

The slots live in Redis (``slot_acquire.lua``): one sorted set per key value, a member
per running handler scored with the end of its lease. A runner renews its slots as it
touches its outcomes (every ``reclaim_idle_ms / 3``); one killed mid-handler stops, and
its slots are free once their lease (``reclaim_idle_ms``) ends. An outcome whose key is
at its limit is held (and touched) until a slot comes free, then runs: it is neither
dead-lettered nor counted as an attempt.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING

from ..durable.groups.streams import Delivery
from ..durable.model.checks import check_int
from ..durable.model.models import Outcome
from ..durable.model.scripts import ScriptName
from ..durable.model.steps import Command, Op, ScriptCall
from ..errors import InvalidInput, quoted

if TYPE_CHECKING:
    from ..client import TimerClient

KeyOf = Callable[[Outcome], object]
_PATH = re.compile(r"^(id|outcome|payload(\.[A-Za-z0-9_\-]+)*)$")
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")  # no ':': a part of its Redis key
_PATHS = "id, outcome, payload or payload.<field>[.<field>…] (letters, digits, _ and -)"
MAX_SLOTS = 10_000
MAX_PER_S = 100_000
MIN_PER_S = 1e-5  # about one a day


@dataclass(frozen=True)
class Limit:
    """At most ``at_most`` handlers at once for each value of ``key``, and (``per_s``) at
    most that many starts a second, spaced evenly with ``burst`` at once after a pause
    (GCRA: a token bucket of ``burst`` filled at ``per_s``). Give either or both.

    ``key`` is ``"id"``, ``"outcome"``, ``"payload"`` or a path into a map payload
    (``"payload.tenant"``, ``"payload.site.domain"``), or a function of the outcome.
    An outcome whose key has no value (a payload without that field, a function
    returning None) is not limited. ``name`` names the limit in Redis (default: the
    path; give one for a function)."""

    key: str | KeyOf
    at_most: int | None = None
    name: str | None = None
    _: KW_ONLY
    per_s: float | None = None
    burst: int = 1

    def __post_init__(self) -> None:
        if self.at_most is None and self.per_s is None:
            raise InvalidInput("a limit needs at_most (handlers at once), per_s, or both")
        if self.at_most is not None:
            check_int("a limit's at_most", self.at_most, 1, MAX_SLOTS)
        if self.per_s is not None and (
            isinstance(self.per_s, bool)
            or not isinstance(self.per_s, int | float)
            or not (MIN_PER_S <= self.per_s <= MAX_PER_S)
        ):
            raise InvalidInput.about(
                "{0} must be a number from {least} (one a day) to {most} a second, got {got}",
                "a limit's per_s",
                least=MIN_PER_S,
                most=MAX_PER_S,
                got=quoted(self.per_s, 80),
            )
        check_int("a limit's burst", self.burst, 1, MAX_SLOTS)
        if isinstance(self.key, str):
            if not _PATH.match(self.key):
                raise InvalidInput.about(
                    "{0} must be {paths}, got {got}{hint}",
                    "a limit's key",
                    paths=_PATHS,
                    got=quoted(self.key, 100),
                    hint=_meant(self.key),
                )
        elif not callable(self.key):
            raise InvalidInput(f"a limit's key must be a path or a function, got {self.key!r}")
        elif self.name is None:
            raise InvalidInput("a limit keyed by a function needs a name (Limit(fn, 2, 'x'))")
        if not isinstance(self.label, str) or not _NAME.match(self.label):
            raise InvalidInput(
                f"a limit's name must be 1-100 letters, digits, '_', '.' or '-', "
                f"got {self.label!r:.100}"
            )

    @property
    def label(self) -> str:
        """Its name in Redis keys and metrics."""
        return self.name if self.name is not None else str(self.key)

    def value_of(self, o: Outcome) -> str | None:
        """The key's value for this outcome as text, or None: not limited."""
        return key_value(self.key, o)


def key_value(key: str | KeyOf, o: Outcome) -> str | None:
    """A key's value for an outcome as text (at most 256 characters), or None: a path
    (``id``, ``outcome``, ``payload``, ``payload.<field>…``) or a function of it."""
    if callable(key):
        value = key(o)
    else:
        head, *path = key.split(".")
        value = {"id": o.id, "outcome": o.outcome, "payload": o.payload}[head]
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return None
    text = value if isinstance(value, str) else repr(value)
    return text[:256]


def check_fair_by(key: object) -> str | KeyOf | None:
    """``Handlers(fair_by=)``: a key as a limit takes it (a path or a function), or None."""
    if key is None or callable(key):
        return key
    if not isinstance(key, str):
        raise InvalidInput(
            f"fair_by must be a key ({_PATHS}) or a function of the outcome, got {quoted(key, 100)}"
        )
    if _PATH.match(key):
        return key
    # a key as text, as the CLI's --fair-by gives it too: named by the caller (the CLI's
    # flag), and no function offered (the command line has none; `tenant` was told of one)
    raise InvalidInput.about(
        "{0} must be {paths}, got {got}{hint}",
        "fair_by",
        paths=_PATHS,
        got=quoted(key, 100),
        hint=_meant(key),
    )


def _meant(key: str) -> str:
    """A payload's field named alone (``tenant``): the path that was meant, said."""
    return f"; did you mean payload.{key}?" if _PATH.match(f"payload.{key}") else ""


# The parts of --limit KEY=N and --rate KEY=R/s, named as their text writes them (an
# error about one names it so, after the flag and the text as given)
_PARTS = {
    "a limit's key": "the KEY before =",
    "a limit's at_most": "the count after =",
    "a limit's per_s": "the rate after =",
}


def _in_flag(flag: str, text: str, exc: InvalidInput) -> InvalidInput:
    """``exc`` about a limit made of ``flag``'s ``text``, in the words of that text."""
    return InvalidInput(f"{flag} {quoted(text, 100)}: {exc.naming(_PARTS)}")


def parse_limit(text: str) -> Limit:
    """``KEY=N`` as ``tickwheel handle --limit`` takes it (``payload.tenant=2``)."""
    key, sep, n = text.rpartition("=")
    if not sep or not n.strip().isdigit():
        raise InvalidInput(
            f"--limit takes KEY=N, e.g. payload.tenant=2 (at most 2 handlers at once per "
            f"tenant), got {quoted(text, 100)}"
        )
    try:
        return Limit(key.strip(), int(n))
    except InvalidInput as exc:
        raise _in_flag("--limit", text, exc) from None


_PER = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_rate(text: str) -> Limit:
    """``KEY=R/s`` (or ``/m``, ``/h``) as ``tickwheel handle --rate`` takes it."""
    key, sep, rate = text.rpartition("=")
    count, slash, unit = rate.strip().partition("/")
    try:
        value = float(count)
    except ValueError:
        value = math.nan
    if not sep or not slash or unit not in _PER or not math.isfinite(value):
        raise InvalidInput(
            f"--rate takes KEY=R/s (or /m, /h), e.g. payload.tenant=5/s (at most 5 handler "
            f"starts a second per tenant), got {quoted(text, 100)}"
        )
    try:
        return Limit(key.strip(), per_s=value / _PER[unit])
    except InvalidInput as exc:
        raise _in_flag("--rate", text, exc) from None


def merged(limits: Sequence[Limit]) -> tuple[Limit, ...]:
    """``--limit`` and ``--rate`` of one key as one limit (the CLI's)."""
    out: dict[str, Limit] = {}
    for x in limits:
        had = out.get(x.label)
        if had is None:
            out[x.label] = x
        else:
            out[x.label] = Limit(
                x.key,
                had.at_most if x.at_most is None else x.at_most,
                x.name,
                per_s=had.per_s if x.per_s is None else x.per_s,
                burst=max(had.burst, x.burst),
            )
    return tuple(out.values())


def check_limits(limits: object) -> tuple[Limit, ...]:
    if limits is None:
        return ()
    if isinstance(limits, Limit):
        return (limits,)
    if not isinstance(limits, Sequence) or isinstance(limits, str | bytes):
        raise InvalidInput(f"limits must be a list of Limit, got {limits!r:.100}")
    out = tuple(limits)
    if not all(isinstance(x, Limit) for x in out):
        raise InvalidInput(f"limits must be a list of Limit, got {limits!r:.100}")
    if len({x.label for x in out}) != len(out):
        raise InvalidInput(
            "two limits share a name: give each its own, or make them one Limit (at_most "
            "and per_s together)"
        )
    return out


class Slots:
    """The slots this runner holds, taken and given back through Redis."""

    def __init__(
        self, client: TimerClient, group: str, consumer: str, limits: Sequence[Limit], lease_ms: int
    ) -> None:
        self.client = client
        self.group = group
        self.consumer = consumer
        self.limits = tuple(limits)
        self.lease_ms = lease_ms
        self.lock = threading.Lock()
        # an attempt (shard, entry id, attempt) -> its slots: (key, member, the key's N).
        # Per attempt, not per entry: a handler past its timeout still runs (a thread
        # cannot be stopped) and keeps its slot until it returns, while its retry, the
        # same entry's next attempt, needs a slot of its own.
        self.held: dict[tuple[int, str, int], list[tuple[str, str, int]]] = {}

    def _valued(self, d: Delivery) -> list[tuple[Limit, str]]:
        """The limits ``d``'s outcome has a value of, with that value."""
        valued = ((x, x.value_of(d.outcome)) for x in self.limits)
        return [(x, v) for x, v in valued if v is not None]

    def needed(self, d: Delivery) -> list[tuple[str, int]]:
        """The slots ``d`` needs: (Redis key, its N)."""
        ns = self.client.keys
        return [
            (ns.limit(self.group, x.label, v), x.at_most)
            for x, v in self._valued(d)
            if x.at_most is not None
        ]

    def rates(self, d: Delivery) -> list[tuple[str, float, int]]:
        """The rates ``d`` starts under: (Redis key, interval ms, burst)."""
        ns = self.client.keys
        return [
            (ns.rate(self.group, x.label, v), 1000 / x.per_s, x.burst)
            for x, v in self._valued(d)
            if x.per_s is not None
        ]

    def admit(self, d: Delivery) -> float | None:
        """Let ``d`` start: its slots taken, then a start of each of its rates. None if
        it may start now; else when to ask again, in seconds (0: once a slot frees)."""
        if not self.acquire(d):
            return 0.0
        for key, interval_ms, burst in self.rates(d):
            wait_ms = self.client._run(_rate(key, interval_ms, burst))
            if wait_ms > 0:
                self.release(d)  # started later: its slots are for others meanwhile
                return wait_ms / 1000
        return None

    def acquire(self, d: Delivery) -> bool:
        """Take a slot of each key ``d`` needs, or none (False: one is at its limit)."""
        needed = self.needed(d)
        if not needed:
            return True
        member = f"{self.consumer}/{d.outcome.shard}/{d.entry_id}/{d.outcome.attempt}"
        got: list[tuple[str, str, int]] = []
        for key, n in needed:
            if not self.client._run(_take(key, member, n, self.lease_ms)):
                for k, m, _ in got:
                    self.client._run(_give_back(k, m))
                return False
            got.append((key, member, n))
        with self.lock:
            self.held[_attempt(d)] = got
        return True

    def release(self, d: Delivery) -> list[str]:
        """Give back the slots ``d`` holds (its handler returned or gave up): their keys."""
        with self.lock:
            got = self.held.pop(_attempt(d), [])
        for key, member, _ in got:
            self.client._run(_give_back(key, member))
        return [key for key, _, _ in got]

    def renew(self) -> None:
        """Extend every slot held by a lease from now (with the outcomes' touch)."""
        with self.lock:
            held = [slot for got in self.held.values() for slot in got]
        for key, member, n in held:
            self.client._run(_take(key, member, n, self.lease_ms))


def _attempt(d: Delivery) -> tuple[int, str, int]:
    return (d.outcome.shard, d.entry_id, d.outcome.attempt)


def _take(key: str, member: str, at_most: int, lease_ms: int) -> Op[bool]:
    reply = yield ScriptCall(ScriptName.SLOT_ACQUIRE, [key], [member, at_most, lease_ms], False)
    return bool(int(reply))


def _rate(key: str, interval_ms: float, burst: int) -> Op[int]:
    reply = yield ScriptCall(ScriptName.RATE_TAKE, [key], [repr(interval_ms), burst], False)
    return int(reply)


def _give_back(key: str, member: str) -> Op[None]:
    yield Command("zrem", (key, member))


def limits_in_use(client: TimerClient, most: int = 100) -> list[dict[str, object]]:
    """The per-key limits' slots held now in the namespace (what the dashboard shows): a
    row per key value with handlers running, at most ``most``, busiest first."""
    tag = client.keys.tag
    now = client.server_time_ms()
    out: list[dict[str, object]] = []
    for raw in client.redis.scan_iter(match=f"{tag}:lim:*", count=1000):
        key = raw if isinstance(raw, bytes) else str(raw).encode()
        size, _, rest = key[len(tag.encode()) + len(b":lim:") :].partition(b":")
        if not size.isdigit():
            continue
        group, rest = rest[: int(size)], rest[int(size) + 1 :]
        name, _, value = rest.partition(b":")
        members = client.redis.zrangebyscore(raw, now, "+inf")
        if members:
            runners = sorted({m.decode("utf-8", "replace").split("/", 1)[0] for m in members})
            out.append(
                {
                    "group": group.decode("utf-8", "replace"),
                    "limit": name.decode("utf-8", "replace"),
                    "value": value.decode("utf-8", "replace"),
                    "running": len(members),
                    "runners": runners,
                }
            )
    out.sort(key=lambda r: (-int(str(r["running"])), str(r["group"]), str(r["value"])))
    return out[:most]
