"""The scripts of a shard's leader and its upkeep: leases, fire, sweep, trim, the results
table's start and the format migration. One pure builder and one pure parser each, as
in :mod:`timer.durable.timers.calls` (no I/O)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ..model.codec import text
from ..model.keys import ShardKeys
from ..model.leader import FireResult, LeaseGrant, LeaseRenewal, SweepResult, Traced
from ..model.models import Trimmed
from ..model.scripts import ScriptName
from ..model.steps import ScriptCall


def lease_acquire_call(sk: ShardKeys, worker: str, ttl_ms: int) -> ScriptCall:
    return ScriptCall(ScriptName.LEASE_ACQUIRE, [sk.lease, sk.epoch, sk.handed], [worker, ttl_ms])


def parse_lease_acquire(reply: Sequence[Any]) -> LeaseGrant:
    if int(reply[0]) == 1:
        return LeaseGrant(True, int(reply[1]), None, 0, int(reply[2]), int(reply[3]) == 1)
    return LeaseGrant(False, 0, text(reply[1]), int(reply[2]), int(reply[3]))


def lease_renew_call(sk: ShardKeys, worker: str, epoch: int, ttl_ms: int) -> ScriptCall:
    return ScriptCall(ScriptName.LEASE_RENEW, [sk.lease, sk.epoch], [worker, epoch, ttl_ms])


def parse_lease_renew(reply: Sequence[Any]) -> LeaseRenewal:
    return LeaseRenewal(int(reply[0]) == 1, int(reply[1]))


def lease_release_call(sk: ShardKeys, worker: str, epoch: int) -> ScriptCall:
    return ScriptCall(ScriptName.LEASE_RELEASE, [sk.lease, sk.epoch, sk.handed], [worker, epoch])


def parse_lease_release(reply: Any) -> bool:
    return int(reply) == 1


class Hand(NamedTuple):
    """What a fire call reads for the caller's own consumer: at most ``most`` new
    entries, for ``consumer`` of ``group`` (a worker that runs handlers itself)."""

    most: int
    group: str
    consumer: str


def fire_call(
    sk: ShardKeys,
    worker: str,
    epoch: int,
    ids: Sequence[str],
    *,
    bucket_ms: int,
    ttl_ms: int,
    ahead: int = 0,
    plans: bytes | str = "",
    hand: Hand | None = None,
) -> ScriptCall:
    """Expire ``ids`` (oldest deadline first) if due by Redis time; fenced by the lease.
    ``ahead``: timers of the shard the caller expects to decide soon (see ``fire.lua``);
    ``plans``: the next occurrence of each id a schedule armed (``schedules.pack_fire_plans``);
    ``hand``: new entries to read for the caller's own consumer in the same step."""
    keys = [sk.timers, sk.buckets, sk.outcomes, sk.lease, sk.epoch, sk.schedules, sk.schedule_queue]
    most, group, consumer = (0, "", "") if hand is None else hand
    args = [sk.prefix, worker, epoch, bucket_ms, ttl_ms, max(0, ahead), plans]
    args += [max(0, most), group, consumer, *ids]
    return ScriptCall(ScriptName.FIRE, keys, args)


def parse_fire(reply: Sequence[Any]) -> FireResult:
    fired, early, armed, queued, traced, now, handed = reply
    return FireResult(
        [text(x) for x in fired],
        {text(early[i]): int(early[i + 1]) for i in range(0, len(early), 2)},
        {text(armed[i]): int(armed[i + 1]) for i in range(0, len(armed), 2)},
        int(queued),
        _traced(traced),
        int(now),
        [(text(e[0]), _fields(e[1])) for e in handed],
    )


def _fields(flat: Sequence[Any]) -> dict[bytes, bytes]:
    """A stream entry's fields as a script returns them (a flat list) as XREADGROUP's."""
    return {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}


def _traced(flat: Sequence[Any]) -> list[Traced]:
    return [
        Traced(text(flat[i]), text(flat[i + 1]), int(flat[i + 2])) for i in range(0, len(flat), 3)
    ]


def sweep_call(
    sk: ShardKeys,
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
    keys = [sk.timers, sk.buckets, sk.outcomes, sk.lease, sk.epoch, sk.schedules, sk.schedule_queue]
    args = [sk.prefix, worker, epoch, bucket_ms, ttl_ms, max(0, ahead), limit]
    return ScriptCall(ScriptName.SWEEP, keys, args)


def parse_sweep(reply: Sequence[Any]) -> SweepResult:
    fired, more, moved, queued, held, traced = reply
    pairs = [(text(fired[i]), int(fired[i + 1])) for i in range(0, len(fired), 2)]
    later = {text(held[i]): int(held[i + 1]) for i in range(0, len(held), 2)}
    return SweepResult(pairs, bool(int(more)), int(moved), int(queued), later, _traced(traced))


TRIM_RESULT_HASHES = 1024  # ~30-50 ms of Redis time at most (design notes)


def trim_call(
    sk: ShardKeys,
    retention_ms: int | None,
    *,
    keep_unread: bool,
    passes: int | None = None,
    owed: int | None = None,
    per_call: int = TRIM_RESULT_HASHES,
) -> ScriptCall:
    """Trim a shard's stream (``retention_ms`` None: leave it) and its expired results:
    a round's share of the results table's hashes, at least a ``passes``-th of them, at
    most ``per_call`` this call; ``owed``: what an earlier call of the round left."""
    keep = "" if retention_ms is None else retention_ms
    args = [keep, int(keep_unread), sk.prefix, per_call, passes or "", "" if owed is None else owed]
    return ScriptCall(ScriptName.TRIM, [sk.outcomes], args)


def trim_results_call(sk: ShardKeys, left: int, per_call: int = TRIM_RESULT_HASHES) -> ScriptCall:
    """The next call of a results-table round that has ``left`` hashes to visit (the
    stream left as it is)."""
    return trim_call(sk, None, keep_unread=True, owed=left, per_call=per_call)


def parse_trim(reply: Sequence[Any], shard: int) -> Trimmed:
    """What one trim call did, and the results-table hashes its round has left."""
    return Trimmed(
        shard=shard,
        removed=int(reply[0]),
        held_by_group=bool(reply[2]),
        results_dropped=int(reply[3]),
        results_left=int(reply[4]),
    )


def results_init_call(sk: ShardKeys) -> ScriptCall:
    """Start the shard's results table unless it has one (see ``results_init.lua``)."""
    return ScriptCall(ScriptName.RESULTS_INIT, [sk.results_table], [], wait=False)


def migrate_call(sk: ShardKeys, budget: int, result_ttl_ms: int) -> ScriptCall:
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
