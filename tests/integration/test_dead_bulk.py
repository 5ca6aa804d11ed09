"""Dead letters by filter (#57): selected by group, error text and a glob on the timer
id, re-delivered or dropped together only at the count a person confirmed, on a real
server; the glob is held to the server's own matching."""

from __future__ import annotations

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from timer import Backoff, Handlers, InvalidInput, Later, Outcome, SelectionChanged, TimerClient
from timer.client.consumer import ConsumerGroup
from timer.durable.groups.streams import Delivery
from timer.durable.model.globs import redis_glob
from timer.testing import RedisServer

from .conftest import done_or_refused, namespace_keys

pytestmark = pytest.mark.redis

GLOB_BYTES = "ab*?[]^-\\é"


@given(
    pattern=st.text(alphabet=GLOB_BYTES, max_size=8),
    ids=st.lists(st.text(alphabet="ab-]^\\[é*", min_size=1, max_size=5), max_size=12),
)
@settings(max_examples=300, deadline=None)
def test_the_glob_matches_what_the_server_matches(
    redis_server: RedisServer, pattern: str, ids: list[str]
) -> None:
    """KEYS on a real server is the oracle: the same pattern selects the same ids."""
    r = redis.Redis.from_url(redis_server.url, db=9)
    try:
        r.flushdb()
        if ids:
            r.mset(dict.fromkeys(ids, 1))
        server = {k.decode() for k in r.keys(pattern) if isinstance(k, bytes)} if pattern else set()
        ours = {i for i in set(ids) if redis_glob(pattern)(i)} if pattern else set()
        assert ours == server, pattern
    finally:
        r.flushdb()
        r.close()


def _dead(client: TimerClient) -> None:
    """18 dead letters: group a's nine (job:0-3 a Timeout, job:4-5 a KeyError, mail:0-2
    a bad address) and group b's nine ("boom")."""
    for tid in [*(f"job:{i}" for i in range(6)), *(f"mail:{i}" for i in range(3))]:
        client.schedule(tid, 60_000)
        client.cancel(tid)  # an outcome at once, no worker needed

    def a_fails(o: Outcome) -> None:  # its source line, in each traceback, names no error
        raise a_errors[0 if o.id.startswith("mail:") else 1 if o.id[-1] in "0123" else 2]

    a_errors = [ValueError("bad address"), TimeoutError("upstream Timeout"), KeyError("k")]

    def b_fails(_: Outcome) -> None:
        raise RuntimeError("boom")

    for group, fail in (("a", a_fails), ("b", b_fails)):
        h = Handlers(client, group=group, max_attempts=1)
        h.add("cancelled", fail)
        assert h.run(stop_when_idle=True)


def test_a_filter_selects_by_group_error_and_timer_id(client: TimerClient) -> None:
    _dead(client)
    assert len(client.dead_letters()) == 18
    assert len(client.dead_letters("a")) == 9
    assert len(client.dead_letters("a", error="timeout")) == 4  # any case
    assert len(client.dead_letters(error="KEYERROR")) == 2
    both = client.dead_letters(match="job:[45]")
    assert sorted(d.outcome.id for d in both if d.outcome) == ["job:4", "job:4", "job:5", "job:5"]
    assert len(client.dead_letters("b", match="mail:*")) == 3
    assert len(client.dead_letters("a", limit=2)) == 2
    assert client.dead_letters("a", error="timeout", match="mail:*") == []


def test_a_count_is_what_the_filter_selects_without_making_the_letters(
    client: TimerClient, redis_client: redis.Redis
) -> None:
    """count_dead_letters gives, for any filter, as many as dead_letters selects, up to
    its most (#55: the dashboard's count reads fields, it decodes no letter the glob
    does not take); a letter whose outcome cannot be decoded has no timer id to match."""
    _dead(client)
    sk = client.keys.shard(client.shard_of("job:0"))
    redis_client.xadd(sk.dead, {"group": "a", "entry": "1-1", "consumer": "c", "attempts": "1",
                                "error": "upstream Timeout", "failed": "1", "i": "job:9",
                                "r": b"\xc1"})  # fmt: skip
    groups, errors = [None, "a", "b", "c"], [None, "timeout", "KEYERROR", "boom", "zzz"]
    globs = [None, "job:*", "job:[45]", "mail:?", "*9", "nothing"]
    for group in groups:
        for error in errors:
            for match in globs:
                letters = client.dead_letters(group, error=error, match=match, limit=10_000)
                want = len(letters)
                got = client.count_dead_letters(group, error=error, match=match)
                assert got == want, (group, error, match)
                page, n = client.dead_letters_counted(group, error=error, match=match)
                assert n == want and sorted(d.ref for d in page) == sorted(d.ref for d in letters)
                page, n = client.dead_letters_counted(group, error=error, match=match, limit=2)
                assert n == want and len(page) == min(want, 2)
                assert client.count_dead_letters(group, error=error, match=match, most=3) == (
                    min(want, 3)
                )
    assert client.count_dead_letters("a", error="timeout") == 5  # the undecodable one too
    assert client.count_dead_letters(match="job:9") == 0  # ... but not by its id


@given(
    args=st.fixed_dictionaries(
        {},
        optional={
            "group": st.one_of(st.none(), st.text(max_size=260), st.integers()),
            "error": st.one_of(st.none(), st.text(max_size=300), st.integers()),
            "match": st.one_of(st.none(), st.text(max_size=20), st.binary(max_size=3)),
            "most": st.one_of(st.integers(), st.booleans(), st.floats(), st.text(max_size=3)),
        },
    )
)
@settings(max_examples=60, deadline=None)
def test_any_count_is_a_number_or_refused_writing_nothing(
    redis_server: RedisServer, args: dict[str, object]
) -> None:
    n = done_or_refused(
        redis_server.url,
        "dead-count-fuzz",
        lambda c: c.count_dead_letters(**args),  # type: ignore[arg-type]
        (InvalidInput,),
    )
    assert n in (None, 0)
    page_args = {("limit" if k == "most" else k): v for k, v in args.items()}  # the same fuzz
    got = done_or_refused(
        redis_server.url,
        "dead-count-fuzz",
        lambda c: c.dead_letters_counted(**page_args),  # type: ignore[arg-type]
        (InvalidInput,),
    )
    assert got in (None, ([], 0))


def test_a_bulk_action_needs_the_count_confirmed_and_redis_agrees(
    client: TimerClient, redis_client: redis.Redis
) -> None:
    _dead(client)

    def stored() -> int:
        return sum(int(redis_client.xlen(client.keys.shard(s).dead)) for s in range(4))

    assert stored() == 18
    before = namespace_keys(redis_client, client.namespace)
    with pytest.raises(SelectionChanged, match="4 dead letters are selected now, not the 5") as e:
        client.redeliver_dead_letters(group="a", error="timeout", expect=5)
    assert e.value.matching == 4
    assert namespace_keys(redis_client, client.namespace) == before  # nothing was done

    back = client.redeliver_dead_letters(group="a", error="timeout", expect=4)
    assert (back.matched, len(back.done), back.missing) == (4, 4, [])
    assert stored() == 14 and client.dead_letters("a", error="timeout") == []
    for group, expected in (("a", ["job:0", "job:1", "job:2", "job:3"]), ("b", [])):
        seen: list[str] = []  # each went back to its own group alone
        h = Handlers(client, group=group)
        h.add("cancelled", lambda o, seen=seen: seen.append(o.id))
        assert h.run(stop_when_idle=True)
        assert sorted(seen) == expected

    dropped = client.drop_dead_letters(group="b", expect=9)
    assert (dropped.matched, len(dropped.done)) == (9, 9) and stored() == 5
    refs = [d.ref for d in client.dead_letters("a")]
    again = client.drop_dead_letters([*refs, refs[0]], expect=5)  # a ref named twice: once
    assert (again.matched, len(again.done), again.missing) == (5, 5, [])
    gone = client.drop_dead_letters(refs)
    assert (gone.done, gone.missing) == ([], refs) and stored() == 0


@given(
    args=st.fixed_dictionaries(
        {},
        optional={
            "refs": st.one_of(
                st.none(),
                st.text(max_size=5),
                st.lists(st.one_of(st.text(max_size=12), st.integers()), max_size=3),
            ),
            "group": st.one_of(st.none(), st.text(max_size=260), st.integers()),
            "error": st.one_of(st.none(), st.text(max_size=300), st.integers()),
            "match": st.one_of(st.none(), st.text(max_size=20), st.binary(max_size=3)),
            "expect": st.one_of(st.none(), st.integers(), st.booleans(), st.floats()),
        },
    ),
    action=st.sampled_from(["redeliver_dead_letters", "drop_dead_letters"]),
)
@settings(max_examples=80, deadline=None)
def test_any_bulk_call_is_done_or_refused_writing_nothing(
    redis_server: RedisServer, args: dict[str, object], action: str
) -> None:
    """Any arguments: refused (InvalidInput, or SelectionChanged for a count that does not
    hold) with the keyspace as it was, or done on what exists (nothing, here)."""
    batch = done_or_refused(
        redis_server.url,
        "dead-fuzz",
        lambda c: getattr(c, action)(**args),
        (InvalidInput, SelectionChanged),
    )
    assert batch is None or batch.done == []


def test_a_dead_letter_keeps_every_attempts_error(
    client: TimerClient, redis_client: redis.Redis
) -> None:
    """Three failed attempts: the dead letter's error is the third's and `earlier` holds
    the first two, oldest first; a Later is not a failure and leaves nothing; an outcome
    that failed once and then was handled leaves no error kept behind."""
    for tid in ("dies", "recovers"):
        client.schedule(tid, 60_000)
        client.cancel(tid)

    def flaky(o: Outcome) -> None:
        if o.attempt == 1 and o.id == "dies":
            raise Later(0.01)  # counts as an attempt, is not a failure
        if o.id == "dies":
            raise RuntimeError(f"refused on attempt {o.attempt}")
        if o.attempt == 1:
            raise RuntimeError("a blip")

    h = Handlers(client, group="g", max_attempts=4, backoff=Backoff(initial_s=0.01, max_s=0.02))
    h.add("cancelled", flaky)
    assert h.run(stop_when_idle=True)
    (letter,) = client.dead_letters()
    assert letter.outcome is not None and letter.outcome.id == "dies"
    assert letter.error.startswith("RuntimeError: refused on attempt 4")
    assert [(e.attempt, e.error.splitlines()[0]) for e in letter.earlier] == [
        (2, "RuntimeError: refused on attempt 2"),
        (3, "RuntimeError: refused on attempt 3"),
    ]
    assert letter.earlier[0].failed_ms <= letter.earlier[1].failed_ms <= letter.failed_ms
    kept = [redis_client.hlen(client.keys.shard(s).errors("g")) for s in range(4)]
    assert kept == [0, 0, 0, 0]  # the dead one's moved, the recovered one's dropped
    back = client.redeliver(letter.ref)
    assert back is not None and h.stats.handled == 1


def test_a_letter_redelivered_and_dead_again_keeps_its_first_deaths_errors(
    client: TimerClient,
) -> None:
    """A dead letter put back that fails again showed `earlier: []` (max_attempts=1): the
    errors of its first death went with the letter redelivered. They come first now, then
    this delivery's, oldest first, a third death adding to both."""
    client.schedule("twice", 60_000)
    client.cancel("twice")
    failures = iter(range(1, 100))

    def fails(o: Outcome) -> None:
        raise RuntimeError(f"failure {next(failures)}")

    h = Handlers(client, group="g", max_attempts=1)
    h.add("cancelled", fails)
    assert h.run(stop_when_idle=True)
    (first,) = client.dead_letters()
    assert first.earlier == ()
    assert client.redeliver(first.ref) is not None
    assert h.run(stop_when_idle=True)
    (second,) = client.dead_letters()
    assert second.error.startswith("RuntimeError: failure 2")
    assert [(e.attempt, e.error.splitlines()[0]) for e in second.earlier] == [
        (1, "RuntimeError: failure 1")
    ]
    assert second.earlier[0].failed_ms == first.failed_ms
    assert second.outcome is not None and second.outcome.id == "twice"
    assert client.redeliver(second.ref) is not None
    assert h.run(stop_when_idle=True)
    (third,) = client.dead_letters()
    assert [e.error.splitlines()[0] for e in third.earlier] == [
        "RuntimeError: failure 1",
        "RuntimeError: failure 2",
    ]


def test_a_retry_sent_again_after_its_reply_was_lost_keeps_its_error_once(
    client: TimerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each retry's call is made twice, as when its first reply is lost and the runner
    tries again: the dead letter still holds each failed attempt's error once."""
    client.schedule("dies", 60_000)
    client.cancel("dies")
    real = ConsumerGroup.retry

    def twice(
        self: ConsumerGroup, delivery: Delivery, delay_ms: int, error: str = ""
    ) -> int | None:
        real(self, delivery, delay_ms, error)  # written; its reply taken as lost
        return real(self, delivery, delay_ms, error)

    monkeypatch.setattr(ConsumerGroup, "retry", twice)

    def refuse(o: Outcome) -> None:
        raise RuntimeError(f"refused on attempt {o.attempt}")

    h = Handlers(client, group="g", max_attempts=3, backoff=Backoff(initial_s=0.01, max_s=0.02))
    h.add("cancelled", refuse)
    assert h.run(stop_when_idle=True)
    (letter,) = client.dead_letters()
    assert [(e.attempt, e.error.splitlines()[0]) for e in letter.earlier] == [
        (1, "RuntimeError: refused on attempt 1"),
        (2, "RuntimeError: refused on attempt 2"),
    ], letter.earlier
