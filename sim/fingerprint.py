"""The exhaustive check's fingerprint of a state (:mod:`sim.exhaustive`): the store's
keyspace as the protocol reads it (``FakeStore.snapshot()`` less the worker cards and
history counts only operators read; outcomes by which timers they decided, not when),
each process's belief and what its next turn decides from (the epoch of each shard it
thinks it leads, its wheel, how long since it renewed, swept, loaded and beat), which
processes are alive, dead or zombies, the time since the start, and which of them the
ledger saw lead each epoch. Two paths that reach one fingerprint are explored once.

It is an abstraction: the processes' other fields (counters, logs) are left out, as are
times of which only the age is kept; ``exact=True`` fingerprints the whole snapshot and
the clocks' readings instead.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from .world import WorkerProc, World


def _age(now: float, then: float | None) -> float | None:
    """How long ago, so two paths that did the same thing at different times compare
    by what matters next (when a renewal, a sweep, a heartbeat is due)."""
    return None if then is None or then == -math.inf else round(now - then, 3)


def _proc(proc: WorkerProc | None) -> Any:
    """A process as its next turn sees itself: its id; for each shard it believes it
    leads, the epoch, how long since it renewed, swept and loaded, what is in its wheel
    and which buckets it has loaded; how long since its heartbeat, the live workers it
    counted, what waits to fire, and its clock's offset to the store's."""
    if proc is None:
        return None
    w = proc.worker
    now = w.ctx.clock.mono_ms()
    shards = []
    for n, st in sorted(w.shards.items()):
        tasks = sorted(
            (t.timer_id, t.deadline_ms, t.epoch, bool(t.released)) for t in st.tasks.values()
        )
        shards.append(
            (
                n,
                st.epoch,
                _age(now, st.renewed_mono_ms),
                tuple(tasks),
                tuple(sorted(st.loaded)),
                _age(now, st.last_sweep_mono_ms),
                _age(now, st.last_load_mono_ms),
                st.needs_reload,
                st.more_to_load,
            )
        )
    firer = w.firer
    backlog = sorted((s, tuple(t.timer_id for t in q)) for s, q in firer.backlog.items())
    clock = w.ctx.clock
    return (
        proc.id,
        tuple(shards),
        w.leases.live,
        _age(now, w.leases.last_heartbeat_mono_ms),
        tuple(backlog),
        tuple(t.timer_id for t in firer.held),
        clock._offset_ms,  # what the process reads the store's time by
        clock.skew,
    )


OBSERVED = (b":wc:", b":h:")  # worker cards and history counts: written, never decided from


def _store(world: World, now_ms: int) -> Any:
    """The store's keyspace as the protocol reads it: every key but the ones only
    operators read (worker cards, history counts); the outcome streams and the results
    table by which timers they decided (not when, nor how late); the workers' heartbeat
    scores as ages."""
    out = []
    for key, kind, raw, pttl in world.store.snapshot():
        if any(part in key for part in OBSERVED):
            continue
        value = raw
        if key == world.keys.workers.encode():
            value = [(member, now_ms - score) for member, score in raw]
        elif kind == "stream":  # which timers each entry decided; its id is when
            entries, _last, groups = raw
            value = ([fields.get(b"i") for _eid, fields in entries], groups)
        elif b":R:" in key:  # the results table: which timers have a result (its record
            value = [field for field, _ in raw]  # says how late, as the stream's did)
        out.append((key, kind, value, pttl))
    return out


def fingerprint(world: World, start_ms: int, *, exact: bool = False) -> str:
    """The state, canonically: the store's keyspace, the processes (alive, dead or
    zombies, and what each believes), the time since the start, and which process id
    the ledger saw lead each lease epoch. ``exact``: the whole snapshot and the
    processes' clocks as they read, not as ages (far fewer states merge)."""
    now_ms = world.time.wall_ms()
    if exact:
        state: Any = (
            now_ms - start_ms,
            world.store.snapshot(),
            tuple(_proc_exact(p) for p in world.workers),
            tuple((slot, _proc_exact(p)) for slot, p in sorted(world.zombies.items())),
            tuple(sorted(world.ledger.leased.items())),
            world.generation,
        )
    else:
        roles = {p.serial: ("worker", p.slot) for p in world.workers if p is not None}
        roles.update({p.serial: ("zombie", slot) for slot, p in world.zombies.items()})
        state = (
            now_ms - start_ms,
            _store(world, now_ms),
            tuple(_proc(p) for p in world.workers),
            tuple((slot, _proc(p)) for slot, p in sorted(world.zombies.items())),
            # who led each epoch matters while that process lives (another at the same
            # epoch is a violation); a process gone never leads again, so it is None
            tuple(sorted((k, roles.get(v)) for k, v in world.ledger.leased.items())),
        )
    return hashlib.blake2b(repr(state).encode(), digest_size=16).hexdigest()


def _proc_exact(proc: WorkerProc | None) -> Any:
    if proc is None:
        return None
    w = proc.worker
    return (
        proc.id,
        proc.serial,
        _proc(proc),
        tuple((n, st.renewed_mono_ms, st.last_sweep_mono_ms) for n, st in sorted(w.shards.items())),
        w.leases.last_heartbeat_mono_ms,
    )
