"""Debounce (#43): many calls over few keys, one outcome a window. Prints one JSON document.

    python -m benchmarks.debounce            # 100,000 calls over 10,000 keys
    python -m benchmarks.debounce --quick    # 10,000 calls over 1,000 keys

Two real worker processes on a private server. The calls (``schedule(key, quiet_ms,
debounce=True, max_total_ms=max_wait_ms)``, keys drawn at random, sent with
``schedule_many`` in batches of 1,000) open and feed windows; then every outcome is read
and held to its window: exactly one outcome per window opened (a call that answered
``created``), its deadline the last deadline its calls were answered with (never an
earlier one: none early), never past its first call + ``max_wait_ms``, and its
``absorbed`` the count of the window's later calls. Beside it, in the same run, as many
plain ``schedule_many`` calls of fresh ids: the rate of debounce calls against them is
the cost of debouncing.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from timer import Timer, TimerClient
from timer.testing import RedisServer, find_server_binary

from ._harness import pct, start_worker, wait_decided
from .options import count

BATCH = 1_000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true")
    p.add_argument(
        "--calls", type=count("calls"), default=None, help="debounce calls (default 100,000)"
    )
    p.add_argument(
        "--keys", type=count("keys"), default=None, help="keys they fall on (default 10,000)"
    )
    # quiet longer than the sending takes, max wait shorter than first call to last call
    # + quiet: one window a key, and the keys called early and late end at their cap
    p.add_argument("--quiet-ms", type=count("ms"), default=10_000, help="each call's delay_ms")
    p.add_argument(
        "--max-wait-ms", type=count("ms"), default=12_000, help="each window's max_total_ms"
    )
    p.add_argument("--server", default=None, help="redis-server or valkey-server binary")
    args = p.parse_args(argv)
    calls = args.calls or (10_000 if args.quick else 100_000)
    keys = args.keys or (1_000 if args.quick else 10_000)
    binary = find_server_binary(args.server)
    with (
        tempfile.TemporaryDirectory() as tmp,
        RedisServer(Path(tmp) / "redis", binary=binary) as server,
    ):
        result = run(server.url, Path(tmp), calls, keys, args.quiet_ms, args.max_wait_ms)
    result.update({"benchmark": "debounce", "calls": calls, "keys": keys,
                   "quiet_ms": args.quiet_ms, "max_wait_ms": args.max_wait_ms})  # fmt: skip
    print(json.dumps(result))
    return 0


def run(  # noqa: PLR0917 - the benchmark's parameters, as main passes them
    url: str, logs: Path, calls: int, keys: int, quiet_ms: int, max_wait_ms: int
) -> dict[str, Any]:
    c = TimerClient.from_url(url, "bench")
    c.init(shards=16)
    workers = [start_worker(url, "bench", f"w{i}", 2_000, logs) for i in range(2)]
    try:
        rng = random.Random(43)
        order = [f"k{rng.randrange(keys)}" for _ in range(calls)]
        plain = [f"p{i}" for i in range(calls)]
        replies: list[Timer] = []
        send_s = {"debounce": 0.0, "plain": 0.0}
        # alternate batches of the two kinds, so both meet the same machine
        for start in range(0, calls, BATCH):
            t0 = time.perf_counter()
            got = c.schedule_many(
                [{"id": k, "delay_ms": quiet_ms, "debounce": True, "max_total_ms": max_wait_ms,
                  "payload": start + i} for i, k in enumerate(order[start : start + BATCH])]
            )  # fmt: skip
            send_s["debounce"] += time.perf_counter() - t0
            for r in got:
                assert isinstance(r, Timer), r
                replies.append(r)
            t0 = time.perf_counter()
            c.schedule_many(
                [{"id": k, "delay_ms": quiet_ms + 60_000, "payload": start + i}
                 for i, k in enumerate(plain[start : start + BATCH])]
            )  # fmt: skip
            send_s["plain"] += time.perf_counter() - t0
        # each key's windows in order: the last deadline answered, the calls absorbed
        windows: dict[str, list[dict[str, int]]] = defaultdict(list)
        for r in replies:
            if r.created:
                windows[r.id].append({"deadline": r.deadline_ms, "absorbed": 0})
            else:
                w = windows[r.id][-1]
                w["deadline"], w["absorbed"] = r.deadline_ms, r.absorbed
        opened = sum(len(ws) for ws in windows.values())
        # the plain ones are due a minute later: not waited for
        wait_decided(c, opened, 120 + (quiet_ms + max_wait_ms) / 1000)
        return check(c, windows, opened, calls, max_wait_ms, send_s)
    finally:
        for proc in workers:
            proc.kill()
            proc.wait()
        c.close()


def check(  # noqa: PLR0917
    c: TimerClient,
    windows: dict[str, list[dict[str, int]]],
    opened: int,
    calls: int,
    max_wait_ms: int,
    send_s: dict[str, float],
) -> dict[str, Any]:
    outs: dict[str, list[Any]] = defaultdict(list)
    for o in c.all_outcomes():
        if o.id.startswith("k"):
            outs[o.id].append(o)
    early = late_of_cap = wrong_count = at_cap = 0
    lateness = []
    for key, ws in windows.items():
        for w, o in zip(ws, outs.get(key, []), strict=False):
            assert o.created_ms is not None
            early += o.deadline_ms < w["deadline"] or o.decided_ms < o.deadline_ms
            late_of_cap += o.deadline_ms > o.created_ms + max_wait_ms
            at_cap += o.deadline_ms == o.created_ms + max_wait_ms
            wrong_count += o.absorbed != w["absorbed"]
            lateness.append(o.decided_ms - o.deadline_ms)
    outcomes = sum(len(v) for v in outs.values())
    per_window_extra = sum(max(0, len(outs.get(k, [])) - len(ws)) for k, ws in windows.items())
    return {
        "windows_opened": opened,
        "outcomes": outcomes,
        "outcomes_beyond_their_window": per_window_extra,
        "absorbed_total": sum(o.absorbed for v in outs.values() for o in v),
        "absorbed_expected": calls - opened,
        "early": early,
        "after_max_wait": late_of_cap,
        "windows_ended_at_their_cap": at_cap,
        "absorbed_miscounted": wrong_count,
        "lateness_ms": {
            "p50": pct(lateness, 0.5),
            "p99": pct(lateness, 0.99),
            "max": max(lateness, default=None),
        },
        "debounce_calls_per_s": round(calls / send_s["debounce"]),
        "plain_calls_per_s": round(calls / send_s["plain"]),
        "ratio_debounce_to_plain_rate": round(send_s["plain"] / send_s["debounce"], 3),
    }


if __name__ == "__main__":
    raise SystemExit(main())
