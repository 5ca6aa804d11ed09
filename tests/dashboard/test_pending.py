"""The Timers view's list: every shard's pending timers by next due (``/api/pending``),
against a brute-force sort of every pending timer, paged with its cursor."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from sim.checks import check_heads, soonest_pending
from tests.conftest import fresh_client
from tests.dashboard.test_api import namespace_dump, web
from timer import TimerClient
from timer.durable.admin import pending as pending_page
from timer.errors import TimerError
from timer.testing import RedisServer

HOUR = 3_600_000


@pytest.fixture
def client(redis_server: RedisServer, namespace: str) -> Iterator[TimerClient]:
    with fresh_client(redis_server, namespace, shards=4) as c:
        yield c


def busy(c: TimerClient) -> list[tuple[int, str]]:
    """Timers every way a shard keeps them: overdue, near (fine buckets), far (coarse:
    hours and days out), a dozen due at the same ms on every shard, some moved between
    near and far (a stale id left behind), some decided (stale ids too), with payloads
    and priorities; what is pending, brute-force sorted by (deadline, id)."""
    now = c.server_time_ms()
    items: list[dict[str, Any]] = []
    for i in range(40):
        items.append({"id": f"near:{i}", "deadline_ms": now + 5_000 + 997 * i % 30_000})
    for i in range(30):
        items.append(
            {"id": f"far:{i}", "deadline_ms": now + 3 * HOUR + 1_234_567 * i % (48 * HOUR)}
        )
    for i in range(5):
        items.append({"id": f"late:{i}", "deadline_ms": now - 60_000 + i})
    same = now + 20 * 60_000
    items += [{"id": f"eq:{i}", "deadline_ms": same} for i in range(12)]
    for i, item in enumerate(items):
        item["payload"] = {"tenant": f"t{i % 3}", "n": i}
        item["priority"] = i % 5 * 10 - 20
    assert not [r for r in c.schedule_many(items) if isinstance(r, Exception)]
    assert len({c.shard_of(f"eq:{i}") for i in range(12)}) > 1  # equal dues on many shards
    for i in range(0, 10, 3):
        c.reschedule(f"near:{i}", 5 * HOUR)  # near -> far: a stale id in a fine bucket
        c.reschedule(f"far:{i}", 90_000)  # far -> near: a stale id in a coarse bucket
    for tid in ("near:1", "far:1", "eq:3", "late:2"):
        assert c.cancel(tid)
    pending = []
    for item in items:
        info = c.get(item["id"])
        assert info is not None
        if info.state == "pending":
            pending.append((info.deadline_ms, info.id))
    return sorted(pending)


def pages(http: Any, size: int, **params: str) -> tuple[list[dict[str, Any]], int]:
    """Every page of /api/pending (``size`` a page) from the first: the timers in the
    order given, and how many pages."""
    got: list[dict[str, Any]] = []
    cursor: str | None = None
    n = 0
    while True:
        q = {"limit": str(size), **params, **({"cursor": cursor} if cursor else {})}
        r = http.get("/api/pending", params=q)
        assert r.status_code == 200, r.text
        page = r.json()
        n += 1
        assert len(page["timers"]) <= size
        got += page["timers"]
        cursor = page["cursor"]
        if cursor is None:
            return got, n
        assert n < 1000, "the pages never end"


def test_pending_timers_come_soonest_first_across_shards_paged_with_no_gap_or_repeat(
    client: TimerClient,
) -> None:
    """Paged 7 at a time (a page ending inside the dozen due at the same ms), then 500 at
    once: the ids in the order of a brute-force sort of every pending timer by (deadline,
    id), none twice, none left out; each row says its shard and time left."""
    expected = busy(client)
    with web(client) as http:
        for size in (7, 500):
            got, n = pages(http, size)
            assert [(t["deadline_ms"], t["id"]) for t in got] == expected, size
            assert n >= len(expected) // size
        first = http.get("/api/pending", params={"limit": "3"}).json()
    assert [t["id"] for t in first["timers"]] == [tid for _, tid in expected[:3]]
    assert first["cursor"] == f"{expected[2][0]}:{expected[2][1]}"
    for t in first["timers"]:
        assert t["shard"] == client.shard_of(t["id"])
        assert t["time_left_ms"] < 0  # the overdue ones come first


def test_pending_timers_filtered_by_id_payload_field_and_priority(client: TimerClient) -> None:
    """Each filter, and all three at once, selects what a brute-force filter of every
    pending timer selects, in the same order, paged."""
    expected = busy(client)
    infos = {tid: client.get(tid) for _, tid in expected}

    def chosen(keep: Any) -> list[tuple[int, str]]:
        return [(d, tid) for d, tid in expected if keep(infos[tid])]

    cases = [
        ({"match": "far:*"}, lambda t: t.id.startswith("far:")),
        ({"field": "tenant", "value": "t1"}, lambda t: t.payload["tenant"] == "t1"),
        ({"field": "n", "value": "7"}, lambda t: t.payload["n"] == 7),
        ({"min_priority": "10"}, lambda t: t.priority >= 10),
        ({"min_priority": "-20"}, lambda t: True),
        (
            {"match": "*:1?", "field": "tenant", "value": "t2", "min_priority": "0"},
            lambda t: (
                t.id.split(":")[1].__len__() == 2
                and t.id.split(":")[1].startswith("1")
                and t.payload["tenant"] == "t2"
                and t.priority >= 0
            ),
        ),
    ]
    with web(client) as http:
        for params, keep in cases:
            got, _ = pages(http, 4, **params)
            assert [(t["deadline_ms"], t["id"]) for t in got] == chosen(keep), params


def test_a_page_that_reads_its_most_ends_where_it_stopped_and_the_next_goes_on(
    client: TimerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A narrow filter over many buckets: a page stops after reading its most ids, says
    so, and its cursor goes on from the first bucket not read; the pages together hold
    every timer the filter selects, in order, once."""
    expected = busy(client)
    monkeypatch.setattr(pending_page, "READ_MOST", 10)
    with web(client) as http:
        first = http.get("/api/pending", params={"match": "eq:*"}).json()
        assert first["stopped"] and first["cursor"].endswith(":") and not first["timers"]
        got, n = pages(http, 50, match="eq:*")
        every, _ = pages(http, 50)  # no filter: pages end short, each where reading stopped
    assert [(t["deadline_ms"], t["id"]) for t in got] == [x for x in expected if "eq:" in x[1]]
    assert n > 2
    assert [(t["deadline_ms"], t["id"]) for t in every] == expected


def test_a_crowded_bucket_pages_soonest_first_with_ties_cut_by_id_bytes(
    client: TimerClient,
) -> None:
    """Many timers in each shard's one bucket, more than a page, many due at the same ms
    and ids that sort differently by bytes than by a locale ("B" before "a"), some
    cancelled and some filtered by priority: small pages read together equal a
    brute-force sort, with no gap at a cut that falls inside a run of equal deadlines
    (what a reading that keeps only each shard's soonest must still hold)."""
    due = client.server_time_ms() + 600_000  # 600 timers within 3 ms: one bucket or two
    items = [(f"{'aB'[i % 2]}{i % 7}:{i}", due + i % 3, i % 4) for i in range(600)]
    scheduled = client.schedule_many(
        [{"id": tid, "deadline_ms": d, "priority": p} for tid, d, p in items]
    )
    assert not [r for r in scheduled if isinstance(r, Exception)]
    for i in range(0, 600, 11):
        assert client.cancel(items[i][0])
    left = [it for i, it in enumerate(items) if i % 11]
    expected = sorted((d, tid) for tid, d, _ in left)
    high = sorted((d, tid) for tid, d, p in left if p >= 2)
    with web(client) as http:
        for size in (7, 50):
            got, _ = pages(http, size)
            assert [(t["deadline_ms"], t["id"]) for t in got] == expected, size
        got, _ = pages(http, 9, min_priority="2")
        assert [(t["deadline_ms"], t["id"]) for t in got] == high


def test_a_page_reads_no_shard_whose_buckets_start_after_its_last_timer(
    client: TimerClient,
) -> None:
    """One shard holds a page's worth and more in one bucket due soon; every other shard
    holds one timer a second, later: a page read from the buckets (a priority filter:
    the shards' heads hold no priorities) reads that bucket and each other shard's
    first round of buckets only (none of their later buckets can hold a timer of the
    page once 50 are taken), not rounds of buckets until each shard alone holds 50;
    its pages still equal a brute-force sort."""
    now = client.server_time_ms()
    soon = 0  # the shard with the crowded bucket
    crowded = [t for t in (f"soon:{i}" for i in range(400)) if client.shard_of(t) == soon][:60]
    later = [t for t in (f"later:{i}" for i in range(2000)) if client.shard_of(t) != soon][:210]
    items = [{"id": t, "deadline_ms": now + 60_000 + i % 7} for i, t in enumerate(crowded)]
    items += [{"id": t, "deadline_ms": now + 120_000 + 1_000 * i} for i, t in enumerate(later)]
    assert not [r for r in client.schedule_many(items) if isinstance(r, Exception)]
    expected = sorted((int(str(it["deadline_ms"])), str(it["id"])) for it in items)
    others = client.meta.shards - 1
    with web(client) as http:
        first = http.get("/api/pending", params={"limit": "50", "min_priority": "-100"}).json()
        got, _ = pages(http, 50, min_priority="-100")
    assert [(t["deadline_ms"], t["id"]) for t in first["timers"]] == expected[:50]
    # the crowded bucket, and each other shard's first round of buckets (one id each)
    assert first["read"] <= len(crowded) + others * pending_page.FIRST_BUCKETS_KEPT
    assert [(t["deadline_ms"], t["id"]) for t in got] == expected


def test_a_shards_head_answers_the_first_page_and_follows_every_change(
    client: TimerClient, redis_client: redis.Redis
) -> None:
    """The first page fills each shard's head from its buckets; the next first pages
    read no bucket at all, and still follow every change since: a timer scheduled
    sooner, one cancelled, one moved later (its entry stale), one moved sooner, a
    shard's head drained by completions (filled again). After each, the first page and
    all pages equal a brute-force sort, and every head keeps its promise."""
    r = redis_client
    now = client.server_time_ms()
    items = [
        {"id": f"job:{i}", "deadline_ms": now + 60_000 + 7_919 * i % 400_000} for i in range(1200)
    ]
    assert not [x for x in client.schedule_many(items) if isinstance(x, Exception)]
    with web(client) as http:

        def first() -> dict[str, Any]:
            page: dict[str, Any] = http.get("/api/pending", params={"limit": "50"}).json()
            check_heads(r, client.keys, client.meta.shards)
            expected = soonest_pending(r, client.keys, client.meta.shards)
            assert [(t["deadline_ms"], t["id"]) for t in page["timers"]] == expected[:50]
            got, _ = pages(http, 50)
            assert [(t["deadline_ms"], t["id"]) for t in got] == expected
            return page

        assert first()["read"] > 0  # the heads filled
        assert first()["read"] == 0
        client.schedule("soonest", 30_000)
        page = first()
        assert page["read"] == 0 and page["timers"][0]["id"] == "soonest"
        assert client.cancel("soonest")
        assert first()["read"] == 0
        head = soonest_pending(r, client.keys, client.meta.shards)[0][1]
        assert client.reschedule(head, 2 * HOUR) is not None
        assert first()["read"] == 0
        last = soonest_pending(r, client.keys, client.meta.shards)[-1][1]
        assert client.reschedule(last, 10_000) is not None
        page = first()
        assert page["read"] == 0 and page["timers"][0]["id"] == last
        shard = client.shard_of(last)
        for _, tid in [
            x
            for x in soonest_pending(r, client.keys, client.meta.shards)
            if client.shard_of(x[1]) == shard
        ][:200]:
            assert client.complete(tid)
        assert first()["read"] > 0  # that shard's head ran short: filled again
        assert first()["read"] == 0


BAD = [
    ({"cursor": "x"}, "cursor must be <deadline ms>:<timer id>"),
    ({"cursor": "12"}, "cursor must be"),
    ({"cursor": "soon:job"}, "deadline is a whole number"),
    ({"cursor": "-5:job"}, "deadline is a whole number"),
    ({"cursor": "\u00b2:job"}, "deadline is a whole number"),
    ({"cursor": "99999999999999999999:job"}, "deadline is a whole number"),
    ({"cursor": "5:" + "x" * 257}, "at most 256"),
    ({"limit": "0"}, "limit"),
    ({"limit": "501"}, "limit"),
    ({"limit": "ten"}, "limit must be a whole number"),
    ({"limit": "\u00b2"}, "limit must be a whole number"),
    ({"min_priority": "101"}, "min_priority"),
    ({"min_priority": "high"}, "min_priority must be a whole number"),
    ({"field": "x" * 300, "value": "1"}, "payload field"),
    ({"match": "x" * 2000}, "match is"),
]


@pytest.mark.parametrize(("params", "said"), BAD)
def test_bad_cursor_or_filter_is_refused_with_a_clear_400_and_nothing_written(
    client: TimerClient, redis_client: redis.Redis, params: dict[str, str], said: str
) -> None:
    client.schedule("job:{1}", 60_000)
    before = namespace_dump(redis_client, client.namespace)
    with web(client) as http:
        r = http.get("/api/pending", params=params)
    assert r.status_code == 400, (params, r.text)
    assert said in r.json()["error"], r.json()
    assert namespace_dump(redis_client, client.namespace) == before


def test_an_empty_namespace_has_one_empty_page(client: TimerClient) -> None:
    with web(client) as http:
        page = http.get("/api/pending").json()
    assert page == {"timers": [], "cursor": None, "stopped": False, "read": 0}


@pytest.mark.parametrize("seed", range(4))
def test_pages_equal_a_brute_force_sort_through_every_change_and_skew(
    redis_server: RedisServer, redis_client: redis.Redis, seed: int
) -> None:
    """Seeded random work on 1, 3 or 8 shards: batches (some due at one ms, some an hour
    and more out), cancels, moves sooner and later, completions by the fifty; between
    them, pages of 1 to 200 read from the first: every page equals a brute-force sort of
    the records, and every head keeps its promise after each step, however the soonest
    timers fall on the shards (a first round's hint from the last page, a second round,
    the buckets when a head ends)."""
    rnd = random.Random(seed)
    c = TimerClient.from_url(redis_server.url, f"skew{seed}-{rnd.randrange(10**9)}")
    c.init(shards=rnd.choice([1, 3, 8]))
    now, ids = c.server_time_ms(), []
    try:
        for step in range(120):
            op = rnd.random()
            if op < 0.35:
                base = now + rnd.choice([0, 1_000, 60_000, 4 * HOUR])
                at_once = rnd.random() < 0.5
                items = [
                    {"id": f"j{step}:{i}:{'aB'[i % 2]}",
                     "deadline_ms": base + (0 if at_once else rnd.randrange(100_000))}
                    for i in range(rnd.choice([1, 5, 40, 300]))
                ]  # fmt: skip
                assert not [x for x in c.schedule_many(items) if isinstance(x, Exception)]
                ids += [str(x["id"]) for x in items]
            elif op < 0.5 and ids:
                c.cancel(rnd.choice(ids))
            elif op < 0.65 and ids:
                with contextlib.suppress(TimerError):  # decided (None), or past its cap
                    c.reschedule(rnd.choice(ids), rnd.choice([10, 5_000, 2 * HOUR]))
            elif op < 0.75 and ids:
                for tid in rnd.sample(ids, min(len(ids), 50)):
                    c.complete(tid)
            else:
                limit = rnd.choice([1, 3, 7, 50, 200])
                truth = soonest_pending(redis_client, c.keys, c.meta.shards)
                got: list[tuple[int, str]] = []
                after = None
                for _ in range(4):
                    page = c.pending_by_due(limit=limit, after=after)
                    got += [(t.deadline_ms, t.id) for t in page.timers]
                    after = page.after
                    if after is None:
                        break
                assert got == truth[: len(got)], (step, limit)
                assert after is not None or got == truth
            check_heads(redis_client, c.keys, c.meta.shards)
    finally:
        c.close()
