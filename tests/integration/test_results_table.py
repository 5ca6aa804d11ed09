"""The results table (format 3, #14): retained outcomes in small hashes found by linear
hashing, dropped by trim once their result_ttl has passed."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from timer import TimerClient
from timer.durable.model.codec import text
from timer.durable.model.keys import ShardKeys, results_part_of, results_parts
from timer.durable.model.scripts import ScriptName, source
from timer.durable.shards import ops as shard_ops
from timer.errors import InvalidInput
from timer.testing import RedisServer

from .conftest import SHARDS, retained, server_now_ms

pytestmark = pytest.mark.redis

# the mean results a hash holds before one splits, as lua/include/results.lua says
RX_LOAD = int(
    re.search(r"^local RX_LOAD = (\d+)$", source(ScriptName.GET), re.MULTILINE).group(1)  # type: ignore[union-attr]
)


def table(r: redis.Redis, sk: ShardKeys) -> dict[str, int]:
    return {text(k): int(v) for k, v in r.hgetall(sk.results_table).items()}


def check_table(r: redis.Redis, sk: ShardKeys) -> dict[str, int]:
    """Every id is in the hash linear hashing names for it, N counts them all, and the
    table has split as often as its load says; the table's state."""
    st = table(r, sk)
    parts = 2 ** st["L"] + st["S"]
    assert st["N"] <= RX_LOAD * parts, st
    held = 0
    for b in range(parts):
        names = r.hkeys(sk.results_part(b))
        held += len(names)
        for name in names:
            assert results_part_of(text(name), st["L"], st["S"]) == b, (name, b, st)
    assert held == st["N"]
    found = len(list(r.scan_iter(match=sk.results_part(0)[:-1] + "*", count=1000)))
    assert found <= parts  # no hash outside the table's range
    return st


def ids_in_shard(c: TimerClient, shard: int, n: int, tag: str) -> list[str]:
    return [f"{tag}:{i}" for i in range(20 * n) if c.shard_of(f"{tag}:{i}") == shard][:n]


def decided_in_shard(c: TimerClient, shard: int, n: int, tag: str) -> list[str]:
    ids = ids_in_shard(c, shard, n, tag)
    now = server_now_ms(c.redis)
    c.schedule_many([{"id": i, "deadline_ms": now + 600_000, "payload": i} for i in ids])
    for tid in ids:
        assert c.cancel(tid)
    return ids


def test_the_table_splits_as_it_grows_and_every_outcome_stays_found(
    client: TimerClient,
) -> None:
    """5,000 outcomes in one shard: the table grows by splits to ~150 hashes of about
    RX_LOAD each, each id where linear hashing puts it; every outcome still answers get,
    and a retried schedule of any of them is an idempotent answer, not a new timer."""
    sk = client.keys.shard(1)
    assert table(client.redis, sk) == {"L": 0, "S": 0, "N": 0}
    ids = decided_in_shard(client, 1, 5_000, "grow")
    st = check_table(client.redis, sk)
    assert st["N"] == 5_000 and 2 ** st["L"] + st["S"] >= 5_000 // RX_LOAD
    for tid in random.Random(3).sample(ids, 200):
        info = client.get(tid)
        assert info is not None and (info.state, info.payload) == ("cancelled", tid)
    again = client.schedule_many([{"id": i, "delay_ms": 1_000, "payload": i} for i in ids])
    assert all(not t.created and t.state == "cancelled" for t in again)  # type: ignore[union-attr]
    assert client.get("grow:none") is None


def test_ids_of_every_length_land_where_the_hash_names(client: TimerClient) -> None:
    """The script hashes an id eight bytes a call, then four, then the last one to three:
    ids of 1 to 40 bytes (ASCII, and multi-byte UTF-8) each land in the hash that
    Python's byte-at-a-time hash names, across a table that has split."""
    alphabet = "az09:-é€"
    rng = random.Random(5)
    ids: list[str] = []
    while len(ids) < 600:
        tid = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
        if client.shard_of(tid) == 1 and tid not in ids:
            ids.append(tid)
    assert {len(t.encode()) % 8 for t in ids} == set(range(8))  # every tail length
    now = server_now_ms(client.redis)
    client.schedule_many([{"id": t, "deadline_ms": now + 600_000} for t in ids])
    for tid in ids:
        assert client.cancel(tid)
    st = check_table(client.redis, client.keys.shard(1))
    assert st["N"] == len(ids) and st["L"] >= 4


def test_rearm_takes_an_outcome_out_of_the_table(client: TimerClient) -> None:
    """A re-armed id's outcome leaves the table (N too), and its next outcome goes in."""
    ids = decided_in_shard(client, 2, 300, "rearm")
    sk = client.keys.shard(2)
    client.schedule_many(
        [{"id": i, "delay_ms": 60_000, "payload": i, "rearm": True} for i in ids[:100]]
    )
    st = check_table(client.redis, sk)
    assert st["N"] == 200
    assert all(retained(client.redis, sk, i)[0] is None for i in ids[:100])
    for tid in ids[:100]:
        assert client.complete(tid)
    assert check_table(client.redis, sk)["N"] == 300
    info = client.get(ids[0])
    assert info is not None and info.state == "completed"


def test_outcomes_with_payloads_stay_compact_on_the_servers_tickwheel_starts(
    client: TimerClient,
) -> None:
    """A results-table hash is compact (a listpack) only while each value fits
    hash-max-listpack-value; tickwheel's own servers (the embedded one, the tests') set
    it to LISTPACK_VALUE_BYTES, so outcomes with 300-byte payloads keep every hash of
    the table a listpack (at Redis's default of 64 they turned it into a hash table)."""
    sk = client.keys.shard(1)
    ids = ids_in_shard(client, 1, 60, "big")
    now = server_now_ms(client.redis)
    client.schedule_many(
        [{"id": i, "deadline_ms": now + 60_000, "payload": "x" * 300} for i in ids]
    )
    for tid in ids:
        assert client.cancel(tid)
    st = check_table(client.redis, sk)
    parts = [sk.results_part(b) for b in range(2 ** st["L"] + st["S"])]
    encodings = {client.redis.object("encoding", k) for k in parts if client.redis.exists(k)}
    assert encodings == {b"listpack"}
    info = client.get(ids[0])
    assert info is not None and info.payload == "x" * 300


def due_in_shard(c: TimerClient, shard: int, n: int, tag: str) -> list[str]:
    ids = ids_in_shard(c, shard, n, tag)
    now = server_now_ms(c.redis)
    c.schedule_many([{"id": i, "deadline_ms": now - 1_000} for i in ids])
    return ids


def hdel_calls(r: redis.Redis) -> int:
    return int(r.info("commandstats").get("cmdstat_hdel", {}).get("calls", 0))


def test_fire_grows_the_table_ahead_of_a_burst_so_the_burst_is_not_moved(
    client: TimerClient,
) -> None:
    """A leader firing 4,000 due timers in batches of 500 tells each call how many more
    it holds (ahead): the first call grows the empty table for all of them (splits of
    empty hashes move nothing), so no later call splits a hash holding results. Without
    the hint the table grows as the results land, splitting full hashes (an HDEL each).
    Either way every outcome is where linear hashing puts it."""
    moves = {}
    for shard, hinted in ((1, True), (2, False)):
        ids = due_in_shard(client, shard, 4_000, f"burst{shard}")
        store = client.shard_store(shard)
        epoch = store.acquire("w", 60_000).epoch
        before = hdel_calls(client.redis)
        for i in range(0, len(ids), 500):
            ahead = len(ids) - i if hinted else 0
            fired = store.fire("w", epoch, ids[i : i + 500], ttl_ms=60_000, ahead=ahead).fired
            assert len(fired) == 500
        moves[hinted] = hdel_calls(client.redis) - before - 8  # one HDEL of P:t a call
        st = check_table(client.redis, client.keys.shard(shard))
        assert st["N"] == 4_000 and 2 ** st["L"] + st["S"] >= 4_000 // RX_LOAD
    assert moves[True] == 0 and moves[False] > 20, moves


def test_sweep_grows_the_table_ahead_too(client: TimerClient) -> None:
    """The sweep takes the same hint: a first call deciding 100 timers into an empty
    table, told 5,000 more are coming, leaves it room for them all."""
    due_in_shard(client, 0, 600, "swept")
    store = client.shard_store(0)
    epoch = store.acquire("w", 60_000).epoch
    swept = store.sweep("w", epoch, ttl_ms=60_000, limit=100, ahead=5_000)
    assert len(swept.fired) == 100 and swept.more
    st = check_table(client.redis, client.keys.shard(0))
    assert st["N"] == 100 and 2 ** st["L"] + st["S"] >= 5_100 // RX_LOAD


def test_growing_ahead_is_bounded_by_what_a_call_inserts(client: TimerClient) -> None:
    """Into a table already holding 2,000 results, a call of 10 with a huge hint splits
    only until it has moved more than 10 results (or 256 hashes): a hint never makes
    one call rebuild a large table."""
    decided_in_shard(client, 3, 2_000, "full")
    sk = client.keys.shard(3)
    st = check_table(client.redis, sk)
    ids = due_in_shard(client, 3, 10, "few")
    store = client.shard_store(3)
    before = hdel_calls(client.redis)
    fired = store.fire("w", store.acquire("w", 60_000).epoch, ids, ttl_ms=60_000, ahead=10**6)
    assert len(fired.fired) == 10
    after = check_table(client.redis, sk)
    grown = (2 ** after["L"] + after["S"]) - (2 ** st["L"] + st["S"])
    assert grown >= 1 and hdel_calls(client.redis) - before - 1 <= 2, (st, after)


@pytest.fixture
def short(redis_server: RedisServer, namespace: str) -> Iterator[TimerClient]:
    """A client whose outcomes are retained for 1 s."""
    c = TimerClient.from_url(redis_server.url, namespace, result_ttl_s=1)
    c.init(shards=SHARDS)
    yield c
    c.close()


def wait_server_time(r: redis.Redis, at_ms: int, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while server_now_ms(r) < at_ms:  # a condition polled up to a deadline
        assert time.monotonic() < deadline, "the server clock did not reach the expiry"
        time.sleep(0.02)


def test_trim_drops_outcomes_past_their_ttl_and_keeps_the_rest(
    short: TimerClient, client: TimerClient
) -> None:
    """Outcomes retained for 1 s are dropped by the first trim after that second (its
    stream left as it is with retention None); outcomes retained for the default day in
    the same shard are kept; N follows."""
    assert short.namespace == client.namespace
    brief = decided_in_shard(short, 0, 400, "brief")
    long = decided_in_shard(client, 0, 100, "long")
    sk = client.keys.shard(0)
    expiries = [e for _, e in (retained(client.redis, sk, i) for i in brief) if e]
    expiry = max(expiries)
    # none dropped before its expiry on the server's clock (all of them, on a machine
    # that decided the 400 within their second; the table keeps whole seconds)
    before = server_now_ms(client.redis)
    first = client.trim_outcomes(None)[0].results_dropped
    after = server_now_ms(client.redis)
    assert sum(e <= before - 1_000 for e in expiries) <= first
    assert first <= sum(e <= after + 1_000 for e in expiries)
    wait_server_time(client.redis, expiry)
    done = client.trim_outcomes(None)
    assert first + done[0].results_dropped == 400 and done[0].removed == 0
    assert client.outcomes_total() == 500  # the stream was left
    assert all(client.get(i) is None for i in brief)
    assert all(client.get(i) is not None for i in long)
    assert check_table(client.redis, sk)["N"] == 100


def test_trim_visits_a_bounded_part_of_a_large_table_round_robin(client: TimerClient) -> None:
    """With more hashes than one call visits, successive calls go round the table from
    the cursor and together reach every hash (here: drop every outcome, made due by
    moving each value's expiry into the past)."""
    sk = client.keys.shard(3)
    decided_in_shard(client, 3, 4_000, "big")
    parts = results_parts(*client.redis.hmget(sk.results_table, "L", "S"))
    assert parts > 64  # more than one call's minimum visit
    for b in range(parts):  # expire everything: the first 4 bytes are the expiry (s)
        key = sk.results_part(b)
        for name, value in client.redis.hgetall(key).items():
            client.redis.hset(key, name, (1).to_bytes(4, "big") + value[4:])
    dropped, calls = 0, 0
    while dropped < 4_000:
        calls += 1
        assert calls <= parts, "trim did not reach every hash"
        dropped += client.trim_outcomes(None, shards=[3])[0].results_dropped
    assert dropped == 4_000 and calls > 1
    assert check_table(client.redis, sk)["N"] == 0


def expire_all(r: Any, sk: ShardKeys, parts: int) -> None:
    """Move every retained outcome's expiry (its first 4 bytes, epoch s) into the past."""
    for b in range(parts):
        key = sk.results_part(b)
        for name, value in r.hgetall(key).items():
            r.hset(key, name, (1).to_bytes(4, "big") + value[4:])


def test_trim_pass_within_one_goes_round_the_table_in_calls_of_per_call(
    client: TimerClient,
) -> None:
    """pass_within=1: one trim_outcomes visits every hash once, however many more than a
    call's cap (here 16 a call): every expired outcome is dropped and the cursor comes
    back to where it was."""
    sk = client.keys.shard(3)
    decided_in_shard(client, 3, 4_000, "round")
    parts = results_parts(*client.redis.hmget(sk.results_table, "L", "S"))
    assert parts > 64  # several calls of 16, and more than the 64 a call at least visits
    expire_all(client.redis, sk, parts)
    start = int(client.redis.hget(sk.results_table, "C") or 0)
    op = shard_ops.trim_outcomes(
        client._ns(), None, keep_unread=True, shards=[3], pass_within=1, per_call=16
    )
    (done,) = client._run(op)
    assert done.results_dropped == 4_000 and done.removed == 0
    assert check_table(client.redis, sk)["N"] == 0
    assert int(client.redis.hget(sk.results_table, "C") or 0) == start % parts


def test_trim_pass_within_k_visits_at_least_a_kth_of_the_table(client: TimerClient) -> None:
    """pass_within=2 on a table of more than 128 hashes: the first call visits half of
    them (more than the thirtieth, or the 64, it visits without), the second the rest."""
    sk = client.keys.shard(3)
    decided_in_shard(client, 3, 6_000, "half")
    parts = results_parts(*client.redis.hmget(sk.results_table, "L", "S"))
    assert parts > 128
    expire_all(client.redis, sk, parts)
    start = int(client.redis.hget(sk.results_table, "C") or 0)
    half = [(start + k) % parts for k in range(-(-parts // 2))]  # not the 64 it visits alone
    held = sum(int(client.redis.hlen(sk.results_part(b))) for b in half)
    first = client.trim_outcomes(None, shards=[3], pass_within=2)[0].results_dropped
    assert first == held and 0 < first < 6_000
    second = client.trim_outcomes(None, shards=[3], pass_within=2)[0].results_dropped
    assert first + second == 6_000
    assert check_table(client.redis, sk)["N"] == 0


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, 2**40])
def test_trim_results_refuses_what_is_no_count(client: TimerClient, bad: object) -> None:
    """A round's next call takes the hashes left, 1 to 2**31 - 1: anything else is refused
    before a call is made."""
    with pytest.raises(InvalidInput, match="left"):
        client.shard_store(0).trim_results(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, 2**40])
def test_trim_pass_within_refuses_what_is_no_count(client: TimerClient, bad: object) -> None:
    """pass_within must be a whole number of calls, 1 to 2**31 - 1: anything else is
    refused before a call is made."""
    with pytest.raises(InvalidInput, match="pass_within"):
        client.trim_outcomes(None, pass_within=bad)  # type: ignore[arg-type]


def test_memory_reports_the_table_bytes_per_decided_timer(client: TimerClient) -> None:
    """stats --memory estimates a decided timer from the table's sampled hashes."""
    decided_in_shard(client, 0, 1_000, "mem")
    m = client.memory()
    assert m["retained_in_table"] == 1_000
    assert m["sampled_results"] > 0
    assert m["bytes_per_decided_timer"] is not None and 20 < m["bytes_per_decided_timer"] < 400
