"""The simulated world: one store, its clock, the worker and handler-runner processes,
and the step functions a run is made of. Each step is atomic on virtual time (nothing
else moves while it runs); :mod:`sim.checks` is told what each one did."""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

from timer.client import TimerClient
from timer.client import driver as driver_module
from timer.clock import Killed, SkewedTime, Time, VirtualTime
from timer.durable.model.models import DurabilityWarning, Outcome
from timer.durable.model.scripts import ScriptName
from timer.errors import TimerError
from timer.handlers import Backoff, Handlers
from timer.testing.store import Cut, FakeStore
from timer.worker import Worker, WorkerSettings

from . import checks
from .checks import Ledger, Violation
from .faults import CutPlan, StallPlan

NAMESPACE = "sim"
GROUP = "sim"


@dataclass(frozen=True)
class Config:
    """The world's shape. Small on purpose: contention is what finds bugs."""

    workers: int = 3
    runners: int = 2
    shards: int = 4
    bucket_ms: int = 1_000
    lease_ms: int = 2_000
    max_attempts: int = 3
    backoff: Backoff = field(
        default_factory=lambda: Backoff(initial_s=0.5, multiplier=2.0, max_s=4.0, jitter=0.0)
    )
    reclaim_idle_ms: int = 2_000


Fsync = Literal["always", "everysec"]  # the store's appendfsync: what a restart keeps


class WorkerProc:
    """One worker process: its own clock (skewable), its own client, its worker."""

    def __init__(self, world: World, slot: int, worker_id: str) -> None:
        self.slot = slot
        self.id = worker_id
        self.serial = world.generation  # this process, among all that ran (ids repeat)
        self.time = SkewedTime(world.time, host=f"host{slot}", pid=100 + slot)
        self.client = world.client(self.time)
        settings = WorkerSettings(
            worker_id=worker_id,
            lease_ms=world.config.lease_ms,
            horizon_ms=2 * world.config.lease_ms,
            sweep_interval_ms=500,
            trim_interval_ms=60_000,
        )
        self.worker = Worker(self.client, settings, time=self.time)

    def held(self) -> dict[int, int]:
        """shard -> the epoch this process believes it leads at."""
        return {n: st.epoch for n, st in self.worker.shards.items()}


class RunnerProc:
    """One handler-runner process, stepped inline; ``kill_next``: its next handler is
    killed as it starts (kill -9 in the middle of a handler)."""

    def __init__(self, world: World, slot: int, consumer: str) -> None:
        self.slot = slot
        self.consumer = consumer
        self.world = world
        self.kill_next = False
        self.client = world.client(world.time)
        cfg = world.config
        self.handlers = Handlers(
            group=GROUP,
            consumer=consumer,
            max_attempts=cfg.max_attempts,
            backoff=cfg.backoff,
            reclaim_idle_ms=cfg.reclaim_idle_ms,
        )
        self.handlers.on()(self._handle)

    def _handle(self, o: Outcome) -> None:
        world = self.world
        try:
            run = world.ledger.started(o, self.consumer, world.time.wall_ms())
        except Violation as v:  # raised here, the runner would take it for a failure
            world.ledger.broken = v
            raise Killed(str(v)) from v
        if self.kill_next:
            self.kill_next = False
            run.result = "killed"
            raise Killed(f"runner {self.consumer} killed in the handler of {o.id}")
        fail = o.payload.get("fail", 0) if isinstance(o.payload, dict) else 0
        if o.attempt <= fail:
            run.result = "failed"
            run.end_ms = world.time.wall_ms()
            raise RuntimeError(f"planned failure of attempt {o.attempt} of {o.id}")
        run.result = "ok"
        run.end_ms = world.time.wall_ms()


class World:
    """The store, the processes and the steps; the ledger checks every step."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Config()
        self.time = VirtualTime()
        self.store = FakeStore(self.time)
        self.admin = self.client(self.time)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DurabilityWarning)  # the store has no AOF
            self.admin.init(shards=self.config.shards, bucket_ms=self.config.bucket_ms)
        self.raw: Any = self.store.redis()  # the checks' own reads
        self.keys = self.admin.keys
        self.ledger = Ledger(self)
        self.generation = 0
        self.workers: list[WorkerProc | None] = [
            self._new_worker(i) for i in range(self.config.workers)
        ]
        self.zombies: dict[int, WorkerProc] = {}
        self.runners: list[RunnerProc] = [
            RunnerProc(self, j, f"r{j}") for j in range(self.config.runners)
        ]
        self.next_id = 0
        self.steps = 0
        self.fsync: Fsync = "always"
        # the runners join before the first fsync, as a deployment's have long before a
        # restart (a group lost by one is created again at the runner's next read:
        # tests/sim/test_sim.py::test_a_group_lost_in_a_restart_is_created_again)
        for runner in self.runners:
            runner.handlers.run_once(runner.client)
        self.store.fsync()
        self.synced_ms = self.time.wall_ms()
        self.restarts = 0
        self.fsyncs = 0  # fsyncs so far
        self.losses: list[int] = []  # the fsync each restart that lost data went back to
        source: Any = driver_module  # the drivers' scripts (a plant's, when planted)
        self.script_names = {
            hashlib.sha1(source.source(n).encode()).hexdigest().encode(): n.value
            for n in ScriptName
        }
        for n in ScriptName:  # loaded, as a running deployment's are: a cut hits a call
            self.raw.script_load(source.source(n))  # that runs, not a NOSCRIPT

    def client(self, time: Time) -> TimerClient:
        """A process's client of the namespace, on its own clock."""
        return self.store.timer_client(NAMESPACE, time=time)

    def _new_worker(self, slot: int, worker_id: str | None = None) -> WorkerProc:
        self.generation += 1
        return WorkerProc(self, slot, worker_id or f"w{slot}.{self.generation}")

    def close(self) -> None:
        self.raw.close()

    # -- steps: time ------------------------------------------------------------------------

    def advance(self, ms: int) -> None:
        self.time.advance(ms / 1000)

    def tick(self, ms: int, runner: int) -> None:
        self.advance(ms)
        for slot in range(len(self.workers)):
            self.step_worker(slot)
        self.step_runner(runner)

    # -- steps: clients -----------------------------------------------------------------------

    def schedule(self, delay_ms: int, fail: int, priority: int) -> None:
        tid = f"t{self.next_id}"
        self.next_id += 1
        for _ in range(2):  # an error (the connection lost): its caller tries again, once
            try:
                timer = self.admin.schedule(
                    tid, delay_ms=delay_ms, payload={"fail": fail}, priority=priority
                )
            except TimerError as exc:
                self.ledger.note(f"schedule {tid}: {exc}")
                continue
            self.ledger.scheduled(tid, timer.deadline_ms)
            break
        else:
            self.ledger.note(f"schedule {tid}: never acknowledged (it may exist)")
        self._observe(None)

    def cancel(self, pick: int) -> None:
        tid = self.ledger.pick(pick)
        if tid is not None:
            try:
                self.admin.cancel(tid)
            except TimerError as exc:
                self.ledger.note(f"cancel {tid}: {exc}")
        self._observe(None)

    def complete(self, pick: int) -> None:
        tid = self.ledger.pick(pick)
        if tid is not None:
            try:
                self.admin.complete(tid)
            except TimerError as exc:
                self.ledger.note(f"complete {tid}: {exc}")
        self._observe(None)

    def open_timers_view(self, limit: int) -> None:
        """An operator opens the Timers view: its first page (which fills the shards'
        heads, include/head.lua) is the soonest pending timers, as the records say."""
        try:
            page = self.admin.pending_by_due(limit=limit)
        except TimerError as exc:
            self.ledger.note(f"open_timers_view: {exc}")
        else:
            want = checks.soonest_pending(self.raw, self.keys, self.config.shards)[:limit]
            got = [(t.deadline_ms, t.id) for t in page.timers]
            if got != want:
                raise checks.Violation(f"the Timers view's first page {got} is not {want}")
        self._observe(None)

    # -- steps: workers -----------------------------------------------------------------------

    def step_worker(self, slot: int) -> None:
        proc = self.workers[slot]
        if proc is None:  # killed: this turn it starts again, a new process
            proc = self.workers[slot] = self._new_worker(slot)
        self._run_worker(proc)

    def step_zombie(self, slot: int) -> None:
        proc = self.zombies.get(slot)
        if proc is not None:
            self._run_worker(proc)

    def _run_worker(self, proc: WorkerProc) -> None:
        try:
            proc.worker.run_once()
        except TimerError as exc:  # a worker's tick meets an error as its loop would
            self.ledger.note(f"{proc.id}: {exc}")
        self._observe(proc)

    def stall_worker(self, slot: int, ms: int) -> None:
        """The worker checks its leases and takes what is due from its wheel, then stalls
        (a GC pause, a VM descheduled) for ``ms`` while the others check their leases
        (taking the shards that came free), and then fires what it took: a fire from a
        leader that may no longer lead."""
        proc = self.workers[slot]
        if proc is None:
            return
        w = proc.worker
        try:
            w.tick()
            w.events.pump()
            w.ctx.raised.advance_clock(0)
            w.timer.advance_clock(0)
            due = w.firer.due_now()
        except TimerError as exc:
            self.ledger.note(f"{proc.id}: {exc}")
            due = []
        self._observe(proc)  # its tick's writes (a sweep) are its own, not the next one's
        self.advance(ms)
        for other in [p for p in self.workers if p is not None and p is not proc]:
            try:  # meanwhile the others check their leases and take what came free
                other.worker.tick()
            except TimerError as exc:
                self.ledger.note(f"{other.id}: {exc}")
            self._observe(other)
        try:
            w.firer.fire_batch(due)
        except TimerError as exc:
            self.ledger.note(f"{proc.id}: {exc}")
        self._observe(proc)

    def lose_events(self, slot: int) -> None:
        """The worker loses the next pub/sub message it reads (its sweep and its reloads
        must still fire what the message announced)."""
        proc = self.workers[slot]
        if proc is None:
            return
        events = proc.worker.events

        def once(_data: str) -> bool:
            events.drop = None  # that one message only
            return True

        events.drop = once
        self._observe(None)

    def kill_worker(self, slot: int) -> None:
        """kill -9: the process is gone; its leases stay until they expire."""
        self.workers[slot] = None

    def partition_worker(self, slot: int) -> None:
        """The process is cut off (a partition, a long pause) and a new one starts under
        its id (a pod restarted by name); the old one may come back (``step_zombie``)."""
        proc = self.workers[slot]
        if proc is None:
            return
        self.zombies[slot] = proc
        self.workers[slot] = self._new_worker(slot, proc.id)

    def skew_worker(self, slot: int, step_wall_ms: int, rate: float) -> None:
        proc = self.workers[slot]
        if proc is not None:
            proc.time.retune(step_wall=step_wall_ms / 1000, rate=rate)

    # -- steps: handler runners -----------------------------------------------------------------

    def step_runner(self, slot: int) -> None:
        runner = self.runners[slot]
        try:
            runner.handlers.run_once(runner.client)
        except Killed:
            # a new process takes its place, under the same consumer name (restarted)
            self.runners[slot] = RunnerProc(self, slot, runner.consumer)
        except TimerError as exc:  # its turn meets an error as its loop would
            self.ledger.note(f"{runner.consumer}: {exc}")
        self._observe(None)

    def kill_runner_in_handler(self, slot: int) -> None:
        self.runners[slot].kill_next = True

    def stall_runner(self, slot: int, script: str, ms: int) -> None:
        """The runner's turn, in which it stalls ``ms`` after its first round trip that
        called ``script`` (:class:`StallPlan`): a poll's claims and its next call, a
        handler's start and its acknowledgement, that far apart on the store's clock."""
        plan = StallPlan(script, ms, self.script_names, self.advance)
        self.store.cut, self.store.sent = plan.command, plan.sent
        try:
            self.step_runner(slot)
        finally:
            self.store.cut = self.store.sent = None

    # -- steps: the store's faults --------------------------------------------------------------

    def cut(self, target: str, script: str, kind: Cut, out: bool) -> None:
        """A step of ``target`` (``w<slot>``, ``r<slot>``, or ``schedule``: a client's)
        during which one script call's connection fails (:class:`CutPlan`)."""
        plan = CutPlan(script, kind, out, self.script_names, self.store._retries)
        began = self.time.wall_ms()
        self.store.cut = plan
        try:
            if target == "schedule":
                self.schedule(1_000, 0, 0)
            elif target.startswith("w"):
                self.step_worker(int(target[1:]))
            else:
                self.step_runner(int(target[1:]))
        finally:
            self.store.cut = None
        if plan.hit and plan.out:
            checks.cut_out(self.ledger, target, began)

    def restart_store(self, down_ms: int) -> None:
        """The store restarts (a power cut of its host, ``down_ms`` down): with
        appendfsync ``always`` nothing is lost; with ``everysec`` what came after the last
        fsync is. Every connection is cut, every subscription and script forgotten."""
        if self.fsync == "always":
            self._fsync()
        self.store.restart()
        self.restarts += 1
        if self.fsync == "everysec":  # what came after the last fsync is gone
            self.losses.append(self.fsyncs)
        self.advance(down_ms)
        checks.restarted(self.ledger, lost=self.fsync == "everysec")
        self._observe(None)

    def _fsync(self) -> None:
        self.store.fsync()
        self.fsyncs += 1
        self.synced_ms = self.time.wall_ms()
        checks.synced(self.ledger)

    # -- what happened ----------------------------------------------------------------------

    def _observe(self, proc: WorkerProc | None) -> None:
        self.steps += 1
        self.ledger.observe(proc)
        checks.check_heads(self.raw, self.keys, self.config.shards)
        if self.fsync == "everysec" and self.time.wall_ms() - self.synced_ms >= 1_000:
            self._fsync()  # the once-a-second fsync, at the first step boundary after it

    def epoch_and_lease(self, shard: int) -> tuple[int, str | None]:
        sk = self.keys.shard(shard)
        epoch, lease = self.raw.mget(sk.epoch, sk.lease)
        return int(epoch or 0), None if lease is None else lease.decode()

    # -- the end: every process back, time on, everything settled ---------------------------

    def settle(self, max_rounds: int = 400, within_s: float = 600.0) -> None:
        """Revive every process (a zombie is killed), then step everything and move time
        on until every timer is decided and every outcome handled or dead-lettered;
        Violation if that does not come within ``within_s`` of virtual time past the last
        deadline (or ``max_rounds`` turns), or if nothing is left that could do it."""
        self.zombies.clear()
        self.workers = [self._new_worker(i) for i in range(self.config.workers)]
        for runner in self.runners:
            runner.kill_next = False
        ends = max([self.time.wall_ms(), *self.ledger.deadlines.values()]) + within_s * 1000
        for turn in range(max_rounds):
            if self.time.wall_ms() > ends:
                break
            undecided = self.ledger.undecided()
            if undecided:
                for slot in range(len(self.workers)):
                    self.step_worker(slot)
            # one runner a round: any of them can claim. Also with every outcome handled:
            # an entry still pending (its acknowledgement lost in a restart) is claimed
            # again once idle, and only a runner's turn does that
            self.step_runner(turn % len(self.runners))
            if self.ledger.settled():
                self.ledger.check_final()
                return
            self.ledger.check_not_stuck()
            self.advance(self.ledger.next_event_in_ms(keep_leases=bool(undecided)))
        raise Violation(f"not settled after {max_rounds} rounds: {self.ledger.unsettled()}")
