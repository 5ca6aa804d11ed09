"""ShardStore: one shard's durable side as its leader uses it (the worker's view)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..durable.model import steps
from ..durable.model.checks import check_int
from ..durable.model.codec import text
from ..durable.model.keys import NamespaceKeys, ShardKeys
from ..durable.model.models import (
    DueTimers,
    FireResult,
    LeaseGrant,
    LeaseRenewal,
    SweepResult,
    Trimmed,
)
from ..durable.model.steps import Run
from ..durable.schedules.records import (
    Plan,
    ScheduleInfo,
    arm_call,
    decode_schedule,
    pack_fire_plans,
    parse_armed,
)
from ..durable.shards import calls as shard_scripts
from ..durable.shards import ops as shard_ops
from ..errors import CorruptRecord, TimerError
from .transport import CountingPubSub


class ShardStore:
    """One shard's durable side as its leader sees it: lease, load, fire, sweep.

    Every call is one fenced script or a bounded read; ``fire`` and ``sweep`` raise
    :class:`~timer.errors.Fenced` when the caller no longer holds the lease at ``epoch``.
    """

    def __init__(self, run: Run, keys: ShardKeys, bucket_ms: int) -> None:
        self._run = run  # the client's driver: runs an operation to its result
        self.shard = keys.shard
        self.keys = keys
        self.bucket_ms = bucket_ms

    @property
    def events_channel(self) -> str:
        return self.keys.events

    def acquire(self, worker: str, ttl_ms: int) -> LeaseGrant:
        reply = self._run(_one(shard_scripts.lease_acquire_call(self.keys, worker, ttl_ms)))
        return shard_scripts.parse_lease_acquire(reply)

    def renew(self, worker: str, epoch: int, ttl_ms: int) -> LeaseRenewal:
        reply = self._run(_one(shard_scripts.lease_renew_call(self.keys, worker, epoch, ttl_ms)))
        return shard_scripts.parse_lease_renew(reply)

    def release(self, worker: str, epoch: int) -> bool:
        reply = self._run(_one(shard_scripts.lease_release_call(self.keys, worker, epoch)))
        return shard_scripts.parse_lease_release(reply)

    def backlog(self) -> tuple[int, int | None]:
        """(timers pending in the shard, start of its oldest durable bucket or None)."""
        return self._run(shard_ops.backlog(self.keys))

    def read_due(self, until_ms: int, skip: set[int], *, max_ids: int) -> DueTimers:
        op = shard_ops.read_due(
            self.keys, until_ms, skip, max_ids=max_ids, bucket_ms=self.bucket_ms
        )
        return self._run(op)

    def fire(
        self,
        worker: str,
        epoch: int,
        ids: Sequence[str],
        *,
        ttl_ms: int,
        ahead: int = 0,
        plans: Mapping[str, tuple[int, Plan]] | None = None,
    ) -> FireResult:
        """Expire ``ids`` if due (fenced); ``ahead``: more of the shard's timers the
        caller expects to decide soon, for which the results table grows while cheap;
        ``plans``: the next occurrence of each id a schedule armed (id -> (version,
        plan)), armed in the same call."""
        call = self.fire_call(worker, epoch, ids, ttl_ms=ttl_ms, ahead=ahead, plans=plans)
        return shard_scripts.parse_fire(self._run(_one(call)))

    def fire_call(
        self,
        worker: str,
        epoch: int,
        ids: Sequence[str],
        *,
        ttl_ms: int,
        ahead: int = 0,
        plans: Mapping[str, tuple[int, Plan]] | None = None,
        hand: shard_scripts.Hand | None = None,
    ) -> steps.ScriptCall:
        """``fire``'s call, to send with other shards' in one ``Shards.fire_together``;
        ``hand``: new entries read for the caller's own consumer in the same step."""
        return shard_scripts.fire_call(
            self.keys,
            worker,
            epoch,
            ids,
            bucket_ms=self.bucket_ms,
            ttl_ms=ttl_ms,
            ahead=ahead,
            plans=pack_fire_plans(plans or {}),
            hand=hand,
        )

    def trim_results(self, left: int) -> Trimmed:
        """The next call of a results-table round of ``trim_outcomes(until_done=False)``
        that has ``left`` hashes to visit: what it dropped and what is still left."""
        call = shard_scripts.trim_results_call(self.keys, check_int("left", left, 1, 2**31 - 1))
        return shard_scripts.parse_trim(self._run(_one(call)), self.keys.shard)

    def sweep(
        self, worker: str, epoch: int, *, ttl_ms: int, limit: int, ahead: int = 0
    ) -> SweepResult:
        call = shard_scripts.sweep_call(
            self.keys,
            worker,
            epoch,
            bucket_ms=self.bucket_ms,
            ttl_ms=ttl_ms,
            limit=limit,
            ahead=ahead,
        )
        return shard_scripts.parse_sweep(self._run(_one(call)))

    # -- recurring schedules -----------------------------------------------------------

    def schedules(self, names: Iterable[str]) -> dict[str, ScheduleInfo]:
        """The records of these schedules (those that exist and can be read)."""
        wanted = sorted(names)
        if not wanted:
            return {}
        raws = self._run(_schedules(self.keys, wanted))
        out: dict[str, ScheduleInfo] = {}
        for name, raw in zip(wanted, raws, strict=True):
            if raw is not None:
                with contextlib.suppress(CorruptRecord):  # planned by no one: stays armed
                    out[name] = decode_schedule(name, raw, self.shard, None)
        return out

    def replan_queue(self, count: int) -> list[str]:
        """Up to ``count`` schedules waiting for their leader to plan their next occurrence."""
        return [text(n) for n in self._run(_queue(self.keys, count)) or []]

    def arm(
        self, worker: str, epoch: int, plans: Sequence[tuple[str, int, Plan]]
    ) -> dict[str, int]:
        """Arm the planned next occurrences (name, version, plan) of queued schedules
        (fenced); the occurrences armed: id -> deadline."""
        call = arm_call(self.keys, worker, epoch, self.bucket_ms, plans)
        return parse_armed(self._run(_one(call))[0])


class Membership:
    """A worker's side of its namespace (``client.membership``): announcing itself,
    leaving, and following the shards' events."""

    def __init__(self, run: Run, keys: NamespaceKeys, pubsub: Callable[[], CountingPubSub]) -> None:
        self._run = run
        self.keys = keys
        self._pubsub = pubsub

    def heartbeat(self, worker_id: str, *, now_ms: int, live_window_ms: int) -> int:
        """Announce a worker at ``now_ms`` (Redis time); how many workers are live."""
        return self._run(shard_ops.heartbeat(self.keys, worker_id, now_ms, live_window_ms))

    def describe(self, worker_id: str, card: Mapping[str, Any]) -> None:
        """Put up what a worker says of itself (its version, host and figures), for its
        page in the dashboard (``TimerClient.worker_cards``)."""
        self._run(shard_ops.put_card(self.keys, worker_id, card))

    def leave(self, worker_id: str) -> None:
        """Take a stopping worker out of the live set at once."""
        self._run(shard_ops.leave(self.keys, worker_id))

    def events_pubsub(self) -> CountingPubSub:
        """A new pub/sub connection for following shard events (one listener thread);
        on a cluster, on a primary that answers (see ``SyncDriver.pubsub``)."""
        return self._pubsub()

    def shard_of_channel(self, channel: str) -> int | None:
        """The shard whose events channel is ``channel`` (None for any other)."""
        return self.keys.shard_of_channel(channel)


def _schedules(keys: ShardKeys, names: Sequence[str]) -> steps.Op[list[Any]]:
    return list((yield steps.Command("hmget", (keys.schedules, list(names)))))


def _queue(keys: ShardKeys, count: int) -> steps.Op[list[Any]]:
    return list((yield steps.Command("srandmember", (keys.schedule_queue, count))) or [])


class Shards:
    """Every shard of a namespace as its leaders see them: one shard's store, and what
    spans several (a leader's fire calls of many shards in one round trip)."""

    def __init__(self, run: Run, keys: NamespaceKeys, shards: int, bucket_ms: int) -> None:
        self._run = run
        self.keys = keys
        self.count = shards
        self.bucket_ms = bucket_ms

    def store(self, shard: int) -> ShardStore:
        """The durable side of one shard, as its leader uses it."""
        check_int("shard", shard, 0, self.count - 1)
        return ShardStore(self._run, self.keys.shard(shard), self.bucket_ms)

    def fire_together(self, calls: Sequence[steps.ScriptCall]) -> list[FireResult | TimerError]:
        """Several ``fire_call``s, of any shards, sent at once: one round trip (a pipeline
        per node on a cluster), not one each. Each call's result, or the error of that
        call alone (``Fenced``: its lease is gone; a ``StoreError``: its node failed). An
        error of the whole pipeline (the connection) is raised."""
        replies = self._run(_together(calls))
        return [r if isinstance(r, TimerError) else shard_scripts.parse_fire(r) for r in replies]


def _together(calls: Sequence[steps.ScriptCall]) -> steps.Op[list[Any]]:
    """An operation of one pipeline: each call's raw reply, or its TimerError."""
    replies: list[Any] = yield steps.Pipeline(list(calls), errors_in_slots=True)
    return replies


def _one(call: steps.ScriptCall | steps.Command) -> steps.Op[Any]:
    """An operation of one step: its raw reply."""
    return (yield call)
