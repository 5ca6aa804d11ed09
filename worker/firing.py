"""Firing: expired wheel entries go through the fenced ``fire`` script in batches.

Threads: the wheel's reaper expires tasks onto ``fire_queue`` (inline: no executor
hop), the raised wheel's (timers of a priority above 0) onto ``raised_queue``; the firer
thread (``worker-firer``, ``loop``) takes them off in batches, highest priority first,
and sends them; ``Worker.run_once`` calls ``fire_batch`` on the caller's thread instead.
What goes next, in what order, is the backlog's (backlog.py, the class the firer extends);
sending it is here. The context's lock is never held across the call to Redis.
"""

from __future__ import annotations

import itertools
import logging
import queue
from collections.abc import Callable, Iterable
from typing import Protocol

from timer import tracing
from timer.durable.model.leader import FireResult, Traced
from timer.durable.shards.calls import Hand
from timer.errors import Fenced, StoreError, TimerError

from .backlog import Backlog
from .context import WorkerContext
from .leases import Leases
from .loading import Loader
from .planning import Planner
from .shard import FireTask, ShardState

log = logging.getLogger("worker")

# The most shards' fire calls sent in one round trip (a pipeline): a batch is at most
# fire_batch * 4 tasks, so this bounds a pipeline by shards, not by timers.
TOGETHER = 64


class HandOff(Protocol):
    """A handler runner in this process that the fire calls read outcomes for (a
    ``Handlers``' loop while it runs: ``timer.handlers.loop.HandlerLoop``)."""

    def at_fire(self, most: int) -> Hand | None:
        """How many new outcomes (at most ``most``) to read for it, and as whom; None:
        none now (its handlers are busy, it stops, its group is paused)."""
        ...

    def accept(self, shard: int, entries: list[tuple[str, dict[bytes, bytes]]]) -> None:
        """The entries a fire call of ``shard`` read for it: start their handlers."""
        ...


def _priority(task: FireTask) -> int:
    return task.priority


def _fire_order(task: FireTask) -> tuple[int, int]:
    """A shard's call fires higher priorities first, then the oldest deadlines: the
    outcome stream is appended in this order, so handlers read them so too."""
    return (-task.priority, task.deadline_ms)


class Firer(Backlog):
    """Fires expired entries, grouped by shard and epoch (a dropped shard's are left to
    its next leader); puts back what Redis says is early or could not be decided."""

    def __init__(
        self,
        ctx: WorkerContext,
        loader: Loader,
        leases: Leases,
        planner: Planner,
        hand_to: Callable[[], HandOff | None] | None = None,
    ) -> None:
        super().__init__(ctx)
        # The runner in this process its fire calls read outcomes for, if one runs now
        self.hand_to = hand_to
        self.loader = loader
        self.leases = leases
        self.planner = planner

    def fire_batch(self, tasks: Iterable[FireTask]) -> int:
        """Fire expired wheel entries, grouped by shard and epoch; returns how many fired.
        Many shards' calls go in one round trip (``Shards.fire_together``): the timers of
        the last shard of a batch do not wait for the others' replies first.
        Before each round trip, a higher priority due no later than its timers goes
        first: the rest of the batch goes back to the backlog (``_higher_due``)."""
        trips = self._trips(tasks)
        fired = 0
        for i, trip in enumerate(trips):
            latest = max(t.deadline_ms for _, group in trip for t in group)
            if self._higher_due(trip[0][1][0].priority, latest):
                self._put_back([t for rest in trips[i:] for _, group in rest for t in group])
                break
            fired += self._fire_together(trip)
        return fired

    def _higher_due(self, priority: int, deadline_ms: int) -> bool:
        """Whether a timer above ``priority``, due no later than ``deadline_ms``, is in
        this worker and not yet sent: asked before each round trip, so what goes next
        never overtakes a higher priority due with it, however the threads ran.

        The wheels expire on reapers of their own, and a reaper hands a release over
        after taking it out of its wheel; and a timer's place in a wheel is its deadline
        by the worker's estimate of Redis time when it arrived, which a correction moves
        by a millisecond or a few. Left to the reapers, under load the flood's reaper
        can put a bucket on fire_queue, and the firer send it, while the high ones due in
        the same millisecond are still in the raised wheel. So the raised wheel's entries
        due by then are taken by deadline (``_take_raised``), not when its reaper gets to
        them; below 0, the flood's own wheel (0 and below) is expired here too, and a
        release its reaper has under way waited for (``SystemTimer.expire_due``): those
        two share a wheel, so they are ordered by its milliseconds."""
        if priority < 0:
            self.ctx.timer.expire_due()
            self._take_expired()
        else:  # fire_queue holds 0 and below: not moved here, the high ones wait for none
            self._take_raised_queue()
        self._take_raised(deadline_ms)
        return bool(self.backlog) and max(self.backlog) > priority

    def _trips(self, tasks: Iterable[FireTask]) -> list[list[tuple[ShardState, list[FireTask]]]]:
        """The round trips to fire ``tasks`` in: each a list of (shard, its calls' ids).

        Every shard's higher priorities go before any shard's lower, in round trips of
        their own: a round trip runs its calls in order, and the server runs a client's
        whole pipeline before another client's, so in one trip a flood's shards would go
        first, whole, before the next shard's (or the next worker's) high ones. A round
        trip carries at most about fire_batch timers: many shards' small calls still go
        together, but a flood is not one long pipeline that another worker's high
        priorities wait behind on the server."""
        ctx = self.ctx
        groups: dict[tuple[int, int], list[FireTask]] = {}
        for task in tasks:
            groups.setdefault((task.shard, task.epoch), []).append(task)
        parts: list[tuple[ShardState, list[FireTask]]] = []
        size = ctx.settings.fire_batch
        for (shard, epoch), candidates in groups.items():
            with ctx.lock:
                state = ctx.shards.get(shard)
                if state is None or state.epoch != epoch:
                    continue  # dropped since: its next leader fires these
                live = [t for t in candidates if state.tasks.get(t.timer_id) is t]
            live.sort(key=_fire_order)
            for _, same in itertools.groupby(live, key=_priority):
                run = list(same)
                parts += [(state, run[i : i + size]) for i in range(0, len(run), size)]
        parts.sort(key=lambda part: -part[1][0].priority)
        trips: list[list[tuple[ShardState, list[FireTask]]]] = []
        for _, level in itertools.groupby(parts, key=lambda part: part[1][0].priority):
            trip: list[tuple[ShardState, list[FireTask]]] = []
            timers = 0
            for part in level:
                if trip and (len(trip) >= TOGETHER or timers + len(part[1]) > size):
                    trips.append(trip)
                    trip, timers = [], 0
                trip.append(part)
                timers += len(part[1])
            if trip:
                trips.append(trip)
        return trips

    def _retry_later(self, state: ShardState, tasks: list[FireTask]) -> None:
        """Put tasks a failed fire could not decide back in the wheel, a little later (so a
        dead node is not hammered), leaving every other shard's firing alone."""
        with self.ctx.lock:
            for task in tasks:
                if state.tasks.get(task.timer_id) is task:
                    self.loader.add_task(state, task.timer_id, task.deadline_ms, min_delay_ms=100)

    def _fire_together(self, parts: list[tuple[ShardState, list[FireTask]]]) -> int:
        """One round trip for these parts (shard, its due tasks): each part's result is
        applied, then its failures handled, each touching only its own shard."""
        ctx = self.ctx
        calls = []
        runner = self.hand_to() if self.hand_to is not None else None
        hand = runner.at_fire(sum(len(group) for _, group in parts)) if runner else None
        left = hand.most if hand is not None else 0
        for state, group in parts:
            ids = [t.timer_id for t in group]
            # the runner's room shared out in order: the higher priorities' shards first
            take = min(left, len(ids))
            left -= take
            # ahead: the shard's timers in the wheel will be decided soon (fired, or
            # cancelled: each leaves an outcome), so the results table grows for them
            # before they land, when that moves least (rx_grow in lua/include/results.lua)
            calls.append(
                state.store.fire_call(
                    ctx.id,
                    state.epoch,
                    ids,
                    ttl_ms=ctx.settings.result_ttl_ms,
                    ahead=len(state.tasks),
                    plans=self.planner.for_fire(state, ids),
                    hand=hand._replace(most=take) if hand is not None and take else None,
                )
            )
        sent = ctx.time.monotonic_ns()
        try:
            results = ctx.client.shards.fire_together(calls)
        except StoreError as exc:  # the whole pipeline (its connection) failed
            for state, group in parts:
                ctx.shard_failed(state.shard, "firing", exc)
                self._retry_later(state, group)
            return 0
        answered = ctx.time.monotonic_ns()
        fired, failed = 0, []
        for (state, group), result in zip(parts, results, strict=True):
            if isinstance(result, Fenced):
                ctx.stats.fence_rejections += 1
                log.warning(
                    "shard %d: fenced at epoch %d; dropping it",
                    state.shard,
                    state.epoch,
                    extra=ctx.fields(state.shard),
                )
                self.leases.drop(state.shard, release=False)
            elif isinstance(result, TimerError):
                failed.append((state, group, result))
            else:
                if result.handed and runner is not None:  # their handlers start first
                    runner.accept(state.shard, result.handed)
                fired += self._apply(state, group, result, sent, answered)
        for state, group, error in failed:
            if not isinstance(error, StoreError):
                raise error  # the loop puts its tasks back (and says why)
            ctx.shard_failed(state.shard, "firing", error)
            self._retry_later(state, group)
        return fired

    def _apply(
        self, state: ShardState, group: list[FireTask], result: FireResult, sent: int, answered: int
    ) -> int:
        """What one shard's fire decided: out of the wheel, early ones back in, schedules'
        next occurrences offered to the planner; how many fired."""
        ctx = self.ctx
        fired_ids, early_at = set(result.fired), result.early
        if early_at and result.now_ms is not None:
            # told early: our estimate of Redis time ran ahead; its reading corrects it
            # (and the clock's measured rate), so the retry waits for the server's own
            # remaining time instead of being released early again and again
            received = ctx.clock.mono_ms()
            ctx.clock.observe(
                result.now_ms, received - (answered - sent) / 1e6, received, refused=True
            )
        now = ctx.clock.now_ms()
        done = [t for t in group if t.timer_id in fired_ids]
        self._observe_stages(done, sent, answered)
        ctx.lateness.observe_all([now - t.deadline_ms for t in done])
        with ctx.lock:
            alive = ctx.shards.get(state.shard) is state
            for task in group:
                tid = task.timer_id
                if state.tasks.get(tid) is not task:
                    continue
                if tid in early_at and alive:  # Redis time says not yet: try again later
                    ctx.stats.early_reinserted += 1
                    self.loader.add_task(state, tid, early_at[tid], min_delay_ms=1)
                else:  # fired here, or decided by someone else meanwhile
                    del state.tasks[tid]
        ctx.stats.fired += len(result.fired)
        if result.traced:
            deadlines = {t.timer_id: t.deadline_ms for t in group}
            trace_fires(ctx, state.shard, result.traced, deadlines)
        self.planner.offer(state, result.armed)
        if result.queued:
            state.replan = True  # a stale plan: the tick plans those schedules again
            self.planner.forget(t.timer_id for t in group)
        return len(result.fired)

    def _observe_stages(self, done: list[FireTask], sent_ns: int, answered_ns: int) -> None:
        """Where each fired timer's time went until its outcome was in Redis (FIRE_STAGES
        in worker/stats.py); a task the wheel did not release (``run_once``) counts from
        the send."""
        stages, clock = self.ctx.stages, self.ctx.clock
        if not done:
            return
        released = [t.released or sent_ns for t in done]
        if clock.ready:
            offset = clock.at_ms(0.0)  # Redis time at monotonic 0: one read for the batch
            stages.observe_all(
                "due_to_release",
                (r / 1e6 + offset - t.deadline_ms for r, t in zip(released, done, strict=True)),
            )
        stages.observe_all("release_to_send", [(sent_ns - r) / 1e6 for r in released])
        stages.observe_all("fire_call", ((answered_ns - sent_ns) / 1e6,), times=len(done))

    def loop(self) -> None:
        """The firer thread: fire what the wheel expires until the worker stops. What it
        expired waits in a backlog by priority: under a flood, the highest
        priorities of what has expired go first; with none given it is first in, first
        out, as before."""
        ctx = self.ctx
        while not ctx.stopping.is_set():
            if self.held:
                self._let_go()
            if not self.backlog:
                try:  # back soon while holding: the round's last load lets them go
                    first = ctx.fire_queue.get(timeout=0.005 if self.held else 0.2)
                except queue.Empty:
                    continue
                self._keep(first)
                if first is not None:  # raised ones due with it, before the flood is moved
                    self._take_raised(first.deadline_ms)
            self._take_raised_queue()
            if not self.backlog or max(self.backlog) <= 0:
                # raised ones in hand go first, without waiting for a flood's step to be
                # moved (nothing on fire_queue is above 0; a trip below 0 takes it first)
                self._take_expired()
            if self.held:  # the round may have ended since the top: all go in together
                self._let_go()
            batch = self._next_batch(ctx.settings.fire_batch * 4)
            if not batch:
                continue
            try:
                self.fire_batch(batch)
            except Exception as exc:  # a TimerError, or a bug: the firer thread goes on
                self._fire_failed(batch, exc)

    def _fire_failed(self, batch: list[FireTask], exc: Exception) -> None:
        """A batch's fire call failed: its entries go back to the wheel (those still the
        shard's own), and the firer pauses a moment before its next."""
        ctx = self.ctx
        ctx.stats.redis_errors += 1
        ctx.note_error(exc)
        if isinstance(exc, TimerError):
            ctx.warn.warning(
                "firing failed (%s); entries go back to the wheel", exc, extra=ctx.fields()
            )
        else:
            log.exception(
                "firing failed unexpectedly; entries go back to the wheel", extra=ctx.fields()
            )
        with ctx.lock:
            for task in batch:
                state = ctx.shards.get(task.shard)
                if state is not None and state.tasks.get(task.timer_id) is task:
                    self.loader.add_task(state, task.timer_id, task.deadline_ms)
        ctx.time.wait(ctx.stopping, 0.1)


def trace_fires(
    ctx: WorkerContext, shard: int, traced: list[Traced], deadlines: dict[str, int]
) -> None:
    """A ``tickwheel.fire`` span in the trace each of these timers was scheduled in: from
    its deadline to its decision (Redis time), by this worker (timer/tracing.py)."""
    for t in traced:
        deadline = deadlines.get(t.id, t.decided_ms)
        tracing.record_span(
            "tickwheel.fire",
            t.traceparent,
            deadline,
            t.decided_ms,
            {
                "tickwheel.timer_id": t.id,
                "tickwheel.shard": shard,
                "tickwheel.worker": ctx.id,
                "tickwheel.lateness_ms": t.decided_ms - deadline,
            },
        )
