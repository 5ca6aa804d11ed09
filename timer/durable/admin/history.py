"""A namespace's history, a minute at a time: what the dashboard charts over the
last hour or day, kept in Redis so it survives a dashboard restart, in bounded memory.

Each minute (Redis time) is one hash, ``{tw:<ns>}:h:<minute ms>``, expiring a day and
an hour after its minute. The processes that see the events add to it, every few
seconds, what they saw since they last did (sans-I/O, as ``ops``):

- a worker: timers scheduled (``S``/``M`` events of its led shards), cancelled and
  completed (``X`` events), expired (fired or swept), their lateness in its histogram's
  buckets (``late:<upper bound ms>``, ``late:inf`` past the last), and the pending
  timers of each shard it leads (``pending:<shard>``, the last reading in the minute);
- a handler runner: outcomes handled, failed attempts and dead letters of its group
  (``handled:<group>``, ``failed:<group>``, ``dead:<group>``).

Expired (and its lateness), handled, failed and dead are counted where they happen,
exactly: each writer adds them every few seconds and when it stops (a worker also when
it releases a shard or loses a lease), so a process stopped by SIGTERM leaves none out,
and one killed with kill -9 loses what it counted since its last flush (a worker's
``history_every_ms``, a runner's ``HISTORY_EVERY_S``: 10 s by default).

So they can be short, by a flush period's counts for each process killed, and no reader
can tell whether one was: every :class:`Minute` names them in ``approximate``, and
:data:`WHY_APPROXIMATE` says why.

Schedules, cancels and completes are what the led shards' events announced, over
pub/sub, which only a subscribed leader hears: those of a shard with no leader, or made
before its new leader subscribed (a worker just started, a shard moving), are not
counted. They are approximate too, for that reason (https://tickwheel.readthedocs.io/design-notes/
says why they are not counted in the scripts). A schedule's own occurrence armed or taken out (by
pausing, updating or deleting it) is neither a user's schedule nor a user's cancel, and
is not counted as one; its firing is an expiry like any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ...errors import InvalidInput, quoted
from ..model import steps
from ..model.checks import check_int
from ..model.codec import text
from ..model.keys import NamespaceKeys
from ..model.steps import Op, server_time_ms

MINUTE_MS = 60_000
KEEP_MS = 25 * 3_600_000  # a day, and an hour's margin
MAX_MINUTES = 24 * 60  # what one read returns at most: the last day
WORKER_COUNTS = ("scheduled", "expired", "cancelled", "completed")
GROUP_COUNTS = ("handled", "failed", "dead")
# The counts heard over pub/sub by the shards' leaders: approximate (what no leader heard
# is missing)
HEARD_COUNTS = ("scheduled", "cancelled", "completed")
# The counts kept where they happen and added every few seconds: exact but for what a
# process killed before its flush had counted since the last one
FLUSHED_COUNTS = ("expired", *GROUP_COUNTS)
APPROXIMATE = (*WORKER_COUNTS, *GROUP_COUNTS)  # so every count, in their order
# Why each approximate count may be short, as the dashboard says it
HEARD_WHY = (
    "approximate: counted from the events a shard's leader heard; misses those no leader "
    "heard (no worker, one starting, a shard moving)"
)
FLUSHED_WHY = (
    "approximate: each worker and handler runner adds its counts every few seconds "
    "(--history-every, 10 s by default) and as it stops; one killed (kill -9, out of "
    "memory) before its flush loses the counts of its last seconds"
)
WHY_APPROXIMATE = {
    **dict.fromkeys(HEARD_COUNTS, HEARD_WHY),
    **dict.fromkeys(FLUSHED_COUNTS, FLUSHED_WHY),
}


def minute_of(ms: int) -> int:
    return ms - ms % MINUTE_MS


def add(
    keys: NamespaceKeys, counts: Mapping[str, int], gauges: Mapping[str, int] | None = None
) -> Op[None]:
    """Add ``counts`` (field -> how many more) to this minute's rollup and set ``gauges``
    (field -> its reading now); the minute is the server's. InvalidInput, before any
    I/O, for a field that is not text or a value that is not a whole number."""
    counts, gauges = _checked(counts, "counts"), _checked(gauges or {}, "gauges")
    now = yield from server_time_ms()
    key = keys.history(minute_of(now))
    commands = [steps.Command("hincrby", (key, f, n)) for f, n in counts.items() if n]
    if gauges:
        commands.append(steps.Command("hset", (key,), {"mapping": dict(gauges)}))
    if commands:
        commands.append(steps.Command("pexpire", (key, KEEP_MS)))
        yield steps.Pipeline(commands)


MAX_FIELD_CHARS = 300  # a group's name and its kind
MAX_VALUE = 2**62  # HINCRBY's range, with room to add


def _checked(values: object, what: str) -> dict[str, int]:
    if not isinstance(values, Mapping):
        raise InvalidInput(f"history {what} must be a mapping of field -> whole number")
    for f, n in values.items():
        if not isinstance(f, str) or not 0 < len(f) <= MAX_FIELD_CHARS or "\x00" in f:
            raise InvalidInput(f"a history field must be text of 1 to {MAX_FIELD_CHARS} chars")
        if isinstance(n, bool) or not isinstance(n, int) or not -MAX_VALUE <= n <= MAX_VALUE:
            raise InvalidInput(
                f"history {what}[{quoted(f)}] must be a whole number, got {quoted(n)}"
            )
    return dict(values)


@dataclass(frozen=True)
class Minute:
    """One minute of a namespace's history, summed over the processes that wrote it.
    ``approximate`` names its counts that may be short (:data:`WHY_APPROXIMATE`)."""

    at_ms: int  # when the minute starts (Redis time, epoch ms)
    scheduled: int = 0
    expired: int = 0
    cancelled: int = 0
    completed: int = 0
    handled: int = 0
    failed: int = 0
    dead: int = 0
    pending: int | None = None  # the led shards' last readings, summed; None: none
    late: tuple[tuple[float, int], ...] = ()  # (upper bound ms, expired timers), rising
    groups: dict[str, dict[str, int]] = field(default_factory=dict)
    # The counts above that may be short: heard over pub/sub, which misses what no
    # subscribed leader heard, or flushed every few seconds, which a kill -9 cuts short
    approximate: tuple[str, ...] = APPROXIMATE

    def lateness_ms(self, q: float) -> float | None:
        """The upper bound (ms) of the lateness bucket holding quantile ``q`` of the
        minute's expired timers (None: none expired; inf: past the last bound)."""
        n = sum(c for _, c in self.late)
        if n == 0:
            return None
        running = 0
        for bound, c in self.late:
            running += c
            if running >= q * n:
                return bound
        return float("inf")


def parse_minute(at_ms: int, raw: Mapping[bytes | str, bytes | str]) -> Minute:
    """A minute's hash as written by :func:`add` (fields this release does not know are
    passed over: a newer process may write more)."""
    counts = dict.fromkeys((*WORKER_COUNTS, *GROUP_COUNTS), 0)
    late: dict[float, int] = {}
    pending: int | None = None
    groups: dict[str, dict[str, int]] = {}
    for f, v in raw.items():
        name, value = text(f), int(v)
        kind, _, rest = name.partition(":")
        if not rest and kind in WORKER_COUNTS:
            counts[kind] += value
        elif kind == "late" and (rest == "inf" or rest.replace(".", "", 1).isdigit()):
            bound = float(rest)
            late[bound] = late.get(bound, 0) + value
        elif kind == "pending" and rest.isdigit():
            pending = (pending or 0) + value
        elif kind in GROUP_COUNTS and rest:
            counts[kind] += value
            groups.setdefault(rest, dict.fromkeys(GROUP_COUNTS, 0))[kind] += value
    c = counts  # by name: a dict spread could fill any field, ``approximate`` too
    return Minute(
        at_ms,
        scheduled=c["scheduled"],
        expired=c["expired"],
        cancelled=c["cancelled"],
        completed=c["completed"],
        handled=c["handled"],
        failed=c["failed"],
        dead=c["dead"],
        pending=pending,
        late=tuple(sorted(late.items())),
        groups=groups,
    )


def read(keys: NamespaceKeys, minutes: int) -> Op[list[Minute]]:
    """The last ``minutes`` minutes (the current one last), oldest first; a minute no
    process wrote is all zeros, its pending None."""
    check_int("minutes", minutes, 1, MAX_MINUTES)
    now = minute_of((yield from server_time_ms()))
    starts = [now - (minutes - 1 - i) * MINUTE_MS for i in range(minutes)]
    replies = yield steps.Pipeline([steps.Command("hgetall", (keys.history(m),)) for m in starts])
    return [parse_minute(m, raw or {}) for m, raw in zip(starts, replies, strict=True)]


def late_field(bound_ms: float) -> str:
    """The field of a lateness bucket: its upper bound in ms (``inf`` past the last)."""
    return "late:inf" if bound_ms == float("inf") else f"late:{bound_ms:g}"


def pending_field(shard: int) -> str:
    """The field of a shard's pending count (a reading: the last in the minute counts)."""
    return f"pending:{shard}"


def group_field(kind: str, group: str) -> str:
    """The field of a runner's count for its group (``handled``, ``failed``, ``dead``)."""
    if kind not in GROUP_COUNTS:
        raise InvalidInput(
            f"a group's history counts {', '.join(GROUP_COUNTS)}, not {quoted(kind)}"
        )
    return f"{kind}:{group}"
