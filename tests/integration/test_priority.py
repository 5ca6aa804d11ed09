"""Priorities (#43): a backlog fires and is handled highest priority first.

The order is read where it is made: the outcome stream, which a shard's leader appends
in the order it fires, and the order a runner's handler threads start outcomes.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import fresh_client, wait_for
from timer import Handlers, InvalidInput, Outcome, TimerClient
from timer.durable.groups.streams import Delivery
from timer.handlers.policy import WorkQueue
from timer.testing import RedisServer
from timer.worker.firing import Firer
from timer.worker.shard import FireTask

from .conftest import server_now_ms
from .test_handlers import running
from .test_worker import all_outcomes, make_worker, subscribed
from .test_worker import running as worker_running

__all__ = ["running"]  # a fixture, used by name

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def one_shard(redis_server: RedisServer, namespace: str) -> Iterator[TimerClient]:
    with fresh_client(redis_server, namespace, 1, bucket_ms=100) as c:
        yield c


def test_the_firer_takes_its_backlog_highest_priority_first() -> None:
    """What the wheel expired waits in the firer's backlog by priority: each batch is
    the highest priorities' oldest entries; with none given, first in, first out."""
    sink: queue.SimpleQueue[FireTask] = queue.SimpleQueue()
    order = [(0, "a"), (5, "b"), (-3, "c"), (0, "d"), (5, "e"), (100, "f"), (-3, "g")]
    for priority, tid in order:
        task = FireTask(0, 0, 1, tid, 0, sink)
        task.priority = priority
        sink.put(task)

    ctx = SimpleNamespace(fire_queue=sink, raised_queue=queue.SimpleQueue(), catching_up=set())
    firer = Firer.__new__(Firer)  # its backlog only: no worker around it
    firer.ctx, firer.backlog, firer.held = ctx, {}, []  # type: ignore[assignment]
    firer._take_expired()
    assert [t.timer_id for t in firer._next_batch(3)] == ["f", "b", "e"]
    assert [t.timer_id for t in firer._next_batch(3)] == ["a", "d", "c"]
    assert [t.timer_id for t in firer.due_now()] == ["g"]


def test_a_taken_over_backlog_fires_by_priority_then_deadline(one_shard: TimerClient) -> None:
    """Overdue timers of mixed priorities, found by a new leader's load (their records
    say their priority): the outcome stream has them highest priority first, each
    priority oldest deadline first."""
    c = one_shard
    now = server_now_ms(c.redis)
    specs = [
        {"id": f"o{i}", "deadline_ms": now - 5_000 + 31 * ((i * 7) % 60),
         "priority": (0, 9, -4, 0, 100)[i % 5]}
        for i in range(60)
    ]  # fmt: skip
    for s in specs[::7]:
        del s["priority"]  # left out: 0
    c.schedule_many(specs)
    w = make_worker(c, "w1", sweep_interval_ms=60_000)
    try:
        w.run_once()
        outs = all_outcomes(c)
    finally:
        w.close()
    expected = sorted(specs, key=lambda s: (-int(s.get("priority", 0)), int(s["deadline_ms"])))
    assert [o.id for o in outs] == [s["id"] for s in expected]
    assert [o.priority for o in outs] == [s.get("priority", 0) for s in expected]


def test_a_high_priority_goes_first_by_its_deadline_not_its_wheels_time(
    one_shard: TimerClient,
) -> None:
    """A high-priority timer due with a flood, whose wheel would let it go a minute later
    (a timer's wheel time is its deadline by the worker's estimate of Redis time when it
    arrived, which a correction moves): the firer takes it by its deadline before it
    sends the flood, so the stream has it first. Before, the firer sent what the wheels
    had released, and the flood went first."""
    c = one_shard
    due = server_now_ms(c.redis) - 1_000  # overdue: the load puts them in at once
    c.schedule_many([{"id": f"f{i}", "deadline_ms": due} for i in range(20)]
                    + [{"id": "high", "deadline_ms": due, "priority": 50}])  # fmt: skip
    w = make_worker(c, "w1", sweep_interval_ms=60_000)
    try:
        w.tick()  # leads the shard and loads all 21
        ctx = w.ctx
        with ctx.lock:
            state = ctx.shards[0]
            assert len(state.tasks) == 21
            # in again, as if the estimate had moved its wheel time a minute on
            w.loader.add_task(state, "high", due, min_delay_ms=60_000, priority=50)
        ctx.timer.advance_clock(0)
        ctx.raised.advance_clock(0)  # the first "high" entry, no longer live, is dropped
        for _ in range(3):  # a round trip put back for the high one, then the rest
            w.firer.fire_batch(w.firer.due_now())
        outs = all_outcomes(c)
    finally:
        w.close()
    assert [o.id for o in outs][:1] == ["high"] and len(outs) == 21, [o.id for o in outs]


def test_a_restart_after_an_outage_fires_every_shards_high_priorities_first(
    redis_server: RedisServer, namespace: str
) -> None:
    """Every timer overdue when the worker starts (16 shards, 1,600 at the default
    priority and 32 at 50, spread over the shards): no timer of the flood is decided
    before the last high one (#54 B). Before, the worker took and loaded its shards one
    by one and fired each one's backlog meanwhile, so the high ones of the last shards
    came after most of the flood; now the overdue timers of the shards it takes wait
    until every one is loaded, and each priority goes in round trips of its own."""
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=16)
    try:
        past = server_now_ms(c.redis) - 2_000
        specs: list[dict[str, object]] = [
            {"id": f"f{i}", "deadline_ms": past + i % 500} for i in range(1_600)
        ]
        for k in range(32):
            specs.insert(k * 50, {"id": f"h{k}", "deadline_ms": past + k, "priority": 50})
        c.schedule_many(specs)
        assert len({c.shard_of(f"h{k}") for k in range(32)}) >= 12  # spread over shards
        outs: list[Outcome] = []

        def all_fired() -> bool:
            outs.extend(all_outcomes(c))
            return len(outs) >= len(specs)

        with worker_running(make_worker(c, "w1", sweep_interval_ms=60_000)):
            wait_for(all_fired, 60, "all fired")
    finally:
        c.close()
    last_high = max(o.decided_ms for o in outs if o.id.startswith("h"))
    before = [o.id for o in outs if o.id.startswith("f") and o.decided_ms < last_high]
    assert before == [], f"{len(before)} of the flood fired before the last high one"


def test_a_flood_due_at_once_fires_its_high_priorities_first(
    redis_server: RedisServer, namespace: str
) -> None:
    """A running leader hears of a flood through its events (M, then Q with the
    priorities) and fires the few high-priority timers of it first: each is among the
    first fifth of its shard's outcomes, where in arrival order they spread evenly."""
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=2, bucket_ms=100)
    w = make_worker(c, "w1", sweep_interval_ms=60_000)
    try:
        with worker_running(w):
            wait_for(lambda: len(w.shards) == 2 and subscribed(c, 2), 10, "leading, subscribed")
            wait_for(lambda: not any(s.needs_reload for s in list(w.shards.values())), 10)
            # within the horizon (10 s): events, not a load; far enough that the whole flood
            # is in before it falls due on a busy machine (1.5 s was not: a batch scheduled
            # after its deadline can only fire after those that fired already)
            due = server_now_ms(c.redis) + 6_000
            flood = [{"id": f"f{i}", "deadline_ms": due} for i in range(8_000)]
            high = {f"f{i}" for i in range(0, 8_000, 400)}
            for spec in flood:
                if spec["id"] in high:
                    spec["priority"] = 50
            for start in range(0, len(flood), 1_000):
                c.schedule_many(flood[start : start + 1_000])
            scheduled_by = server_now_ms(c.redis)
            assert scheduled_by < due, f"the flood was in {scheduled_by - due} ms after it was due"
            outs: list[Outcome] = []

            def all_fired() -> bool:
                outs.extend(all_outcomes(c))
                return len(outs) >= 8_000

            wait_for(all_fired, 60, "all fired")
    finally:
        c.close()
    by_shard: dict[int, list[str]] = {}
    for o in outs:
        by_shard.setdefault(o.shard, []).append(o.id)
    for ids in by_shard.values():
        ranks = [n for n, tid in enumerate(ids) if tid in high]
        assert ranks and max(ranks) < len(ids) // 5, (ranks, len(ids))
    assert {o.id: o.priority for o in outs if o.id in high} == dict.fromkeys(high, 50)


# The runner's handler for the live-flood test: one line a start, "<id> <priority>".
STARTS = """
import os

_LOG = open(os.environ["START_LOG"], "a", buffering=1)


def handle(o):
    _LOG.write(f"{o.id} {o.priority}\\n")
"""


@pytest.fixture
def one_busy_core(
    tmp_path: Path,
) -> Iterator[Callable[[list[str], dict[str, str]], subprocess.Popen[bytes]]]:
    """Start processes (in ``tmp_path``, their output in a log each there) pinned to one
    core, beside a busy loop pinned there too, started first and always killed: they
    get what CPU the scheduler leaves them, in slices."""
    core = min(os.sched_getaffinity(0))
    procs: list[subprocess.Popen[bytes]] = []

    def pin() -> None:  # in the child, before exec: every thread it starts inherits it
        os.sched_setaffinity(0, {core})

    def start(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with (tmp_path / f"proc-{len(procs)}.log").open("wb") as out:  # the child keeps a fd
            proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, preexec_fn=pin)  # fmt: skip  # noqa: PLW1509
        procs.append(proc)
        assert os.sched_getaffinity(proc.pid) == {core}
        return proc

    try:
        start([sys.executable, "-c", "while True: pass"], dict(os.environ))
        yield start
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


def test_a_live_flood_keeps_its_order_on_one_busy_core(
    redis_server: RedisServer,
    namespace: str,
    tmp_path: Path,
    one_busy_core: Callable[[list[str], dict[str, str]], subprocess.Popen[bytes]],
) -> None:
    """10,000 timers at priority 0 and 50 at 50 due in one millisecond, heard live by a
    worker process and handled by a runner process, both pinned to one core a busy loop
    also runs on: each shard's stream has its high ones before any of the flood, and the
    runner starts the 50 before any of the flood. Before, the flood's wheel and the
    raised wheel released on reapers of their own, and the firer sent whatever had
    reached it: under load a round trip of the flood went before the high ones (one run:
    499 of a shard's flood first, the last high one started after 14.6 % of all)."""
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=4)
    (tmp_path / "prio_starts.py").write_text(textwrap.dedent(STARTS))
    starts = tmp_path / "starts.log"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}", "START_LOG": str(starts)}
    where = ["--redis-url", redis_server.url, "--namespace", namespace]
    try:
        one_busy_core([sys.executable, "-m", "timer.worker", *where, "--id", "w1",
                       "--log-level", "WARNING"], env)  # fmt: skip
        one_busy_core([sys.executable, "-m", "timer.cli", *where, "handle", "prio_starts:handle",
                       "--on", "expired", "--consumer", "one", "--concurrency", "1"],
                      env)  # fmt: skip

        def ready() -> bool:  # the worker hears every shard; the runner's group is there
            if not subscribed(c, 4):
                return False
            streams = [c.keys.shard(s).outcomes for s in range(4)]
            return all(c.redis.exists(k) and c.redis.xinfo_groups(k) for k in streams)

        wait_for(ready, 60, "worker and runner ready")
        due = server_now_ms(c.redis) + 4_000
        specs: list[dict[str, object]] = [
            {"id": f"f{i}", "deadline_ms": due} for i in range(10_000)
        ]
        for k in range(50):  # spread through the flood's order (and so its shards)
            specs.insert(k * 201, {"id": f"h{k}", "deadline_ms": due, "priority": 50})
        for start in range(0, len(specs), 1_000):
            c.schedule_many(specs[start : start + 1_000])
        # One marker a shard, due first, scheduled last: its event comes after the
        # flood's on its shard's channel, so once it fired the worker had the flood in
        # its wheel (what the order is promised for: timers heard of before their time)
        markers = {c.shard_of(f"m{i}"): f"m{i}" for i in range(64)}
        assert len(markers) == 4
        c.schedule_many([{"id": m, "deadline_ms": due - 2_000} for m in markers.values()])
        total = len(specs) + len(markers)

        def handled() -> bool:
            return starts.exists() and len(starts.read_text().splitlines()) >= total

        wait_for(handled, 120, "every outcome handled")
        outs = [o for o in c.all_outcomes() if o.id[0] != "m"]
        marked = [c.get(m) for m in markers.values()]
    finally:
        c.close()
    heard = [o.decided_ms if o is not None else None for o in marked]
    assert all(d is not None and d < due for d in heard), f"premise: heard in time {heard}"
    by_shard: dict[int, list[Outcome]] = {}
    for o in outs:
        by_shard.setdefault(o.shard, []).append(o)
    for shard, line in by_shard.items():
        last_high = max(n for n, o in enumerate(line) if o.priority == 50)
        before = sum(1 for o in line[:last_high] if o.priority == 0)
        assert before == 0, f"shard {shard}: {before} of the flood before its last high one"
    started = [row.split() for row in starts.read_text().splitlines() if row[0] != "m"]
    assert len(started) == len(specs)
    first = [tid for tid, _ in started[:50]]
    assert sorted(first) == sorted(f"h{k}" for k in range(50)), (
        f"the last high one started at {max(n for n, (t, _) in enumerate(started) if t[0] == 'h')}"
    )


def test_a_runner_starts_the_higher_priorities_it_holds_first(
    one_shard: TimerClient,
    running: Callable[..., threading.Thread],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One handler thread and a read of 40 outcomes: the handler sees them highest
    priority first, each priority in stream order (the first too: a read goes to the
    handler threads highest first, not in stream order, which let the idle thread start
    the read's first outcome before the higher ones behind it were queued)."""
    c = one_shard
    priorities = [(i * 37) % 7 - 3 for i in range(40)]
    c.schedule_many([{"id": f"h{i}", "delay_ms": 60_000, "priority": p}
                     for i, p in enumerate(priorities)])  # fmt: skip
    for i in range(40):
        c.cancel(f"h{i}")  # an outcome each, in this order
    seen: list[tuple[int, str]] = []
    queued: list[int] = []  # the priorities in the order the read went to the threads
    put = WorkQueue.put

    def recording_put(self: WorkQueue, d: Delivery | None) -> None:
        if d is not None:
            queued.append(d.outcome.priority)
        put(self, d)

    monkeypatch.setattr(WorkQueue, "put", recording_put)
    gate = threading.Event()
    h = Handlers(c, group="pri", consumer="one")

    @h.on("cancelled")
    def handle(o: Outcome) -> None:
        gate.wait(10)  # the first holds the thread until the read's rest is queued
        seen.append((o.priority, o.id))

    running(h, concurrency=1)
    wait_for(lambda: h.in_flight == 40, 10, "the whole read in hand")
    gate.set()
    wait_for(lambda: len(seen) == 40, 10, "every outcome handled")
    assert queued == sorted(priorities, reverse=True), queued
    order = {f"h{i}": i for i in range(40)}
    assert seen == sorted(seen, key=lambda x: (-x[0], order[x[1]])), seen


def test_the_priority_benchmark_runs_its_four_cases(server_binary: Path) -> None:
    """benchmarks/priority.py at its smallest (here, not with the slow benchmark smoke
    tests: it asserts no speed, so it may share the machine): each run fires every
    timer, none early, the high ones counted apart."""
    from benchmarks import priority  # noqa: PLC0415
    from tests.test_benchmarks_smoke import run  # noqa: PLC0415

    out = run(priority.main, ["--flood", "2000", "--high", "20", "--lead-ms", "1500",
                              "--outage-flood", "1000", "--outage-high", "10",
                              "--server", str(server_binary)])  # fmt: skip
    for case, flood in (("alone", 0), ("flood", 2000), ("flood_no_priority", 2000)):
        assert out[case]["timers"] == flood + 20 and out[case]["early"] == 0, out[case]
        assert out[case]["high_ms"]["n"] == 20 and out[case]["flood_ms"]["n"] == flood
    outage = out["outage"]  # every one fired, the high ones counted apart
    assert outage["high_since_first_ms"]["n"] == 10, outage
    assert outage["flood_since_first_ms"]["n"] == 1000, outage


def test_a_runner_fair_by_a_key_takes_the_keys_in_turn(
    one_shard: TimerClient, running: Callable[..., threading.Thread]
) -> None:
    """fair_by="payload.tenant": one handler thread holding a flood of tenant a read
    before a few of b and c starts them in turn, within each priority: at every point
    the tenants that still have outcomes waiting have started within one of each other,
    and the two of priority 5 (read last) go before all of priority 0."""
    c = one_shard
    tenants = ["a"] * 30 + ["b"] * 10 + ["c"] * 5 + ["a", "b"]
    c.schedule_many([{"id": f"f{i}", "delay_ms": 60_000, "payload": {"tenant": t},
                      "priority": 5 if i >= 45 else 0} for i, t in enumerate(tenants)])  # fmt: skip
    for i in range(len(tenants)):
        c.cancel(f"f{i}")
    seen: list[Outcome] = []
    gate = threading.Event()
    h = Handlers(c, group="fair", consumer="one", fair_by="payload.tenant")

    @h.on("cancelled")
    def handle(o: Outcome) -> None:
        gate.wait(10)
        seen.append(o)

    running(h, concurrency=1)
    wait_for(lambda: h.in_flight == len(tenants), 10, "the whole read in hand")
    gate.set()
    wait_for(lambda: len(seen) == len(tenants), 10, "every outcome handled")
    # the first may have started as it was read, before the rest were queued
    rest = seen[1:] if seen[0].id == "f0" else seen
    assert [o.priority for o in rest[:2]] == [5, 5] and {o.priority for o in rest[2:]} == {0}
    left = {t: sum(1 for o in rest[2:] if o.payload["tenant"] == t) for t in "abc"}
    started = dict.fromkeys("abc", 0)
    for o in rest[2:]:
        started[o.payload["tenant"]] += 1
        waiting = [t for t in "abc" if started[t] < left[t]]
        counts = [started[t] for t in waiting]
        assert not counts or max(counts) - min(counts) <= 1, (started, waiting)
    ids = [o.id for o in rest[2:] if o.payload["tenant"] == "a"]
    assert ids == sorted(ids, key=lambda i: int(i[1:]))  # each tenant in stream order


def test_fair_by_is_a_key_or_a_clear_refusal(one_shard: TimerClient) -> None:
    """fair_by takes what a limit's key takes (a path or a function), refusing the rest
    at construction; tickwheel handle --fair-by says so on the command line."""
    from click.testing import CliRunner  # noqa: PLC0415

    from timer.cli.main import main  # noqa: PLC0415

    assert Handlers(one_shard, fair_by="payload.site.domain").fair_by == "payload.site.domain"
    assert Handlers(one_shard, fair_by=lambda o: o.id[:2]).fair_by is not None
    for bad in ("tenant", "payload..x", "", 7, b"id"):
        with pytest.raises(InvalidInput, match="fair_by"):
            Handlers(one_shard, fair_by=bad)  # type: ignore[arg-type]
    out = CliRunner().invoke(
        main, ["--redis-url", one_shard.where, "--namespace", one_shard.namespace,
               "handle", "tests.integration.test_priority:noop", "--fair-by", "tenant"],
    )  # fmt: skip
    assert out.exit_code == 3 and "--fair-by must be" in out.output, out.output
    assert "function" not in out.output  # none can be given on the command line


def noop(o: Outcome) -> None:
    """A handler for the CLI test (never reached: its option is refused first)."""
