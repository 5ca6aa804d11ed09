"""The FakeStore (timer.testing.store): tickwheel on fakeredis, on a clock the test moves.

Three kinds of test: fakeredis itself still does each thing a fix of
timer/testing/store/fixes.py works around (each fails once fakeredis behaves, saying which
fix to drop); the store answers as Redis does; and tickwheel's own API runs on it end to
end on virtual time (a worker fires an hour's timer at 3,600 s and not at 3,599 s).
"""

from __future__ import annotations

import asyncio
import inspect
import re
import warnings
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
from fakeredis.commands_mixins.scripting_mixin import ScriptingCommandsMixin

from timer.clock import VirtualTime
from timer.durable.model.models import DurabilityWarning, Outcome
from timer.errors import ConfigError
from timer.handlers import Handlers
from timer.redis.store import error_code
from timer.testing.store import REDIS_VERSION, FakeStore
from timer.testing.store.clock import FAKEREDIS_TIME_READERS, FAKEREDIS_TIME_READS_LEFT
from timer.worker import Worker
from timer.worker.settings import WorkerSettings

FIXES = "timer/testing/store/fixes.py"
HOUR_MS = 3_600_000


def plain(protocol: int = 2) -> Any:
    """A fakeredis client as fakeredis gives it, on a server of its own (Redis 7.2)."""
    return fakeredis.FakeRedis(server=fakeredis.FakeServer(version=(7, 2)), protocol=protocol)


def cmd(client: Any, *args: object) -> Any:
    """A command as it is sent (redis-py's execute_command is untyped)."""
    return client.execute_command(*args)


def dropped(what_now: str, fix: str) -> str:
    return f"fakeredis now {what_now}: drop {fix} from {FIXES} (and its test here)"


@pytest.fixture
def time() -> VirtualTime:
    return VirtualTime()


@pytest.fixture
def store(time: VirtualTime) -> FakeStore:
    return FakeStore(time)


# -- fakeredis itself still misbehaves (each fails once it is fixed upstream) ---------------


def test_the_installed_fakeredis_is_in_the_pinned_range() -> None:
    """The fixes were written against fakeredis 2.41 (pyproject.toml's testing extra)."""
    assert fakeredis.__version__.startswith("2.41."), (
        f"fakeredis {fakeredis.__version__} is installed: run this file's upstream tests "
        f"against it, drop the fixes it no longer needs from {FIXES}, and move the pin"
    )


def test_fakeredis_has_no_info() -> None:
    with pytest.raises(redis.ResponseError, match="unknown command 'info'"):
        plain().info()
        pytest.fail(dropped("answers INFO", "StoreCommands.store_info"))


def test_fakeredis_hello_names_itself_and_drops_to_resp2() -> None:
    r = plain(protocol=3)
    hello = cmd(r, "HELLO")
    assert isinstance(hello, list), dropped("keeps RESP3 on HELLO with no version", "hello")
    fields = dict(zip(hello[::2], hello[1::2], strict=True))
    assert fields[b"server"] == b"fakeredis", dropped("reports the server it emulates", "hello")


def test_fakeredis_lua_has_no_cmsgpack() -> None:
    assert plain().eval("return type(cmsgpack)", 0) == b"nil", dropped(
        "has cmsgpack in its Lua", "_get_server_runtime's install of cmsgpack.py (and that module)"
    )


def test_fakeredis_busygroup_is_an_err() -> None:
    r = plain()
    r.xgroup_create("s", "g", "0", mkstream=True)
    with pytest.raises(redis.ResponseError) as caught:
        r.xgroup_create("s", "g", "0")
    assert error_code(caught.value) == "ERR", dropped("answers -BUSYGROUP", "xgroup_create")


READ_IN_SCRIPT = (
    "local r = redis.call('XREADGROUP', 'GROUP', 'g', 'c', 'COUNT', 1, 'STREAMS', KEYS[1], '>')"
    " if not r then return 'nil' end return type(r[1])"
)


def test_fakeredis_xreadgroup_in_a_script_answers_in_the_clients_protocol() -> None:
    r = plain(protocol=3)
    r.xadd("s", {"a": "1"})
    r.xgroup_create("s", "g", "0")
    # a script speaks RESP2: [[stream, entries]], whose first item is a table; a RESP3
    # map flattened gives the stream's name first
    assert r.eval(READ_IN_SCRIPT, 1, "s") == b"string", dropped(
        "answers XREADGROUP in the script's protocol", "_xreadgroup_reply"
    )


@pytest.mark.parametrize("command", [("XSETID", "s", "5-0"), ("MEMORY", "USAGE", "s")])
def test_fakeredis_lacks_xsetid_and_memory_usage(command: tuple[str, ...]) -> None:
    r = plain()
    r.xadd("s", {"a": "1"}, id="1-0")
    with pytest.raises(redis.ResponseError, match="unknown command"):
        cmd(r, *command)
        pytest.fail(dropped(f"has {command[0]}", f"store_{command[0].lower()}"))


def test_fakeredis_compiles_every_script_again_and_collects_all_garbage_after() -> None:
    source = inspect.getsource(ScriptingCommandsMixin.eval)
    assert "lua_runtime.execute(script)" in source, dropped("caches compiled scripts", "eval")
    assert 'collectgarbage()"' in source, dropped("no longer collects after each call", "eval")


def test_fakeredis_reads_the_time_where_the_store_patches_it() -> None:
    """Every module of fakeredis (but the stack modules tickwheel never uses) that calls
    time.time() is one whose clock the store follows."""
    root = Path(fakeredis.__file__).parent
    readers = {
        ".".join(("fakeredis", *path.relative_to(root).with_suffix("").parts))
        for path in root.rglob("*.py")
        if "stack" not in path.parts and re.search(r"\btime\.time\(\)", path.read_text())
    }
    known = {*FAKEREDIS_TIME_READERS, *FAKEREDIS_TIME_READS_LEFT}
    assert readers == known, (
        "fakeredis reads the time in other modules now: point timer/testing/store/clock.py's "
        f"FAKEREDIS_TIME_READERS at them ({sorted(readers ^ known)})"
    )


# -- the store answers as Redis does ---------------------------------------------------------


def test_info_has_what_tickwheel_reads(store: FakeStore) -> None:
    info = store.redis().info()
    assert info["redis_version"] == REDIS_VERSION
    assert info["maxmemory_policy"] == "noeviction" and info["aof_enabled"] == 0
    assert info["connected_slaves"] == 0 and info["role"] == "master"
    persistence = store.redis().info("persistence")
    assert set(persistence) == {"loading", "aof_enabled", "rdb_bgsave_in_progress"}


def test_hello_is_redis_and_keeps_the_protocol(store: FakeStore) -> None:
    assert cmd(store.redis(protocol=3), "HELLO")["version"] == REDIS_VERSION
    assert cmd(store.redis(protocol=3), "HELLO")["proto"] == 3  # asked twice
    flat = cmd(store.redis(), "HELLO")
    assert flat[flat.index(b"server") + 1] == b"redis" and flat[flat.index(b"proto") + 1] == 2


# What Redis 7.2's cmsgpack.pack writes for each value (its lua_cmsgpack.c).
PACKED = [
    ("1", "01"),
    ("-1", "ff"),
    ("-200", "d1ff38"),
    ("200", "ccc8"),
    ("70000", "ce00011170"),
    ("2^32", "cf0000000100000000"),
    ("1.5", "ca3fc00000"),
    ("0.1", "cb3fb999999999999a"),
    ("2^70", "ca62800000"),  # a float32 exactly, past int64
    ("1e20", "cb4415af1d78b58c40"),
    ("true, false", "c3c2"),
    ("'abc'", "a3616263"),
    ("string.rep('x', 40)", "d928" + "78" * 40),
    ("string.rep('x', 300)", "da012c" + "78" * 300),
    ("{}", "90"),
    ("{1, 2, 3}", "93010203"),
    ("{a = 1}", "81a16101"),
    ("{[1] = 1, [3] = 3}", "820101" + "0303"),
]


@pytest.mark.parametrize(("lua", "hex_bytes"), PACKED)
def test_cmsgpack_packs_as_redis(store: FakeStore, lua: str, hex_bytes: str) -> None:
    packed = store.redis().eval(f"return cmsgpack.pack({lua})", 0)
    assert packed.hex() == hex_bytes


def test_cmsgpack_unpacks_what_it_packs(store: FakeStore) -> None:
    script = (
        "local a, b = cmsgpack.unpack(cmsgpack.pack({1, 'x', {k = 'v'}, 2^40}, 7))"
        " return {a[1], a[2], a[3]['k'], tostring(a[4]), b}"
    )
    assert store.redis().eval(script, 0) == [1, b"x", b"v", b"1099511627776", 7]
    with pytest.raises(redis.ResponseError, match="Bad data format"):
        store.redis().eval("return cmsgpack.unpack('\\193')", 0)


def test_busygroup_is_its_own_error(store: FakeStore) -> None:
    r = store.redis()
    r.xgroup_create("s", "g", "0", mkstream=True)
    with pytest.raises(redis.ResponseError) as caught:
        r.xgroup_create("s", "g", "0")
    assert error_code(caught.value) == "BUSYGROUP"


def test_xreadgroup_in_a_script_answers_in_resp2(store: FakeStore) -> None:
    r = store.redis(protocol=3)
    r.xadd("s", {"a": "1"})
    r.xgroup_create("s", "g", "0")
    assert r.eval(READ_IN_SCRIPT, 1, "s") == b"table"


def test_xsetid_moves_the_last_id_never_below_the_top(store: FakeStore) -> None:
    r = store.redis()
    r.xadd("s", {"a": "1"}, id="5-0")
    assert cmd(r, "XSETID", "s", "9-3", "ENTRIESADDED", "4") == b"OK"
    assert r.xinfo_stream("s")["last-generated-id"] == b"9-3"
    assert r.xinfo_stream("s")["entries-added"] == 4
    assert r.xadd("s", {"a": "2"}, id="9-*") == b"9-4"
    with pytest.raises(redis.ResponseError, match="smaller than the target stream top item"):
        cmd(r, "XSETID", "s", "1-0")
    with pytest.raises(redis.ResponseError, match="no such key"):
        cmd(r, "XSETID", "missing", "1-0")


def test_memory_usage_estimates(store: FakeStore) -> None:
    r = store.redis()
    r.hset("small", "f", "v")
    r.hset("large", mapping={f"f{i}": "v" * 100 for i in range(50)})
    small, large = r.memory_usage("small"), r.memory_usage("large")
    assert small is not None and large is not None and 0 < small < large
    assert r.memory_usage("missing") is None


def test_durability_that_waits_is_refused_with_the_reason(store: FakeStore) -> None:
    for durability in ("aof", "replicas:1", "aof+replicas:1"):
        with pytest.raises(ConfigError, match="in memory and has no replicas"):
            store.timer_client("t", durability=durability)
    with pytest.raises(redis.ResponseError, match=r"WAITAOF \(durability 'aof'\) cannot be had"):
        cmd(store.redis(), "WAITAOF", 1, 0, 100)
    with pytest.raises(redis.ResponseError, match="replicas:N"):
        cmd(store.redis(), "WAIT", 1, 100)


def test_scripts_are_compiled_once_and_flushed(store: FakeStore) -> None:
    r = store.redis()
    assert [r.eval("return ARGV[1]", 0, n) for n in (1, 2)] == [b"1", b"2"]
    assert len(store.server._store_scripts) == 1  # type: ignore[attr-defined]
    r.script_flush()
    assert store.server._store_scripts == {}  # type: ignore[attr-defined]
    with pytest.raises(redis.ResponseError, match="Script attempted to set global"):
        r.eval("x = 1", 0)
    assert r.eval("return 1", 0) == 1  # the globals check cleaned up after itself


def test_a_plain_fakeredis_keeps_the_system_clock(store: FakeStore) -> None:
    """The store's clock patch changes nothing for another fakeredis server."""
    store.time.advance(10 * 365 * 86400)  # type: ignore[attr-defined]
    seconds, _ = plain().time()
    assert abs(seconds - __import__("time").time()) < 60


# -- virtual time followed ---------------------------------------------------------------


def test_expiry_follows_virtual_time(store: FakeStore, time: VirtualTime) -> None:
    """A key with PEXPIRE 1000 lives through +1000 ms (Redis expires when now > when)
    and is gone at +1001 ms."""
    r = store.redis()
    r.set("k", "v")
    r.pexpire("k", 1000)
    time.advance(0.999)
    assert r.exists("k") and r.pttl("k") == 1
    time.advance(0.001)
    assert r.exists("k") and r.pttl("k") == 0
    time.advance(0.001)
    assert not r.exists("k")


def test_time_and_stream_ids_follow_virtual_time(store: FakeStore, time: VirtualTime) -> None:
    r = store.redis()
    time.advance(12.345678)
    assert r.time() == (int(time.wall()), round(time.wall() * 1e6) % 1_000_000)
    assert r.xadd("s", {"a": "1"}) == f"{time.wall_ms()}-0".encode()
    r.xgroup_create("s", "g", "0")
    r.xreadgroup("g", "c", {"s": ">"})
    time.advance(90)
    assert r.xpending_range("s", "g", "-", "+", 10)[0]["time_since_delivered"] == 90_000


def test_a_blocking_read_returns_at_once_and_its_timeout_passes(
    store: FakeStore, time: VirtualTime
) -> None:
    r = store.redis()
    r.xgroup_create("s", "g", "$", mkstream=True)
    before = time.wall()
    assert r.xreadgroup("g", "c", {"s": ">"}, block=5000) == []
    assert time.wall() - before == pytest.approx(5.0)
    with pytest.raises(redis.ResponseError, match="would never return"):
        r.blpop(["nothing"], timeout=0)


# -- tickwheel on the store, on virtual time ------------------------------------------------


@pytest.fixture
def worker_time(time: VirtualTime) -> VirtualTime:
    """The store's clock, which its clients (and their workers and runners) are given."""
    return time


def ready(store: FakeStore, namespace: str = "t") -> Worker:
    with pytest.warns(DurabilityWarning, match="AOF is off"):
        store.timer_client(namespace).init(shards=2)
    settings = WorkerSettings(worker_id="w1", lease_ms=60_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DurabilityWarning)
        worker = Worker(store.timer_client(namespace), settings)
    return worker


def run_for(worker: Worker, time: VirtualTime, seconds: float, step: float = 15.0) -> int:
    """Step the worker every ``step`` s (a third of its lease is 20 s) for ``seconds``."""
    fired, end = 0, time.wall() + seconds
    while time.wall() < end:
        time.advance(min(step, end - time.wall()))
        fired += worker.run_once()
    return fired


@pytest.mark.filterwarnings("ignore::timer.durable.model.models.DurabilityWarning")
def test_a_worker_fires_an_hours_timer_at_3600_s_not_before(
    store: FakeStore, worker_time: VirtualTime
) -> None:
    worker = ready(store)
    client = store.timer_client("t")
    client.schedule("job:{1}", delay_ms=HOUR_MS)
    assert worker.run_once() == 0
    assert run_for(worker, worker_time, 3599) == 0
    assert client.get("job:{1}").state == "pending"  # type: ignore[union-attr]
    worker_time.advance(1)
    assert worker.run_once() == 1
    outcome = client.get("job:{1}")
    assert outcome is not None and outcome.state == "expired"
    assert outcome.decided_ms == outcome.deadline_ms == worker_time.wall_ms()


@pytest.mark.filterwarnings("ignore::timer.durable.model.models.DurabilityWarning")
def test_cancel_complete_notify_and_handlers_on_the_store(
    store: FakeStore, worker_time: VirtualTime
) -> None:
    worker = ready(store)
    client = store.timer_client("t")
    for n in range(4):
        client.schedule(f"job:{{{n}}}", delay_ms=60_000, watch=[f"done:{{{n}}}"])
    assert client.cancel("job:{0}") and client.complete("job:{1}")
    assert client.notify("done:{2}") == 1
    assert run_for(worker, worker_time, 60) == 1  # job:{3}
    assert [client.get(f"job:{{{n}}}").state for n in range(4)] == [  # type: ignore[union-attr]
        "cancelled", "completed", "completed", "expired"
    ]  # fmt: skip
    seen: list[tuple[str, str]] = []
    handlers = Handlers(client, group="g", consumer="c1")

    @handlers.on("expired", "cancelled", "completed")
    def record(outcome: Outcome) -> None:
        seen.append((outcome.id, outcome.outcome))

    assert handlers.run(stop_when_idle=True, concurrency=1)
    assert sorted(seen) == [
        ("job:{0}", "cancelled"), ("job:{1}", "completed"),
        ("job:{2}", "completed"), ("job:{3}", "expired"),
    ]  # fmt: skip


@pytest.mark.filterwarnings("ignore::timer.durable.model.models.DurabilityWarning")
def test_the_asyncio_client_on_the_same_store(store: FakeStore, time: VirtualTime) -> None:
    store.timer_client("t").init(shards=2)

    async def main() -> list[str]:
        c = await store.async_timer_client("t")
        await c.schedule("a:{1}", delay_ms=1000, watch=["w:{1}"])
        await c.schedule("b:{1}", delay_ms=1000)
        notified = await c.notify("w:{1}")
        cancelled = await c.cancel("b:{1}")
        got = await c.get("a:{1}")
        await c.aclose()
        return [str(notified), str(cancelled), got.state if got else "none"]

    assert asyncio.run(main()) == ["1", "True", "completed"]
    assert store.timer_client("t").get("b:{1}").state == "cancelled"  # type: ignore[union-attr]


def one_run() -> list[tuple[bytes, str, object, int]]:
    time = VirtualTime()
    store = FakeStore(time)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DurabilityWarning)
        client = store.timer_client("t")
        client.init(shards=2)
        worker = Worker(store.timer_client("t"), WorkerSettings(worker_id="w1", lease_ms=60_000))
    for n in range(20):
        client.schedule(f"job:{{{n}}}", delay_ms=1000 * (n + 1), watch=[f"d:{{{n}}}"])
    client.notify("d:{3}")
    run_for(worker, time, 30, step=1.0)
    for outcome in client.outcomes("g", "c", stop_when_idle=True, block_ms=100):
        if outcome.id != "job:{5}":
            outcome.ack()
    return store.snapshot()


@pytest.mark.filterwarnings("ignore::timer.durable.model.models.DurabilityWarning")
def test_two_runs_from_the_same_start_leave_the_same_keyspace() -> None:
    """Every key, value, stream id, group, pending entry and TTL the same, twice."""
    first, second = one_run(), one_run()
    assert first == second
    assert any(kind == "stream" for _, kind, _, _ in first)
