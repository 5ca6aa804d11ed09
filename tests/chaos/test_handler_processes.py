"""Real `tickwheel handle` processes: kill -9 with outcomes in flight, a restart under
the same name, and a SIGTERM drain."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import most_at_once, stage_counts, wait_for
from timer import TimerClient
from timer.testing import RedisServer, free_port

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

# Each handler run appends "start <key> <attempt> <pid>" to the log; while the process's
# hold file exists it then waits (a handler in the middle of its work), else appends
# "done <key> <pid>" and returns.
MODULE = """
import os, pathlib, time

LOG = pathlib.Path(os.environ["HANDLER_LOG"])
HOLD = pathlib.Path(os.environ["HOLD_FILE"])

def handle(o):
    with LOG.open("a") as f:
        f.write(f"start {o.idempotency_key} {o.attempt} {os.getpid()}\\n")
    while HOLD.exists():
        time.sleep(0.01)  # the handler's own work, blocked for the test
    time.sleep(float(os.environ.get("WORK_S", "0")))  # or taking this long
    with LOG.open("a") as f:
        f.write(f"done {o.idempotency_key} {os.getpid()}\\n")
"""


class Consumers:
    def __init__(self, tmp: Path, url: str, namespace: str) -> None:
        self.tmp, self.url, self.namespace = tmp, url, namespace
        self.log = tmp / "handled.log"
        self.log.touch()
        (tmp / "chaos_handlers.py").write_text(textwrap.dedent(MODULE))
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self, consumer: str, *args: str, hold: bool, work_s: float = 0.0, on: str = "cancelled"
    ) -> subprocess.Popen[bytes]:
        hold_file = self.tmp / f"hold-{consumer}-{len(self.procs)}"
        if hold:
            hold_file.touch()
        out = (self.tmp / f"{consumer}-{len(self.procs)}.out").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "timer.cli", "--redis-url", self.url, "--namespace",
             self.namespace, "handle", "chaos_handlers:handle", "--on", on,
             "--consumer", consumer, *args],
            cwd=self.tmp, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
                 "HANDLER_LOG": str(self.log), "HOLD_FILE": str(hold_file),
                 "WORK_S": str(work_s)},
        )  # fmt: skip
        out.close()
        proc.hold_file = hold_file  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def lines(self, kind: str, pid: int | None = None) -> list[list[str]]:
        rows = [line.split() for line in self.log.read_text().splitlines() if line]
        return [r for r in rows if r[0] == kind and (pid is None or int(r[-1]) == pid)]

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)


@pytest.fixture
def consumers(
    tmp_path: Path, redis_server: RedisServer, namespace: str
) -> Iterator[tuple[Consumers, TimerClient]]:
    if not redis_server.running:
        redis_server.restart()
    client = TimerClient.from_url(redis_server.url, namespace)
    client.init(shards=4)
    c = Consumers(tmp_path, redis_server.url, namespace)
    try:
        yield c, client
    finally:
        c.stop_all()
        client.close()


def decide(client: TimerClient, ids: list[str]) -> None:
    for tid in ids:
        client.schedule(tid, 60_000)
        client.cancel(tid)


def test_kill9_with_outcomes_in_flight_another_consumer_handles_them(
    consumers: tuple[Consumers, TimerClient],
) -> None:
    """A is killed holding 6 outcomes mid-handler; B takes them over after the reclaim
    idle time and handles each once; the repeats are exactly the 6 A had started."""
    c, client = consumers
    decide(client, [f"j{i}" for i in range(6)])
    a = c.start("a", "--concurrency", "6", "--reclaim-idle", "1s", hold=True)
    wait_for(lambda: len(c.lines("start", a.pid)) == 6, 30, "A to start 6 handlers")
    a.send_signal(signal.SIGKILL)
    a.wait(10)
    b = c.start("b", "--concurrency", "6", "--reclaim-idle", "1s", hold=False)
    wait_for(lambda: len(c.lines("done", b.pid)) == 6, 30, "B to handle A's outcomes")
    done = Counter(r[1] for r in c.lines("done"))
    assert len(done) == 6 and set(done.values()) == {1}  # each handled once, by B
    started = Counter(r[1] for r in c.lines("start"))
    assert set(started.values()) == {2}  # the repeats: exactly what A had in hand
    assert {int(r[2]) for r in c.lines("start", b.pid)} == {2}  # B saw attempt 2
    wait_for(lambda: any(g.pending == 0 for g in client.groups()), 10, "B's acknowledgements")


def test_kill9_of_a_process_that_fires_and_handles_loses_nothing_and_decides_once(
    consumers: tuple[Consumers, TimerClient],
) -> None:
    """A (`handle --fire`: a worker and its handlers in one process, #55) leads every
    shard and holds 6 outcomes its fire calls handed it, mid-handler, when it is killed
    -9, 6 more timers still ahead. B (`--fire` too) takes over the shards after A's
    lease and A's outcomes after the reclaim idle time: all 12 handled, each timer
    decided once (one outcome each), the repeats exactly the 6 A had in hand."""
    c, client = consumers
    fire = ("--fire", "--lease", "1s", "--reclaim-idle", "1s", "--concurrency", "6")
    a = c.start("a", *fire, hold=True, on="expired")
    wait_for(lambda: set(client.leaders().values()) - {None}, 30, "A to lead the shards")
    first = [f"f{i}" for i in range(6)]
    client.schedule_many([{"id": t, "delay_ms": 100} for t in first])
    wait_for(lambda: len(c.lines("start", a.pid)) == 6, 30, "A to start 6 handlers")
    later = [f"l{i}" for i in range(6)]
    client.schedule_many([{"id": t, "delay_ms": 1_500} for t in later])
    a.send_signal(signal.SIGKILL)
    a.wait(10)
    b = c.start("b", *fire, hold=False, on="expired")
    wait_for(lambda: len(c.lines("done", b.pid)) == 12, 60, "B to handle all 12")
    done = Counter(r[1] for r in c.lines("done"))
    assert len(done) == 12 and set(done.values()) == {1}  # each handled once, by B
    started = Counter(r[1] for r in c.lines("start"))
    assert {k for k, n in started.items() if n == 2} == {r[1] for r in c.lines("start", a.pid)}
    assert set(started.values()) == {1, 2} and len(c.lines("start", a.pid)) == 6
    decided = Counter(o.id for o in client.all_outcomes())
    assert decided == Counter(dict.fromkeys(first + later, 1))  # each decided once
    wait_for(lambda: any(g.pending == 0 for g in client.groups()), 10, "B's acknowledgements")


def test_restart_under_the_same_name_takes_back_its_outcomes_at_once(
    consumers: tuple[Consumers, TimerClient],
) -> None:
    """With a 60 s reclaim idle, only taking back its own at start can handle the
    outcomes a killed pod-0 held within this test's 30 s."""
    c, client = consumers
    decide(client, [f"j{i}" for i in range(4)])
    args = ("--concurrency", "4", "--reclaim-idle", "60s")
    first = c.start("pod-0", *args, hold=True)
    wait_for(lambda: len(c.lines("start", first.pid)) == 4, 30, "pod-0 to start 4 handlers")
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    again = c.start("pod-0", *args, hold=False)
    wait_for(lambda: len(c.lines("done", again.pid)) == 4, 30, "the restarted pod-0")
    assert client.groups()[0].consumers[0].name == "pod-0"


def test_sigterm_stops_taking_outcomes_finishes_running_handlers_and_exits_0(
    consumers: tuple[Consumers, TimerClient],
) -> None:
    c, client = consumers
    decide(client, ["a0", "a1"])
    port = free_port()
    p = c.start("c", "--concurrency", "2", "--metrics-port", str(port), hold=True)
    wait_for(lambda: len(c.lines("start", p.pid)) == 2, 30, "2 handlers to start")
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    text = metrics.decode()
    assert 'tickwheel_handler_in_flight{consumer="c",group="handlers"} 2.0' in text
    assert 'tickwheel_group_pending{group="handlers"} 2.0' in text
    assert "tickwheel_handler_duration_seconds_bucket" in text
    assert stage_counts(text, "tickwheel_handler_stage_seconds") == {
        "decided_to_read": 2.0,
        "read_to_start": 2.0,
    }  # both first attempts, started
    p.send_signal(signal.SIGTERM)
    out = Path(c.tmp / "c-0.out")
    wait_for(lambda: "SIGTERM: stopping" in out.read_text(), 15, "the runner to see SIGTERM")
    decide(client, ["late"])  # arrives while draining: must not be taken
    assert p.poll() is None  # still finishing its handlers
    p.hold_file.unlink()  # type: ignore[attr-defined]
    assert p.wait(30) == 0, out.read_text()
    assert sorted(r[1] for r in c.lines("done")) == sorted(r[1] for r in c.lines("start"))
    assert len(c.lines("done")) == 2
    (g,) = client.groups()
    assert g.pending == 0 and g.lag == 1  # handled and acked; "late" waits for the next
    assert "handled 2" in out.read_text()


def test_redis_kill_9_while_handling_loses_no_outcome(
    tmp_path: Path, namespace: str, server_binary: Path
) -> None:
    """kill -9 of Redis (appendfsync always) while a `tickwheel handle` process is
    handling, restart on the same port: the runner rides it out, and every outcome is
    handled (at least once) and acknowledged in the end; nothing is dead-lettered."""
    server = RedisServer(tmp_path / "redis", binary=server_binary, appendfsync="always").start()
    try:
        client = TimerClient.from_url(server.url, namespace)
        client.init(shards=4)
        ids = [f"j{i}" for i in range(300)]
        decide(client, ids)
        c = Consumers(tmp_path, server.url, namespace)
        try:
            p = c.start(
                "c", "--concurrency", "4", "--reclaim-idle", "1s", hold=False, work_s=0.02
            )  # 300 x 20 ms on 4 threads: 1.5 s of work
            wait_for(lambda: len(c.lines("done")) >= 50, 30, "handling under way")
            server.kill()
            assert len(c.lines("done")) < len(ids)  # the kill came mid-way
            server.restart()

            def done() -> set[str]:
                return {r[1] for r in c.lines("done")}

            wait_for(lambda: len(done()) == len(ids), 90, "every outcome handled")
            wait_for(
                lambda: any(g.pending == 0 and g.lag == 0 for g in client.groups()),
                60,
                "every outcome acknowledged",
            )
            assert p.poll() is None, "the runner died with Redis"
            assert client.dead_letters() == []
        finally:
            c.stop_all()
        client.close()
    finally:
        server.stop()


# A tenant's handler run: "start <tenant> <wall s> <pid> <id>", its work, then "done …".
LIMITED = """
import os, pathlib, time

LOG = pathlib.Path(os.environ["LIMIT_LOG"])

def handle(o):
    tenant = o.payload["tenant"]
    at = f"{os.getpid()} {o.id} {o.attempt}"
    with LOG.open("a") as f:
        f.write(f"start {tenant} {time.time()} {at}\\n")
    hung = o.payload["hang"] and o.attempt == 1
    time.sleep(0.8 if hung else 0.2)  # the handler's work; a hang runs past --timeout
    with LOG.open("a") as f:
        f.write(f"{'hung' if hung else 'done'} {tenant} {time.time()} {at}\\n")
"""


def test_a_per_key_limit_holds_across_three_runners_and_a_kill_9(
    consumers: tuple[Consumers, TimerClient],
) -> None:
    """Three `tickwheel handle --limit payload.tenant=2 --timeout 0.3s` processes share
    600 outcomes of 6 tenants; the first attempt of one in 25 hangs 0.8 s, past its
    timeout (its retry runs while the hung thread still does), and one runner is killed
    with kill -9 in the middle of handlers. Per tenant, never more than 2 attempts ran
    at once (the hung ones counted until they returned, the killed ones until the kill),
    each limit was reached, every outcome was handled, and no slot is left held: the
    killed runner's slots came free (else its tenants' outcomes could not all have
    run). Before #54 a retry shared its hung attempt's slot and then gave it back.

    A slot is a lease of `--reclaim-idle`, renewed every third of it: a runner stalled
    past it (a CI machine running the suite and a trial on 2 cores stalled one past 1 s:
    every tenant then ran 3 or 4 at once) loses its slots and its outcomes, as the
    limits guide says. 3 s here, so a busy machine's stall is not taken for the limit
    failing."""
    c, client = consumers
    log = c.tmp / "limited.log"
    log.touch()
    (c.tmp / "limited_handlers.py").write_text(textwrap.dedent(LIMITED))
    ids = [f"lim{i}" for i in range(600)]
    for i, tid in enumerate(ids):
        client.schedule(tid, 60_000, payload={"tenant": f"t{i % 6}", "hang": i % 25 == 7})
        client.cancel(tid)
    procs = []
    for name in ("a", "b", "c"):
        out = (c.tmp / f"{name}.out").open("wb")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "timer.cli", "--redis-url", c.url, "--namespace", c.namespace,
             "handle", "limited_handlers:handle", "--on", "cancelled", "--consumer", name,
             "--concurrency", "4", "--reclaim-idle", "3s", "--limit", "payload.tenant=2",
             "--timeout", "0.3s", "--backoff", "50ms"],
            cwd=c.tmp, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "LIMIT_LOG": str(log)},
        ))  # fmt: skip
        out.close()
    c.procs.extend(procs)

    def rows() -> list[list[str]]:
        return [line.split() for line in log.read_text().splitlines() if line.count(" ") == 5]

    victim = procs[0]

    def victim_mid_handler() -> bool:
        """In an attempt that started less than 0.1 s ago, so at least 0.1 s of its work
        is left for the kill to cut (one near its end could end between this read and
        the kill on a busy machine, and then nothing was cut); a hung one is 0.8 s."""
        rs = rows()
        mine = [r for r in rs if int(r[3]) == victim.pid]
        ended = {(r[4], r[5]) for r in mine if r[0] != "start"}
        now = time.time()
        fresh = [r for r in mine if r[0] == "start" and (r[4], r[5]) not in ended
                 and now - float(r[2]) < 0.1]  # fmt: skip
        return len({r[4] for r in rs if r[0] == "done"}) >= 100 and bool(fresh)

    wait_for(victim_mid_handler, 60, "a third of the work done, the victim mid-handler")
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    killed_at = time.time()  # the victim's handlers ran until (just before) now
    wait_for(lambda: {r[4] for r in rows() if r[0] == "done"} >= set(ids), 60,
             "every outcome handled")  # fmt: skip
    survivors = {p.pid for p in procs[1:]}

    def hung_returned() -> list[list[str]] | None:
        """The log, once every attempt a live runner started in it has returned. One
        snapshot: a runner stalled past --reclaim-idle on a busy machine has its handled
        outcome run again by another (at least once), and a start read later than the
        check would be taken for a span cut at the kill."""
        rs = rows()
        ended = {(r[3], r[4], r[5]) for r in rs if r[0] != "start"}
        done = all((r[3], r[4], r[5]) in ended for r in rs
                   if r[0] == "start" and int(r[3]) in survivors)  # fmt: skip
        return rs if done else None

    snapshot = wait_for(
        hung_returned, 10, "every attempt of a live runner returned, the hung ones too"
    )
    assert isinstance(snapshot, list)
    spans: dict[tuple[str, str, int, str], list[float]] = {}
    for kind, tenant, at, pid, tid, attempt in snapshot:
        span = spans.setdefault((tenant, tid, int(pid), attempt), [float(at), killed_at])
        if kind != "start":
            span[1] = float(at)
    assert any(r[0] == "hung" for r in snapshot), "a handler ran past its timeout"
    per_tenant: dict[str, list[tuple[float, float]]] = {}
    for (tenant, _, _, _), (a, b) in spans.items():
        per_tenant.setdefault(tenant, []).append((a, b))
    assert {t: most_at_once(v) for t, v in per_tenant.items()} == {f"t{k}": 2 for k in range(6)}
    cut = [k for k, (_, b) in spans.items() if b == killed_at and k[2] == victim.pid]
    assert cut, "the victim was killed mid-handler"
    left = list(client.redis.scan_iter(match=f"{{tw:{client.namespace}}}:lim:*"))
    wait_for(lambda: all(client.redis.zcard(k) == 0 for k in left), 10, "every slot given back")
