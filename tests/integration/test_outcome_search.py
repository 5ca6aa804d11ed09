"""Searching outcomes (#57) on a real server: by kind, timer glob, time range, a payload
field (dotted, compared as text) and shard, newest first; a search that reads its most
says so; any input is answered or refused writing nothing."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from timer import InvalidInput, NotFound, TimerClient
from timer.durable.admin import search as outcome_search
from timer.testing import RedisServer

from .conftest import done_or_refused

pytestmark = pytest.mark.redis


def _decide(client: TimerClient) -> list[int]:
    """Six outcomes, in this order: the decided ms of each."""
    plan = [
        ("order:1", {"tenant": "acme", "customer": {"id": 42}}, "cancel"),
        ("order:2", {"tenant": "beta"}, "complete"),
        ("order:3", {"tenant": "acme", "customer": {"id": 7}}, "complete"),
        ("mail:1", {"tenant": "acme"}, "cancel"),
        ("mail:2", None, "cancel"),
        ("order:4", {"tenant": "acme", "vip": True}, "cancel"),
    ]
    decided = []
    for tid, payload, how in plan:
        client.schedule(tid, 60_000, payload=payload)
        getattr(client, how)(tid)
        info = client.get(tid)
        assert info is not None and info.decided_ms is not None
        decided.append(info.decided_ms)
    return decided


def ids(found: tuple[list[Any], bool]) -> list[str]:
    outcomes, stopped = found
    assert stopped is False
    return [o.id for o in outcomes]


def test_search_by_kind_glob_payload_time_and_shard(client: TimerClient) -> None:
    decided = _decide(client)
    everything = ids(client.search_outcomes())
    assert sorted(everything) == sorted(
        ["order:1", "order:2", "order:3", "order:4", "mail:1", "mail:2"]
    )
    newest = client.search_outcomes()[0]
    assert [o.decided_ms for o in newest] == sorted((o.decided_ms for o in newest), reverse=True)
    assert sorted(ids(client.search_outcomes(kind="completed"))) == ["order:2", "order:3"]
    assert sorted(ids(client.search_outcomes(match="order:[14]"))) == ["order:1", "order:4"]
    acme = ids(client.search_outcomes(payload={"tenant": "acme"}))
    assert sorted(acme) == ["mail:1", "order:1", "order:3", "order:4"]
    assert ids(client.search_outcomes(payload={"customer.id": "42"})) == ["order:1"]
    assert ids(client.search_outcomes(payload={"customer.id": 42})) == ["order:1"]
    assert ids(client.search_outcomes(payload={"vip": True})) == ["order:4"]
    assert ids(client.search_outcomes(payload={"vip": "true"})) == ["order:4"]
    late = ids(client.search_outcomes(since_ms=decided[3]))
    assert {"mail:1", "mail:2", "order:4"} <= set(late) and "order:1" not in late
    early = ids(client.search_outcomes(until_ms=decided[0]))
    assert "order:1" in early and "order:4" not in early
    on_one = client.search_outcomes(shards=[0])[0]
    assert all(o.shard == 0 for o in on_one)
    assert len(on_one) == sum(1 for t in everything if client._ns().shard_of(t) == 0)
    assert ids(client.search_outcomes(limit=2)) == everything[:2]


def test_the_time_range_is_the_decisions_not_the_stream_ids(client: TimerClient) -> None:
    """On Redis 7.0 a deciding script's TIME and its XADD's id read the clock apart, so an
    outcome's id can be later than its decided_ms by as long as the script ran. A search
    by time selects on decided_ms: an outcome whose id is 50 ms late (moved there with its
    own fields) is found up to its decision and not after it."""
    client.schedule("late", 60_000, payload={"n": 1})
    client.cancel("late")
    info = client.get("late")
    assert info is not None and info.decided_ms is not None
    decided = info.decided_ms
    stream = client.keys.shard(client.shard_of("late")).outcomes
    [(entry_id, fields)] = client.redis.xrange(stream)
    client.redis.xdel(stream, entry_id)
    client.redis.xadd(stream, fields, id=f"{decided + 50}-0")
    assert ids(client.search_outcomes(until_ms=decided)) == ["late"]
    assert ids(client.search_outcomes(since_ms=decided, until_ms=decided)) == ["late"]
    assert ids(client.search_outcomes(since_ms=decided + 1)) == []
    [found] = client.search_outcomes()[0]
    assert found.decided_ms == decided


def test_search_by_where_outcomes_are_for_a_group(client: TimerClient) -> None:
    """For group g: one handled (settled), two delivered and not settled (in hand), one
    decided after its read (waiting); a group nobody made is NotFound."""
    for tid in ("a", "b", "c"):
        client.schedule(tid, 60_000)
        client.cancel(tid)
    g = client.consumer("g", "c1")
    g.ensure()
    got = {d.outcome.id: d for d in g.read(10, None)}
    assert sorted(got) == ["a", "b", "c"]
    g.ack(got["b"])
    client.schedule("d", 60_000)
    client.cancel("d")

    def where(state: str) -> list[str]:
        return sorted(ids(client.search_outcomes(group="g", state=state)))

    assert (where("settled"), where("in_hand"), where("waiting")) == (["b"], ["a", "c"], ["d"])
    with pytest.raises(NotFound, match='no consumer group "nobody"'):
        client.search_outcomes(group="nobody", state="waiting")
    with pytest.raises(InvalidInput, match="name the group too"):
        client.search_outcomes(state="waiting")


def test_a_search_that_reads_its_most_says_so(
    client: TimerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    _decide(client)
    monkeypatch.setattr(outcome_search, "SCAN_MOST", 2)
    monkeypatch.setattr(outcome_search, "PAGE", 1)
    found, stopped = client.search_outcomes(match="nothing:*")
    assert found == [] and stopped is True


@given(
    args=st.fixed_dictionaries(
        {},
        optional={
            "kind": st.one_of(st.none(), st.sampled_from(["expired", "late", ""]), st.integers()),
            "match": st.one_of(st.none(), st.text(max_size=6), st.integers()),
            "since_ms": st.one_of(
                st.none(), st.integers(-5, 2**63), st.floats(), st.text(max_size=3)
            ),
            "until_ms": st.one_of(st.none(), st.integers(-5, 2**63)),
            "payload": st.one_of(
                st.none(),
                st.dictionaries(
                    st.one_of(st.text(max_size=5), st.integers()), st.integers(), max_size=2
                ),
                st.text(max_size=3),
            ),
            "shards": st.one_of(
                st.none(), st.lists(st.integers(-2, 5), max_size=3), st.text(max_size=2)
            ),
            "limit": st.one_of(st.integers(-2, 2000), st.booleans(), st.none()),
            "group": st.one_of(st.none(), st.text(max_size=4), st.integers()),
            "state": st.one_of(st.none(), st.sampled_from(["waiting", "settled", "gone"])),
        },
    )
)
@settings(max_examples=80, deadline=None)
def test_any_search_is_answered_or_refused_writing_nothing(
    redis_server: RedisServer, args: dict[str, Any]
) -> None:
    got = done_or_refused(
        redis_server.url,
        "search-fuzz",
        lambda c: c.search_outcomes(**args),
        (InvalidInput, NotFound),
    )
    assert got is None or isinstance(got[0], list)
