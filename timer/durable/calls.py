"""Build a call, read its reply: one pure builder and one pure parser per Lua script.

No I/O here (BullMQ's ``scripts.ts`` is the model). A builder turns typed, validated
arguments into a :class:`ScriptCall` (script, KEYS, ARGV), so nobody else knows the
argument order of a script; a parser turns the script's reply into a typed result or a
:class:`~timer.errors.TimerError`. The sync client, the asyncio client, the worker and
the tests all go through these; only the I/O around them differs.

Here: the steps an operation asks its I/O layer to take (:class:`ScriptCall`,
:class:`Command`, one plain redis-py command, :class:`Pipeline`, :class:`Sleep` and
:class:`Emit`; see ``ops``), the validation of a timer, and the calls of the client's
own scripts (schedule, decide). The leader's scripts are in :mod:`.shard_calls`, the
consumer groups' in :mod:`.groups`, and reading stored records in :mod:`.entries`.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, TypeVar

import msgpack

from ..errors import (
    ConfigError,
    InvalidInput,
    StoreError,
    TimerError,
    TimerNotFound,
)
from . import keys as K
from .checks import check_int as check_int  # noqa: PLC0414 - ops use C.check_int
from .codec import (
    FORMAT_VERSION,
    decode_result,
    encode_payload,
)
from .models import (
    ClientSettings,
    Meta,
    Timer,
)
from .scripts import ScriptName, script_error

# -- steps: what an operation asks its I/O layer to do ------------------------------------


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """One run of a Lua script: its name, KEYS and ARGV; ``wait`` False for a call that
    writes no timer (a read, a namespace's creation): a client that waits for
    durability does not wait on it."""

    script: ScriptName
    keys: list[str]
    args: list[Any]
    wait: bool = True


@dataclass(frozen=True, slots=True)
class Command:
    """One plain command, named as redis-py's method (``hget``, ``xreadgroup``…).

    With ``every_primary`` it runs on each primary of a Redis Cluster (one server
    otherwise) and the reply is a ``{node name: reply}`` mapping.
    """

    name: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    every_primary: bool = False


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Calls sent together (per node on a cluster); the replies come back in order.

    All of one kind: every call a ScriptCall or every call a Command. With
    ``errors_in_slots`` a failed call's slot holds its TimerError instead of raising.
    """

    calls: Sequence[ScriptCall] | Sequence[Command]
    errors_in_slots: bool = False


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait this long before the next step (polling with backoff)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Emit:
    """Hand a value to the caller of a streaming operation (an outcome read)."""

    value: Any


@dataclass(frozen=True, slots=True)
class Send:
    """Start ``pipeline`` and go on before its replies are read; the reply to this step
    is a ticket for :class:`Collect`. A driver that can send ahead (the blocking client
    on one server) writes the calls and returns at once, so the server runs them while
    the operation prepares its next batch; any other driver runs the pipeline here."""

    pipeline: Pipeline


@dataclass(frozen=True, slots=True)
class Collect:
    """The replies of a :class:`Send`'s pipeline (as ``Pipeline``'s reply), by its ticket.
    Tickets are collected in the order they were sent."""

    ticket: Any


Step = ScriptCall | Command | Pipeline | Sleep | Emit | Send | Collect
T = TypeVar("T")
Op = Generator[Step, Any, T]  # an operation: yields steps, gets replies, returns a T


class Run(Protocol):
    """Runs an operation to its result: a client's driver (``TimerClient._run``); what
    the facades over one client (``ShardStore``, ``Schedules``, ``Timers``, ...) hold."""

    def __call__(self, op: Op[T], /) -> T: ...


# -- validation ------------------------------------------------------------------------


# Deadlines are epoch milliseconds. A script's Lua numbers are doubles, and msgpack
# writes 2**63 and above as unsigned integers that Lua's cmsgpack reads back negative
# (due at once: an early fire), so nothing past 2**53 - 1 is ever sent. The server then
# refuses a deadline further ahead than max_delay_ms from its own clock (TOOFAR).
MAX_DEADLINE_MS = 2**53 - 1
# Watch keys a timer may wait on: its record holds every one of them (256 bytes each at
# most), and a notify walks the index of each.
MAX_WATCH_KEYS = 256


def check_watch(watch: object) -> list[str]:
    """A timer's watch keys, sorted and without repeats; InvalidInput otherwise."""
    if watch is None or (type(watch) is tuple and not watch):  # the default: cheap
        return []
    if isinstance(watch, str | bytes | bytearray | Mapping) or not isinstance(watch, Iterable):
        raise InvalidInput(
            f"watch must be a list of keys (text), got {type(watch).__name__}: {watch!r:.80}"
        )
    keys: set[str] = set()
    for key in watch:
        keys.add(K.check_name("watch key", key))
        if len(keys) > MAX_WATCH_KEYS:
            raise InvalidInput(
                f"watch holds more than {MAX_WATCH_KEYS} keys, the most a timer may wait on "
                "(notify one key that stands for the group instead)"
            )
    return sorted(keys)


def check_shards(ns: Namespace, shards: object) -> list[int]:
    """Shard numbers to work on: None for every shard, or an iterable of shard numbers."""
    if shards is None:
        return list(range(ns.meta.shards))
    if isinstance(shards, str | bytes | Mapping) or not isinstance(shards, Iterable):
        raise InvalidInput(f"shards must be a list of shard numbers, got {shards!r:.80}")
    return [check_int("shard", s, 0, ns.meta.shards - 1) for s in shards]


def check_origin(origin: object) -> str:
    """``schedule_many``'s origin token: text of at most 256 bytes (may be empty)."""
    return "" if origin == "" else K.check_name("origin", origin)


def text(value: object) -> str:
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class Namespace:
    """What every builder needs: the namespace's keys, its shape, and the client's limits."""

    keys: K.NamespaceKeys
    meta: Meta
    settings: ClientSettings

    @property
    def name(self) -> str:
        return self.keys.namespace

    def shard_of(self, name: str) -> int:
        return K.shard_of(name, self.meta.shards)

    def shard(self, shard: int) -> K.ShardKeys:
        return self.keys.shard(shard)

    def outcome_streams(self) -> dict[str, int]:
        """Each shard's outcome stream key -> its shard number."""
        return {self.shard(s).outcomes: s for s in range(self.meta.shards)}

    def not_found(self, timer_id: str) -> TimerNotFound:
        return TimerNotFound.of(timer_id, self.name)


def meta_from(
    stored: Mapping[Any, Any], namespace: str, where: str, *, older: bool = False
) -> Meta:
    """The namespace's Meta from its ``meta`` hash; ConfigError if it was never created,
    was made by a newer tickwheel, or (unless ``older``: migrate's own read) is in a
    format an earlier release wrote."""
    if not stored:
        raise ConfigError(
            f"namespace {namespace!r} is not initialised at {where}; run "
            f"`tickwheel init --shards N` or TimerClient.init(shards=N) once"
        )
    version = int(stored.get(b"version", 1))
    if version > FORMAT_VERSION:
        raise ConfigError(
            f"namespace {namespace!r} at {where} holds data format {version}, written by a "
            f"newer tickwheel; this one reads format {FORMAT_VERSION}: upgrade tickwheel "
            "(pip install -U tickwheel)"
        )
    if version < FORMAT_VERSION and not older:
        raise ConfigError(
            f"namespace {namespace!r} at {where} holds data format {version}, written by an "
            f"earlier tickwheel; this one reads format {FORMAT_VERSION}: stop its workers and "
            f"run `tickwheel --namespace {namespace} migrate` (TimerClient.migrate()) to "
            "convert it"
        )
    return Meta(int(stored[b"shards"]), int(stored[b"bucket_ms"]), version)


# -- schedule ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Prepared:
    """A validated ``reschedule`` call, with what its parser needs."""

    call: ScriptCall
    timer_id: str
    shard: int
    origin: str


def _when(ns: Namespace, delay_ms: object, deadline_ms: object) -> tuple[str, int]:
    if (delay_ms is None) == (deadline_ms is None):
        raise InvalidInput("give exactly one of delay_ms (relative) or deadline_ms (absolute)")
    if delay_ms is not None:
        return "in", check_int("delay_ms", delay_ms, 0, ns.settings.max_delay_ms)
    return "at", check_int("deadline_ms", deadline_ms, 0, MAX_DEADLINE_MS)


TIMERS_PER_CALL = 100  # timers of one shard per schedule call: ~1 ms of Redis time


class ScheduleItem(NamedTuple):
    """One validated timer for ``schedule.lua``, with what its parser needs (a tuple:
    built per item of ``schedule_many``, it must be cheap)."""

    timer_id: str
    shard: int
    spec: tuple[Any, ...]  # (id, mode, value, payload[, need, rearm, watch]) as the script takes it


def schedule_item(  # noqa: PLR0917 - the fields of one timer, in the order users write them
    ns: Namespace,
    timer_id: object,
    delay_ms: object = None,
    deadline_ms: object = None,
    payload: object = None,
    watch: object = (),
    need: object = 1,
    rearm: object = False,
    traceparent: object = None,
    callback_url: object = None,
) -> ScheduleItem:
    """Validate one timer for ``schedule_call``; InvalidInput, nothing sent.

    ``rearm``: an id that ended (its outcome retained) is scheduled again instead of
    answering with that outcome. ``traceparent``: a W3C trace context kept with the timer
    and handed to its outcome (``timer.tracing``). ``callback_url``: where the outcome is
    POSTed (``tickwheel handle --callbacks``, for hosts its operator allows).
    """
    tid = K.check_name("timer id", timer_id)
    mode, value = _when(ns, delay_ms, deadline_ms)
    keys = check_watch(watch)
    if keys:
        check_int("need", need, 1, len(keys))
    elif need != 1:
        raise InvalidInput(f"need={need!r} makes no sense without watch keys (leave it at 1)")
    if rearm is not False and rearm is not True:
        raise InvalidInput(f"rearm must be True or False, got {rearm!r}")
    data = encode_payload(payload, ns.settings.max_payload_bytes)
    shard = ns.shard_of(tid)
    for key in keys:
        if ns.shard_of(key) != shard:
            raise InvalidInput(
                f"watch key {key!r} routes to shard {ns.shard_of(key)} but timer "
                f"{tid!r} routes to shard {shard}; give both the same hash tag, e.g. "
                f"id 'job:{{42}}' and key 'job:{{42}}:done'"
            )
    # need, rearm, watch and trace are left out at their defaults: less to decode
    if callback_url is not None:
        trace = "" if traceparent is None else check_traceparent(traceparent)
        url = check_callback_url(callback_url)
        return ScheduleItem(tid, shard, (tid, mode, value, data, need, int(rearm), keys, trace,
                                         url))  # fmt: skip
    if traceparent is not None:
        trace = check_traceparent(traceparent)
        return ScheduleItem(tid, shard, (tid, mode, value, data, need, int(rearm), keys, trace))
    if keys:
        return ScheduleItem(tid, shard, (tid, mode, value, data, need, int(rearm), keys))
    if rearm:
        return ScheduleItem(tid, shard, (tid, mode, value, data, 1, 1))
    return ScheduleItem(tid, shard, (tid, mode, value, data))


SCHEDULE_FIELDS = frozenset({
    "id", "delay_ms", "deadline_ms", "payload", "watch", "need", "rearm", "traceparent",
    "callback_url",
})  # fmt: skip
MAX_URL_BYTES = 2048


def check_callback_url(value: object) -> str:
    """An http(s) URL with a host and no credentials, at most 2048 bytes."""
    if not isinstance(value, str) or len(value.encode("utf-8", "replace")) > MAX_URL_BYTES:
        raise InvalidInput(f"callback_url must be an http(s) URL of at most {MAX_URL_BYTES} "
                           f"bytes, got {value!r:.100}")  # fmt: skip
    try:
        parts = urllib.parse.urlsplit(value)
        scheme, host = parts.scheme, parts.hostname
    except ValueError:  # an invalid port or IPv6 literal
        scheme, host = "", None
    if scheme not in ("http", "https") or not host:
        raise InvalidInput(
            f"callback_url must be http:// or https:// with a host, got {value!r:.100}"
        )
    if parts.username or parts.password:
        raise InvalidInput("callback_url must not carry credentials: receivers check the signature")
    return value


TRACEPARENT = re.compile(r"^[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$")


def check_traceparent(value: object) -> str:
    """A W3C ``traceparent`` header value (``00-<trace id>-<span id>-<flags>``)."""
    if not isinstance(value, str) or not TRACEPARENT.match(value) or value.startswith("ff"):
        raise InvalidInput(
            f"traceparent must be a W3C trace context such as "
            f"'00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', got {value!r:.100}"
        )
    return value


def schedule_item_of(ns: Namespace, item: object) -> ScheduleItem:
    """``schedule_item`` for one item of ``schedule_many`` (a mapping with an ``id``).

    Whatever the item is, this returns its ScheduleItem or raises InvalidInput, so a bad
    item costs only its own slot: nothing of a batch is sent while an item can still fail.
    """
    if type(item) is not dict and not isinstance(item, Mapping):  # the ABC check is slow
        raise InvalidInput(f"each item must be a mapping with an 'id', got {item!r:.200}")
    try:
        if not SCHEDULE_FIELDS.issuperset(item):
            extra = sorted(repr(k) for k in set(item) - SCHEDULE_FIELDS)
            raise InvalidInput(
                f"unknown field(s) [{', '.join(extra)}] in item {item.get('id')!r:.200}; "
                f"an item takes {', '.join(sorted(SCHEDULE_FIELDS))}"
            )
        get = item.get
        return schedule_item(
            ns,
            get("id"),
            get("delay_ms"),
            get("deadline_ms"),
            get("payload"),
            get("watch", ()),
            get("need", 1),
            get("rearm", False),
            get("traceparent"),
            get("callback_url"),
        )
    except InvalidInput:
        raise
    except Exception as exc:
        raise InvalidInput(f"item could not be read ({type(exc).__name__}: {exc})") from None


def schedule_call(ns: Namespace, items: Sequence[ScheduleItem], origin: str) -> ScriptCall:
    """One ``schedule`` call for up to TIMERS_PER_CALL timers of one shard, packed once."""
    if not items or len(items) > TIMERS_PER_CALL:
        raise ValueError(f"a schedule call takes 1 to {TIMERS_PER_CALL} timers")
    sk = ns.shard(items[0].shard)
    keys = [sk.timers, sk.buckets]
    # The old raw format (no bin or str8 types): what Redis's Lua cmsgpack reads.
    timers = msgpack.packb([item.spec for item in items], use_bin_type=False)
    args = [
        sk.prefix,
        ns.meta.bucket_ms,
        ns.settings.max_delay_ms,
        sk.events,
        origin,
        timers,
    ]
    return ScriptCall(ScriptName.SCHEDULE, keys, args)


def parse_schedule(
    reply: Sequence[Any], items: Sequence[ScheduleItem], origin: str
) -> list[Timer | TimerError]:
    """One result per timer of a ``schedule`` call: its Timer, or the error in its slot."""
    return [_schedule_result(r, item, origin) for r, item in zip(reply, items, strict=True)]


def _schedule_result(reply: Any, item: ScheduleItem, origin: str) -> Timer | TimerError:
    if isinstance(reply, Exception):  # an error reply in the slot (CONFLICT, TOOFAR)
        message = str(reply)
        return script_error(message) or StoreError(f"Redis answered with an error: {message}")
    if isinstance(reply, int):  # created by this call: its deadline
        return Timer(item.timer_id, item.shard, reply, "pending", True, origin)
    status = text(reply[0])
    if status == "pending":
        return Timer(item.timer_id, item.shard, int(reply[1]), "pending", False, text(reply[3]))
    rec = decode_result(reply[1])
    return Timer(item.timer_id, item.shard, int(rec["d"]), rec["o"], False, text(rec.get("s", b"")))


# -- decide: cancel, complete, reschedule, notify ---------------------------------------


def decide_call(ns: Namespace, script: ScriptName, timer_id: object) -> tuple[ScriptCall, str]:
    """``cancel`` or ``complete`` of one timer: (call, its validated id)."""
    tid = K.check_name("timer id", timer_id)
    sk = ns.shard(ns.shard_of(tid))
    keys = [sk.timers, sk.buckets, sk.outcomes]
    args = [sk.prefix, tid, ns.meta.bucket_ms, ns.settings.result_ttl_ms, sk.events]
    return ScriptCall(script, keys, args), tid


def parse_decide(ns: Namespace, reply: Sequence[Any], tid: str, done: str) -> bool:
    """True if this call decided the timer as ``done``; TimerNotFound if it is unknown."""
    status = text(reply[0])
    if status == "missing":
        raise ns.not_found(tid)
    return status == done


def reschedule_call(
    ns: Namespace, timer_id: object, delay_ms: object, deadline_ms: object
) -> Prepared:
    tid = K.check_name("timer id", timer_id)
    mode, value = _when(ns, delay_ms, deadline_ms)
    shard = ns.shard_of(tid)
    sk = ns.shard(shard)
    keys = [sk.timers, sk.buckets]
    args = [sk.prefix, tid, mode, value, ns.meta.bucket_ms, ns.settings.max_delay_ms,
            sk.events]  # fmt: skip
    return Prepared(ScriptCall(ScriptName.RESCHEDULE, keys, args), tid, shard, "")


def parse_reschedule(ns: Namespace, reply: Sequence[Any], p: Prepared) -> Timer | None:
    status = text(reply[0])
    if status == "missing":
        raise ns.not_found(p.timer_id)
    if status == "decided":
        return None
    return Timer(p.timer_id, p.shard, int(reply[1]), "pending", False)


def notify_call(ns: Namespace, key: object) -> ScriptCall:
    name = K.check_name("watch key", key)
    sk = ns.shard(ns.shard_of(name))
    args = [sk.prefix, name, ns.meta.bucket_ms, ns.settings.result_ttl_ms, sk.events,
            ns.keys.key_channel(name), ns.settings.notify_batch]  # fmt: skip
    return ScriptCall(ScriptName.NOTIFY, [sk.timers, sk.buckets, sk.outcomes], args)


def parse_notify(reply: Sequence[Any]) -> tuple[int, int]:
    """(timers completed by this call, watchers still to process)."""
    return int(reply[0]), int(reply[1])


def error_or(reply: Any) -> Any:
    """A pipelined reply, raising the TimerError an ``errors_in_slots`` pipeline put there."""
    if isinstance(reply, TimerError):
        raise reply
    return reply
