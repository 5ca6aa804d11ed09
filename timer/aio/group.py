"""AsyncConsumer: one consumer of a consumer group, read a batch at a time and settled
by reference, for callers that hold outcomes across requests (the HTTP API's handlers
in other languages).

The same reader as ``Handlers`` and ``outcomes()`` (:class:`~timer.durable.groups.reader.
GroupReader`): each ``poll`` hands out due retries, others' outcomes idle past
``reclaim_idle_ms`` (their consumer is presumed dead), its own left unsettled that long
(a restart under the same name gets them then), and new ones. It does not take its own
back at once when it starts, as ``Handlers`` does: the same consumer may be served by
several processes (``tickwheel serve --workers``), and one of them starting must not
hand out again what another handed out a moment ago. Each outcome carries its ``ref``
(``<shard>/<entry id>``, the same as its ``idempotency_key`` unless it is a dead letter
put back); ``ack``, ``retry`` and ``dead_letter`` take refs. At least once: an outcome
not settled within ``reclaim_idle_ms`` is delivered again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..durable.groups import streams as group_ops
from ..durable.groups.admin import group_exists
from ..durable.groups.reader import GroupReader
from ..durable.groups.streams import Delivery
from ..durable.model import steps
from ..durable.model.checks import check_int
from ..durable.model.entries import parse_ref
from ..durable.model.models import Outcome
from ..durable.model.namespace import Namespace
from ..durable.model.steps import Op
from ..errors import InvalidInput, NotFound, quoted

MAX_BATCH = 1000


class AsyncConsumer:
    """``AsyncTimerClient.consumer(group, name)``: see the module."""

    def __init__(
        self,
        run: Callable[[Op[Any]], Awaitable[Any]],
        ns: Namespace,
        group: str,
        consumer: str,
        *,
        reclaim_idle_ms: int,
        per_stream: bool,
    ) -> None:
        self._run = run
        self.ns = ns
        self.reader = GroupReader.of(
            ns,
            group,
            consumer,
            reclaim_idle_ms=reclaim_idle_ms,
            per_stream=per_stream,
            held=lambda: {(d.outcome.shard, d.entry_id) for d in self._over},
        )
        self.group, self.consumer = self.reader.group, self.reader.consumer
        self._started = False
        # Taken past a poll's count (claims: a page from each shard; a blocked read's
        # wake-up, one entry from each shard that has one):
        # handed out first by the next poll, while fresh (monotonic s it was read at).
        self._over: list[Delivery] = []
        self._over_at = 0.0

    async def poll(self, count: int = 100, wait_ms: int = 1000) -> list[Outcome]:
        """Up to ``count`` outcomes for this consumer, waiting up to ``wait_ms`` for one
        (a long poll: it returns as soon as there is one, or empty when the time is up).

        New outcomes are read shard by shard up to ``count``. Claims (retries come due,
        outcomes of a dead consumer) take a page from each shard and a blocked read
        wakes with one from each shard that has one: what they take past ``count`` is
        this consumer's, handed out first by its next poll."""
        check_int("count", count, 1, MAX_BATCH)
        check_int("wait_ms", wait_ms, 0, 60_000)
        if not self._started:
            await self._run(self.reader.ensure())
            self._started = True
        got: list[Delivery] = await self._run(self._poll(count, wait_ms))
        return [d.outcome for d in got]

    def _poll(self, count: int, wait_ms: int) -> Op[list[Delivery]]:
        clock = yield steps.Clock()
        now = clock.monotonic()
        # What was read past the last count goes first; one read longer ago than half
        # reclaim_idle_ms is left to the group (claimed again once idle, at least once)
        if self._over and now - self._over_at < self.reader.reclaim_idle_ms / 2000:
            got, self._over = self._over[:count], self._over[count:]
            return got
        self._over = []
        end = now + wait_ms / 1000
        while True:  # the reader waits at most until its next claims are due: again
            before = clock.monotonic()
            left = round((end - before) * 1000)
            got = yield from self.reader.poll(count, left if left > 0 else None)
            if got or left <= 0:
                break
            if clock.monotonic() <= before:  # a store that does not block (a test's)
                yield steps.Sleep(min(left / 1000, self.reader.claim_every_s))
        if len(got) > count:
            self._over, self._over_at = got[count:], clock.monotonic()
            got = got[:count]
        return got

    def _delivery(self, ref: object, attempt: int = 1) -> Delivery:
        shard, eid = parse_ref(ref, self.ns.meta.shards, "outcome")
        outcome = Outcome("", "", 0, 0, None, shard, entry_id=eid, attempt=attempt)
        return Delivery(outcome, self.ns.shard(shard), self.group)

    def _deliveries(self, refs: object) -> list[Delivery]:
        if not isinstance(refs, (list, tuple)) or len(refs) > MAX_BATCH:
            raise InvalidInput(f"refs must be a list of at most {MAX_BATCH} outcome refs")
        return [self._delivery(r) for r in refs]  # every ref checked before any is sent

    async def ack(self, refs: Sequence[str]) -> int:
        """Acknowledge these outcomes: handled, never delivered again (safe to repeat).
        How many were pending and are acknowledged now (one acknowledged already, or
        named twice, counts once)."""
        ds = self._deliveries(refs)
        missing: int = await self._run(group_ops.ack_many(ds))
        if (
            missing
            and missing == len(ds)
            and not await self._run(group_exists(self.ns, self.group))
        ):
            raise NotFound(  # a group's name mistyped acknowledges nothing, silently
                f"no consumer group {quoted(self.group)} in namespace {quoted(self.ns.name)}: "
                "a group "
                "exists once it has read (outcomes, a handler runner)"
            )
        return len(ds) - missing

    async def retry(self, ref: str, delay_ms: int) -> bool:
        """Deliver this outcome again in ``delay_ms`` (its attempt counts); False if it is
        no longer pending (acknowledged or dead-lettered meanwhile)."""
        d = self._delivery(ref)
        return await self._run(group_ops.retry(d, delay_ms)) is not None

    async def give_back(self, ref: str) -> bool:
        """Hand this outcome back to the group unsent (a client that left before it was
        sent): due at once, for any consumer, and not an attempt: the next delivery has
        the attempt number this one had. False if it is no longer pending."""
        d = self._delivery(ref)
        return await self._run(group_ops.retry(d, 0, counted=False)) is not None

    async def dead_letter(self, ref: str, error: str) -> str | None:
        """Move this outcome to the dead letters with ``error``; the dead letter's ref, or
        None if it is no longer pending."""
        if not isinstance(error, str):
            raise InvalidInput(f"error must be text, got {type(error).__name__}")
        d = self._delivery(ref)
        pending = await self._run(_pending_of(d))
        if pending is None:
            return None
        d = Delivery(dataclasses.replace(d.outcome, attempt=pending), d.keys, d.group)
        eid = await self._run(group_ops.dead_letter(d, self.consumer, error))
        return None if eid is None else f"{d.outcome.shard}/{eid}"


def _pending_of(d: Delivery) -> Op[int | None]:
    """How many times the entry was delivered, or None if it is not pending."""
    rows = yield steps.Command("xpending_range", (d.stream, d.group, d.entry_id, d.entry_id, 1))
    return int(rows[0]["times_delivered"]) if rows else None
