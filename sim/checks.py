"""The promises, checked as invariants against the store after every step of a run, and
at its end (liveness). A broken promise raises :class:`Violation`, naming it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgpack

from timer.durable.model.entries import outcome_from_entry
from timer.durable.model.models import Outcome

if TYPE_CHECKING:
    from .world import WorkerProc, World


class Violation(AssertionError):
    """A promise of tickwheel broken in a simulated run."""


@dataclass
class Run:
    """One start of a handler: for which outcome, which attempt, when (store ms), how it
    ended (``ok``, ``failed``, ``killed``)."""

    key: str  # <shard>/<entry id>: the outcome
    timer_id: str
    attempt: int
    consumer: str
    start_ms: int
    result: str = "running"
    end_ms: int | None = None


@dataclass
class StoreFaults:
    """What the store's faults changed in what may be expected: the outcomes whose success
    may not have been acknowledged (handled again, at least once), the leases processes
    still believe in that a restart took from the store, and since when the store's
    retry times are its own again (a restart that lost data forgot the ones after its
    last fsync)."""

    unsure: set[str] = field(default_factory=set)  # outcome keys
    stale: set[tuple[int, int, int]] = field(default_factory=set)  # (process, shard, epoch)
    lost_at_ms: int = 0  # the last restart that lost data
    synced: tuple[dict[str, int], dict[str, Outcome], dict[str, Outcome], dict[int, str]] = (
        {},
        {},
        {},
        {},
    )  # the ledger's deadlines, outcomes, by_key and tips at the last fsync
    lost_timers: list[str] = field(default_factory=list)  # acknowledged after it: lost


@dataclass
class Ledger:
    """What the run did (timers scheduled, outcomes seen, handlers run), and the checks."""

    world: World
    deadlines: dict[str, int] = field(default_factory=dict)  # scheduled id -> deadline
    outcomes: dict[str, Outcome] = field(default_factory=dict)  # timer id -> its outcome
    by_key: dict[str, Outcome] = field(default_factory=dict)  # <shard>/<entry> -> outcome
    tips: dict[int, str] = field(default_factory=dict)  # shard -> last entry id read
    runs: dict[str, list[Run]] = field(default_factory=dict)  # outcome key -> its runs
    notes: list[str] = field(default_factory=list)
    leased: dict[tuple[int, int], int] = field(default_factory=dict)  # (shard, epoch) -> process
    broken: Violation | None = None  # found inside a process (a handler): raised after it
    faults: StoreFaults = field(default_factory=StoreFaults)
    # more checks after every step (sim.crossings: limits, schedules)
    extra: list[Callable[[], None]] = field(default_factory=list)
    fire_sent: set[str] = field(default_factory=set)  # ids sent in fire calls this step
    # the shard's lease as each fire call of this step found it just before it was sent:
    # (shard, holder, epoch, store ms then, its lease's end) (see _seen)
    fire_leases: list[tuple[int, str | None, int, int, int]] = field(default_factory=list)
    fresh: int = 0  # outcomes the last observation read

    # -- what the steps tell it -------------------------------------------------------------

    def scheduled(self, timer_id: str, deadline_ms: int) -> None:
        self.deadlines[timer_id] = deadline_ms

    def pick(self, n: int) -> str | None:
        """A scheduled timer, by number (any: pending or decided)."""
        ids = list(self.deadlines)
        return ids[n % len(ids)] if ids else None

    def note(self, line: str) -> None:
        self.notes.append(line)

    def started(self, o: Outcome, consumer: str, now_ms: int) -> Run:
        """A handler starts: checked against its attempts and the backoff of the last."""
        key = o.idempotency_key
        runs = self.runs.setdefault(key, [])
        max_attempts = self.world.config.max_attempts
        if o.attempt > max_attempts:
            raise Violation(f"{o.id} ({key}) handled at attempt {o.attempt} > {max_attempts}")
        if key not in self.by_key:
            raise Violation(f"{o.id} ({key}) handled but its outcome was never seen")
        if runs and runs[-1].result == "ok" and key not in self.faults.unsure:
            # at least once: a second run after a success is allowed only as a redelivery
            # of an outcome never acknowledged (a kill after the handler returned); the
            # stepped runner acknowledges at once, so a success is final
            raise Violation(f"{o.id} ({key}) handled again after it succeeded: {runs}")
        last = runs[-1] if runs else None
        if (
            last is not None
            and last.result == "failed"
            and last.end_ms is not None
            and last.end_ms >= self.faults.lost_at_ms  # else the store forgot its retry time
        ):
            wait = self.world.config.backoff.delay_s(last.attempt, rand=lambda: 0.0)
            due = last.end_ms + round(wait * 1000)
            if now_ms < due - 1:
                raise Violation(
                    f"{o.id} ({key}) attempt {o.attempt} started at {now_ms}, before its "
                    f"backoff ended at {due} (attempt {last.attempt} failed at {last.end_ms})"
                )
        run = Run(key, o.id, o.attempt, consumer, now_ms)
        runs.append(run)
        return run

    def observe(self, proc: WorkerProc | None) -> None:
        """Read the outcomes the last step wrote; check each: one outcome a timer, never
        early by the store's clock, and an expiry only from the process leading its
        shard at the store's epoch (``proc``: the worker the step was, else None)."""
        if self.broken is not None:
            raise self.broken
        if proc is not None:
            for shard, epoch in proc.held().items():
                if (proc.serial, shard, epoch) in self.faults.stale:
                    continue  # believed before the store lost it: its next renewal fails
                holder = self.leased.setdefault((shard, epoch), proc.serial)
                if holder != proc.serial:
                    raise Violation(
                        f"shard {shard} led at epoch {epoch} by two processes ({proc.id}, "
                        f"process {proc.serial}, and process {holder}): a lease without its "
                        "own epoch cannot fence the other"
                    )
        raw = self.world.raw
        self.fresh = 0
        for shard in range(self.world.config.shards):
            stream = self.world.keys.shard(shard).outcomes
            start = "(" + self.tips[shard] if shard in self.tips else "-"
            fresh = []
            for entry_id, fields in raw.xrange(stream, start, "+"):
                eid = entry_id.decode()
                self.tips[shard] = eid
                o = outcome_from_entry(shard, eid, fields)
                self._seen(o, proc)
                fresh.append(o)
            self._check_order(fresh)
            self.fresh += len(fresh)
        self.fire_sent.clear()
        self.fire_leases.clear()
        if proc is not None:
            watch_fires(proc, self)
        for check in self.extra:
            check()

    def _check_order(self, fresh: list[Outcome]) -> None:
        """The priority order (docs/guides/job-timeouts.md, "Priorities"): of the timers a
        worker holds, it sends none while one of a priority above 0 due no later is still
        in it, so a shard's stream has the raised ones first. Checked on what one turn's
        fire calls decided on a shard (a sweep decides by bucket, not by priority)."""
        fired = [o for o in fresh if o.outcome == "expired" and o.id in self.fire_sent]
        for i, low in enumerate(fired):
            for high in fired[i + 1 :]:
                if high.priority > max(low.priority, 0) and high.deadline_ms <= low.deadline_ms:
                    raise Violation(
                        f"{high.id} (priority {high.priority}, due {high.deadline_ms}) fired "
                        f"after {low.id} (priority {low.priority}, due {low.deadline_ms}) "
                        f"in one turn on shard {low.shard}"
                    )

    def _seen(self, o: Outcome, proc: WorkerProc | None) -> None:
        if o.id in self.outcomes:
            raise Violation(f"{o.id} decided twice: {self.outcomes[o.id]} and then {o}")
        self.outcomes[o.id] = o
        self.by_key[o.idempotency_key] = o
        if o.outcome != "expired":
            return
        if o.decided_ms < o.deadline_ms:
            raise Violation(
                f"{o.id} fired {o.deadline_ms - o.decided_ms} ms early by the store's clock "
                f"(deadline {o.deadline_ms}, fired at {o.decided_ms})"
            )
        if proc is None:
            raise Violation(f"{o.id} expired in a step that was no worker's")
        epoch, lease = self.world.epoch_and_lease(o.shard)
        believed = proc.held().get(o.shard)
        if lease is None and believed == epoch and self._leased_at(o, proc.id, epoch):
            # its lease ran out after the fire, within the step (time moved on in the
            # retries of a connection cut through them): it was held when the fire landed
            return
        if lease != proc.id or believed != epoch:
            raise Violation(
                f"{o.id} fired on shard {o.shard} by {proc.id} (believing epoch {believed}) "
                f"while the store's lease is {lease!r} at epoch {epoch}: a stale leader's "
                "write landed"
            )

    def _leased_at(self, o: Outcome, worker: str, epoch: int) -> bool:
        """Whether a fire call of this step found ``worker`` holding ``o``'s shard at
        ``epoch`` with a lease still running when ``o`` was decided (no write between the
        read and the call's script could have renewed or taken it)."""
        return any(
            shard == o.shard and holder == worker and at_epoch == epoch and at <= o.decided_ms < end
            for shard, holder, at_epoch, at, end in self.fire_leases
        )

    # -- the end -----------------------------------------------------------------------------

    def settled(self) -> bool:
        """Every timer decided, and nothing pending or waiting to retry in the group."""
        if any(t not in self.outcomes for t in self.deadlines):
            return False
        raw = self.world.raw
        for shard in range(self.world.config.shards):
            sk = self.world.keys.shard(shard)
            if self._has_group(sk.outcomes) and raw.xpending(sk.outcomes, "sim")["pending"]:
                return False
            if raw.zcard(sk.retries("sim")):
                return False
        return not self.unhandled()

    def _has_group(self, stream: str) -> bool:
        """The stream has the simulation's group (sim.crossings' runners may have made
        the stream, for their own group, before any of the simulation's runners ran)."""
        raw = self.world.raw
        return bool(raw.exists(stream)) and any(
            g["name"] in (b"sim", "sim") for g in raw.xinfo_groups(stream)
        )

    def check_not_stuck(self) -> None:
        """Every timer decided, nothing pending, retrying or unread in the group, and yet
        an outcome neither handled nor dead: nothing can handle it any more (it was
        acknowledged without a handler that succeeded)."""
        if any(t not in self.outcomes for t in self.deadlines):
            return
        raw = self.world.raw
        for shard in range(self.world.config.shards):
            sk = self.world.keys.shard(shard)
            if not raw.exists(sk.outcomes):
                continue
            if raw.zcard(sk.retries("sim")):
                return
            groups = raw.xinfo_groups(sk.outcomes)
            if not any(g["name"] in (b"sim", "sim") for g in groups):
                return  # lost in a restart: the runners create it again
            for g in groups:
                if g["name"] in (b"sim", "sim") and (g["pending"] or g.get("lag")):
                    return
        dead = self.dead_keys()
        for key, o in self.by_key.items():
            if key not in dead and not any(r.result == "ok" for r in self.runs.get(key, ())):
                raise Violation(
                    f"{o.id} ({key}) acknowledged in its group with no handler that "
                    f"succeeded: {self.runs.get(key, [])}"
                )

    def _dead(self, key: str) -> bool:
        return key in self.dead_keys()

    def dead_keys(self) -> set[str]:
        return set(self.dead_letters())

    def dead_letters(self) -> dict[str, int]:
        """<shard>/<entry id> of each dead letter of the group -> the deliveries it had."""
        raw = self.world.raw
        out = {}
        for shard in range(self.world.config.shards):
            for _eid, fields in raw.xrange(self.world.keys.shard(shard).dead, "-", "+"):
                if fields[b"group"] != b"sim":  # another group's (sim.crossings' limited)
                    continue
                key = f"{shard}/{fields[b'entry'].decode()}"
                if key in out:
                    raise Violation(f"{key} dead-lettered twice")
                out[key] = int(fields[b"attempts"])
        return out

    def check_final(self) -> None:
        """Liveness: each outcome handled with success once, or dead-lettered after
        ``max_attempts`` deliveries (a delivery to a runner killed before it started the
        handler counts: its outcome comes again) none of which succeeded."""
        dead = self.dead_letters()
        max_attempts = self.world.config.max_attempts
        for key, o in self.by_key.items():
            runs = self.runs.get(key, [])
            ok = [r for r in runs if r.result == "ok"]
            if key in self.faults.unsure:  # at least once: its acknowledgement may be lost
                if not ok and key not in dead:
                    raise Violation(f"{o.id} ({key}) neither handled nor dead: {runs}")
            elif key in dead:
                if ok:
                    raise Violation(f"{o.id} ({key}) dead-lettered after it succeeded: {runs}")
                if dead[key] < max_attempts:
                    raise Violation(
                        f"{o.id} ({key}) dead-lettered after {dead[key]} deliveries "
                        f"(max_attempts {max_attempts}): {runs}"
                    )
            elif len(ok) != 1:
                raise Violation(f"{o.id} ({key}) handled with success {len(ok)} times: {runs}")

    def undecided(self) -> list[str]:
        return [t for t in self.deadlines if t not in self.outcomes]

    def unhandled(self) -> bool:
        """Some outcome is neither handled with success nor dead-lettered."""
        dead: set[str] | None = None
        for key in self.by_key:
            if any(r.result == "ok" for r in self.runs.get(key, ())):
                continue
            dead = self.dead_keys() if dead is None else dead
            if key not in dead:
                return True
        return False

    def unsettled(self) -> str:
        undecided = [t for t in self.deadlines if t not in self.outcomes]
        unhandled = [k for k in self.by_key if k not in self.runs and not self._dead(k)]
        return f"undecided {undecided[:10]}, never handled {unhandled[:10]}"

    def next_event_in_ms(self, *, keep_leases: bool) -> int:
        """How far to move time when nothing is left to do now: to the next deadline or
        retry, and while timers wait, never more than a third of a lease (the leaders
        keep their leases); else at most a reclaim's idle time (a dead runner's)."""
        now = self.world.time.wall_ms()
        cfg = self.world.config
        soonest = now + (cfg.lease_ms // 3 if keep_leases else cfg.reclaim_idle_ms)
        for tid, deadline in self.deadlines.items():
            if tid not in self.outcomes and deadline > now:  # an overdue one: leases' time
                soonest = min(soonest, deadline)
        raw = self.world.raw
        for shard in range(self.world.config.shards):
            top = raw.zrange(self.world.keys.shard(shard).retries("sim"), 0, 0, withscores=True)
            if top:
                soonest = min(soonest, int(top[0][1]))
        return max(10, soonest - now)


# -- the store's faults: what a lost connection or a restart lets the checks expect ----------


def synced(ledger: Ledger) -> None:
    """The store's data was fsynced: what a restart that loses data comes back to."""
    ledger.faults.synced = (
        dict(ledger.deadlines),
        dict(ledger.outcomes),
        dict(ledger.by_key),
        dict(ledger.tips),
    )


def cut_out(ledger: Ledger, target: str, since_ms: int) -> None:
    """A connection stayed down through a call's retries in a step of ``target``: a
    runner's success in that step may not have been acknowledged, so it may come again."""
    if target.startswith("r"):
        for key, runs in ledger.runs.items():
            if any(r.result == "ok" and r.start_ms >= since_ms for r in runs):
                ledger.faults.unsure.add(key)


def restarted(ledger: Ledger, *, lost: bool) -> None:
    """The store restarted. Nothing lost (appendfsync always): every check as before.
    Lost what came after the last fsync (everysec, durability none: what tickwheel's
    promises allow): the timers acknowledged after it are gone (never expected to fire),
    the outcomes decided after it are gone (their timers fire again: at least once), any
    success may be handled again (its acknowledgement lost), and epochs may repeat.
    The per-key limits' slots and the outcomes' reads and touches after it are lost too,
    so a handler running at the restart no longer counts against its key's limit
    (:meth:`sim.crossings.Crossings.check_limit`: its outcome may be handed out again
    and another of its key may run beside it); the ones started after it still do."""
    if not lost:
        return
    f = ledger.faults
    deadlines, outcomes, by_key, tips = f.synced
    f.lost_timers += [t for t in ledger.deadlines if t not in deadlines]
    ledger.deadlines = dict(deadlines)
    ledger.outcomes = dict(outcomes)
    ledger.by_key = dict(by_key)
    ledger.tips = dict(tips)
    f.unsure |= {k for k, runs in ledger.runs.items() if any(r.result == "ok" for r in runs)}
    world = ledger.world
    f.lost_at_ms = world.time.wall_ms()
    for proc in [*world.workers, *world.zombies.values()]:
        if proc is not None:
            f.stale |= {(proc.serial, n, e) for n, e in proc.held().items()}
    kept = {n: world.epoch_and_lease(n)[0] for n in range(world.config.shards)}
    ledger.leased = {k: v for k, v in ledger.leased.items() if k[1] <= kept[k[0]]}


def watch_fires(proc: WorkerProc, ledger: Ledger) -> None:
    """From its next turn on, the ids the worker sends in fire calls go into the ledger's
    ``fire_sent`` (the order check's: what its firer sent, not what a sweep decided), and
    each shard's lease as the call found it into its ``fire_leases`` (the fence check's,
    for a lease that ran out after the fire landed, within the step)."""
    firer: Any = proc.worker.firer
    if getattr(firer, "sim_watched", False):
        return
    inner = firer._fire_together
    world = ledger.world

    def fire_together(parts: list[tuple[Any, list[Any]]]) -> int:
        cut, world.store.cut = world.store.cut, None  # the checks' reads are never cut
        try:
            now = world.time.wall_ms()
            for state, group in parts:
                ledger.fire_sent.update(t.timer_id for t in group)
                epoch, holder = world.epoch_and_lease(state.shard)
                ttl = world.raw.pttl(world.keys.shard(state.shard).lease)
                ledger.fire_leases.append((state.shard, holder, epoch, now, now + max(ttl, 0)))
        finally:
            world.store.cut = cut
        return int(inner(parts))

    firer._fire_together = fire_together
    firer.sim_watched = True


def check_heads(raw: Any, keys: Any, shards: int) -> None:
    """The shards' heads keep their promise (``lua/include/head.lua``): every pending
    timer of a shard due before its head's bound is in its head, at its deadline. A
    head with no bound promises nothing; stale entries (a timer decided or moved since)
    are allowed: a reader drops them."""
    for s in range(shards):
        sk = keys.shard(s)
        bound = raw.get(sk.head_bound)
        if bound is None:
            continue
        limit = math.inf if bound == b"inf" else int(bound)
        head = {m: int(score) for m, score in raw.zrange(sk.head, 0, -1, withscores=True)}
        for tid, rec in raw.hgetall(sk.timers).items():
            due = msgpack.unpackb(rec, raw=True, strict_map_key=False)[0]
            if due < limit and head.get(tid) != due:
                raise Violation(
                    f"shard {s}'s head (bound {bound.decode()}) lacks pending timer "
                    f"{tid.decode()} due at {due} (its head has {head.get(tid)})"
                )


def soonest_pending(raw: Any, keys: Any, shards: int) -> list[tuple[int, str]]:
    """Every pending timer as (deadline, id), soonest first: from the records, by brute force."""
    return sorted(
        (msgpack.unpackb(rec, raw=True, strict_map_key=False)[0], tid.decode())
        for s in range(shards)
        for tid, rec in raw.hgetall(keys.shard(s).timers).items()
    )
