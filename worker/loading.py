"""Loading and events: a led shard's timers due within the horizon go into the wheel.

Threads: ``load`` runs on the tick's thread (the caller of ``Worker.run``); the event
callbacks on the events thread (``EventListener``); ``add_task`` on either, and on the
firer thread (a task put back for a retry). All of them take the context's lock.
"""

from __future__ import annotations

import heapq

from timer.durable.model.entries import parse_events
from timer.durable.model.leader import Event
from timer.durable.schedules.records import occurrence_name

from .context import WorkerContext
from .events import EventListener
from .shard import FireTask, ShardState


class Loader:
    """Keeps each led shard's timers due within the horizon in the wheel, from its
    durable buckets (``load``: overdue first, so they fire at once) and its events."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.events = EventListener(
            ctx.client.membership.events_pubsub,
            self._on_event,
            self._on_reconnect,
            self._on_subscribed,
            time=ctx.time,
            stopping=ctx.stopping,
        )

    def follow(self) -> None:
        """Subscribe to the events of exactly the shards led now."""
        with self.ctx.lock:
            self.events.want({s.store.events_channel for s in self.ctx.shards.values()})

    def load(self, state: ShardState) -> int:
        """Put the shard's timers due within the horizon in the wheel (overdue first)."""
        ctx = self.ctx
        until = ctx.clock.now_ms() + ctx.settings.horizon_ms
        if state.needs_reload:
            state.loaded = set()
        due = state.store.read_due(until, state.loaded, max_ids=ctx.settings.max_load)
        added = 0
        with ctx.lock:
            if ctx.shards.get(state.shard) is not state:
                return 0
            ranked = due.priorities
            for deadline, tid in due.timers:
                if tid not in state.tasks:
                    self.add_task(state, tid, deadline, priority=ranked.get(tid, 0))
                    added += 1
            # Only buckets wholly inside the horizon count as loaded (later loads skip
            # them; events fill them in). One straddling the edge is read again next time:
            # a timer scheduled into it beyond the horizon while we read would be missed.
            width = ctx.meta.bucket_ms
            state.loaded.update(n for n in due.buckets if (n + 1) * width <= until)
            # Buckets whose end is long past were swept: forget them (bounded memory).
            old = (ctx.clock.now_ms() - 4 * width) // width
            state.loaded = {n for n in state.loaded if n >= old}
            state.needs_reload = False
            state.more_to_load = len(due.timers) >= ctx.settings.max_load  # backlog: next tick
            state.last_load_mono_ms = ctx.clock.mono_ms()
        ctx.stats.loaded += added
        return added

    def add_task(
        self,
        state: ShardState,
        tid: str,
        deadline_ms: int,
        min_delay_ms: int = -1,
        priority: int | None = None,
    ) -> None:
        """Put (or move) the timer in the wheel; under the context's lock. ``priority``:
        the timer's, if known (None: the entry it replaces keeps its own, else 0)."""
        # min_delay_ms=1 for entries Redis called early: our clock runs ahead of Redis's,
        # so retry a millisecond later instead of spinning on fire until it catches up.
        ctx = self.ctx
        delay = max(min_delay_ms, ctx.clock.wheel_delay_ms(deadline_ms))
        old = state.tasks.get(tid)
        if old is not None:
            old.cancel()
        if priority is None:
            priority = old.priority if old is not None else 0
        task = FireTask(
            delay,
            state.shard,
            state.epoch,
            tid,
            deadline_ms,
            ctx.sink_of(priority),
            ctx.time.monotonic_ns,
        )
        task.priority = priority
        state.tasks[tid] = task
        ctx.wheel_of(task.priority).add(task)
        if priority > 0:  # the firer finds it by deadline too (backlog.Backlog._take_raised)
            heapq.heappush(ctx.raised_due, (deadline_ms, next(ctx.raised_seq), task))

    def offer(self, state: ShardState, tid: str, deadline_ms: int) -> None:
        """A timer the shard just got (an event, or an occurrence armed): into the wheel
        if it is due within the horizon, or in a bucket already loaded (load skips
        those); else its bucket is loaded when its time comes. Under the lock."""
        within = (
            deadline_ms <= self.ctx.clock.now_ms() + self.ctx.settings.horizon_ms
            or deadline_ms // self.ctx.meta.bucket_ms in state.loaded
        )
        if within:
            self.add_task(state, tid, deadline_ms)
        elif tid in state.tasks:
            state.tasks.pop(tid).cancel()

    # -- events (the events thread) ------------------------------------------------------

    def _on_event(self, channel: str, data: str) -> None:
        shard = self.ctx.client.membership.shard_of_channel(channel)
        events = parse_events(data)  # one, or a schedule call's batch
        with self.ctx.lock:
            state = self.ctx.shards.get(shard) if shard is not None else None
            if state is None:
                return
            for event in events:
                self._apply_event(state, event)

    def _apply_event(self, state: ShardState, event: Event) -> None:
        ctx = self.ctx
        tid = event.timer_id
        if event.kind == "prioritized":  # follows the event that put it in the wheel
            task = state.tasks.get(tid)
            if task is not None:
                wheel = ctx.wheel_of(task.priority)
                task.priority = event.priority
                if ctx.wheel_of(event.priority) is not wheel:  # into the other wheel
                    self.add_task(state, tid, task.deadline_ms, priority=event.priority)
            return
        # A schedule's own occurrence armed or taken out (pausing, updating or deleting
        # the schedule) is no user's schedule or cancel: the history counts neither
        own = occurrence_name(tid) is not None
        if event.deadline_ms is not None:  # scheduled or rescheduled
            if event.kind == "scheduled":
                if not own:
                    ctx.stats.scheduled_seen += 1
                if tid in state.tasks:
                    return
            # A loaded bucket must hold all its timers in the wheel (load skips it from
            # now on), even those beyond the horizon edge it straddles.
            self.offer(state, tid, event.deadline_ms)
        else:  # decided
            if event.outcome == "completed":
                ctx.stats.completed_seen += 1
            elif event.outcome == "cancelled" and not own:
                ctx.stats.cancelled_seen += 1
            task = state.tasks.pop(tid, None)
            if task is not None:
                task.cancel()
            if own:  # a schedule's occurrence, maybe ended
                state.replan = True  # by cancel, complete or notify: arm its next now

    def _on_subscribed(self, channel: str) -> None:
        shard = self.ctx.client.membership.shard_of_channel(channel)
        with self.ctx.lock:
            state = self.ctx.shards.get(shard) if shard is not None else None
            if state is not None:
                state.needs_reload = True

    def _on_reconnect(self) -> None:
        self.ctx.stats.reloads += 1
        with self.ctx.lock:
            for state in self.ctx.shards.values():
                state.needs_reload = True
