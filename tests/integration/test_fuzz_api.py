"""Any input to the public client API: a TimerError or a result, and a rejection writes
nothing (hypothesis; the keyspace is compared after every rejection, and every accepted
payload is read back by get, wait and a consumer group)."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable, Iterator
from typing import Any, get_type_hints

import msgpack
import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from timer import InvalidInput, Timer, TimerClient, TimerError
from timer.aio import AsyncTimerClient
from timer.durable.model.fields import TimerOptions
from timer.testing import RedisServer

from .conftest import namespace_keys

pytestmark = pytest.mark.redis

FUZZ = settings(
    max_examples=int(os.environ.get("TICKWHEEL_FUZZ_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
NASTY_INTS = [2**63, 2**63 - 1, 2**64 - 1, 2**64, 10**20, 2**53, 2**53 + 1, -1, -(2**63)]

texts = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["\udc80", "a\ud800b", "", "x" * 257, "job:{1}", "{}", "é" * 200]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(NASTY_INTS),
    st.floats(),
    texts,
    st.binary(max_size=12),
)
keys = st.one_of(
    st.none(), st.booleans(), st.integers(), texts, st.binary(max_size=4),
    st.tuples(st.integers(), st.integers()), st.frozensets(st.integers(), max_size=2),
)  # fmt: skip
anything = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(keys, inner, max_size=3),
    ),
    max_leaves=8,
)
_ids = itertools.count()


def fresh_id() -> str:
    """An id no earlier example used, so an accepted timer is this example's own."""
    return f"fz:{next(_ids)}"


def packed(value: object) -> bytes:
    """A payload as msgpack writes it: equal for a value and the value read back."""
    return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]


@st.composite
def timers(draw: st.DrawFn) -> dict[str, Any]:
    """schedule()'s keyword arguments: each one right, or anything at all."""
    tid = draw(st.one_of(st.builds(fresh_id), anything))
    when = draw(st.sampled_from(["delay", "deadline", "both", "neither", "delay", "delay"]))
    timer: dict[str, Any] = {"timer_id": tid}
    if when in ("delay", "both"):
        timer["delay_ms"] = draw(st.one_of(st.integers(0, 10**8), anything))
    if when in ("deadline", "both"):
        timer["deadline_ms"] = draw(
            st.one_of(st.integers(0, 2_000_000_000_000), st.sampled_from(NASTY_INTS), anything)
        )
    if draw(st.booleans()):
        timer["payload"] = draw(anything)
    for name in OPTIONS:  # each other declared field (#41): sometimes, right or anything
        if draw(st.integers(0, 4)) == 0:
            timer[name] = draw(st.one_of(RIGHT.get(name, texts), anything))
    if draw(st.integers(0, 9)) == 0:  # a keyword no timer has (schedule takes **options)
        timer[draw(st.sampled_from(["id", "notes", "Payload", "delay"]))] = draw(anything)
    return timer


traceparents = st.builds(
    lambda trace, span, flags: f"00-{trace:032x}-{span:016x}-{flags:02x}",
    st.integers(0, 2**128 - 1),
    st.integers(0, 2**64 - 1),
    st.integers(0, 255),
)
callback_urls = st.builds(
    lambda scheme, host, path: f"{scheme}://{host}/{path}",
    st.sampled_from(["http", "https", "ftp", "javascript", ""]),
    st.sampled_from(["hooks.example", "user:secret@hooks.example", "", "[::1]:99999"]),
    st.text(max_size=20),
)


OPTIONS = [name for name in get_type_hints(TimerOptions) if name != "payload"]
RIGHT = {  # a value of the right form, where mere text is not one
    "watch": st.lists(texts, max_size=3),
    "need": st.integers(-1, 4),
    "rearm": st.booleans(),
    "debounce": st.booleans(),  # a debounce window (#43)
    "priority": st.integers(-102, 102),  # its range and just past it (#43)
    "traceparent": traceparents,  # a W3C trace context (#31)
    "callback_url": callback_urls,  # where its outcome is POSTed (#30)
}


def as_item(timer: dict[str, Any]) -> dict[str, Any]:
    """schedule()'s keyword arguments as a schedule_many item."""
    item = dict(timer)
    item["id"] = item.pop("timer_id")
    return item


class ReadBack:
    """Every timer a fuzz test had accepted, with its payload, read back at the end."""

    def __init__(self, client: TimerClient) -> None:
        self.client = client
        self.payloads: dict[str, bytes] = {}

    def accepted(self, timer: Timer, payload: object) -> None:
        """An accepted timer: get returns its payload; once cancelled, wait does too."""
        if not timer.created:
            return  # an id some earlier example had made: its payload is that one's
        info = self.client.get(timer.id)
        assert info is not None and packed(info.payload) == packed(payload)
        self.client.cancel(timer.id)
        assert packed(self.client.wait(timer.id, timeout=1).payload) == packed(payload)
        self.payloads[timer.id] = packed(payload)

    def check_outcomes(self) -> None:
        """A consumer group reads every accepted timer's outcome with its payload."""
        seen: dict[str, bytes] = {}
        for outcome in self.client.outcomes("fuzz", block_ms=10, stop_when_idle=True):
            seen[outcome.id] = packed(outcome.payload)
            outcome.ack()
        assert {i: seen.get(i) for i in self.payloads} == self.payloads


@pytest.fixture
def read_back(client: TimerClient) -> Iterator[ReadBack]:
    rb = ReadBack(client)
    yield rb
    rb.check_outcomes()


def rejected_writes_nothing(
    r: redis.Redis, namespace: str, call: Callable[[], Any]
) -> tuple[Any, TimerError | None]:
    """Run ``call``: (its result, None), or (None, the TimerError it raised) with the
    namespace's keys checked unchanged. Any other exception fails the test."""
    before = namespace_keys(r, namespace)
    try:
        return call(), None
    except TimerError as exc:
        assert namespace_keys(r, namespace) == before, f"{exc!r} wrote to the keyspace"
        return None, exc


@FUZZ
@given(timer=timers())
def test_schedule_any_input(
    client: TimerClient, redis_client: redis.Redis, read_back: ReadBack, timer: dict[str, Any]
) -> None:
    """schedule() of anything returns a Timer or raises a TimerError having written
    nothing; an accepted payload reads back the same through get, wait and a group."""
    result, error = rejected_writes_nothing(
        redis_client, client.namespace, lambda: client.schedule(**timer)
    )
    if error is None:
        assert isinstance(result, Timer)
        read_back.accepted(result, timer.get("payload"))


@FUZZ
@given(batch=st.lists(st.one_of(timers().map(as_item), anything), max_size=6))
def test_schedule_many_any_items(
    client: TimerClient, redis_client: redis.Redis, read_back: ReadBack, batch: list[Any]
) -> None:
    """schedule_many of any items returns one result per item; a refused item is not
    written, and the good items around it are."""
    before = namespace_keys(redis_client, client.namespace)
    results = client.schedule_many(batch)
    assert len(results) == len(batch)
    for item, result in zip(batch, results, strict=True):
        assert isinstance(result, Timer | TimerError)
        if isinstance(result, Timer):
            read_back.accepted(result, item.get("payload"))
        elif isinstance(item, dict) and str(item.get("id")).startswith("fz:"):
            assert client.get(item["id"]) is None  # this example's own id: never written
    if not any(isinstance(r, Timer) for r in results):
        assert namespace_keys(redis_client, client.namespace) == before


@FUZZ
@given(items=anything)
def test_schedule_many_of_anything(
    client: TimerClient, redis_client: redis.Redis, items: Any
) -> None:
    """schedule_many of a value that is no list of items is refused or answered per item."""
    results, error = rejected_writes_nothing(
        redis_client, client.namespace, lambda: client.schedule_many(items)
    )
    if error is None:
        assert isinstance(results, list)


def _short(timeout: Any) -> Any:
    """A wait that would block long is cut to 10 ms (the test is of the input's checks)."""
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0.01:
        return 0.01 if timeout < 1e300 else timeout
    return timeout


CALLS: dict[str, Callable[[TimerClient, list[Any]], Any]] = {
    "cancel": lambda c, a: c.cancel(a[0]),
    "complete": lambda c, a: c.complete(a[0]),
    "reschedule": lambda c, a: c.reschedule(a[0], a[1], deadline_ms=a[2]),
    "notify": lambda c, a: c.notify(a[0]),
    "get": lambda c, a: c.get(a[0]),
    "wait": lambda c, a: c.wait(a[0], _short(a[1])),
    "next_due": lambda c, a: c.next_due(a[0], a[1]),
    "recent_outcomes": lambda c, a: c.recent_outcomes(a[0]),
    "dead_letters": lambda c, a: c.dead_letters(a[0], limit=a[1]),
    "dead_letter": lambda c, a: c.dead_letter(a[0]),
    "redeliver": lambda c, a: c.redeliver(a[0]),
    "drop_dead_letter": lambda c, a: c.drop_dead_letter(a[0]),
    "delete_group": lambda c, a: c.delete_group(a[0]),
    "trim_outcomes": lambda c, a: c.trim_outcomes(
        a[0], keep_unread=True, pass_within=a[1], until_done=a[2]
    ),
    "shard_store.trim_results": lambda c, a: c.shard_store(0).trim_results(a[0]),
    "memory": lambda c, a: c.memory(a[0]),
    "all_outcomes": lambda c, a: list(c.all_outcomes(a[0])),
    "outcomes": lambda c, a: list(
        itertools.islice(c.outcomes(a[0], a[1], block_ms=a[2], count=a[3], stop_when_idle=True), 5)
    ),
    "timers.find": lambda c, a: c.timers.find(
        a[0], state=a[1], deadline_from_ms=a[2], cursor=a[3], count=7
    ),
    "timers.count": lambda c, a: c.timers.count(a[0], state=a[1], deadline_to_ms=a[2]),
    "timers.cancel": lambda c, a: c.timers.cancel(a[0], deadline_from_ms=a[1], dry_run=a[2]),
    "timers.reschedule": lambda c, a: c.timers.reschedule(a[0], shift_ms=a[1], deadline_to_ms=a[2]),
    "schedules.get": lambda c, a: c.schedules.get(a[0]),
    "schedules.list": lambda c, a: c.schedules.list(),
    "schedules.update": lambda c, a: c.schedules.update(a[0], every=a[1], tz=a[2]),
    "schedules.pause": lambda c, a: c.schedules.pause(a[0]),
    "schedules.resume": lambda c, a: c.schedules.resume(a[0]),
    "schedules.trigger": lambda c, a: c.schedules.trigger(a[0]),
    "schedules.backfill": lambda c, a: c.schedules.backfill(a[0], a[1], a[2], limit=a[3]),
    "schedules.delete": lambda c, a: c.schedules.delete(a[0], keep_armed=a[1]),
}
READ_ONLY = {"get", "wait", "next_due", "recent_outcomes", "dead_letters", "dead_letter",
             "memory", "all_outcomes", "schedules.get", "schedules.list", "timers.find",
             "timers.count"}  # fmt: skip


@st.composite
def schedule_specs(draw: st.DrawFn) -> dict[str, Any]:
    """schedules.create()'s arguments: each one right, or anything at all."""
    spec: dict[str, Any] = {"name": draw(st.one_of(st.builds(fresh_id), anything))}
    if draw(st.booleans()):
        spec["every"] = draw(st.one_of(st.sampled_from(["1s", "30s", 60_000]), anything))
    if draw(st.booleans()):
        spec["cron"] = draw(st.one_of(st.sampled_from(["* * * * *", "0 8 * * MON"]), anything))
    for key, good in (("tz", "Europe/Paris"), ("offset", "1s"), ("jitter", "100ms"),
                      ("start", 0), ("end", 2**41), ("missed", "all"), ("catch_up", "10m"),
                      ("overlap", "skip"), ("group", "g"), ("watch", ["x"])):  # fmt: skip
        if draw(st.integers(0, 4)) == 0:
            spec[key] = draw(st.one_of(st.just(good), anything))
    if draw(st.booleans()):
        spec["payload"] = draw(anything)
    return spec


@FUZZ
@given(spec=schedule_specs())
def test_create_schedule_any_input(
    client: TimerClient, redis_client: redis.Redis, spec: dict[str, Any]
) -> None:
    """schedules.create of anything: a schedule that reads back with its payload and
    an armed occurrence, or a TimerError and nothing written."""
    args = dict(spec)
    name = args.pop("name")
    made, error = rejected_writes_nothing(
        redis_client, client.namespace, lambda: client.schedules.create(name, **args)
    )
    if error is None:
        assert made.name == name and made.armed is not None
        info = client.schedules.get(name)
        assert info is not None and packed(info.payload) == packed(spec.get("payload"))
        assert client.schedules.delete(name)


@FUZZ
@given(
    name=st.sampled_from(sorted(CALLS)),
    args=st.lists(st.one_of(st.integers(-3, 5), texts, anything), min_size=4, max_size=4),
)
def test_every_call_any_arguments(
    client: TimerClient, redis_client: redis.Redis, name: str, args: list[Any]
) -> None:
    """Every other public call, given anything: a result or a TimerError, and nothing
    written when it refuses (a read-only call never writes)."""
    before = namespace_keys(redis_client, client.namespace)
    result, error = rejected_writes_nothing(
        redis_client, client.namespace, lambda: CALLS[name](client, args)
    )
    if name in READ_ONLY:
        assert namespace_keys(redis_client, client.namespace) == before
    if error is None and name in ("get",):
        assert result is None or result.id == args[0]


@FUZZ
@given(
    option=st.sampled_from(
        [
            "result_ttl_s",
            "max_payload_bytes",
            "socket_timeout_s",
            "durability",
            "durability_timeout_s",
        ]
    ),
    value=anything,
)
@example(option="result_ttl_s", value=1.8e305)  # finite in s, infinite in ms (CI found it)
@example(option="result_ttl_s", value=-1.8e305)
def test_client_options_any_value(redis_server: RedisServer, option: str, value: Any) -> None:
    """A client option of any value is refused at construction or works for a call."""
    try:
        c = TimerClient.from_url(redis_server.url, "fuzz-options", **{option: value})
    except TimerError:
        return
    try:
        c.server_time_ms()
    finally:
        c.close()


@settings(max_examples=25, deadline=None)
@given(timer=timers())
def test_async_schedule_any_input(redis_server: RedisServer, timer: dict[str, Any]) -> None:
    """AsyncTimerClient.schedule of anything: a Timer or a TimerError, nothing written."""
    r = redis.Redis.from_url(redis_server.url)

    async def run() -> None:
        ac = await AsyncTimerClient.connect(redis_server.url, "fuzz-aio")
        try:
            result, _ = await _async_outcome(r, ac.schedule(**timer))
            if isinstance(result, Timer) and result.created:
                info = await ac.get(result.id)
                assert info is not None
                assert packed(info.payload) == packed(timer.get("payload"))
        finally:
            await ac.aclose()

    with TimerClient.from_url(redis_server.url, "fuzz-aio") as c:
        c.init(shards=2)
    try:
        asyncio.run(run())
    finally:
        r.close()


async def _async_outcome(r: redis.Redis, call: Any) -> tuple[Any, TimerError | None]:
    before = namespace_keys(r, "fuzz-aio")
    try:
        return await call, None
    except TimerError as exc:
        assert namespace_keys(r, "fuzz-aio") == before
        return None, exc


def test_the_issues_partial_batch(client: TimerClient) -> None:
    """A batch of 1,000 good items, a bad one, then a good one: every good item is
    written and the bad one gets its InvalidInput (it raised half-way before)."""
    base = fresh_id()
    good = [{"id": f"{base}:{i}", "delay_ms": 60_000} for i in range(1000)]
    items: list[Any] = [
        *good,
        {"id": f"{base}:bad", "delay_ms": 1, "watch": 7},
        {"id": f"{base}:last", "delay_ms": 60_000},
    ]
    results = client.schedule_many(items)
    assert [type(r) for r in results] == [Timer] * 1000 + [InvalidInput, Timer]
    assert client.get(f"{base}:last") is not None
    assert client.get(f"{base}:bad") is None
