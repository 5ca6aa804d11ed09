"""Membership and leases: which shards this worker leads, and for how long.

Threads: everything here runs on the tick's thread (the caller of ``Worker.run``),
except ``drop``, which the firer thread also calls when a fire is fenced. The clock is
learnt from the Redis TIME each lease call carries back.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Protocol, TypeVar

from timer.errors import StoreError, TimerError

from .context import WorkerContext
from .loading import Loader
from .shard import ShardState

log = logging.getLogger("worker")


class _Timed(Protocol):
    @property
    def now_ms(self) -> int: ...


L = TypeVar("L", bound=_Timed)


class Leases:
    """Announces the worker, keeps its fair share of shard leases, and drops a shard at
    once when its lease is lost, fenced or could not be renewed in time: a paused or
    partitioned ex-leader never fires."""

    def __init__(
        self, ctx: WorkerContext, loader: Loader, on_drop: Callable[[str], None] | None = None
    ) -> None:
        """``on_drop(why)``: called after each shard dropped (``why``: "a shard released"
        or "a lease lost"), on the thread that dropped it."""
        self.ctx = ctx
        self.loader = loader
        self.on_drop = on_drop
        self.live = 1  # workers live at the last heartbeat
        self.last_heartbeat_mono_ms = -math.inf
        self.round = _Round()  # the shards taken since the last "took N shards" line

    def sync_clock(self) -> None:
        """A precise reading of Redis time (TIME's microseconds) for the clock."""
        clock = self.ctx.clock
        sent = clock.mono_ms()
        server_us = self.ctx.client.server_time_us()
        clock.observe(server_us / 1000, sent, clock.mono_ms(), precise=True)

    def _timed(self, lease_call: Callable[..., L], *args: object) -> tuple[L, float]:
        """Run a lease call; learn the clock offset from the Redis TIME it carries back."""
        clock = self.ctx.clock
        sent = clock.mono_ms()
        reply = lease_call(*args)
        clock.observe(reply.now_ms, sent, clock.mono_ms())
        return reply, sent

    def heartbeat(self) -> int:
        """Announce this worker; return how many workers are live."""
        ctx = self.ctx
        live = ctx.client.membership.heartbeat(
            ctx.id, now_ms=ctx.clock.now_ms(), live_window_ms=ctx.settings.live_window_ms
        )
        self.live = max(1, live)
        self.last_heartbeat_mono_ms = ctx.clock.mono_ms()
        return self.live

    @property
    def fair_share(self) -> int:
        return math.ceil(self.ctx.meta.shards / self.live)

    def renew(self) -> None:
        """Renew each lease that is due; drop a shard whose lease is lost or too old.

        Cheap when nothing is due (a clock read per shard), so the tick calls it between
        every piece of slow work (each shard's load, each sweep call): a long catch-up
        never holds a renewal back (a catch-up of a large burst outlasts a lease)."""
        ctx, s = self.ctx, self.ctx.settings
        now = ctx.clock.mono_ms()
        for state in list(ctx.shards.values()):
            if now - state.renewed_mono_ms >= s.lease_ms - s.lease_ms // 6:
                log.warning(
                    "shard %d: lease could not be renewed in time; dropping it",
                    state.shard,
                    extra=ctx.fields(state.shard),
                )
                ctx.stats.leases_lost += 1
                self.drop(state.shard, release=False)
            elif now - state.renewed_mono_ms >= s.renew_every_ms and not ctx.failing(state.shard):
                try:
                    renewal, sent = self._timed(state.store.renew, ctx.id, state.epoch, s.lease_ms)
                except StoreError as exc:
                    ctx.shard_failed(state.shard, "renewing its lease", exc)
                    continue  # dropped above once too late; other shards go on
                if renewal.renewed:
                    state.renewed_mono_ms = sent
                else:
                    log.warning(
                        "shard %d: lease lost at epoch %d",
                        state.shard,
                        state.epoch,
                        extra=ctx.fields(state.shard),
                    )
                    ctx.stats.leases_lost += 1
                    self.drop(state.shard, release=False)

    def rebalance(self) -> None:
        """Renew what is held, drop what is lost, release extras, take free shards."""
        ctx = self.ctx
        self.renew()
        if ctx.stopping.is_set():
            return
        share = self.fair_share
        while len(ctx.shards) > share:  # others joined: give back the highest shards
            self.drop(max(ctx.shards), release=True)
        if len(ctx.shards) < share:
            shards = ctx.meta.shards
            start = sum(map(ord, ctx.id)) % shards  # spread first picks
            try:
                for shard in ((start + i) % shards for i in range(shards)):
                    if len(ctx.shards) >= share:
                        break
                    if shard not in ctx.shards and not ctx.failing(shard):
                        try:
                            self.acquire(shard)
                        except StoreError as exc:
                            ctx.shard_failed(shard, "acquiring it", exc)
            finally:  # every shard of the round loaded: the firer takes what they held
                with ctx.lock:
                    taken = len(ctx.catching_up)
                    ctx.catching_up.clear()
                if taken:
                    log.info("took %s", self.round.summary(taken), extra=ctx.fields())
                self.round = _Round()

    def acquire(self, shard: int) -> bool:
        """Take the shard's lease if it is free; then follow it and load its horizon."""
        ctx = self.ctx
        store = ctx.client.shard_store(shard)
        grant, sent = self._timed(store.acquire, ctx.id, ctx.settings.lease_ms)
        if not grant.acquired:
            return False
        epoch = grant.epoch
        with ctx.lock:
            # The first sweep waits a sweep interval: catch-up goes through the wheel, in
            # deadline order, rather than bucket by bucket in set order.
            ctx.shards[shard] = ShardState(
                shard, epoch, store, renewed_mono_ms=sent, last_sweep_mono_ms=sent
            )
        ctx.stats.leases_acquired += 1
        if grant.handover:
            ctx.stats.handovers += 1
        elif epoch > 1:
            ctx.stats.takeovers += 1
        with ctx.lock:
            ctx.catching_up.add(shard)  # its overdue ones wait for the round's other loads
            state = ctx.shards[shard]
        self.loader.follow()
        self.loader.load(state)
        self._report(state, handover=grant.handover)
        return True

    def _report(self, state: ShardState, *, handover: bool) -> None:
        """Log a shard just taken: at DEBUG, as the round's "took N shards" line sums it
        up; at WARNING if it was taken over from a lapsed lease (its leader died, stalled
        or was cut off) with timers overdue: those fire late, and the summary names no
        shard."""
        ctx = self.ctx
        now = ctx.clock.now_ms()
        with ctx.lock:
            overdue = sum(1 for t in state.tasks.values() if t.deadline_ms <= now)
            more = state.more_to_load
        lapsed = not handover and state.epoch > 1
        self.round.add(handover=handover, lapsed=lapsed, overdue=overdue, more=more)
        how = "handed over" if handover else "taken over from a lapsed lease" if lapsed else "new"
        if lapsed and overdue:
            log.warning(
                "shard %d: taken over at epoch %d from a lapsed lease (its leader died, "
                "stalled or was cut off); %s overdue timer(s) fire now",
                state.shard,
                state.epoch,
                _at_least(overdue, more),
                extra=ctx.fields(state.shard),
            )
        else:
            log.debug(
                "shard %d: leading at epoch %d (%s; %s overdue timers)",
                state.shard,
                state.epoch,
                how,
                _at_least(overdue, more),
                extra=ctx.fields(state.shard),
            )

    def drop(self, shard: int, *, release: bool) -> None:
        """Stop leading the shard: its timers leave the wheel (``release``: and its lease
        is given back, else it expires)."""
        ctx = self.ctx
        with ctx.lock:
            state = ctx.shards.pop(shard, None)
        if state is None:
            return
        for task in list(state.tasks.values()):
            task.cancel()
        state.tasks.clear()
        self.loader.follow()
        if release:
            try:
                released = state.store.release(ctx.id, state.epoch)
                ctx.stats.leases_released += int(released)
            except TimerError as exc:
                log.warning(
                    "shard %d: release failed (%s); its lease will expire",
                    shard,
                    exc,
                    extra=ctx.fields(shard),
                )
        if self.on_drop is not None:
            self.on_drop("a shard released" if release else "a lease lost")

    def drop_expired(self) -> None:
        """Drop every shard whose lease may have expired (the loop could not tick)."""
        s, now = self.ctx.settings, self.ctx.clock.mono_ms()
        for state in list(self.ctx.shards.values()):
            if now - state.renewed_mono_ms >= s.lease_ms - s.lease_ms // 6:
                self.ctx.stats.leases_lost += 1
                self.drop(state.shard, release=False)


def _at_least(n: int, more: bool) -> str:
    """``n`` timers, or "at least n" when a backlog is still to be loaded."""
    return f"at least {n:,}" if more else f"{n:,}"


class _Round:
    """What one rebalance round took, for its one INFO line."""

    def __init__(self) -> None:
        self.handed = self.lapsed = self.overdue = 0
        self.more = False

    def add(self, *, handover: bool, lapsed: bool, overdue: int, more: bool) -> None:
        self.handed += handover
        self.lapsed += lapsed
        self.overdue += overdue
        self.more = self.more or more

    def summary(self, taken: int) -> str:
        """E.g. ``64 shards (2 handed over, 3 from a lapsed lease); 120 overdue timers fire
        by priority now``; no parenthesis when each was new (led for the first time)."""
        how = [f"{self.handed} handed over"] if self.handed else []
        how += [f"{self.lapsed} from a lapsed lease"] if self.lapsed else []
        text = f"{taken} shard{'s' * (taken != 1)}" + (f" ({', '.join(how)})" if how else "")
        if not self.overdue:
            return text + "; none has a timer overdue"
        many = self.overdue != 1 or self.more
        return text + (
            f"; {_at_least(self.overdue, self.more)} overdue timer{'s' * many} "
            f"fire{'s' * (not many)} by priority now"
        )
