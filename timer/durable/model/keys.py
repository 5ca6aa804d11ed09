"""Every Redis key and channel name tickwheel uses: the key format, owned here alone.

A namespace ``ns`` has ``S`` shards. Each shard's keys share the hash tag ``{tw:<ns>:<s>}``
so a shard lives in one Redis Cluster slot and every script on it is atomic there. Scripts
get their keys in KEYS, except those that depend on server time or on what the script
finds: the durable bucket ``P:b:<n>``, the coarse bucket ``P:c:<m>`` and its mirror
``P:coarse``, the watch index ``P:w:<key>``, the results table ``P:rx`` with its hashes
``P:R:<b>``, the head ``P:h`` and its bound ``P:hs`` (a timer joins the head only when
it is due before the bound), and while ``migrate.lua`` converts a shard its state
``P:mig`` and copies ``P:mig:<kind>``. Those are built in ``lua/include/keys.lua`` by
``bucket_key``, ``coarse_key``, ``coarse_mirror``, ``watch_key``, ``rx_key``,
``head_key``, ``head_bound_key``, ``migrate_state_key`` and ``migrate_copy_key`` from
the shard prefix ``P`` — the same format as :class:`ShardKeys` here, which a contract
test pins.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from ...errors import InvalidInput, quoted
from .checks import too_long

NAMESPACE_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
NAMESPACES = "tw:namespaces"  # SET of every namespace `init` created (one key per server)
MAX_NAME_BYTES = 256


def check_namespace(namespace: object) -> str:
    if not isinstance(namespace, str) or not NAMESPACE_RE.match(namespace):
        raise InvalidInput(
            f"namespace must be 1-64 characters of letters, digits, '_', '.' or '-', "
            f"got {quoted(namespace)}"
        )
    return namespace


def check_name(kind: str, value: object) -> str:
    """An id or watch key: non-empty text of at most 256 UTF-8 bytes.

    Text with a lone surrogate (``"\\udc80"``, as ``os.fsdecode`` makes of a stray byte)
    has no UTF-8 form, so redis-py could not send it: it is refused here, before any I/O.
    """
    if not isinstance(value, str):
        raise InvalidInput(
            f"{kind} must be text (str), got {type(value).__name__}: {quoted(value, 80)}"
        )
    if not value:
        raise InvalidInput(f"{kind} must not be empty")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            f"{kind} {quoted(value)} is not valid Unicode text: a lone surrogate at position "
            f"{exc.start} has no UTF-8 form (decode bytes with errors='replace' first)"
        ) from None
    if size > MAX_NAME_BYTES:
        raise too_long(kind, size, MAX_NAME_BYTES, "bytes in UTF-8")
    return value


def route(name: str) -> str:
    """The part of ``name`` that decides its shard: its ``{hash tag}`` if it has one.

    As in Redis Cluster: the text between the first ``{`` and the first ``}`` after it,
    if that text is not empty; otherwise the whole name.
    """
    start = name.find("{")
    if start != -1:
        end = name.find("}", start + 1)
        if end > start + 1:
            return name[start + 1 : end]
    return name


def shard_of(name: str, shards: int) -> int:
    return zlib.crc32(route(name).encode("utf-8", "surrogatepass")) % shards


@dataclass(frozen=True)
class NamespaceKeys:
    namespace: str

    @property
    def tag(self) -> str:
        return f"{{tw:{self.namespace}}}"

    @property
    def meta(self) -> str:
        return f"{self.tag}:meta"

    @property
    def workers(self) -> str:
        return f"{self.tag}:workers"

    def card(self, worker: str) -> str:
        """What a worker says of itself (version, host, figures), for its page."""
        return f"{self.tag}:wc:{worker}"

    @property
    def paused(self) -> str:
        """The consumer groups paused by an operator: group -> ``<since ms> <by whom>``."""
        return f"{self.tag}:paused"

    def history(self, minute_ms: int) -> str:
        """One minute's rollup of the namespace's history (``history.py``), by the epoch
        ms its minute starts at (Redis time)."""
        return f"{self.tag}:h:{minute_ms}"

    def limit(self, group: str, name: str, value: str) -> str:
        """The slots of one value of a handler runner's limit (``slot_acquire.lua``). The
        group (any text) comes with its length in bytes and the name has no ``:``, so no
        two (group, name, value) share a key."""
        return f"{self.tag}:lim:{len(group.encode())}:{group}:{name}:{value}"

    def rate(self, group: str, name: str, value: str) -> str:
        """The theoretical arrival time of one value of a handler runner's rate
        (``rate_take.lua``), named as :meth:`limit` names slots."""
        return f"{self.tag}:rate:{len(group.encode())}:{group}:{name}:{value}"

    def key_channel(self, key: str) -> str:
        """Pub/sub channel carrying each notification of watch key ``key``."""
        return f"tw:{self.namespace}:key:{key}"

    @property
    def patterns(self) -> tuple[str, str]:
        """SCAN MATCH patterns that together match every key of the namespace and no
        other's: its own tag's keys and its shards' (a name holds no ``:``, ``*``, ``?``
        or ``[``, so neither pattern reaches into another namespace)."""
        return f"{self.tag}*", f"{{tw:{self.namespace}:*"

    def shard(self, shard: int) -> ShardKeys:
        return ShardKeys(self.namespace, shard)

    def shard_of_channel(self, channel: str) -> int | None:
        """The shard whose events channel is ``channel``; None for any other channel."""
        head = f"tw:{self.namespace}:"
        if not (channel.startswith(head) and channel.endswith(":ev")):
            return None
        middle = channel[len(head) : -len(":ev")]
        return int(middle) if middle.isdigit() else None


@dataclass(frozen=True)
class ShardKeys:
    namespace: str
    shard: int

    @property
    def prefix(self) -> str:
        """``{tw:<ns>:<s>}``: the hash-tagged prefix of every key of the shard."""
        return f"{{tw:{self.namespace}:{self.shard}}}"

    @property
    def timers(self) -> str:
        return f"{self.prefix}:t"

    @property
    def buckets(self) -> str:
        return f"{self.prefix}:buckets"

    @property
    def outcomes(self) -> str:
        return f"{self.prefix}:out"

    @property
    def lease(self) -> str:
        return f"{self.prefix}:lease"

    @property
    def epoch(self) -> str:
        return f"{self.prefix}:epoch"

    @property
    def handed(self) -> str:
        """The epoch whose leader gave the lease back (a handover, not a takeover)."""
        return f"{self.prefix}:handed"

    @property
    def events(self) -> str:
        """Pub/sub channel of scheduled / cancelled / decided events for the leader."""
        return f"tw:{self.namespace}:{self.shard}:ev"

    @property
    def dead(self) -> str:
        """STREAM of the shard's dead letters: outcomes whose handler failed every attempt."""
        return f"{self.prefix}:dead"

    def retries(self, group: str) -> str:
        """ZSET of a consumer group's entries waiting to be retried: entry id -> when (ms)."""
        return f"{self.prefix}:retry:{group}"

    def errors(self, group: str) -> str:
        """HASH of a consumer group's entries that failed and wait to be retried: entry id
        -> their failed attempts' errors (retry.lua), for the dead letter they may become."""
        return f"{self.prefix}:err:{group}"

    @property
    def head(self) -> str:
        """ZSET of the shard's soonest pending timers, id -> deadline (lua/include/head.lua):
        every pending timer due before :attr:`head_bound` is in it; stale entries too."""
        return f"{self.prefix}:h"

    @property
    def head_bound(self) -> str:
        """STRING: the head's bound, ms (``inf``: none); absent until a page fills the head."""
        return f"{self.prefix}:hs"

    def bucket(self, n: int) -> str:
        """LIST of the timers due in [n, n + 1) * bucket_ms; it may hold stale ids (see
        the lazy buckets in lua/include/buckets.lua)."""
        return f"{self.prefix}:b:{n}"

    @property
    def coarse_buckets(self) -> str:
        """ZSET mirror of the coarse buckets: m -> m * COARSE_MS."""
        return f"{self.prefix}:coarse"

    def coarse(self, m: int) -> str:
        """LIST of the far timers due in [m, m + 1) * COARSE_MS, lazy as ``bucket``."""
        return f"{self.prefix}:c:{m}"

    def watch(self, key: str) -> str:
        return f"{self.prefix}:w:{key}"

    @property
    def results_table(self) -> str:
        """HASH state of the results table: ``L``, ``S``, ``N``, ``C``."""
        return f"{self.prefix}:rx"

    def task_result(self, task_id: str) -> str:
        """STRING: a Django task's result (``timer.django``): its status, times, attempts
        and return value or errors, msgpack; it expires with the timer's outcome."""
        return f"{self.prefix}:task:{task_id}"

    def celery_claim(self, task_id: str) -> str:
        """STRING: a Celery task's start and end (``timer.celery``): ``r`` while a
        copy runs (its lease: the key's PX), ``d`` once it ended, ``y`` if it handed
        itself back to Celery's own retry; the sender reads it to know a task it sent
        started, and a second copy of the task finds it and is dropped."""
        return f"{self.prefix}:celery:{task_id}"

    def results_part(self, b: int) -> str:
        """HASH ``b`` of the results table: id -> 4 bytes of expiry + the outcome."""
        return f"{self.prefix}:R:{b}"

    @property
    def schedules(self) -> str:
        """HASH of the shard's recurring schedules: name -> record (lua/include/schedules.lua)."""
        return f"{self.prefix}:S"

    @property
    def schedule_queue(self) -> str:
        """SET of schedules whose next occurrence the leader must plan and arm."""
        return f"{self.prefix}:Sq"

    @property
    def guard(self) -> str:
        """Never written: every script reads it first, so on a cluster slot being migrated
        it is missing and stops the script before any write (``lua/prelude/guard.lua``)."""
        return f"{self.prefix}:guard"

    @property
    def migration(self) -> str:
        """HASH: where ``migrate.lua`` is in converting the shard (gone once converted)."""
        return f"{self.prefix}:mig"

    def migration_copy(self, kind: str) -> str:
        """A copy ``migrate.lua`` builds (``b`` a bucket, ``s`` a stream) and renames."""
        return f"{self.prefix}:mig:{kind}"


def results_parts(level: str | bytes | int | None, split: str | bytes | int | None) -> int:
    """How many hashes a results table has at ``level``/``split`` (``P:rx``'s L and S as
    read, absent as 0): 2^L, and the S split past it."""
    return (1 << int(level or 0)) + int(split or 0)


def results_part_of(timer_id: str, level: int, split: int) -> int:
    """Which hash of a results table at ``level``/``split`` holds ``timer_id``: linear
    hashing on ``rx_hash`` (31 * h + byte mod 2^32), as ``rx_part`` in
    ``lua/include/results.lua``."""
    h = 0
    for byte in timer_id.encode("utf-8", "surrogatepass"):
        h = (h * 31 + byte) % 4294967296
    b = h % (1 << level)
    return h % (2 << level) if b < split else b
