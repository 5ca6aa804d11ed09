"""The worker: leads a fair share of a namespace's shards and fires their timers.

Per led shard (lease at epoch ``e``): load the durable buckets due within the horizon
into the in-memory wheel (the engine's ``SystemTimer``), oldest first, so overdue timers
fire at once (catch-up); keep loading ahead as time passes; follow the shard's events;
fire expired entries in batches through the fenced ``fire`` script; ``sweep`` every
ended bucket. A ``FENCED`` reply, a failed renewal, or a renewal that could not happen in
time drops the shard at once: a paused or partitioned ex-leader never fires.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis

from timer import SystemTimer, SystemTimerReaper, TimerClient, TimerError
from timer.errors import Fenced
from timer.store import map_errors, translate

from .events import EventListener
from .metrics import LatenessHistogram
from .redis_clock import RedisClock
from .settings import WorkerSettings
from .shard import FireTask, ShardState, read_due

log = logging.getLogger("worker")


@dataclass
class WorkerStats:
    fired: int = 0
    swept: int = 0
    early_reinserted: int = 0
    fence_rejections: int = 0
    leases_acquired: int = 0
    leases_lost: int = 0
    leases_released: int = 0
    takeovers: int = 0
    redis_errors: int = 0
    loaded: int = 0
    reloads: int = 0
    completed_seen: int = 0
    cancelled_seen: int = 0
    outcomes_trimmed: int = 0


class Worker:
    def __init__(self, client: TimerClient, settings: WorkerSettings | None = None) -> None:
        self.client = client
        self.settings = settings or WorkerSettings()
        self.id = self.settings.worker_id
        self.clock = RedisClock()
        self.timer = SystemTimer(f"worker-{self.id}")
        self.fire_queue: queue.SimpleQueue[FireTask] = queue.SimpleQueue()
        self.shards: dict[int, ShardState] = {}
        self.stats = WorkerStats()
        self.lateness_histogram = LatenessHistogram()
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._live = 1
        self._last_heartbeat = -math.inf
        self._reaper: SystemTimerReaper | None = None
        self._firer: threading.Thread | None = None
        self.events = EventListener(
            client.redis, self._on_event, self._on_reconnect, self._on_subscribed
        )
        self.meta = client.meta

    # -- Redis time --------------------------------------------------------------------

    def _sync_clock(self) -> None:
        sent = self.clock.mono_ms()
        server_ms = self.client.server_time_ms()
        self.clock.observe(server_ms, sent, self.clock.mono_ms())

    def _lease_call(self, script: Any, state_keys: Any, args: list[Any]) -> Any:
        sent = self.clock.mono_ms()
        with map_errors(self.client.where):
            reply = script(keys=[state_keys.lease, state_keys.epoch], args=args)
        if isinstance(reply, list):
            self.clock.observe(int(reply[-1]), sent, self.clock.mono_ms())
        return reply, sent

    # -- membership and leases -----------------------------------------------------------

    def heartbeat(self) -> int:
        """Announce this worker; return how many workers are live."""
        now = self.clock.now_ms()
        key = self.client.keys.workers
        with map_errors(self.client.where):
            pipe = self.client.redis.pipeline(transaction=False)
            pipe.zadd(key, {self.id: now})
            pipe.zremrangebyscore(key, "-inf", now - 10 * self.settings.live_window_ms)
            pipe.zcount(key, now - self.settings.live_window_ms, "+inf")
            live = int(pipe.execute()[-1])
        self._live = max(1, live)
        self._last_heartbeat = self.clock.mono_ms()
        return self._live

    @property
    def fair_share(self) -> int:
        return math.ceil(self.meta.shards / self._live)

    def rebalance(self) -> None:
        """Renew what is held, drop what is lost, release extras, take free shards."""
        s = self.settings
        now = self.clock.mono_ms()
        for state in list(self.shards.values()):
            if now - state.renewed_mono_ms >= s.lease_ms - s.lease_ms // 6:
                log.warning(
                    "shard %d: lease could not be renewed in time; dropping it", state.shard
                )
                self.stats.leases_lost += 1
                self.drop(state.shard, release=False)
            elif now - state.renewed_mono_ms >= s.renew_every_ms:
                reply, sent = self._lease_call(
                    self.client.scripts.lease_renew, state.keys, [self.id, state.epoch, s.lease_ms]
                )
                if int(reply[0]) == 1:
                    state.renewed_mono_ms = sent
                else:
                    log.warning("shard %d: lease lost at epoch %d", state.shard, state.epoch)
                    self.stats.leases_lost += 1
                    self.drop(state.shard, release=False)
        if self._stopping.is_set():
            return
        share = self.fair_share
        while len(self.shards) > share:  # others joined: give back the highest shards
            self.drop(max(self.shards), release=True)
        if len(self.shards) < share:
            start = sum(map(ord, self.id)) % self.meta.shards  # spread first picks
            order = [(start + i) % self.meta.shards for i in range(self.meta.shards)]
            for shard in order:
                if len(self.shards) >= share:
                    break
                if shard not in self.shards:
                    self.acquire(shard)

    def acquire(self, shard: int) -> bool:
        keys = self.client.keys.shard(shard)
        reply, sent = self._lease_call(
            self.client.scripts.lease_acquire, keys, [self.id, self.settings.lease_ms]
        )
        if int(reply[0]) != 1:
            return False
        epoch = int(reply[1])
        with self._lock:
            # The first sweep waits a sweep interval: catch-up goes through the wheel, in
            # deadline order, rather than bucket by bucket in set order.
            self.shards[shard] = ShardState(
                shard, epoch, keys, renewed_mono_ms=sent, last_sweep_mono_ms=sent
            )
        self.stats.leases_acquired += 1
        if epoch > 1:
            self.stats.takeovers += 1
        log.info("shard %d: leading at epoch %d", shard, epoch)
        self._update_subscriptions()
        self.load(self.shards[shard])
        return True

    def drop(self, shard: int, *, release: bool) -> None:
        with self._lock:
            state = self.shards.pop(shard, None)
        if state is None:
            return
        for task in list(state.tasks.values()):
            task.cancel()
        state.tasks.clear()
        self._update_subscriptions()
        if release:
            try:
                reply, _ = self._lease_call(
                    self.client.scripts.lease_release, state.keys, [self.id, state.epoch]
                )
                self.stats.leases_released += int(reply == 1)
            except TimerError as exc:
                log.warning("shard %d: release failed (%s); its lease will expire", shard, exc)

    def _update_subscriptions(self) -> None:
        with self._lock:
            self.events.want({s.keys.events for s in self.shards.values()})

    # -- loading the horizon -------------------------------------------------------------

    def load(self, state: ShardState) -> int:
        """Put the shard's timers due within the horizon in the wheel (overdue first)."""
        until = self.clock.now_ms() + self.settings.horizon_ms
        if state.needs_reload:
            state.loaded = set()
        with map_errors(self.client.where):
            buckets, due = read_due(
                self.client.redis, state.keys, until, state.loaded,
                max_ids=self.settings.max_load,
            )  # fmt: skip
        added = 0
        with self._lock:
            if self.shards.get(state.shard) is not state:
                return 0
            for deadline, tid in due:
                if tid not in state.tasks:
                    self._add_task(state, tid, deadline)
                    added += 1
            # Only buckets wholly inside the horizon count as loaded (later loads skip
            # them; events fill them in). One straddling the edge is read again next time:
            # a timer scheduled into it beyond the horizon while we read would be missed.
            width = self.meta.bucket_ms
            state.loaded.update(n for n in buckets if (n + 1) * width <= until)
            # Buckets whose end is long past were swept: forget them (bounded memory).
            old = (self.clock.now_ms() - 4 * self.meta.bucket_ms) // self.meta.bucket_ms
            state.loaded = {n for n in state.loaded if n >= old}
            state.needs_reload = False
            state.more_to_load = len(due) >= self.settings.max_load  # a backlog: next tick
            state.last_load_mono_ms = self.clock.mono_ms()
        self.stats.loaded += added
        return added

    def _add_task(
        self, state: ShardState, tid: str, deadline_ms: int, min_delay_ms: int = -1
    ) -> None:
        # min_delay_ms=1 for entries Redis called early: our clock runs ahead of Redis's,
        # so retry a millisecond later instead of spinning on fire until it catches up.
        delay = max(min_delay_ms, deadline_ms - self.clock.now_ms())
        task = FireTask(delay, state.shard, state.epoch, tid, deadline_ms, self.fire_queue)
        old = state.tasks.get(tid)
        if old is not None:
            old.cancel()
        state.tasks[tid] = task
        self.timer.add(task)

    def _on_event(self, channel: str, data: str) -> None:
        kind, rest = data.split(" ", 1)
        shard = int(channel.rsplit(":", 2)[-2])
        with self._lock:
            state = self.shards.get(shard)
            if state is None:
                return
            if kind in ("S", "R"):
                deadline_s, tid = rest.split(" ", 1)
                deadline = int(deadline_s)
                # A loaded bucket must hold all its timers in the wheel (load skips it from
                # now on), even those beyond the horizon edge it straddles.
                within = (
                    deadline <= self.clock.now_ms() + self.settings.horizon_ms
                    or deadline // self.meta.bucket_ms in state.loaded
                )
                if kind == "S" and tid in state.tasks:
                    return
                if within:
                    self._add_task(state, tid, deadline)
                elif tid in state.tasks:
                    state.tasks.pop(tid).cancel()
            elif kind == "X":
                outcome, tid = rest.split(" ", 1)
                if outcome == "completed":
                    self.stats.completed_seen += 1
                elif outcome == "cancelled":
                    self.stats.cancelled_seen += 1
                task = state.tasks.pop(tid, None)
                if task is not None:
                    task.cancel()

    def _on_subscribed(self, channel: str) -> None:
        shard = int(channel.rsplit(":", 2)[-2])
        with self._lock:
            state = self.shards.get(shard)
            if state is not None:
                state.needs_reload = True

    def _on_reconnect(self) -> None:
        self.stats.reloads += 1
        with self._lock:
            for state in self.shards.values():
                state.needs_reload = True

    # -- firing --------------------------------------------------------------------------

    def fire_batch(self, tasks: Iterable[FireTask]) -> int:
        """Fire expired wheel entries, grouped by shard and epoch; returns how many fired."""
        groups: dict[tuple[int, int], list[FireTask]] = {}
        for task in tasks:
            groups.setdefault((task.shard, task.epoch), []).append(task)
        fired_total = 0
        for (shard, epoch), candidates in groups.items():
            with self._lock:
                state = self.shards.get(shard)
                if state is None or state.epoch != epoch:
                    continue  # dropped since: its next leader fires these
                live = [t for t in candidates if state.tasks.get(t.timer_id) is t]
            live.sort(key=lambda t: t.deadline_ms)
            for start in range(0, len(live), self.settings.fire_batch):
                fired_total += self._fire(state, live[start : start + self.settings.fire_batch])
        return fired_total

    def _fire(self, state: ShardState, group: list[FireTask]) -> int:
        k, ids = state.keys, [t.timer_id for t in group]
        try:
            fired, early = self.client.scripts.fire(
                keys=[k.timers, k.buckets, k.outcomes, k.lease, k.epoch,
                      *(k.result(i) for i in ids)],
                args=[k.prefix, self.id, state.epoch, self.meta.bucket_ms,
                      self.settings.result_ttl_ms, k.events, *ids],
            )  # fmt: skip
        except redis.RedisError as exc:
            err = translate(exc, self.client.where)
            if isinstance(err, Fenced):
                self.stats.fence_rejections += 1
                log.warning("shard %d: fenced at epoch %d; dropping it", state.shard, state.epoch)
                self.drop(state.shard, release=False)
                return 0
            raise err from None
        now = self.clock.now_ms()
        fired_ids = {x.decode("utf-8", "surrogatepass") for x in fired}
        early_at = {
            early[i].decode("utf-8", "surrogatepass"): int(early[i + 1])
            for i in range(0, len(early), 2)
        }
        with self._lock:
            alive = self.shards.get(state.shard) is state
            for task in group:
                tid = task.timer_id
                if tid in fired_ids:
                    self._record_lateness(now - task.deadline_ms)
                if state.tasks.get(tid) is not task:
                    continue
                if tid in early_at and alive:  # Redis time says not yet: try again later
                    self.stats.early_reinserted += 1
                    self._add_task(state, tid, early_at[tid], min_delay_ms=1)
                else:  # fired here, or decided by someone else meanwhile
                    del state.tasks[tid]
        self.stats.fired += len(fired)
        return len(fired)

    def _record_lateness(self, ms: int) -> None:
        self.lateness_histogram.observe(ms)

    def _firer_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                first = self.fire_queue.get(timeout=0.2)
            except queue.Empty:
                continue
            batch = [first]
            while len(batch) < self.settings.fire_batch * 4:
                try:
                    batch.append(self.fire_queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self.fire_batch(batch)
            except TimerError as exc:
                self.stats.redis_errors += 1
                log.warning("firing failed (%s); entries go back to the wheel", exc)
                with self._lock:
                    for task in batch:
                        state = self.shards.get(task.shard)
                        if state is not None and state.tasks.get(task.timer_id) is task:
                            self._add_task(state, task.timer_id, task.deadline_ms)
                self._stopping.wait(0.1)

    # -- sweeping ------------------------------------------------------------------------

    def sweep(self, state: ShardState) -> int:
        """Expire what is left in the shard's ended buckets (pub/sub is never trusted)."""
        k = state.keys
        total = 0
        for _ in range(self.settings.max_sweeps_per_tick):  # the rest waits for the next tick
            try:
                fired, more = self.client.scripts.sweep(
                    keys=[k.timers, k.buckets, k.outcomes, k.lease, k.epoch],
                    args=[k.prefix, self.id, state.epoch, self.meta.bucket_ms,
                          self.settings.result_ttl_ms, k.events, self.settings.sweep_limit],
                )  # fmt: skip
            except redis.RedisError as exc:
                err = translate(exc, self.client.where)
                if isinstance(err, Fenced):
                    self.stats.fence_rejections += 1
                    self.drop(state.shard, release=False)
                    return total
                raise err from None
            now = self.clock.now_ms()
            with self._lock:
                for i in range(0, len(fired), 2):
                    tid = fired[i].decode("utf-8", "surrogatepass")
                    self._record_lateness(now - int(fired[i + 1]))
                    task = state.tasks.pop(tid, None)
                    if task is not None:
                        task.cancel()
            total += len(fired) // 2
            if not int(more):
                state.last_sweep_mono_ms = self.clock.mono_ms()
                break
        # else: ended buckets still hold timers; the next tick sweeps again, interval or not
        self.stats.swept += total
        return total

    def trim(self, states: list[ShardState]) -> int:
        """Drop the shards' outcomes past the retention that every consumer group has acked
        (one pipelined round trip for all of them).

        Not fenced: trimming is idempotent and keeps what any group still owes, so a
        stale leader doing it is harmless.
        """
        retention = self.settings.outcome_retention_ms
        done = self.client.trim_outcomes(retention, shards=[st.shard for st in states])
        now = self.clock.mono_ms()
        for state in states:
            state.last_trim_mono_ms = now
        removed = sum(t.removed for t in done)
        self.stats.outcomes_trimmed += removed
        return removed

    # -- the loop ------------------------------------------------------------------------

    def tick(self) -> None:
        """One round of housekeeping: heartbeat, leases, loading ahead, sweeping, trimming."""
        s = self.settings
        if not self.clock.ready:
            self._sync_clock()
        mono = self.clock.mono_ms()
        if mono - self._last_heartbeat >= s.renew_every_ms:
            self.heartbeat()
        self.rebalance()
        for state in list(self.shards.values()):
            due_again = mono - state.last_load_mono_ms >= s.horizon_ms / 4
            if state.needs_reload or state.more_to_load or due_again:
                self.load(state)
            if mono - state.last_sweep_mono_ms >= s.sweep_interval_ms:
                self.sweep(state)
        if s.outcome_retention_ms:
            due = [st for st in self.shards.values() if st.last_trim_mono_ms is None
                   or mono - st.last_trim_mono_ms >= s.trim_interval_ms]  # fmt: skip
            if due:
                self.trim(due)

    def run_once(self) -> int:
        """A deterministic round for tests: tick, then expire and fire what is due now."""
        self.tick()
        while self.timer.advance_clock(0):
            pass
        done = threading.Event()

        class _Marker(FireTask):
            __slots__ = ()

            def run(self) -> None:
                done.set()

        self.timer.add(_Marker(-1, -1, -1, "", 0, self.fire_queue))
        done.wait(10)
        batch: list[FireTask] = []
        while True:
            try:
                batch.append(self.fire_queue.get_nowait())
            except queue.Empty:
                break
        return self.fire_batch(batch)

    def run(self) -> None:
        """Run until ``stop()`` (or SIGTERM in the CLI): threads for the wheel, firing, events."""
        self._reaper = SystemTimerReaper(self.timer)
        self._firer = threading.Thread(target=self._firer_loop, name="worker-firer", daemon=True)
        self._firer.start()
        self.events.start()
        backoff = 0.05
        tick_s = min(0.1, self.settings.renew_every_ms / 4000)
        while not self._stopping.is_set():
            try:
                self.tick()
                backoff = 0.05
                self._stopping.wait(tick_s)
            except TimerError as exc:
                self.stats.redis_errors += 1
                log.warning("worker %s: %s; retrying in %.2fs", self.id, exc, backoff)
                self._drop_expired_leases()
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 2.0)
        self._shutdown()

    def _drop_expired_leases(self) -> None:
        s, now = self.settings, self.clock.mono_ms()
        for state in list(self.shards.values()):
            if now - state.renewed_mono_ms >= s.lease_ms - s.lease_ms // 6:
                self.stats.leases_lost += 1
                self.drop(state.shard, release=False)

    def stop(self) -> None:
        self._stopping.set()

    def _shutdown(self) -> None:
        if self._firer is not None:
            self._firer.join(5)
        for shard in list(self.shards):
            self.drop(shard, release=True)
        try:
            with map_errors(self.client.where):
                self.client.redis.zrem(self.client.keys.workers, self.id)
        except TimerError:
            pass
        self.events.stop()
        if self._reaper is not None:
            self._reaper.close()
        else:
            self.timer.close()

    def close(self) -> None:
        """For run_once users: release leases and stop the wheel."""
        self._stopping.set()
        self._shutdown()
