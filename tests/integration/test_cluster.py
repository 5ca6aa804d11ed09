"""tickwheel on a real 3-master Redis Cluster started by the fixture.

Every key of a shard carries the shard's hash tag, so each script runs in one slot;
pipelines are split by node by redis-py's cluster pipeline.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import wait_for
from timer import Backoff, Handlers, Limit, Outcome, TimerClient
from timer.aio import AsyncTimerClient
from timer.errors import NotDurable
from timer.testing import (
    CLUSTER_BUS_OFFSET,
    RedisServer,
    free_port,
    redis_cluster,
    start_cluster_node,
)
from timer.worker import Worker, WorkerSettings, fire_and_handle

from .test_handler_limits import Overlap
from .test_handlers import running

__all__ = ["running"]  # a fixture, used by name

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster_url(tmp_path_factory: pytest.TempPathFactory, server_binary: Path) -> Iterator[str]:
    """A 3-master cluster shared by the module's tests."""
    with redis_cluster(tmp_path_factory.mktemp("cluster"), binary=server_binary) as servers:
        yield servers[0].url


@pytest.fixture
def cclient(cluster_url: str, namespace: str) -> Iterator[TimerClient]:
    c = TimerClient.from_url(cluster_url, namespace)
    c.init(shards=8)
    yield c
    c.close()


def test_client_detects_cluster(cclient: TimerClient) -> None:
    """from_url on a cluster node gives a cluster client."""
    assert cclient.cluster is True


def test_cluster_lifecycle(cclient: TimerClient) -> None:
    """schedule, notify, cancel, get, schedule_many, stats and memory work across all three
    masters."""
    res = cclient.schedule_many(
        [
            {"id": f"job:{{{i}}}", "delay_ms": 60_000, "watch": [f"job:{{{i}}}:done"]}
            for i in range(200)
        ]
    )
    assert all(not isinstance(r, Exception) and r.created for r in res)
    shards = {r.shard for r in res if not isinstance(r, Exception)}
    assert shards == set(range(8))
    assert cclient.notify("job:{1}:done") == 1
    assert cclient.cancel("job:{2}") is True
    info = cclient.get("job:{1}")
    assert info is not None and info.state == "completed"
    st = cclient.stats()
    assert st["pending"] == 198 and st["outcomes"] == 2
    held = cclient.memory()  # MEMORY USAGE routed to each key's master
    assert held["pending"] == 198 and held["bytes_per_pending_timer"] > 0
    # two outcomes are too few to say bytes each: the empty streams' own bytes would dominate
    assert held["outcomes"] == 2 and held["bytes_per_decided_timer"] is None
    outs = list(cclient.outcomes("g", "c", stop_when_idle=True))
    assert sorted(o.id for o in outs) == ["job:{1}", "job:{2}"]


def test_a_backlog_fires_by_priority_on_a_cluster(cclient: TimerClient) -> None:
    """Priorities (#43) across three masters: overdue timers of mixed priorities over
    every shard, taken over by one worker, land in each shard's outcome stream highest
    priority first, then oldest deadline first."""
    now = cclient.server_time_ms()
    specs = [{"id": f"p:{{{i}}}", "deadline_ms": now - 3_000 + (i * 13) % 500,
              "priority": (i * 7) % 5 - 2} for i in range(160)]  # fmt: skip
    assert all(not isinstance(r, Exception) for r in cclient.schedule_many(specs))
    w = Worker(
        TimerClient.from_url(cclient.where, cclient.namespace),
        WorkerSettings(worker_id="pw", sweep_interval_ms=60_000),
    )
    try:
        w.run_once()
    finally:
        w.close()
        w.client.close()
    outs = list(cclient.outcomes("prio", "c", stop_when_idle=True))
    assert len(outs) == 160 and len({o.shard for o in outs}) == 8
    for shard in range(8):
        mine = [(o.priority, o.deadline_ms) for o in outs if o.shard == shard]
        assert mine == sorted(mine, key=lambda x: (-x[0], x[1])), (shard, mine)


def test_finding_and_bulk_actions_on_a_cluster(cclient: TimerClient) -> None:
    """client.timers pages each shard's hash on the master that holds it, and acts on
    what it found there."""
    cclient.schedule_many([{"id": f"f:{{{i}}}", "delay_ms": 600_000} for i in range(150)])
    found = list(cclient.timers.scan("f:*", count=40))
    assert sorted(t.id for t in found) == sorted(f"f:{{{i}}}" for i in range(150))
    assert {t.shard for t in found} == set(range(8))
    done = cclient.timers.cancel("f:{1*")  # f:{1}, f:{10}..{19}, f:{100}..{149}
    assert done.done == 61 and cclient.timers.count("f:*", state="cancelled") == 61


def test_far_timers_on_a_cluster(cclient: TimerClient) -> None:
    """Coarse buckets (built inside the scripts from the shard's hash tag) stay in their
    shard's slot: far timers are scheduled, moved, rescheduled and cancelled on every
    master; then no timer is pending (the buckets, lists, keep the ids until they are
    swept: see the lazy buckets in lua/include/buckets.lua)."""
    far = 5 * 3_600_000
    res = cclient.schedule_many([{"id": f"far:{{{i}}}", "delay_ms": far} for i in range(64)])
    assert all(not isinstance(r, Exception) and r.created for r in res)
    coarse = sum(cclient.redis.zcard(cclient.keys.shard(s).coarse_buckets) for s in range(8))
    assert 8 <= coarse <= 16  # one or two hours per shard
    assert cclient.reschedule("far:{1}", delay_ms=60_000) is not None  # coarse -> fine
    assert cclient.reschedule("far:{2}", delay_ms=far * 2) is not None  # coarse -> coarse
    assert all(cclient.cancel(f"far:{{{i}}}") for i in range(64))
    for s in range(8):
        sk = cclient.keys.shard(s)
        assert cclient.redis.hlen(sk.timers) == 0
        for mirror, key in ((sk.buckets, sk.bucket), (sk.coarse_buckets, sk.coarse)):
            for n in cclient.redis.zrange(mirror, 0, -1):
                assert cclient.redis.type(key(int(n))) == b"list"  # in the shard's slot


def test_handlers_on_a_cluster(cclient: TimerClient) -> None:
    """The runner across three masters: retries, a dead letter, redelivery, groups, a
    group deleted, and follow() with no group."""
    for i in range(16):
        cclient.schedule(f"h:{{{i}}}", delay_ms=60_000, payload={"i": i})
        cclient.cancel(f"h:{{{i}}}")
    seen: list[tuple[str, int]] = []
    h = Handlers(cclient, group="g", max_attempts=2, backoff=Backoff(initial_s=0.01, max_s=0.02))

    @h.on("cancelled")
    def handler(o: Outcome) -> None:
        seen.append((o.id, o.attempt))
        if o.id == "h:{3}" and o.redelivery_of is None:
            raise RuntimeError("poison")
        if o.id == "h:{5}" and o.attempt == 1:
            raise RuntimeError("flaky")

    assert h.run(concurrency=4, stop_when_idle=True)
    assert h.stats.handled == 15 and h.stats.dead_lettered == 1 and h.stats.retried == 2
    (letter,) = cclient.dead_letters()
    assert letter.outcome is not None and letter.outcome.id == "h:{3}"
    assert [e.attempt for e in letter.earlier] == [1]  # every attempt's error, kept per shard
    assert cclient.redeliver(letter.ref) is not None
    assert h.run(concurrency=4, stop_when_idle=True)
    assert ("h:{3}", 1) in seen and seen.count(("h:{3}", 1)) == 2  # first try, and again
    (g,) = cclient.groups()
    assert (g.name, g.pending, g.retrying, g.lag, g.shards) == ("g", 0, 0, 0, 8)
    assert len(list(cclient.follow(history=True, stop_when_idle=True))) == 16
    assert cclient.delete_group("g") == 8 and cclient.groups() == []


def test_fire_and_handle_on_a_cluster(cclient: TimerClient) -> None:
    """A worker and its handlers in one process (#55) across three masters: each node's
    fire calls (a pipeline per node) read their outcomes for the runner, every timer's
    handler runs once, and the group owes nothing after."""
    seen: list[str] = []
    h = Handlers(cclient, group="g", consumer="me")
    h.add("expired", lambda o: seen.append(o.id))
    settings = WorkerSettings(worker_id="fh", lease_ms=2_000)
    t = threading.Thread(target=fire_and_handle, args=(cclient, h, settings), daemon=True)
    t.start()
    try:
        wait_for(lambda: h.hand_off() is not None, 30, "the handlers to start")
        wait_for(lambda: len(set(cclient.leaders().values()) - {None}) == 1, 30, "the worker")
        ids = [f"fh:{i}" for i in range(60)]
        cclient.schedule_many([{"id": x, "delay_ms": 200} for x in ids])
        wait_for(lambda: len(seen) == len(ids), 30, "every handler to run")
        assert sorted(seen) == sorted(ids) and h.stats.handed_at_fire > 0
        assert {cclient.shard_of(x) for x in ids} == set(range(8))  # all three masters
    finally:
        h.stop()
        t.join(30)
    assert not t.is_alive()
    wait_for(lambda: any(g.pending == 0 for g in cclient.groups()), 10, "the acknowledgements")


def test_limits_and_rates_on_a_cluster(
    cclient: TimerClient, running: Callable[..., threading.Thread]
) -> None:
    """Per-key limits and rates (#43) across three masters: two runners, outcomes of
    timers on every shard, at most 2 at once per tenant, every outcome handled once, and
    every slot given back (slot_acquire and rate_take run where their key's slot is)."""
    ids = []
    for i in range(48):
        tid = f"cl:{{{i}}}"
        cclient.schedule(tid, 60_000, payload={"tenant": f"t{i % 3}"})
        cclient.cancel(tid)
        ids.append(tid)
    seen = Overlap()
    limits = [Limit("payload.tenant", 2), Limit("payload.tenant", name="r", per_s=10_000, burst=50)]
    runners = []
    for name in ("a", "b"):
        h = Handlers(cclient, group="clim", consumer=name, limits=limits)
        h.add("cancelled", seen.handler)
        runners.append(h)
        running(h, concurrency=6)
    wait_for(lambda: len(seen.done) >= len(ids), 60, "every outcome handled")
    assert sorted(seen.done) == sorted(ids)
    assert all(seen.most[f"t{k}"] == 2 for k in range(3)), seen.most
    wait_for(lambda: all(h.in_flight == 0 for h in runners), 10, "nothing left in hand")
    tag = f"{{tw:{cclient.namespace}}}"
    left = list(cclient.redis.scan_iter(match=f"{tag}:lim:*"))
    assert all(cclient.redis.zcard(k) == 0 for k in left), left
    assert list(cclient.redis.scan_iter(match=f"{tag}:rate:*"))


def test_django_results_on_a_cluster(cclient: TimerClient) -> None:
    """timer.django (#44) across three masters: tasks enqueued over every shard read
    READY from their timers, then run as the runner runs them, their results (a key
    beside each timer, in its shard's slot) read back SUCCESSFUL with the value."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DJANGO_SETTINGS_MODULE", "tests.django_project.settings")
        import django  # noqa: PLC0415

        django.setup()
        from tests.django_project.tasks import echo  # noqa: PLC0415
        from tests.integration.test_django import forget_backend  # noqa: PLC0415
        from timer.django import TickwheelBackend, task_backends  # noqa: PLC0415

        backend = TickwheelBackend(
            "cluster", {"OPTIONS": {"URL": cclient.where, "NAMESPACE": cclient.namespace}}
        )
        try:
            made = [backend.enqueue(echo, [i], {}) for i in range(24)]
            shards = {cclient.get(r.id).shard for r in made}  # type: ignore[union-attr]
            assert len(shards) >= 4, shards  # spread over the masters
            assert {backend.get_result(r.id).status.name for r in made} == {"READY"}
            for r in made:
                info = cclient.get(r.id)
                assert info is not None
                backend.run(r.id, info.payload["django"], info.created_ms)
            results = [backend.get_result(r.id) for r in made]
            assert [(r.status.name, r.return_value) for r in results] == [
                ("SUCCESSFUL", i) for i in range(24)
            ]
        finally:
            backend.close()
            forget_backend(task_backends)  # made without a URL by echo's import, if first


def test_dashboard_on_a_cluster(cclient: TimerClient) -> None:
    """The dashboard's overview, lookup and cancel across three masters."""
    from tests.dashboard.page import as_page  # noqa: PLC0415
    from timer.dashboard import create_app  # noqa: PLC0415

    cclient.schedule("d:{1}", delay_ms=60_000)
    cclient.schedule("d:{2}", delay_ms=60_000)
    with as_page(create_app(cclient)) as http:
        o = http.get("/api/overview").json()
        assert o["pending"] == 2 and len(o["shards"]) == 8
        assert http.get("/api/timers/d:{1}").json()["state"] == "pending"
        assert http.post("/api/timers/d:{1}/cancel").json()["state"] == "cancelled"
        assert http.get("/api/overview").json()["outcomes_last_minute"]["cancelled"] == 1
        now = cclient.server_time_ms()  # a worker's card, read with one MGET
        cclient.membership.heartbeat("w1", now_ms=now, live_window_ms=60_000)
        cclient.membership.describe("w1", {"id": "w1", "host": "h"})
        assert http.get("/api/worker", params={"id": "w1"}).json()["card"]["host"] == "h"
        g = cclient.consumer("audit", "a1")  # a group: paused, searched, its dead letters
        g.ensure()
        assert http.post("/api/groups/pause", json={"group": "audit"}).json()["done"] is True
        assert cclient.groups()[0].paused
        (held,) = g.read(10, None)
        searched = http.get("/api/outcomes", params={"group": "audit", "state": "in_hand"})
        assert [o["id"] for o in searched.json()["outcomes"]] == ["d:{1}"]
        assert g.dead_letter(held, "RuntimeError: no audit log") is not None
        dropped = http.post("/api/dead/bulk/drop", json={"group": "audit", "expect": 1})
        assert dropped.json()["done"] == 1 and cclient.dead_letters_total() == 0
    assert cclient.delete_group("audit") == 8 and cclient.groups() == []


def test_pending_page_on_a_cluster(cclient: TimerClient) -> None:
    """The Timers view's list across three masters: each shard's buckets read on its own
    master, paged, equal to a brute-force sort of every pending timer, filters too."""
    from tests.dashboard.test_api import web  # noqa: PLC0415
    from tests.dashboard.test_pending import busy, pages  # noqa: PLC0415

    expected = busy(cclient)
    with web(cclient) as http:
        for size in (7, 500):
            got, _ = pages(http, size)
            assert [(t["deadline_ms"], t["id"]) for t in got] == expected, size
        got, _ = pages(http, 5, match="far:*", min_priority="0")
    infos = {tid: cclient.get(tid) for _, tid in expected if tid.startswith("far:")}
    chosen = [x for x in expected if (t := infos.get(x[1])) is not None and t.priority >= 0]
    assert [(t["deadline_ms"], t["id"]) for t in got] == chosen


def test_cluster_survives_script_flush(cclient: TimerClient, cluster_url: str) -> None:
    """After SCRIPT FLUSH on every node, single calls and pipelines reload the scripts."""
    cclient.schedule("warm", delay_ms=60_000)
    cclient.redis.script_flush()
    assert cclient.schedule("after-flush", delay_ms=60_000).created
    res = cclient.schedule_many([{"id": f"f:{i}", "delay_ms": 60_000} for i in range(50)])
    assert all(not isinstance(r, Exception) for r in res), res
    cclient.redis.script_flush()
    assert cclient.cancel("after-flush") is True


def test_asyncio_client_on_a_cluster(cclient: TimerClient) -> None:
    """AsyncTimerClient at parity with the sync client on a cluster: schedule one and a
    batch over every shard (its pipelines split per node), get, notify, cancel,
    reschedule, wait for what a worker fires, read and ack through a group, find and act
    in bulk, create and list a schedule; after SCRIPT FLUSH the calls reload."""
    w = Worker(
        TimerClient.from_url(cclient.where, cclient.namespace),
        WorkerSettings(worker_id="aw", lease_ms=5_000),
    )
    runner = threading.Thread(target=w.run, daemon=True)

    async def main() -> None:
        async with await AsyncTimerClient.connect(cclient.where, cclient.namespace) as ac:
            assert ac.cluster
            made = await ac.schedule("a:{1}", 60_000, watch=["a:{1}:done"])
            assert made.created and (await ac.get("a:{1}")) is not None
            batch = await ac.schedule_many(
                [{"id": f"b:{{{i}}}", "delay_ms": 200} for i in range(40)]
            )
            assert all(not isinstance(t, Exception) for t in batch), batch
            assert {t.shard for t in batch if not isinstance(t, Exception)} == set(range(8))
            assert await ac.notify("a:{1}:done") == 1
            await ac.schedule("c:{2}", 60_000)
            assert await ac.cancel("c:{2}") is True
            await ac.schedule("r:{3}", 60_000)
            assert (await ac.reschedule("r:{3}", 100)) is not None
            runner.start()
            assert (await ac.wait("r:{3}", timeout=20)).outcome == "expired"
            for i in range(40):
                assert (await ac.wait(f"b:{{{i}}}", timeout=20)).outcome == "expired"
            seen: set[str] = set()
            async for o in ac.outcomes("g", "c1", stop_when_idle=True):
                seen.add(o.id)
                await o.aack()
            assert {f"b:{{{i}}}" for i in range(40)} | {"a:{1}", "c:{2}", "r:{3}"} <= seen
            page = await ac.timers.find("*", state="any", count=200)
            assert len(page.timers) >= 43
            await ac.schedule_many([{"id": f"x:{{{i}}}", "delay_ms": 600_000} for i in range(16)])
            assert (await ac.timers.act("cancel", "x:*")).done == 16
            await ac.schedules.create("tick", every="1h")
            assert [s.name for s in await ac.schedules.list()] == ["tick"]
            await ac.redis.script_flush()
            assert (await ac.schedule_many([{"id": "after-flush", "delay_ms": 60_000}]))[0]
            assert await ac.cancel("after-flush") is True

    try:
        asyncio.run(main())
    finally:
        w.stop()
        if runner.is_alive():
            runner.join(15)
        w.client.close()


def test_worker_follows_events_on_a_cluster(
    cclient: TimerClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker on a cluster hears its shards' events: timers scheduled into buckets it has
    already loaded are fired from its wheel, none left to the sweep, no listener errors.

    The sweep (the safety net, taking an ended bucket's leftovers) is held off for the
    test: on a busy machine it may win the race with a late firer (a CI run saw 12 of 48
    swept), and the test is about the wheel, so only the wheel can fire here."""
    due = cclient.server_time_ms() + 5_000
    seeds = [f"seed:{{{i}}}" for i in range(24)]
    cclient.schedule_many([{"id": t, "deadline_ms": due} for t in seeds])
    settings = WorkerSettings(
        worker_id="cw", lease_ms=5_000, horizon_ms=10_000, sweep_interval_ms=600_000
    )
    w = Worker(TimerClient.from_url(cclient.where, cclient.namespace), settings)
    runner = threading.Thread(target=w.run, daemon=True)
    runner.start()
    try:
        # Once a shard is loaded after its channel's subscription was confirmed, its
        # bucket of `due` counts as loaded: a timer scheduled into it later reaches the
        # wheel only through the shard's events. (A PUBLISH reaches every node, and the
        # listener follows all channels from one of them: asked of every node, the
        # cluster client adds up their counts; by default it asks one node.)
        channels = [cclient.keys.shard(s).events for s in range(8)]
        wait_for(
            lambda: (
                len(w.shards) == 8
                and all(
                    n == 1 for _, n in cclient.redis.pubsub_numsub(*channels, target_nodes="all")
                )
                and all(s.loaded and not s.needs_reload for s in list(w.shards.values()))
            ),
            20,
            "the worker leads, follows and has loaded every shard",
        )
        ids = [f"ev:{{{i}}}" for i in range(24)]
        cclient.schedule_many([{"id": t, "deadline_ms": due} for t in ids])
        assert {cclient.shard_of(t) for t in ids} == set(range(8))
        for tid in seeds + ids:
            assert cclient.wait(tid, timeout=20).outcome == "expired"
        # every new timer heard (the seeds came before it listened: loaded, not heard)
        assert w.stats.scheduled_seen == len(ids)
        assert (w.stats.fired, w.stats.swept) == (48, 0)
    finally:
        w.stop()
        runner.join(15)
        w.client.close()
    assert not [r for r in caplog.records if r.name == "worker.events" and r.levelname == "ERROR"]


def test_a_dead_master_stalls_only_its_own_shards(
    tmp_path: Path, server_binary: Path, namespace: str
) -> None:
    """A master killed under a worker: the shards of the two healthy masters keep their
    leases and their timers fire from the wheel; only the dead node's shards are lost."""
    with redis_cluster(tmp_path, binary=server_binary) as servers:
        url = servers[0].url
        c = TimerClient.from_url(url, namespace, socket_timeout_s=1.0)
        c.init(shards=8)
        lease_ms = 2_500
        w = Worker(
            TimerClient.from_url(url, namespace, socket_timeout_s=1.0),
            # no sweep: on a busy machine it may win the race with a late firer, and the
            # test is about the wheel of the healthy shards going on
            WorkerSettings(
                worker_id="iso", lease_ms=lease_ms, horizon_ms=10_000, sweep_interval_ms=600_000
            ),
        )
        runner = threading.Thread(target=w.run, daemon=True)
        runner.start()
        try:
            wait_for(lambda: len(w.shards) == 8, 20, "the worker leads every shard")
            victim = servers[2]
            on_victim = {
                s
                for s in range(8)
                if c.redis.get_node_from_key(c.keys.shard(s).prefix).port == victim.port
            }
            healthy = set(range(8)) - on_victim
            assert on_victim and healthy
            lost_before = w.stats.leases_lost
            victim.kill()
            # Due after two leases: by then a stalled renewal would have dropped them. And
            # at the start of a 1 s bucket: a timer due at the end of its bucket may be
            # taken by the sweep (the safety net) as that bucket ends, before the firer.
            due = ((c.server_time_ms() + 2 * lease_ms) // 1000 + 1) * 1000 + 1
            ids = [t for t in (f"iso:{{{i}}}" for i in range(200)) if c.shard_of(t) in healthy]
            c.schedule_many([{"id": t, "deadline_ms": due} for t in ids[:24]])
            for tid in ids[:24]:
                assert c.wait(tid, timeout=30).outcome == "expired"
            assert healthy <= set(w.shards), (healthy, set(w.shards))
            assert w.stats.leases_lost - lost_before <= len(on_victim)
            assert w.stats.swept == 0  # fired from the wheel (the sweep is held off)
        finally:
            w.stop()
            runner.join(20)
            w.client.close()
            c.close()


def test_a_cluster_node_whose_bus_port_is_taken_starts_on_other_ports(
    tmp_path: Path, server_binary: Path
) -> None:
    """A node's bus listens on its port + 10000, which another process may hold (CI once
    failed so: an outgoing connection had it); the node moves to free ports and starts."""
    port = free_port(bus_offset=CLUSTER_BUS_OFFSET)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", port + CLUSTER_BUS_OFFSET))
        squatter.listen()
        node = RedisServer(
            tmp_path / "n", binary=server_binary, port=port, extra_args=("--cluster-enabled", "yes")
        )
        try:
            start_cluster_node(node)
            assert node.port != port
            info = redis.Redis.from_url(node.url).info("cluster")
            assert info["cluster_enabled"] == 1
        finally:
            node.stop()


def test_a_confirmed_read_on_a_cluster_master_with_no_replica_is_not_handed_out(
    cclient: TimerClient,
) -> None:
    """A consumer with replicas:1 reads each shard's stream on its master with the wait
    after it on the same connection (tests/integration/test_confirmed_reads.py, on a
    Cluster): these masters have no replica, so the read raises NotDurable (sync and
    asyncio) and the entries stay pending for the group, where a consumer without
    durability gets them."""
    ids = [f"a:{{{i}}}" for i in range(8)]
    for tid in ids:
        cclient.schedule(tid, 3_600_000)
        assert cclient.cancel(tid) is True  # an outcome in its shard's stream
    for group in ("g", "h"):
        cclient.consumer(group, "c1").ensure()
    durable = TimerClient.from_url(
        cclient.where, cclient.namespace, durability="replicas:1", durability_timeout_s=0.05
    )
    try:
        with pytest.raises(NotDurable, match="1 replica"):
            durable.consumer("g", "c1").read(10, None)
    finally:
        durable.close()

    async def read_async() -> None:
        async with await AsyncTimerClient.connect(
            cclient.where, cclient.namespace, durability="replicas:1", durability_timeout_s=0.05
        ) as a:
            with pytest.raises(NotDurable, match="1 replica"):
                await a.consumer("h", "c1").poll(10, 0)

    asyncio.run(read_async())
    plain = cclient.consumer("g", "c2")
    fresh = {d.outcome.id for d in plain.read(10, None)}
    assert fresh < set(ids), "the refused read took its stream's entries (pending)"
    claimed = plain.claim(dict.fromkeys(range(8), "0-0"), count=10, min_idle_ms=0)
    pending = {d.outcome.id for d in claimed[0]}
    assert pending and fresh | pending == set(ids)
