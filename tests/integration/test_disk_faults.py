"""Faults of Redis's own disk on a real server (tests/faults): a power cut that loses
exactly what was never fsynced, a full disk, and what each durability level promises
through them."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import wait_for
from tests.faults import FaultyDisk, build_shim
from timer import ConfigError, StoreError, TimerClient
from timer.aio import AsyncTimerClient
from timer.durable.model.models import DurabilityWarning
from timer.testing import RedisServer

pytestmark = [pytest.mark.redis]


@pytest.fixture(scope="session")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_shim(tmp_path_factory.mktemp("diskshim"))


Disks = Callable[[str], FaultyDisk]


@pytest.fixture
def disk_factory(tmp_path: Path, shim: Path, server_binary: Path) -> Iterator[Disks]:
    """Start a server on a faulty disk with this ``appendfsync``; each stopped after."""
    made: list[FaultyDisk] = []

    def make(appendfsync: str) -> FaultyDisk:
        disk = FaultyDisk(
            tmp_path / f"s{len(made)}", shim, binary=server_binary, appendfsync=appendfsync
        )
        made.append(disk)
        disk.start()
        return disk

    yield make
    for disk in made:
        disk.close()


def has_waitaof(url: str) -> bool:
    with redis.Redis.from_url(url) as r:
        info = r.info("server")
    version = str(info.get("valkey_version") or info["redis_version"])
    return tuple(int(x) for x in version.split(".")[:2]) >= (7, 2)


def keyspace(url: str) -> dict[bytes, bytes]:
    """Every key with its DUMP (the whole keyspace, to compare before and after)."""
    with redis.Redis.from_url(url) as r:
        return {k: r.dump(k) for k in sorted(r.scan_iter(count=1000))}


def schedule_batches(c: TimerClient, prefix: str, batches: int, size: int) -> list[str]:
    """Schedule ``batches`` of ``size`` timers an hour out; the ids acknowledged."""
    acked: list[str] = []
    for b in range(batches):
        items = [{"id": f"{prefix}{b}-{i}", "delay_ms": 3_600_000} for i in range(size)]
        replies = c.schedule_many(items)
        acked += [
            str(it["id"])
            for it, r in zip(items, replies, strict=True)
            if not isinstance(r, Exception)
        ]
    return acked


def missing(url: str, namespace: str, ids: list[str]) -> list[str]:
    with TimerClient.from_url(url, namespace) as c:
        return [i for i in ids if c.get(i) is None]


def test_a_power_cut_loses_exactly_what_was_never_fsynced(
    disk_factory: Disks, namespace: str
) -> None:
    """The harness itself: under `appendfsync no` the server never fsyncs, so a power cut
    takes every timer acknowledged since the data was last on disk, where kill -9 takes
    nothing (the page cache keeps it). What a restarted server read back counts as on
    disk (the shim starts each run from the files as they are)."""
    disk = disk_factory("no")
    url = disk.server.url
    with TimerClient.from_url(url, namespace) as c:
        c.init(shards=4)
        kept = schedule_batches(c, "p", 2, 100)
    assert len(kept) == 200
    disk.server.kill()  # kill -9: the page cache keeps every write
    disk.restart()
    assert missing(url, namespace, kept) == []
    with TimerClient.from_url(url, namespace) as c:
        unsynced = schedule_batches(c, "q", 2, 100)
    assert len(unsynced) == 200
    cut = disk.power_cut()
    assert cut.total > 0, "nothing was cut: the shim saw no unsynced write"
    disk.restart()
    assert missing(url, namespace, kept) == []
    assert missing(url, namespace, unsynced) == unsynced


def test_aof_durability_keeps_every_acknowledged_timer_through_a_power_cut(
    disk_factory: Disks, namespace: str
) -> None:
    """durability='aof' on `appendfsync always`: batches (sync and asyncio) and single
    calls acknowledged up to the instant of the cut are all there after it."""
    disk = disk_factory("always")
    url = disk.server.url
    if not has_waitaof(url):
        with TimerClient.from_url(url, namespace) as c:
            c.init(shards=4)
        before = keyspace(url)
        with (
            TimerClient.from_url(url, namespace, durability="aof") as c,
            pytest.raises(ConfigError, match="needs WAITAOF"),
        ):
            c.schedule("x", delay_ms=60_000)
        assert keyspace(url) == before
        return
    with TimerClient.from_url(url, namespace, durability="aof") as c:
        c.init(shards=4)
        acked = schedule_batches(c, "b", 4, 250)
        acked += [c.schedule(f"one{i}", delay_ms=3_600_000).id for i in range(20)]

    async def more() -> list[str]:
        a = await AsyncTimerClient.connect(url, namespace, durability="aof")
        try:
            items = [{"id": f"a{i}", "delay_ms": 3_600_000} for i in range(200)]
            replies = await a.schedule_many(items)
            return [
                str(it["id"])
                for it, r in zip(items, replies, strict=True)
                if not isinstance(r, Exception)
            ]
        finally:
            await a.aclose()

    acked += asyncio.run(more())
    assert len(acked) == 1220
    disk.power_cut()  # right after the last acknowledgement
    disk.restart()
    assert missing(url, namespace, acked) == []


def test_aof_durability_refuses_a_server_that_cannot_promise_it(
    disk_factory: Disks, namespace: str
) -> None:
    """Under `appendfsync everysec` a server answers WAITAOF before its fsync, so 'aof'
    is refused with what to do, before anything is written, by both clients."""
    disk = disk_factory("everysec")
    url = disk.server.url
    with TimerClient.from_url(url, namespace) as c:
        c.init(shards=4)
    before = keyspace(url)
    want = "appendfsync always" if has_waitaof(url) else "needs WAITAOF"
    with TimerClient.from_url(url, namespace, durability="aof") as c:
        with pytest.raises(ConfigError, match=want):
            c.schedule("x", delay_ms=60_000)
        with pytest.raises(ConfigError, match=want):
            c.schedule_many([{"id": "y", "delay_ms": 60_000}])

    async def refused() -> None:
        a = await AsyncTimerClient.connect(url, namespace, durability="aof")
        try:
            with pytest.raises(ConfigError, match=want):
                await a.schedule("z", delay_ms=60_000)
        finally:
            await a.aclose()

    asyncio.run(refused())
    assert keyspace(url) == before
    if has_waitaof(url):
        with redis.Redis.from_url(url) as r:
            r.config_set("appendonly", "no")
        with (
            TimerClient.from_url(url, namespace, durability="aof") as c,
            pytest.raises(ConfigError, match="appendonly yes"),
        ):
            c.schedule("x", delay_ms=60_000)
        assert keyspace(url) == before


def test_none_durability_on_appendfsync_always_survives_a_power_cut(
    disk_factory: Disks, namespace: str
) -> None:
    """Under `appendfsync always` a server fsyncs before it replies: even durability
    'none' loses nothing acknowledged (every server, Redis 7.0 included)."""
    disk = disk_factory("always")
    url = disk.server.url
    with TimerClient.from_url(url, namespace) as c:
        c.init(shards=4)
        acked = schedule_batches(c, "n", 4, 250)
    disk.power_cut()
    disk.restart()
    assert missing(url, namespace, acked) == []


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "timer.cli", "--redis-url", url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def aof_written(url: str) -> bool:
    """The server has handed all it acknowledged to the OS (what kill -9 cannot take)."""
    with redis.Redis.from_url(url) as r:
        info = r.info("persistence")
    return bool(info["aof_last_write_status"] == "ok" and info["aof_buffer_length"] == 0)


def test_a_full_disk_refuses_writes_cleanly_and_reads_go_on(
    disk_factory: Disks, namespace: str
) -> None:
    """With the AOF's disk full, a write is a StoreError with Redis's MISCONF and writes
    nothing; reads are answered, by a client opened before and by new ones (the library,
    `tickwheel get` and `tickwheel shards`); once space returns, writes go on and nothing
    acknowledged is lost."""
    disk = disk_factory("everysec")
    url = disk.server.url
    c = TimerClient.from_url(url, namespace)
    try:
        c.init(shards=4)
        acked = schedule_batches(c, "f", 2, 100)
        disk.full()
        with redis.Redis.from_url(url) as r:

            def refused() -> bool:
                try:
                    r.set("canary", "x")
                except redis.ResponseError as exc:
                    return str(exc).startswith("MISCONF") or "MISCONF" in repr(exc)
                return False

            wait_for(refused, 10, "the server to notice its full disk")
        before = keyspace(url)
        with pytest.raises(StoreError) as refusal:
            c.schedule("late", delay_ms=60_000)
        assert refusal.value.code == "MISCONF", refusal.value
        replies = c.schedule_many([{"id": f"late{i}", "delay_ms": 60_000} for i in range(10)])
        assert all(isinstance(r, StoreError) and r.code == "MISCONF" for r in replies), replies
        assert keyspace(url) == before  # nothing half-written
        assert c.get("f0-0") is not None
        with TimerClient.from_url(url, namespace) as fresh:
            assert fresh.get("f1-99") is not None
            assert fresh.meta.shards == 4
        got = cli(url, "--namespace", namespace, "--json", "get", "f0-1")
        assert got.returncode == 0, got.stderr
        assert '"pending"' in got.stdout
        shards = cli(url, "--namespace", namespace, "shards")
        assert shards.returncode == 0, shards.stderr
        disk.full(False)

        def resumed() -> bool:
            try:
                return c.schedule("after", delay_ms=60_000).created
            except StoreError:
                return False  # MISCONF until the server has written its AOF again

        wait_for(resumed, 10, "writes to resume")
        # Under everysec a write may wait in the server's buffer for up to 2 s while an
        # fsync is still running (Redis's own loss window, which job-timeouts.md states
        # for durability "none"); kill -9 loses only what the server has not written.
        wait_for(lambda: aof_written(url), 10, "the server to write its AOF buffer")
    finally:
        c.close()
    disk.server.kill()
    disk.restart()
    assert missing(url, namespace, [*acked, "after"]) == []


def test_aof_durability_warns_when_the_user_may_not_check_the_server(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str
) -> None:
    """A user without CONFIG (least privilege) cannot be checked for `appendfsync
    always`: its aof writes go on, with a DurabilityWarning that says what to grant."""
    if not has_waitaof(redis_server.url):
        pytest.skip("no WAITAOF on this server (Redis < 7.2): aof is refused outright")
    user = f"u{namespace}"
    redis_client.acl_setuser(user, enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                             commands=["+@all", "-config"])  # fmt: skip
    url = redis_server.url.replace("redis://", f"redis://{user}:pw@")
    try:
        with TimerClient.from_url(url, namespace) as c:
            c.init(shards=2)
        with (
            TimerClient.from_url(url, namespace, durability="aof") as c,
            pytest.warns(DurabilityWarning, match=r"may not run CONFIG GET.*\+config\|get"),
        ):
            assert c.schedule("w", delay_ms=60_000).created
    finally:
        redis_client.acl_deluser(user)


def test_replicas_durability_keeps_what_it_acknowledged_through_the_masters_power_cut(
    disk_factory: Disks, server_binary: Path, tmp_path: Path, namespace: str
) -> None:
    """The master's host loses power (what it never fsynced is gone: `everysec`) and its
    replica is promoted, as a Sentinel would (#53). Everything acknowledged under
    `replicas:1` is on the replica. Then the link to the replica is cut (a proxy):
    `replicas:1` refuses the next writes (`NotDurable`: not acknowledged), while
    `none` acknowledges its writes and loses every one of them at the cut."""
    from tests.faults.partition import Proxy  # noqa: PLC0415
    from timer.errors import NotDurable  # noqa: PLC0415

    disk = disk_factory("everysec")
    master = disk.server
    proxy = Proxy(("127.0.0.1", master.port))
    replica = RedisServer(tmp_path / "replica", binary=server_binary,
                          extra_args=("--replicaof", "127.0.0.1", str(proxy.port)))  # fmt: skip
    replica.start()
    try:
        with redis.Redis.from_url(replica.url) as r:
            wait_for(lambda: r.info("replication").get("master_link_status") == "up", 30,
                     "the replica linked")  # fmt: skip
        with TimerClient.from_url(master.url, namespace, durability="replicas:1") as c:
            c.init(shards=4)
            kept = schedule_batches(c, "k", 4, 250)
            proxy.cut()
            refused = c.schedule_many([{"id": f"r{i}", "delay_ms": 3_600_000} for i in range(10)])
            assert all(isinstance(r, NotDurable) for r in refused), refused
        with TimerClient.from_url(master.url, namespace) as c:
            gone = schedule_batches(c, "g", 2, 250)  # durability none: acknowledged
        disk.power_cut()
        with redis.Redis.from_url(replica.url) as r:
            r.execute_command("REPLICAOF", "NO", "ONE")  # the failover
        assert missing(replica.url, namespace, kept) == []
        assert len(missing(replica.url, namespace, gone)) == len(gone) == 500
    finally:
        replica.stop()
        proxy.close()
