"""Readers never stop on an entry they cannot decode: a consumer group dead-letters it
with the reason, readers without a group show it as ``undecodable``, ``get`` and ``wait``
raise CorruptRecord naming the timer (entries written raw, as something other than
tickwheel, or damage, could leave them)."""

from __future__ import annotations

import json

import pytest
import redis
from click.testing import CliRunner
from starlette.testclient import TestClient

from timer import CorruptRecord, Handlers, Outcome, TimerClient
from timer.cli.main import main
from timer.dashboard import create_app
from timer.spark import read_shard_outcomes
from timer.testing import RedisServer

pytestmark = pytest.mark.redis

BROKEN = [
    {"i": "bad:1", "r": b"\xc1 not msgpack"},  # 0xc1 is never used by msgpack
    {"i": "bad:2", "r": b"\x93\x01\x02\x03"},  # msgpack, not an outcome record
    {"i": "bad:3", "outcome": "expired"},  # no outcome record
]


def with_broken_entries(client: TimerClient, r: redis.Redis) -> tuple[str, str]:
    """Shard 0's stream: a good outcome, the broken entries, another good outcome; the
    two good ones' ids."""
    stream = client.keys.shard(0).outcomes
    ids = _ids_on_shard(client, 0, 2)
    client.schedule(ids[0], 60_000, payload={"n": 1})
    client.cancel(ids[0])
    for fields in BROKEN:
        r.xadd(stream, fields)  # type: ignore[arg-type]
    client.schedule(ids[1], 60_000, payload={"n": 2})
    client.cancel(ids[1])
    return ids[0], ids[1]


def _ids_on_shard(client: TimerClient, shard: int, n: int) -> list[str]:
    found = [f"ok:{i}" for i in range(1000) if client.shard_of(f"ok:{i}") == shard]
    return found[:n]


def test_group_reader_dead_letters_what_it_cannot_decode(
    client: TimerClient, redis_client: redis.Redis
) -> None:
    """outcomes() delivers the good outcomes around broken entries and dead-letters each
    broken one, with the reason, atomically with its acknowledgement."""
    first, last = with_broken_entries(client, redis_client)
    got: list[Outcome] = []
    for o in client.outcomes("g", block_ms=10, stop_when_idle=True):
        got.append(o)
        o.ack()
    assert [o.id for o in got] == [first, last]
    dead = client.dead_letters("g")
    assert len(dead) == len(BROKEN)
    assert all("cannot be decoded" in d.error and d.outcome is None for d in dead)
    assert client.groups()[0].pending == 0  # nothing left pending behind them
    again = list(client.outcomes("g", block_ms=10, stop_when_idle=True))
    assert again == []


@pytest.mark.parametrize("concurrency", [1, 8])
def test_handlers_go_on_past_a_broken_entry(
    client: TimerClient, redis_client: redis.Redis, concurrency: int
) -> None:
    """A handler runner handles the good outcomes and dead-letters the broken ones. With
    one outcome in hand at a time a read takes one entry a stream, so some reads meet
    only a broken entry: the runner reads on (it took such a read for idle and stopped,
    leaving the last good outcome unread: a clean-clone CI run saw it)."""
    first, last = with_broken_entries(client, redis_client)
    seen: list[str] = []
    handlers = Handlers(client, group="h", consumer="c1")
    handlers.add("cancelled", lambda o: seen.append(o.id))
    assert handlers.run(stop_when_idle=True, concurrency=concurrency) is True
    assert sorted(seen) == sorted([first, last])
    assert len(client.dead_letters("h")) == len(BROKEN)


def test_readers_without_a_group_show_it_undecodable(
    client: TimerClient, redis_client: redis.Redis, redis_server: RedisServer
) -> None:
    """all_outcomes, recent_outcomes, tail, the Spark reader and the dashboard's feed
    show a broken entry as outcome 'undecodable' with why, and go on to the next."""
    first, last = with_broken_entries(client, redis_client)
    listed = list(client.all_outcomes([0]))
    assert [o.outcome for o in listed] == ["cancelled"] + ["undecodable"] * 3 + ["cancelled"]
    assert [o.id for o in listed] == [first, "bad:1", "bad:2", "bad:3", last]
    assert all("cannot be decoded" in (o.error or "") for o in listed[1:4])
    recent = client.recent_outcomes(10, shards=[0])
    assert sorted(o.outcome for o in recent).count("undecodable") == 3
    rows = list(read_shard_outcomes(redis_server.url, client.namespace, 0))
    assert [row[1] for row in rows].count("undecodable") == 3
    assert "cannot be decoded" in json.loads(rows[1][6])["$error"]
    tail = CliRunner().invoke(
        main, ["--redis-url", redis_server.url, "--namespace", client.namespace, "--json",
               "tail", "--history", "--idle-exit"],
    )  # fmt: skip
    assert tail.exit_code == 0, tail.output
    kinds = [json.loads(line)["outcome"] for line in tail.stdout.splitlines()]
    assert kinds.count("undecodable") == 3 and kinds.count("cancelled") == 2
    page = TestClient(create_app(client), base_url="http://127.0.0.1").get("/api/overview")
    assert page.status_code == 200
    assert [o["outcome"] for o in page.json()["recent"]].count("undecodable") == 3


def test_get_and_wait_name_a_broken_record(
    client: TimerClient, redis_client: redis.Redis, redis_server: RedisServer
) -> None:
    """A pending record that cannot be decoded: get and wait raise CorruptRecord naming
    the timer; `tickwheel get` exits 11 with one line, no traceback."""
    tid = _ids_on_shard(client, 0, 1)[0]
    client.schedule(tid, 60_000)
    redis_client.hset(client.keys.shard(0).timers, tid, b"\xc1")
    with pytest.raises(CorruptRecord, match=tid):
        client.get(tid)
    with pytest.raises(CorruptRecord, match="cannot be decoded"):
        client.wait(tid, timeout=0.1)
    result = CliRunner().invoke(
        main, ["--redis-url", redis_server.url, "--namespace", client.namespace, "get", tid]
    )
    assert result.exit_code == 11, result.output
    assert "cannot be decoded" in result.output and "Traceback" not in result.output
