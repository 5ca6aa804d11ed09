"""The worker: leads a fair share of a namespace's shards and fires their timers.

Per led shard (lease at epoch ``e``): load the durable buckets due within the horizon
into the in-memory wheels (the engine's ``SystemTimer``: one for the default and lower
priorities, one for the raised ones, each holding every led shard's timers), oldest
first, so overdue timers fire at once (catch-up); keep loading ahead as time passes;
follow the shard's events; fire expired entries in batches through the fenced ``fire``
script; ``sweep`` every ended bucket. A ``FENCED`` reply, a failed renewal, or a
renewal that could not happen in time drops the shard at once: a paused or partitioned
ex-leader never fires.

A worker is seven collaborating parts around one shared :class:`WorkerContext`:

    leases.Leases          membership and leases (heartbeat, fair share, renew, acquire,
                           drop)
    loading.Loader         loading the horizon into the wheels, and the shards' events
    firing.Firer           firing what the wheels expire
    planning.Planner       the next occurrence of recurring schedules, armed as one fires
    upkeep.Upkeep          sweeping ended buckets, trimming old outcomes
    history.HistoryWriter  what it saw, added to the namespace's per-minute history
    card.CardWriter        what it says of itself (version, host, figures), for its page

and this module's loop, which ticks them (``duties.Duties``: a table of what a tick does,
in order) and says whether it is healthy.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator

from timer import SystemTimerReaper, TimerClient, TimerError
from timer.clock import Time
from timer.durable.model.models import Meta
from timer.errors import StoreError
from timer.signals import stop_on_signals

from .card import CardWriter
from .context import WorkerContext
from .duties import Duties
from .firing import Firer, HandOff
from .history import HistoryWriter
from .leases import Leases
from .loading import Loader
from .planning import Planner
from .settings import WorkerSettings
from .stats import Health, ShardFigures
from .upkeep import Upkeep

log = logging.getLogger("worker")


WORKER_CLUSTER_RETRY_S = 0.0
OOM_RETRY_S = 0.2  # the loop's pause after a tick Redis refused for want of memory


class Worker:
    """Leads a fair share of a namespace's shards and fires their timers.

    ``run()`` until ``stop()``; ``run_once()`` is the deterministic mode for tests (one
    tick, then fire what is due now). Knobs are in :class:`WorkerSettings`.

    Threads: the caller's runs ``tick`` (heartbeat and leases, loading, sweeping,
    trimming); the wheel's reaper expires tasks onto ``fire_queue`` (inline); the firer
    thread (``worker-firer``) sends them through ``ShardStore.fire``; the events thread
    follows pub/sub. Shard state is guarded by one lock, never held across a call to
    Redis from the firer. Every Redis call goes through the client (``heartbeat``,
    ``leave``) or a shard's ``ShardStore``; the worker builds no key.
    """

    def __init__(
        self,
        client: TimerClient,
        settings: WorkerSettings | None = None,
        *,
        hand_to: Callable[[], HandOff | None] | None = None,
        time: Time | None = None,
    ) -> None:
        """``hand_to``: the handler runner of this process, if one runs now, that its
        fire calls read the outcomes they decide for (``fire_and_handle``). ``time``:
        where it reads the clock, sleeps and waits (default: its client's, the system's
        unless the client was given another: :mod:`timer.clock`)."""
        settings = settings or WorkerSettings()
        # On a cluster, a call that must wait (a slot moving, a failover) is left to the
        # next tick, not retried within it: one shard's wait would hold the fires and
        # renewals of the others, pipelined with it (a redirect is still followed at once).
        client.cluster_retry_s = WORKER_CLUSTER_RETRY_S
        self.ctx = ctx = WorkerContext(
            client, settings, settings.worker_id, time=client.time if time is None else time
        )
        self.time = ctx.time
        self.loader = Loader(ctx)
        self.history = HistoryWriter(ctx)
        # What it counted is written as a shard leaves it: a worker that lost its leases
        # may be about to be killed, and the next leader counts from here on.
        self.leases = Leases(ctx, self.loader, on_drop=self.history.flush_now)
        self.planner = Planner(ctx, self.loader)
        self.firer = Firer(ctx, self.loader, self.leases, self.planner, hand_to)
        self.upkeep = Upkeep(ctx, self.leases, self.planner)
        self.card = CardWriter(ctx)
        # The parts' shared state, by the names the metrics, the CLI and tests read.
        self.client, self.settings, self.id = client, settings, ctx.id
        self.clock, self.timer, self.shards, self.stats = (
            ctx.clock,
            ctx.timer,
            ctx.shards,
            ctx.stats,
        )
        self.lateness_histogram = ctx.lateness
        self.fire_stages = ctx.stages
        self.events = self.loader.events
        self.duties = Duties(
            ctx,
            leases=self.leases,
            loader=self.loader,
            upkeep=self.upkeep,
            planner=self.planner,
            card=self.card,
            history=self.history,
        )
        self._reapers: list[SystemTimerReaper] = []
        self._firer: threading.Thread | None = None
        self._ready = False
        self._loop_mono_ms: float | None = None  # the run loop's last turn, ok or not
        self._tick_ok_mono_ms: float | None = None  # the last tick that succeeded
        self._last_error = ""

    @property
    def meta(self) -> Meta:
        return self.ctx.meta

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
                "and AOF go unchecked; grant +info to have them checked "
                "(https://tickwheel.readthedocs.io/guides/security/)"
            ]
        for note in notes:
            log.warning("%s", note, extra=self.ctx.fields())
        self._ready = True

    def _wait_until_ready(self) -> bool:
        """``prepare`` with backoff while Redis is unreachable; False if stopped meanwhile."""
        backoff = 0.05
        while not self.ctx.stopping.is_set():
            try:
                self.prepare()
                return True
            except StoreError as exc:
                self._loop_mono_ms, self._last_error = self.clock.mono_ms(), str(exc)
                self.ctx.warn.warning(
                    "worker %s: waiting for Redis: %s", self.id, exc, extra=self.ctx.fields()
                )
                self.time.wait(self.ctx.stopping, backoff)
                backoff = min(backoff * 2, 2.0)
        return False

    # -- the loop ------------------------------------------------------------------------

    def tick(self) -> None:
        """One round of housekeeping: the worker's duties in their table's order."""
        self.prepare()
        self.duties.tick(self.clock.mono_ms())

    def run_once(self) -> int:
        """A deterministic round for tests: tick, then expire and fire what is due now.
        On virtual time (a simulation, ``timer.testing``) the shards' events are read
        too, without a thread: what was scheduled since the last round is in the wheel."""
        self.tick()
        if self.time.virtual:
            self.events.pump()
        # The timer runs inline: once advance_clock returns, every FireTask due by now
        # (and every overdue one load added) is on fire_queue.
        self.ctx.raised.advance_clock(0)
        self.timer.advance_clock(0)
        return self.firer.fire_batch(self.firer.due_now())

    def run(self, *, handle_signals: bool | None = None) -> None:
        """Run until ``stop()``: threads for the wheel, firing and events; then release.

        Start-up waits (with backoff) while Redis is unreachable. ``handle_signals``
        (default: when called on the main thread) makes SIGTERM and SIGINT stop the
        worker gracefully, releasing its leases, and restores the old handlers after.
        A ConfigError at start-up (no namespace, an evicting server) is raised.
        """
        stopping = self.ctx.stopping
        with _graceful_stop(self, handle_signals):
            if not self._wait_until_ready():
                self._shutdown()
                return
            self._reapers = [SystemTimerReaper(self.timer), SystemTimerReaper(self.ctx.raised)]
            self._firer = self.time.thread(self.firer.loop, name="worker-firer")
            self._firer.start()
            self.events.start()
            backoff = 0.05
            tick_s = min(0.1, self.settings.renew_every_ms / 4000)
            while not stopping.is_set():
                try:
                    self.tick()
                    self._loop_mono_ms = self._tick_ok_mono_ms = self.clock.mono_ms()
                    self.ctx.writes_accepted()
                    backoff = 0.05
                    self.time.wait(stopping, tick_s)
                except TimerError as exc:
                    self._loop_mono_ms, self._last_error = self.clock.mono_ms(), str(exc)
                    self.stats.redis_errors += 1
                    self.ctx.note_error(exc)
                    self.ctx.warn.warning(
                        "worker %s: %s; retrying", self.id, exc, extra=self.ctx.fields()
                    )
                    self.leases.drop_expired()
                    self.time.wait(stopping, backoff)
                    # Out of memory, Redis still answers (and takes the renewals): keep
                    # ticking often, so leases hold and firing resumes at once when freed.
                    oom = isinstance(exc, StoreError) and exc.code == "OOM"
                    backoff = min(backoff * 2, OOM_RETRY_S if oom else 2.0)
                except Exception as exc:  # a bug (ours or a library's): logged, never fatal
                    self._loop_mono_ms, self._last_error = self.clock.mono_ms(), repr(exc)
                    self.stats.redis_errors += 1
                    self.ctx.note_error(exc)
                    log.exception(
                        "worker %s: unexpected error in its loop; retrying",
                        self.id,
                        extra=self.ctx.fields(),
                    )
                    self.leases.drop_expired()
                    self.time.wait(stopping, backoff)
                    backoff = min(backoff * 2, 2.0)
            self._shutdown()

    # -- what it reports -----------------------------------------------------------------

    def shard_figures(self) -> list[ShardFigures]:
        """Per led shard: timers in the wheel, pending in Redis, sweep lag (for metrics)."""
        now = self.clock.now_ms() if self.clock.ready else None
        width = self.meta.bucket_ms if self._ready else 0
        out = []
        with self.ctx.lock:
            for shard, st in sorted(self.shards.items()):
                lag = None
                if now is not None and st.last_backlog_mono_ms is not None:
                    ended = None if st.oldest_bucket_ms is None else st.oldest_bucket_ms + width
                    lag = 0 if ended is None else max(0, now - ended)
                out.append(ShardFigures(shard, len(st.tasks), st.pending, lag))
        return out

    def shard_count(self) -> int | None:
        """The namespace's shards, once the worker has read its meta (None before)."""
        return self.meta.shards if self._ready else None

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
        if self.ctx.stopping.is_set():
            reasons.append("stopping")
        if not self._ready:
            reasons.append("not started: " + (self._last_error or "starting"))
        elif not self.clock.ready:
            reasons.append("clock not yet synced to Redis")
        ok = self._tick_ok_mono_ms
        oom = self.ctx.oom_since_mono_ms
        if oom is not None:
            reasons.append(
                f"Redis refuses writes: out of memory (OOM) for {now - oom:.0f} ms; "
                "no timer fires until memory is freed (raise maxmemory)"
            )
        if self._ready and (ok is None or now - ok > lease / 2):
            since = "never" if ok is None else f"{now - ok:.0f} ms ago"
            reasons.append(f"last successful tick {since}: {self._last_error or 'starting'}")
        loop = self._loop_mono_ms
        stuck_ms = 0.0 if loop is None else now - loop
        live = stuck_ms <= max(2 * lease, 10_000)
        if not live:
            reasons.append(f"run loop stuck for {stuck_ms:.0f} ms")
        age = None if ok is None else round(now - ok)
        return Health(
            live=live,
            ready=not reasons,
            reasons=tuple(reasons),
            tick_age_ms=age,
            refusing_writes=oom is not None,
        )

    # -- stopping ------------------------------------------------------------------------

    def stop(self) -> None:
        self.ctx.stopping.set()

    def _shutdown(self) -> None:
        if self._firer is not None:
            self._firer.join(5)
        for shard in list(self.shards):
            self.leases.drop(shard, release=True)
        with contextlib.suppress(TimerError):  # gone from the live set within a TTL anyway
            self.client.membership.leave(self.id)
        self.events.stop()
        # The firer has ended (the shards' drops above wrote its expirations) and no event
        # comes any more: what is left is written now, not lost with the process.
        self.history.flush_now("stopping", last=True)
        for reaper in self._reapers:
            reaper.close()
        if not self._reapers:
            self.timer.close()
            self.ctx.raised.close()

    def close(self) -> None:
        """For run_once users: release leases and stop the wheel."""
        self.ctx.stopping.set()
        self._shutdown()


@contextlib.contextmanager
def _graceful_stop(worker: Worker, handle_signals: bool | None) -> Iterator[None]:
    """SIGTERM and SIGINT call ``Worker.stop()`` inside the block (main thread only)."""
    on_main = threading.current_thread() is threading.main_thread()
    if not (on_main if handle_signals is None else handle_signals and on_main):
        yield
        return

    def on_signal(sig: signal.Signals) -> None:
        log.info("worker %s: %s received; stopping", worker.id, sig.name, extra=worker.ctx.fields())
        worker.stop()

    with stop_on_signals(on_signal, name=f"worker-{worker.id}"):
        yield
