"""ConsumerGroup: one consumer of a consumer group, as the handler runner drives it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from ..clock import SYSTEM_TIME, Time
from ..durable.groups import admin as group_admin
from ..durable.groups import streams as group_ops
from ..durable.groups.reader import GroupReader, Held
from ..durable.model.namespace import Namespace
from ..durable.model.steps import Run

log = logging.getLogger("tickwheel.handlers")


class ConsumerGroup:
    """One consumer of a consumer group, as the handler runner drives it.

    ``start``, ``poll``, ``idle`` and ``touch`` follow the one reading policy
    (:class:`~timer.durable.groups.reader.GroupReader`, the one ``outcomes()`` runs on, with
    its timings from ``reclaim_idle_ms``; ``held`` says which entries the caller has in
    hand). The others are single steps: each a pipelined script per shard or a plain
    read; ``timer.durable.groups.streams`` says what each one guarantees.
    """

    def __init__(
        self,
        run: Run,
        namespace: Callable[[], Namespace],
        group: str,
        consumer: str,
        *,
        per_stream: bool,
        reclaim_idle_ms: int = 60_000,
        held: Held | None = None,
        time: Time = SYSTEM_TIME,
    ) -> None:
        self.time = time  # the client's: its runner's clock, sleeps, waits and threads
        self._run = run  # the client's driver: runs an operation to its result
        self._ns = namespace  # the namespace's keys, shape and limits (read once, then kept)
        self.group = group
        self.consumer = consumer
        self.per_stream = per_stream  # a Redis Cluster: streams are read one at a time
        self.reader = GroupReader(
            namespace(),
            group,
            consumer,
            reclaim_idle_ms=reclaim_idle_ms,
            per_stream=per_stream,
            held=held,
        )
        self._ensured = False

    # -- the reading policy ---------------------------------------------------------------

    def start(self, count: int) -> list[group_ops.Delivery]:
        """This consumer's own pending entries, every one (a restart under its name)."""
        return self._run(self.reader.start(count))

    def poll(self, count: int, block_ms: int | None) -> list[group_ops.Delivery]:
        """Claims whose time has come, then new entries: about ``count`` deliveries."""
        if not self._ensured:  # a first poll with no ensure: the group made, not "gone"
            self.ensure()
        again = self.reader.groups_created_again
        got = self._run(self.reader.poll(count, block_ms))
        if self.reader.groups_created_again != again:
            log.warning(
                "consumer group %r was gone from a shard's outcome stream (a server restart "
                "lost it?): created again from %r; its outcomes there are delivered again",
                self.group,
                self.reader.start_at,
            )
        return got

    def idle(self) -> tuple[bool, list[group_ops.Delivery]]:
        """(True if nothing is left to do, else what a whole scan of claims found)."""
        return self._run(self.reader.idle())

    def touch(self, deliveries: Sequence[group_ops.Delivery]) -> list[group_ops.Delivery]:
        """Reset the idle time of entries still being handled; those another consumer
        has taken over meanwhile."""
        return self._run(self.reader.touch(list(deliveries)))

    def handed(
        self, shard: int, entries: Sequence[tuple[str, Mapping[bytes, bytes]]]
    ) -> list[group_ops.Delivery]:
        """The deliveries among entries a fire call read for this consumer (a worker
        that runs handlers itself); the others acknowledged or dead-lettered as a read's."""
        return self._run(group_ops.handed(self._ns(), self.group, self.consumer, shard, entries))

    def paused(self) -> bool:
        """Whether an operator has paused the group (``TimerClient.pause_group``)."""
        return self._run(group_admin.is_paused(self._ns(), self.group))

    # -- single steps ---------------------------------------------------------------------

    @property
    def shards(self) -> list[int]:
        """The namespace's shards: one outcome stream each."""
        return list(range(self._ns().meta.shards))

    def ensure(self, *, start: str = "0") -> None:
        """Create the group on every shard's stream unless it exists (``$``: only new)."""
        self._run(self.reader.ensure(start=start))
        self._ensured = True

    def read(self, count: int, block_ms: int | None) -> list[group_ops.Delivery]:
        """Outcomes never delivered to the group, up to ``count`` (the shards in turn),
        waiting up to ``block_ms`` for one (None: not at all)."""
        return self._run(self.reader.read(count, block_ms))

    def claim(
        self,
        cursors: Mapping[int, str],
        *,
        count: int,
        min_idle_ms: int,
        own: bool = False,
        retries: bool = True,
    ) -> tuple[list[group_ops.Delivery], dict[int, str]]:
        """Entries due for a retry, then (scanning from each shard's cursor) pending
        entries idle for ``min_idle_ms`` (``own``: only this consumer's)."""
        return self._run(
            group_ops.claim(
                self._ns(),
                self.group,
                self.consumer,
                cursors,
                count=count,
                min_idle_ms=min_idle_ms,
                owner=self.consumer if own else "",
                retries=retries,
            )
        )

    def ack(self, delivery: group_ops.Delivery) -> None:
        self._run(group_ops.ack(delivery))

    def ack_many(self, deliveries: Sequence[group_ops.Delivery]) -> int:
        """Acknowledge many at once: one call per shard's stream, pipelined (waited on
        when the client waits for durability). Returns how many found nothing pending
        (see :func:`timer.durable.groups.streams.ack_many`)."""
        return self._run(group_ops.ack_many(deliveries))

    def retry(self, delivery: group_ops.Delivery, delay_ms: int, error: str = "") -> int | None:
        """Retry the delivery in ``delay_ms``; its retry time, or None if no longer pending.
        ``error``: the failed attempt's, kept for the dead letter it may become."""
        return self._run(group_ops.retry(delivery, delay_ms, error))

    def dead_letter(self, delivery: group_ops.Delivery, error: str) -> str | None:
        """Move the delivery to the dead letters; the dead letter's ref, or None."""
        dead_id = self._run(group_ops.dead_letter(delivery, self.consumer, error))
        return None if dead_id is None else f"{delivery.outcome.shard}/{dead_id}"

    def retrying(self) -> int:
        """How many of the group's outcomes wait for a retry time, over every shard."""
        return self._run(group_ops.retrying(self._ns(), self.group))

    def leave(self) -> int:
        """Remove this consumer where it owes nothing; on how many shards it stays."""
        return self._run(group_ops.leave(self._ns(), self.group, self.consumer))
