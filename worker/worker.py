"""The worker: leads a fair share of a namespace's shards and fires their timers.

Per led shard (lease at epoch ``e``): load the durable buckets due within the horizon
into the in-memory wheel (the engine's ``SystemTimer``), oldest first, so overdue timers
fire at once (catch-up); keep loading ahead as time passes; follow the shard's events;
fire expired entries in batches through the fenced ``fire`` script; ``sweep`` every
ended bucket. A ``FENCED`` reply, a failed renewal, or a renewal that could not happen in
time drops the shard at once: a paused or partitioned ex-leader never fires.
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, TypeVar

from timer import SystemTimer, SystemTimerReaper, TimerClient, TimerError
from timer.durable.calls import parse_events
from timer.durable.models import Event, Meta
from timer.errors import Fenced, StoreError

from .events import EventListener
from .logs import RateLimitedLog
from .redis_clock import RedisClock
from .settings import WorkerSettings
from .shard import FireTask, ShardState
from .stats import Health, LatenessHistogram, ShardFigures, WorkerStats

log = logging.getLogger("worker")
BACKLOG_EVERY_MS = 5_000  # how often a led shard's pending count and oldest bucket are read


class _Timed(Protocol):
    @property
    def now_ms(self) -> int: ...


L = TypeVar("L", bound=_Timed)


class Worker:
    """Leads a fair share of a namespace's shards and fires their timers.

    ``run()`` until ``stop()``; ``run_once()`` is the deterministic mode for tests (one
    tick, then fire what is due now). Knobs are in :class:`WorkerSettings`.

    Threads: the caller's runs ``tick`` (heartbeat, leases, loading, sweeping, trimming);
    the wheel's reaper and executor expire tasks into ``fire_queue``; the firer thread
    sends them through ``ShardStore.fire``; the events thread follows pub/sub. Shard
    state is guarded by one lock, never held across a call to Redis from the firer.
    Every Redis call goes through the client (``heartbeat``, ``leave``) or a shard's
    ``ShardStore``; the worker builds no key.
    """

    def __init__(self, client: TimerClient, settings: WorkerSettings | None = None) -> None:
        self.client = client
        self.settings = settings or WorkerSettings()
        self.id = self.settings.worker_id
        self.clock = RedisClock()
        # Inline: a FireTask only puts itself on fire_queue, so the reaper runs it directly
        # instead of handing it to an executor thread first (one thread hop fewer).
        self.timer = SystemTimer(f"worker-{self.id}", inline=True)
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
            client.events_pubsub, self._on_event, self._on_reconnect, self._on_subscribed
        )
        self._ready = False
        self._warn = RateLimitedLog(log, every_s=10.0)
        self._loop_mono_ms: float | None = None  # the run loop's last turn, ok or not
        self._tick_ok_mono_ms: float | None = None  # the last tick that succeeded
        self._last_error = ""
        self._failing_until: dict[int | None, float] = {}  # cluster: shards backed off

    @property
    def meta(self) -> Meta:
        return self.client.meta  # read once by the client, then cached

    def prepare(self) -> None:
        """Read the namespace and check the server (version, eviction policy, AOF) once.

        ConfigError if the namespace does not exist or the server may evict timers
        (unless ``allow_eviction``); StoreError while Redis cannot be reached.
        """
        if self._ready:
            return
        _ = self.client.meta
        try:
            notes = self.client.check_durability(allow_eviction=self.settings.allow_eviction)
        except StoreError as exc:
            if exc.code != "NOPERM":
                raise
            notes = [  # an ACL user without INFO: run, but say what went unchecked
                "this worker's ACL user may not run INFO, so the servers' eviction policy "
                "and AOF go unchecked; grant +info (README, Security) to have them checked"
            ]
        for note in notes:
            log.warning("%s", note)
        self._ready = True

    def _wait_until_ready(self) -> bool:
        """``prepare`` with backoff while Redis is unreachable; False if stopped meanwhile."""
        backoff = 0.05
        while not self._stopping.is_set():
            try:
                self.prepare()
                return True
            except StoreError as exc:
                self._loop_mono_ms, self._last_error = self.clock.mono_ms(), str(exc)
                self._warn.warning("worker %s: waiting for Redis: %s", self.id, exc)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 2.0)
        return False

    # -- Redis time --------------------------------------------------------------------

    def _sync_clock(self) -> None:
        sent = self.clock.mono_ms()
        server_ms = self.client.server_time_ms()
        self.clock.observe(server_ms, sent, self.clock.mono_ms())

    def _timed(self, lease_call: Callable[..., L], *args: object) -> tuple[L, float]:
        """Run a lease call; learn the clock offset from the Redis TIME it carries back."""
        sent = self.clock.mono_ms()
        reply = lease_call(*args)
        self.clock.observe(reply.now_ms, sent, self.clock.mono_ms())
        return reply, sent

    # -- membership and leases -----------------------------------------------------------

    def heartbeat(self) -> int:
        """Announce this worker; return how many workers are live."""
        live = self.client.heartbeat(
            self.id, now_ms=self.clock.now_ms(), live_window_ms=self.settings.live_window_ms
        )
        self._live = max(1, live)
        self._last_heartbeat = self.clock.mono_ms()
        return self._live

    @property
    def fair_share(self) -> int:
        return math.ceil(self.meta.shards / self._live)

    def renew_leases(self) -> None:
        """Renew each lease that is due; drop a shard whose lease is lost or too old.

        Cheap when nothing is due (a clock read per shard), so the tick calls it between
        every piece of slow work (each shard's load, each sweep call): a long catch-up
        never holds a renewal back (#14: a 200k burst once cost a worker all its leases).
        """
        s = self.settings
        now = self.clock.mono_ms()
        for state in list(self.shards.values()):
            if now - state.renewed_mono_ms >= s.lease_ms - s.lease_ms // 6:
                log.warning(
                    "shard %d: lease could not be renewed in time; dropping it", state.shard
                )
                self.stats.leases_lost += 1
                self.drop(state.shard, release=False)
            elif now - state.renewed_mono_ms >= s.renew_every_ms and not self._failing(state.shard):
                try:
                    renewal, sent = self._timed(state.store.renew, self.id, state.epoch, s.lease_ms)
                except StoreError as exc:
                    self._shard_failed(state.shard, "renewing its lease", exc)
                    continue  # dropped above once too late; other shards go on
                if renewal.renewed:
                    state.renewed_mono_ms = sent
                else:
                    log.warning("shard %d: lease lost at epoch %d", state.shard, state.epoch)
                    self.stats.leases_lost += 1
                    self.drop(state.shard, release=False)

    def rebalance(self) -> None:
        """Renew what is held, drop what is lost, release extras, take free shards."""
        self.renew_leases()
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
                if shard not in self.shards and not self._failing(shard):
                    try:
                        self.acquire(shard)
                    except StoreError as exc:
                        self._shard_failed(shard, "acquiring it", exc)

    def acquire(self, shard: int) -> bool:
        store = self.client.shard_store(shard)
        grant, sent = self._timed(store.acquire, self.id, self.settings.lease_ms)
        if not grant.acquired:
            return False
        epoch = grant.epoch
        with self._lock:
            # The first sweep waits a sweep interval: catch-up goes through the wheel, in
            # deadline order, rather than bucket by bucket in set order.
            self.shards[shard] = ShardState(
                shard, epoch, store, renewed_mono_ms=sent, last_sweep_mono_ms=sent
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
                released = state.store.release(self.id, state.epoch)
                self.stats.leases_released += int(released)
            except TimerError as exc:
                log.warning("shard %d: release failed (%s); its lease will expire", shard, exc)

    def _update_subscriptions(self) -> None:
        with self._lock:
            self.events.want({s.store.events_channel for s in self.shards.values()})

    # -- loading the horizon -------------------------------------------------------------

    def load(self, state: ShardState) -> int:
        """Put the shard's timers due within the horizon in the wheel (overdue first)."""
        until = self.clock.now_ms() + self.settings.horizon_ms
        if state.needs_reload:
            state.loaded = set()
        due = state.store.read_due(until, state.loaded, max_ids=self.settings.max_load)
        added = 0
        with self._lock:
            if self.shards.get(state.shard) is not state:
                return 0
            for deadline, tid in due.timers:
                if tid not in state.tasks:
                    self._add_task(state, tid, deadline)
                    added += 1
            # Only buckets wholly inside the horizon count as loaded (later loads skip
            # them; events fill them in). One straddling the edge is read again next time:
            # a timer scheduled into it beyond the horizon while we read would be missed.
            width = self.meta.bucket_ms
            state.loaded.update(n for n in due.buckets if (n + 1) * width <= until)
            # Buckets whose end is long past were swept: forget them (bounded memory).
            old = (self.clock.now_ms() - 4 * self.meta.bucket_ms) // self.meta.bucket_ms
            state.loaded = {n for n in state.loaded if n >= old}
            state.needs_reload = False
            state.more_to_load = len(due.timers) >= self.settings.max_load  # backlog: next tick
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
        shard = self.client.shard_of_channel(channel)
        events = parse_events(data)  # one, or a schedule call's batch
        with self._lock:
            state = self.shards.get(shard) if shard is not None else None
            if state is None:
                return
            for event in events:
                self._apply_event(state, event)

    def _apply_event(self, state: ShardState, event: Event) -> None:
        tid = event.timer_id
        if event.deadline_ms is not None:  # scheduled or rescheduled
            deadline = event.deadline_ms
            # A loaded bucket must hold all its timers in the wheel (load skips it from
            # now on), even those beyond the horizon edge it straddles.
            within = (
                deadline <= self.clock.now_ms() + self.settings.horizon_ms
                or deadline // self.meta.bucket_ms in state.loaded
            )
            if event.kind == "scheduled" and tid in state.tasks:
                return
            if within:
                self._add_task(state, tid, deadline)
            elif tid in state.tasks:
                state.tasks.pop(tid).cancel()
        else:  # decided
            if event.outcome == "completed":
                self.stats.completed_seen += 1
            elif event.outcome == "cancelled":
                self.stats.cancelled_seen += 1
            task = state.tasks.pop(tid, None)
            if task is not None:
                task.cancel()

    def _on_subscribed(self, channel: str) -> None:
        shard = self.client.shard_of_channel(channel)
        with self._lock:
            state = self.shards.get(shard) if shard is not None else None
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
                part = live[start : start + self.settings.fire_batch]
                try:
                    fired_total += self._fire(state, part)
                except StoreError as exc:
                    self._shard_failed(shard, "firing", exc)
                    self._retry_later(state, part)
        return fired_total

    def _retry_later(self, state: ShardState, tasks: list[FireTask]) -> None:
        """Put tasks a failed fire could not decide back in the wheel, a little later (so a
        dead node is not hammered), leaving every other shard's firing alone."""
        with self._lock:
            for task in tasks:
                if state.tasks.get(task.timer_id) is task:
                    self._add_task(state, task.timer_id, task.deadline_ms, min_delay_ms=100)

    def _fire(self, state: ShardState, group: list[FireTask]) -> int:
        ids = [t.timer_id for t in group]
        try:
            # ahead: the shard's timers in the wheel will be decided soon (fired, or
            # cancelled: each leaves an outcome), so the results table grows for them
            # before they land, when that moves least (rx_grow in lua/include/results.lua)
            result = state.store.fire(
                self.id, state.epoch, ids, ttl_ms=self.settings.result_ttl_ms,
                ahead=len(state.tasks),
            )  # fmt: skip
        except Fenced:
            self.stats.fence_rejections += 1
            log.warning("shard %d: fenced at epoch %d; dropping it", state.shard, state.epoch)
            self.drop(state.shard, release=False)
            return 0
        now = self.clock.now_ms()
        fired_ids, early_at = set(result.fired), result.early
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
        self.stats.fired += len(result.fired)
        return len(result.fired)

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
                self._warn.warning("firing failed (%s); entries go back to the wheel", exc)
                with self._lock:
                    for task in batch:
                        state = self.shards.get(task.shard)
                        if state is not None and state.tasks.get(task.timer_id) is task:
                            self._add_task(state, task.timer_id, task.deadline_ms)
                self._stopping.wait(0.1)

    # -- sweeping ------------------------------------------------------------------------

    def sweep(self, state: ShardState) -> int:
        """Expire what is left in the shard's ended buckets (pub/sub is never trusted)."""
        s = self.settings
        total = 0
        for _ in range(s.max_sweeps_per_tick):  # the rest waits for the next tick
            self.renew_leases()  # a long sweep never holds a renewal back
            if self.shards.get(state.shard) is not state:
                return total  # its lease was lost meanwhile
            try:
                swept = state.store.sweep(
                    self.id, state.epoch, ttl_ms=s.result_ttl_ms, limit=s.sweep_limit,
                    ahead=len(state.tasks),
                )  # fmt: skip
            except Fenced:
                self.stats.fence_rejections += 1
                self.drop(state.shard, release=False)
                return total
            now = self.clock.now_ms()
            with self._lock:
                for tid, deadline in swept.fired:
                    self._record_lateness(now - deadline)
                    task = state.tasks.pop(tid, None)
                    if task is not None:
                        task.cancel()
            total += len(swept.fired)
            self.stats.cascaded += swept.moved
            if not swept.more:
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
        retention = self.settings.outcome_retention_ms or None  # 0: keep the stream
        done = self.client.trim_outcomes(retention, shards=[st.shard for st in states])
        now = self.clock.mono_ms()
        for state in states:
            state.last_trim_mono_ms = now
        removed = sum(t.removed for t in done)
        self.stats.outcomes_trimmed += removed
        self.stats.results_dropped += sum(t.results_dropped for t in done)
        return removed

    # -- the loop ------------------------------------------------------------------------

    def tick(self) -> None:
        """One round of housekeeping: heartbeat, leases, loading ahead, sweeping, trimming."""
        self.prepare()
        s = self.settings
        if not self.clock.ready:
            self._sync_clock()
        mono = self.clock.mono_ms()
        self.rebalance()  # renewals first: nothing else in a tick may delay them
        if mono - self._last_heartbeat >= s.heartbeat_every_ms and not self._failing(None):
            try:
                self.heartbeat()
            except StoreError as exc:  # the fair share stays as last measured
                self._shard_failed(None, "heartbeat", exc)
        for state in list(self.shards.values()):
            self.renew_leases()  # after the previous shard's loading and sweeping
            if self._failing(state.shard) or self.shards.get(state.shard) is not state:
                continue
            due_again = mono - state.last_load_mono_ms >= s.horizon_ms / 4
            try:
                if state.needs_reload or state.more_to_load or due_again:
                    self.load(state)
                if mono - state.last_sweep_mono_ms >= s.sweep_interval_ms:
                    self.sweep(state)
                last = state.last_backlog_mono_ms
                if last is None or mono - last >= BACKLOG_EVERY_MS:
                    state.pending, state.oldest_bucket_ms = state.store.backlog()
                    state.last_backlog_mono_ms = mono
            except StoreError as exc:
                self._shard_failed(state.shard, "loading or sweeping", exc)
        # trimmed even when the stream is kept for ever: the results table
        due = [st for st in self.shards.values() if not self._failing(st.shard) and (
               st.last_trim_mono_ms is None
               or mono - st.last_trim_mono_ms >= s.trim_interval_ms)]  # fmt: skip
        if due:
            try:
                self.trim(due)
            except StoreError as exc:
                self._shard_failed(None, "trimming outcomes", exc)

    def run_once(self) -> int:
        """A deterministic round for tests: tick, then expire and fire what is due now."""
        self.tick()
        # The timer runs inline: once advance_clock returns, every FireTask due by now
        # (and every overdue one load added) is on fire_queue.
        self.timer.advance_clock(0)
        batch: list[FireTask] = []
        while True:
            try:
                batch.append(self.fire_queue.get_nowait())
            except queue.Empty:
                break
        return self.fire_batch(batch)

    def run(self, *, handle_signals: bool | None = None) -> None:
        """Run until ``stop()``: threads for the wheel, firing and events; then release.

        Start-up waits (with backoff) while Redis is unreachable. ``handle_signals``
        (default: when called on the main thread) makes SIGTERM and SIGINT stop the
        worker gracefully, releasing its leases, and restores the old handlers after.
        A ConfigError at start-up (no namespace, an evicting server) is raised.
        """
        with _graceful_stop(self, handle_signals):
            if not self._wait_until_ready():
                self._shutdown()
                return
            self._reaper = SystemTimerReaper(self.timer)
            self._firer = threading.Thread(
                target=self._firer_loop, name="worker-firer", daemon=True
            )
            self._firer.start()
            self.events.start()
            backoff = 0.05
            tick_s = min(0.1, self.settings.renew_every_ms / 4000)
            while not self._stopping.is_set():
                try:
                    self.tick()
                    self._loop_mono_ms = self._tick_ok_mono_ms = self.clock.mono_ms()
                    backoff = 0.05
                    self._stopping.wait(tick_s)
                except TimerError as exc:
                    self._loop_mono_ms, self._last_error = self.clock.mono_ms(), str(exc)
                    self.stats.redis_errors += 1
                    self._warn.warning("worker %s: %s; retrying", self.id, exc)
                    self._drop_expired_leases()
                    self._stopping.wait(backoff)
                    backoff = min(backoff * 2, 2.0)
            self._shutdown()

    def shard_figures(self) -> list[ShardFigures]:
        """Per led shard: timers in the wheel, pending in Redis, sweep lag (for metrics)."""
        now = self.clock.now_ms() if self.clock.ready else None
        width = self.meta.bucket_ms if self._ready else 0
        out = []
        with self._lock:
            for shard, st in sorted(self.shards.items()):
                lag = None
                if now is not None and st.last_backlog_mono_ms is not None:
                    ended = None if st.oldest_bucket_ms is None else st.oldest_bucket_ms + width
                    lag = 0 if ended is None else max(0, now - ended)
                out.append(ShardFigures(shard, len(st.tasks), st.pending, lag))
        return out

    def health(self) -> Health:
        """Liveness and readiness, with the reasons when not (for probes).

        Ready: started (Redis reached, namespace read), clock synced to Redis, and a
        tick that succeeded within half a lease (a worker that cannot tick cannot renew
        its leases). Live: the run loop turned (even failing) within two leases or 10 s,
        whichever is longer, so a wedged process is restarted, a Redis outage is not.
        """
        now = self.clock.mono_ms()
        lease = self.settings.lease_ms
        reasons: list[str] = []
        if self._stopping.is_set():
            reasons.append("stopping")
        if not self._ready:
            reasons.append("not started: " + (self._last_error or "starting"))
        elif not self.clock.ready:
            reasons.append("clock not yet synced to Redis")
        ok = self._tick_ok_mono_ms
        if self._ready and (ok is None or now - ok > lease / 2):
            since = "never" if ok is None else f"{now - ok:.0f} ms ago"
            reasons.append(f"last successful tick {since}: {self._last_error or 'starting'}")
        loop = self._loop_mono_ms
        stuck_ms = 0.0 if loop is None else now - loop
        live = stuck_ms <= max(2 * lease, 10_000)
        if not live:
            reasons.append(f"run loop stuck for {stuck_ms:.0f} ms")
        age = None if ok is None else round(now - ok)
        return Health(live=live, ready=not reasons, reasons=tuple(reasons), tick_age_ms=age)

    def _shard_failed(self, shard: int | None, doing: str, exc: StoreError) -> None:
        """A Redis error while working on one shard (None: the namespace's keys).

        On a Redis Cluster the shard's node may be down while the others serve: count it,
        say it (rate-limited) and go on with the other shards, so one node's failure
        touches only its own shards. On one server every shard shares its fate: re-raise,
        and the loop backs off as a whole.
        """
        if not self.client.cluster:
            raise exc
        # Leave it alone for a third of a lease, so calls to a dead node (each may wait
        # out retries) cannot eat the time the healthy shards' renewals need.
        self._failing_until[shard] = self.clock.mono_ms() + self.settings.renew_every_ms
        self.stats.redis_errors += 1
        what = "namespace" if shard is None else f"shard {shard}"
        self._warn.warning("%s: %s failed (%s); other shards go on", what, doing, exc)

    def _failing(self, shard: int | None) -> bool:
        """True while a recent failure on this shard (None: namespace keys) is backed off."""
        until = self._failing_until.get(shard)
        return until is not None and self.clock.mono_ms() < until

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
        with contextlib.suppress(TimerError):  # gone from the live set within a TTL anyway
            self.client.leave(self.id)
        self.events.stop()
        if self._reaper is not None:
            self._reaper.close()
        else:
            self.timer.close()

    def close(self) -> None:
        """For run_once users: release leases and stop the wheel."""
        self._stopping.set()
        self._shutdown()


@contextlib.contextmanager
def _graceful_stop(worker: Worker, handle_signals: bool | None) -> Iterator[None]:
    """SIGTERM and SIGINT call ``worker.stop()`` inside the block (main thread only)."""
    on_main = threading.current_thread() is threading.main_thread()
    if not (on_main if handle_signals is None else handle_signals and on_main):
        yield
        return

    def on_signal(signum: int, _frame: object) -> None:
        log.info("worker %s: %s received; stopping", worker.id, signal.Signals(signum).name)
        worker.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
