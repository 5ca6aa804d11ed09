"""Build a call, read its reply: one pure builder and one pure parser per Lua script.

No I/O here (BullMQ's ``scripts.ts`` is the model). A builder turns typed, validated
arguments into a :class:`ScriptCall` (script, KEYS, ARGV), so nobody else knows the
argument order of a script; a parser turns the script's reply into a typed result or a
:class:`~timer.errors.TimerError`. The sync client, the asyncio client, the worker and
the tests all go through these; only the I/O around them differs.

The steps an operation asks its I/O layer to take are also defined here:
:class:`ScriptCall`, :class:`Command` (one plain redis-py command), :class:`Pipeline`,
:class:`Sleep` and :class:`Emit` (see ``ops``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import msgpack

from ..errors import (
    ConfigError,
    CorruptRecord,
    InvalidInput,
    StoreError,
    TimerError,
    TimerNotFound,
)
from . import keys as K
from .checks import check_int as check_int  # noqa: PLC0414 - ops use C.check_int
from .codec import (
    FORMAT_VERSION,
    decode_payload,
    decode_pending,
    decode_result,
    encode_payload,
)
from .models import (
    UNDECODABLE,
    ClientSettings,
    DeadLetter,
    Event,
    FireResult,
    LeaseGrant,
    LeaseRenewal,
    Meta,
    Outcome,
    SweepResult,
    Timer,
    TimerInfo,
    Trimmed,
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

    def not_found(self, timer_id: str, detail: str = "") -> TimerNotFound:
        return TimerNotFound(f"no timer {timer_id!r} in namespace {self.name!r}{detail}")


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
) -> ScheduleItem:
    """Validate one timer for ``schedule_call``; InvalidInput, nothing sent.

    ``rearm``: an id that ended (its outcome retained) is scheduled again instead of
    answering with that outcome.
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
    # need, rearm and watch are left out at their defaults (1, 0, none): less to decode
    if keys:
        return ScheduleItem(tid, shard, (tid, mode, value, data, need, int(rearm), keys))
    if rearm:
        return ScheduleItem(tid, shard, (tid, mode, value, data, 1, 1))
    return ScheduleItem(tid, shard, (tid, mode, value, data))


SCHEDULE_FIELDS = frozenset({"id", "delay_ms", "deadline_ms", "payload", "watch", "need", "rearm"})


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


# -- the leader's scripts: leases, fire, sweep, trim --------------------------------------


def lease_acquire_call(sk: K.ShardKeys, worker: str, ttl_ms: int) -> ScriptCall:
    return ScriptCall(ScriptName.LEASE_ACQUIRE, [sk.lease, sk.epoch], [worker, ttl_ms])


def parse_lease_acquire(reply: Sequence[Any]) -> LeaseGrant:
    if int(reply[0]) == 1:
        return LeaseGrant(True, int(reply[1]), None, 0, int(reply[2]))
    return LeaseGrant(False, 0, text(reply[1]), int(reply[2]), int(reply[3]))


def lease_renew_call(sk: K.ShardKeys, worker: str, epoch: int, ttl_ms: int) -> ScriptCall:
    return ScriptCall(ScriptName.LEASE_RENEW, [sk.lease, sk.epoch], [worker, epoch, ttl_ms])


def parse_lease_renew(reply: Sequence[Any]) -> LeaseRenewal:
    return LeaseRenewal(int(reply[0]) == 1, int(reply[1]))


def lease_release_call(sk: K.ShardKeys, worker: str, epoch: int) -> ScriptCall:
    return ScriptCall(ScriptName.LEASE_RELEASE, [sk.lease, sk.epoch], [worker, epoch])


def parse_lease_release(reply: Any) -> bool:
    return int(reply) == 1


def fire_call(
    sk: K.ShardKeys,
    worker: str,
    epoch: int,
    ids: Sequence[str],
    *,
    bucket_ms: int,
    ttl_ms: int,
    ahead: int = 0,
) -> ScriptCall:
    """Expire ``ids`` (oldest deadline first) if due by Redis time; fenced by the lease.
    ``ahead``: timers of the shard the caller expects to decide soon (see ``fire.lua``)."""
    keys = [sk.timers, sk.buckets, sk.outcomes, sk.lease, sk.epoch]
    args = [sk.prefix, worker, epoch, bucket_ms, ttl_ms, max(0, ahead), *ids]
    return ScriptCall(ScriptName.FIRE, keys, args)


def parse_fire(reply: Sequence[Any]) -> FireResult:
    fired, early = reply
    return FireResult(
        [text(x) for x in fired],
        {text(early[i]): int(early[i + 1]) for i in range(0, len(early), 2)},
    )


def sweep_call(
    sk: K.ShardKeys,
    worker: str,
    epoch: int,
    *,
    bucket_ms: int,
    ttl_ms: int,
    limit: int,
    ahead: int = 0,
) -> ScriptCall:
    """Expire what is left in ended buckets, at most ``limit`` timers; fenced.
    ``ahead``: as for ``fire_call``."""
    keys = [sk.timers, sk.buckets, sk.outcomes, sk.lease, sk.epoch]
    args = [sk.prefix, worker, epoch, bucket_ms, ttl_ms, max(0, ahead), limit]
    return ScriptCall(ScriptName.SWEEP, keys, args)


def parse_sweep(reply: Sequence[Any]) -> SweepResult:
    fired, more, moved = reply
    pairs = [(text(fired[i]), int(fired[i + 1])) for i in range(0, len(fired), 2)]
    return SweepResult(pairs, bool(int(more)), int(moved))


# The most results-table hashes one trim call visits (about 32 outcomes each).
TRIM_RESULT_HASHES = 1024  # ~30-50 ms of Redis time at most (design notes)


def trim_call(sk: K.ShardKeys, retention_ms: int | None, *, keep_unread: bool) -> ScriptCall:
    """Trim a shard's stream (``retention_ms`` None: leave it) and its expired results."""
    keep = "" if retention_ms is None else retention_ms
    args = [keep, int(keep_unread), sk.prefix, TRIM_RESULT_HASHES]
    return ScriptCall(ScriptName.TRIM, [sk.outcomes], args)


def parse_trim(reply: Sequence[Any], shard: int) -> Trimmed:
    return Trimmed(
        shard=shard, removed=int(reply[0]), held_by_group=bool(reply[2]),
        results_dropped=int(reply[3]),
    )  # fmt: skip


def get_call(sk: K.ShardKeys, tid: str) -> ScriptCall:
    """A timer's pending record and, if none, its retained outcome, in one call."""
    return ScriptCall(ScriptName.GET, [sk.timers], [sk.prefix, tid], wait=False)


def results_init_call(sk: K.ShardKeys) -> ScriptCall:
    """Start the shard's results table unless it has one (see ``results_init.lua``)."""
    return ScriptCall(ScriptName.RESULTS_INIT, [sk.results_table], [], wait=False)


def migrate_call(sk: K.ShardKeys, budget: int, result_ttl_ms: int) -> ScriptCall:
    """One bounded step of converting a shard an earlier release made (``migrate.lua``)."""
    keys = [sk.timers, sk.buckets, sk.outcomes, sk.dead, sk.results_table, sk.migration]
    args = [sk.prefix, budget, result_ttl_ms]
    return ScriptCall(ScriptName.MIGRATE, keys, args)


class MigrateStep(NamedTuple):
    """One ``migrate.lua`` call: whether the shard is converted, the step it worked on
    (records, fine, coarse, strings, out, dead), and what it converted or visited."""

    done: bool
    step: str
    converted: int


def parse_migrate(reply: Sequence[Any]) -> MigrateStep:
    return MigrateStep(bool(int(reply[0])), text(reply[1]), int(reply[2]))


# -- reading records, outcomes and events -------------------------------------------------


@contextlib.contextmanager
def decoding(what: str, hint: str = "") -> Iterator[None]:
    """Any failure to decode inside the block as the CorruptRecord that names ``what``."""
    try:
        yield
    except Exception as exc:
        raise CorruptRecord(
            f"{what} cannot be decoded ({type(exc).__name__}: {exc}){hint}"
        ) from None


def timer_info(tid: str, shard: int, pending: Any, decided: Any) -> TimerInfo | None:
    """TimerInfo from the pending record or the retained outcome (either may be None);
    CorruptRecord if the one stored cannot be decoded."""
    with decoding(f"the record of timer {tid!r} (shard {shard})", "; cancel it"):
        return _timer_info(tid, shard, pending, decided)


def _timer_info(tid: str, shard: int, pending: Any, decided: Any) -> TimerInfo | None:
    if pending is not None:
        rec = decode_pending(pending)
        return TimerInfo(
            tid, shard, "pending", int(rec["d"]), decode_payload(rec["p"]),
            created_ms=int(rec["c"]), watch=tuple(rec["w"]), need=int(rec["n"]),
            got=tuple(rec["g"]),
        )  # fmt: skip
    if decided is not None:
        rec = decode_result(decided)
        return TimerInfo(
            tid, shard, rec["o"], int(rec["d"]), decode_payload(rec["p"]),
            created_ms=int(rec["c"]), decided_ms=int(rec["t"]), got=tuple(rec.get("g", ())),
        )  # fmt: skip
    return None


def outcome_from_entry(
    shard: int, entry_id: bytes | str, fields: Mapping[bytes, bytes], attempt: int = 1
) -> Outcome:
    """An Outcome from one entry of a shard's outcome stream (or of a dead letter): its
    id and outcome record (``i``, ``r``). CorruptRecord if the entry cannot be decoded."""
    with decoding(f"outcome entry {text(entry_id)} of shard {shard}"):
        return _outcome_from_entry(shard, entry_id, fields, attempt)


def undecodable(
    shard: int, entry_id: bytes | str, fields: Mapping[bytes, bytes], error: CorruptRecord
) -> Outcome:
    """An entry no reader can decode, as the Outcome a reader without a group shows."""
    tid = fields.get(b"i") or b"?"
    eid = text(entry_id)
    decided = eid.split("-", 1)[0]
    return Outcome(
        id=text(tid)[: K.MAX_NAME_BYTES], outcome=UNDECODABLE, deadline_ms=0,
        decided_ms=int(decided) if decided.isdigit() else 0, payload=None, shard=shard,
        entry_id=eid, error=str(error),
    )  # fmt: skip


def outcome_or_undecodable(
    shard: int, entry_id: bytes | str, fields: Mapping[bytes, bytes]
) -> Outcome:
    """``outcome_from_entry``, or ``undecodable`` for an entry it cannot read."""
    try:
        return outcome_from_entry(shard, entry_id, fields)
    except CorruptRecord as exc:
        return undecodable(shard, entry_id, fields, exc)


def _outcome_from_entry(
    shard: int, entry_id: bytes | str, fields: Mapping[bytes, bytes], attempt: int
) -> Outcome:
    origin = fields.get(b"from")
    rec = decode_result(fields[b"r"])
    return Outcome(
        id=text(fields[b"i"]),
        outcome=rec["o"],
        deadline_ms=int(rec["d"]),
        decided_ms=int(rec["t"]),
        payload=decode_payload(rec["p"]),
        shard=shard,
        entry_id=text(entry_id),
        attempt=attempt,
        redelivery_of=None if origin is None else text(origin),
    )


def for_group(fields: Mapping[bytes, bytes], group: str) -> bool:
    """False for a dead letter put back for another group (``redeliver``): this group
    acknowledges it unseen."""
    only = fields.get(b"only")
    return only is None or text(only) == group


def flat_fields(flat: Sequence[Any]) -> dict[bytes, bytes]:
    """A stream entry's fields as a script returns them (a flat array) as a mapping."""
    return {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}


# -- consumer groups: claim, retry, dead-letter, touch, redeliver --------------------------


def claim_call(
    sk: K.ShardKeys,
    group: str,
    consumer: str,
    *,
    count: int,
    min_idle_ms: int,
    owner: str = "",
    cursor: str = "-",
    retries: bool = True,
) -> ScriptCall:
    return ScriptCall(
        ScriptName.CLAIM,
        [sk.outcomes, sk.retries(group)],
        [group, consumer, count, min_idle_ms, owner, cursor, int(retries)],
    )


def parse_claim(reply: Sequence[Any]) -> tuple[str, list[tuple[str, dict[bytes, bytes], int]]]:
    """(the cursor of the next scan, '' when done; [(entry id, fields, deliveries)])."""
    taken = [(text(e[0]), flat_fields(e[1]), int(e[2])) for e in reply[1:]]
    return text(reply[0]), taken


def retry_call(sk: K.ShardKeys, group: str, entry_id: str, delay_ms: int) -> ScriptCall:
    return ScriptCall(
        ScriptName.RETRY, [sk.outcomes, sk.retries(group)], [group, entry_id, delay_ms]
    )


def parse_retry(reply: Any) -> int | None:
    """The retry time (ms), or None when the entry was no longer pending."""
    return int(reply) or None


MAX_ERROR_CHARS = 4000


def dead_call(
    sk: K.ShardKeys, group: str, entry_id: str, consumer: str, *, attempts: int, error: str
) -> ScriptCall:
    if len(error) > MAX_ERROR_CHARS:
        error = error[: MAX_ERROR_CHARS - 1] + "…"
    return ScriptCall(
        ScriptName.DEAD,
        [sk.outcomes, sk.retries(group), sk.dead],
        [group, entry_id, consumer, attempts, error],
    )


def parse_dead(reply: Any) -> str | None:
    """The dead letter's id, or None when the entry was no longer pending."""
    return text(reply) or None


def touch_call(sk: K.ShardKeys, group: str, consumer: str, entry_ids: Sequence[str]) -> ScriptCall:
    return ScriptCall(ScriptName.TOUCH, [sk.outcomes], [group, consumer, *entry_ids])


def parse_touch(reply: Sequence[Any]) -> list[str]:
    """The ids no longer pending for the consumer."""
    return [text(x) for x in reply]


def redeliver_call(sk: K.ShardKeys, dead_id: str) -> ScriptCall:
    return ScriptCall(ScriptName.REDELIVER, [sk.dead, sk.outcomes], [dead_id])


def parse_redeliver(reply: Any) -> str | None:
    return text(reply) or None


def leave_group_call(sk: K.ShardKeys, group: str, consumer: str) -> ScriptCall:
    return ScriptCall(ScriptName.LEAVE_GROUP, [sk.outcomes], [group, consumer])


def dead_letter_from_entry(shard: int, entry_id: Any, fields: Mapping[bytes, bytes]) -> DeadLetter:
    """A DeadLetter from one entry of a shard's dead-letter stream (``lua/dead.lua``)."""
    eid = text(entry_id)
    return DeadLetter(
        ref=f"{shard}/{eid}",
        shard=shard,
        group=text(fields[b"group"]),
        entry_id=text(fields[b"entry"]),
        consumer=text(fields[b"consumer"]),
        attempts=int(fields[b"attempts"]),
        error=text(fields[b"error"]),
        failed_ms=int(fields[b"failed"]),
        outcome=_dead_outcome(shard, fields),
    )


def _dead_outcome(shard: int, fields: Mapping[bytes, bytes]) -> Outcome | None:
    """The outcome a dead letter carries; None if it had been trimmed before it died, or
    if it is an entry no reader could decode (its ``error`` says so)."""
    if b"i" not in fields:
        return None
    try:
        return outcome_from_entry(shard, fields[b"entry"], fields, int(fields[b"attempts"]))
    except CorruptRecord:
        return None


def parse_ref(ref: object, shards: int) -> tuple[int, str]:
    """(shard, dead letter id) from a ref ``<shard>/<id>``; InvalidInput otherwise."""
    if isinstance(ref, str):
        shard, _, eid = ref.partition("/")
        ms, _, seq = eid.partition("-")
        if shard.isdigit() and int(shard) < shards and ms.isdigit() and seq.isdigit():
            return int(shard), eid
    raise InvalidInput(
        f"dead letter ref must be <shard>/<id> as `tickwheel dead list` shows it "
        f"(e.g. 3/1700000000000-0), got {ref!r}"
    )


_EVENTS = {"S": "scheduled", "R": "rescheduled"}


def parse_events(data: str) -> list[Event]:
    """The events of one shard message as the scripts publish it (``lua/include/records.lua`` and
    ``lua/schedule.lua`` name the forms): one event, or ``M`` with a schedule call's batch.

    ``data`` is the message decoded as UTF-8 with surrogatepass (how the listener reads
    it); a batch names each id's length in bytes, so it is parsed as bytes.
    """
    if not data.startswith("M "):
        return [parse_event(data)]
    raw = data.encode("utf-8", "surrogatepass")
    events: list[Event] = []
    pos = 1  # at the space before each entry: " <deadline> <id bytes> <id>"
    try:
        while pos < len(raw):
            if raw[pos] != 0x20:
                raise ValueError("expected a space")
            cut = raw.index(b" ", pos + 1)
            deadline = int(raw[pos + 1 : cut])
            end = raw.index(b" ", cut + 1)
            size = int(raw[cut + 1 : end])
            tid = raw[end + 1 : end + 1 + size]
            if len(tid) != size:
                raise ValueError("an id shorter than its length")
            events.append(
                Event("scheduled", tid.decode("utf-8", "surrogatepass"), deadline_ms=deadline)
            )
            pos = end + 1 + size
    except ValueError as exc:
        raise ValueError(f"not a tickwheel event batch ({exc}): {data[:200]!r}") from None
    return events


def parse_event(data: str) -> Event:
    """A single shard event (``S``, ``R`` or ``X``); ``parse_events`` reads batches too."""
    kind, head, tid = data.split(" ", 2)
    if kind == "X":
        return Event("decided", tid, outcome=head)
    if kind in _EVENTS:
        return Event(_EVENTS[kind], tid, deadline_ms=int(head))
    raise ValueError(f"not a tickwheel event: {data!r}")


def error_or(reply: Any) -> Any:
    """A pipelined reply, raising the TimerError an ``errors_in_slots`` pipeline put there."""
    if isinstance(reply, TimerError):
        raise reply
    return reply
