"""One layout (#28): a namespace an earlier release wrote (records as maps, buckets as
sets, outcomes retained as strings of their own, outcome entries and dead letters of
five fields, a consumer group with an entry in hand) is refused until ``migrate``
converts it, in bounded resumable steps; then every timer fires once and every outcome
reads, through every reader. The old shapes are written raw here, as that release's
scripts wrote them: this release has no code path that writes them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
import redis
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timer import ConfigError, TimerClient, TimerError
from timer.cli.main import main
from timer.durable.model.codec import FORMAT_VERSION, text
from timer.durable.model.keys import NAMESPACES, NamespaceKeys, ShardKeys, shard_of
from timer.testing import RedisServer

from .conftest import SHARDS, namespace_keys, server_now_ms

pytestmark = pytest.mark.redis

HOUR = 3_600_000
MAPS = {"records": "map", "strings": True, "table": False, "coarse": False}  # format 1
ARRAYS = {"records": "array", "strings": True, "table": True, "coarse": True}  # 2, then 4


def pack(value: Any) -> bytes:
    """As a script's cmsgpack writes: strings without the bin type."""
    data: bytes = msgpack.packb(value, use_bin_type=False)
    return data


def payload(value: Any) -> bytes:
    data: bytes = msgpack.packb(value, use_bin_type=True)
    return data


class OldNamespace:
    """A namespace made and used by an earlier release, written raw."""

    def __init__(self, r: redis.Redis, namespace: str, version: int, shape: dict[str, Any]):
        self.r, self.ns, self.shape = r, NamespaceKeys(namespace), shape
        self.now = server_now_ms(r)
        r.hset(self.ns.meta, mapping={"shards": SHARDS, "bucket_ms": 1000, "version": version})
        r.sadd(NAMESPACES, namespace)
        if shape["table"]:  # a format-3 table made by a migration from 2 (no F; E; G ahead)
            for s in range(SHARDS):
                r.hset(
                    self.sk(s).results_table,
                    mapping={"L": 0, "S": 0, "N": 0, "E": 1, "G": self.now + HOUR},
                )

    def sk(self, shard: int) -> ShardKeys:
        return self.ns.shard(shard)

    def of(self, tid: str) -> ShardKeys:
        return self.sk(shard_of(tid, SHARDS))

    def pending(self, tid: str, deadline: int, value: Any, *, coarse: bool = False) -> None:
        sk, p = self.of(tid), payload(value)
        if self.shape["records"] == "map":
            rec = pack({"d": deadline, "p": p, "w": [], "n": 1, "g": [], "c": self.now, "s": ""})
        else:
            rec = pack([deadline, p, deadline - self.now])
        self.r.hset(sk.timers, tid, rec)
        if coarse:
            self.r.sadd(sk.coarse(deadline // HOUR), tid)
            self.r.zadd(sk.coarse_buckets, {str(deadline // HOUR): deadline // HOUR * HOUR})
        else:
            self.r.sadd(sk.bucket(deadline // 1000), tid)
            self.r.zadd(sk.buckets, {str(deadline // 1000): deadline // 1000 * 1000})

    def decided(self, tid: str, outcome: str, deadline: int, value: Any) -> str:
        """A decided timer: its five-field entry, and its outcome retained as a string."""
        sk, p, at = self.of(tid), payload(value), self.now - 10
        if self.shape["records"] == "map":
            rec = pack(
                {"o": outcome, "d": deadline, "t": at, "p": p, "c": self.now - 99, "s": "", "g": []}
            )
        else:
            code = {"expired": 1, "cancelled": 2, "completed": 3}[outcome]
            rec = pack([code, deadline, at - deadline, p, deadline - self.now + 99])
        self.r.set(f"{sk.prefix}:r:{tid}", rec, px=HOUR)
        fields = {"id": tid, "outcome": outcome, "deadline": deadline, "decided": at, "payload": p}
        return text(self.r.xadd(sk.outcomes, fields))  # type: ignore[arg-type]


@pytest.fixture(params=[(1, MAPS), (4, ARRAYS)], ids=["format-1", "format-4-migrated"])
def old(
    request: pytest.FixtureRequest, redis_client: redis.Redis, namespace: str
) -> Iterator[OldNamespace]:
    version, shape = request.param
    yield OldNamespace(redis_client, namespace, version, shape)


def fill(o: OldNamespace) -> dict[str, Any]:
    """Pending timers (due, later, and in a coarse bucket whose hour has begun), outcomes
    retained, a group holding one entry, a dead letter; what each should read as."""
    due = {f"due{i}": o.now - 5_000 - i for i in range(12)}
    for tid, d in due.items():
        o.pending(tid, d, {"n": tid})
    o.pending("later", o.now + 60_000, "later")
    if o.shape["coarse"]:
        o.pending("hour", o.now - 3_000, "hour", coarse=True)
        due["hour"] = o.now - 3_000
    entries = {
        tid: o.decided(tid, "cancelled", o.now + 50_000, [tid])
        for tid in ("gone0", "gone1", "gone2")
    }
    sk = o.of("gone0")
    o.r.xgroup_create(sk.outcomes, "g", id="0")
    reply: Any = o.r.xreadgroup("g", "c1", {sk.outcomes: ">"}, count=1)
    held = reply[0][1][0]
    dead_sk = o.of("gone1")
    o.r.xadd(dead_sk.dead, {"group": "g", "entry": entries["gone1"], "consumer": "c1",
                            "attempts": 3, "error": "boom", "failed": o.now, "id": "gone1",
                            "outcome": "cancelled", "deadline": o.now + 50_000,
                            "decided": o.now - 10, "payload": payload(["gone1"])})  # fmt: skip
    return {"due": due, "held": (sk, text(held[0])), "entries": entries}


def version_of(r: redis.Redis, o: OldNamespace) -> int:
    """The data format the namespace's meta names."""
    return int(text(r.hget(o.ns.meta, "version")))


def converted_keyspace(r: redis.Redis, namespace: str) -> None:
    """Only this release's shapes are left: no string outcome, no set bucket, no map
    record, no five-field entry, no migration state, no layout flag."""
    for key in namespace_keys(r, namespace):
        name = text(key)
        assert ":r:" not in name and ":mig" not in name, name
        kind = r.type(key)
        if ":b:" in name or ":c:" in name:
            assert kind == b"list", name
        if name.endswith(":t"):
            for raw in r.hvals(key):
                assert isinstance(msgpack.unpackb(raw, raw=True), list), name
        if name.endswith((":out", ":dead")):
            for _, fields in r.xrange(key) or []:
                assert fields is not None and b"r" in fields and b"outcome" not in fields, (
                    name,
                    fields,
                )
        if name.endswith(":rx"):
            assert set(r.hkeys(key)) <= {b"L", b"S", b"N", b"C"}, name


def test_an_old_namespace_is_refused_until_migrated_and_nothing_written(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str, old: OldNamespace
) -> None:
    """Every client call and a worker's start refuse an unconverted namespace, naming
    `tickwheel migrate`; nothing is written."""
    fill(old)
    before = namespace_keys(redis_client, namespace)
    c = TimerClient.from_url(redis_server.url, namespace)
    for call in (lambda: c.schedule("x", delay_ms=1_000), lambda: c.get("due0"),
                 lambda: c.cancel("later"), lambda: c.init(shards=SHARDS)):  # fmt: skip
        with pytest.raises(
            ConfigError, match=r"earlier tickwheel.*tickwheel --namespace .* migrate"
        ):
            call()
    assert c.data_format() == version_of(redis_client, old)
    assert namespace_keys(redis_client, namespace) == before
    c.close()


def test_migrate_converts_and_every_timer_fires_once_and_every_outcome_reads(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str, old: OldNamespace
) -> None:
    """Interrupted half-way and run again (a budget of 3 a call), migrate converts every
    shape; then each pending timer fires exactly once (the coarse one through the
    cascade), the retained outcomes answer get and make a repeated schedule an
    idempotent answer, the group's entry in hand is still in hand (same consumer, same
    deliveries) and reads, the dead letter reads and is redelivered."""
    made = fill(old)
    version = version_of(redis_client, old)
    c = TimerClient.from_url(redis_server.url, namespace)
    assert c.data_format() == version
    calls: list[tuple[int, str]] = []

    def interrupt(shard: int, step: Any) -> None:
        calls.append((shard, step.step))
        if len(calls) == 7:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        c.migrate(progress=interrupt, budget=3)
    assert version_of(redis_client, old) == version  # not yet
    steps: list[tuple[int, str]] = []
    assert c.migrate(progress=lambda s, st: steps.append((s, st.step)), budget=3) == (
        version,
        FORMAT_VERSION,
    )
    assert {s for s, _ in steps} == set(range(SHARDS)) and len(steps) > SHARDS  # bounded steps
    assert c.migrate() == (FORMAT_VERSION, FORMAT_VERSION)  # again: nothing to do
    converted_keyspace(redis_client, namespace)

    sk, held = made["held"]
    (pel,) = redis_client.xpending_range(sk.outcomes, "g", "-", "+", 10)
    assert (text(pel["message_id"]), pel["consumer"], pel["times_delivered"]) == (
        held,
        b"c1",
        1,
    )
    info = c.get("later")
    assert info is not None and (info.state, info.payload) == ("pending", "later")
    for tid in ("gone0", "gone1", "gone2"):
        got = c.get(tid)
        assert got is not None and (got.state, got.payload) == ("cancelled", [tid])
        again = c.schedule(tid, delay_ms=60_000, payload=[tid])
        assert (again.created, again.state) == (False, "cancelled")

    fired: list[str] = []
    for shard in range(SHARDS):
        store = c.shard_store(shard)
        epoch = store.acquire("w", 5_000).epoch
        for _ in range(2):  # the second sweep finds nothing: once each
            fired += [tid for tid, _ in store.sweep("w", epoch, ttl_ms=60_000, limit=1000).fired]
    assert sorted(fired) == sorted(made["due"])
    outcomes = {o.id: (o.outcome, o.payload) for o in c.all_outcomes()}
    assert outcomes == {
        **{tid: ("expired", {"n": tid} if tid != "hour" else "hour") for tid in made["due"]},
        **{tid: ("cancelled", [tid]) for tid in ("gone0", "gone1", "gone2")},
    }
    first = next(iter(c.outcomes("g", consumer="c1", block_ms=10, stop_when_idle=True)))
    assert (first.entry_id, first.id, first.payload) == (held, "gone0", ["gone0"])
    (letter,) = c.dead_letters()
    assert letter.outcome is not None and (letter.outcome.id, letter.outcome.payload) == (
        "gone1",
        ["gone1"],
    )
    assert c.redeliver(letter.ref) is not None and c.dead_letters() == []
    c.close()


def test_the_cli_converts_with_progress(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str, old: OldNamespace
) -> None:
    """`tickwheel migrate` asks first (no: nothing changes), then converts with progress
    on stderr; `tickwheel migrate` again says there is nothing to do."""
    fill(old)
    base = ["--redis-url", redis_server.url, "--namespace", namespace]
    runner = CliRunner()
    no = runner.invoke(main, [*base, "migrate"], input="n\n")
    assert no.exit_code != 0 and version_of(redis_client, old) < FORMAT_VERSION
    yes = runner.invoke(main, [*base, "migrate", "--yes"])
    assert yes.exit_code == 0, yes.output
    assert f"-> {FORMAT_VERSION}" in yes.stdout and "shard 0: converted" in yes.stderr
    assert version_of(redis_client, old) == FORMAT_VERSION
    converted_keyspace(redis_client, namespace)
    again = runner.invoke(main, [*base, "migrate"])
    assert again.exit_code == 0 and "nothing to do" in again.output


def test_migrate_refuses_while_a_worker_holds_a_lease_and_converts_nothing(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str, old: OldNamespace
) -> None:
    """A worker of the earlier release still running would write its layout into what was
    converted: `migrate` said "Stop the namespace's workers first" and went ahead. Now a
    held lease refuses it (exit 4, what to do), before anything is written; once the
    lease is gone it converts."""
    fill(old)
    lease = old.sk(1).lease
    redis_client.set(lease, "w-old", px=60_000)
    before = {k: redis_client.dump(k) for k in redis_client.scan_iter(match=f"*{namespace}*")}
    base = ["--redis-url", redis_server.url, "--namespace", namespace]
    refused = CliRunner().invoke(main, [*base, "migrate", "--yes"])
    assert refused.exit_code == 4, refused.output
    assert "has live workers: shard 1's lease is held" in refused.stderr, refused.stderr
    assert "stop every worker of the namespace" in refused.stderr
    after = {k: redis_client.dump(k) for k in redis_client.scan_iter(match=f"*{namespace}*")}
    assert after == before  # nothing converted, nothing written
    redis_client.delete(lease)
    done = CliRunner().invoke(main, [*base, "migrate", "--yes"])
    assert done.exit_code == 0, done.output
    assert version_of(redis_client, old) == FORMAT_VERSION


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(budget=st.one_of(st.integers(), st.floats(), st.text(max_size=5), st.none(), st.booleans()))
def test_migrate_takes_any_budget_and_writes_nothing_on_a_refusal(
    client: TimerClient, redis_client: redis.Redis, budget: Any
) -> None:
    """Any budget: a converted namespace answers nothing to do, or the budget is refused
    with a TimerError; the keyspace is unchanged either way."""
    before = namespace_keys(redis_client, client.namespace)
    try:
        assert client.migrate(budget=budget) == (FORMAT_VERSION, FORMAT_VERSION)
    except TimerError as exc:
        assert "budget" in str(exc)
    assert namespace_keys(redis_client, client.namespace) == before
