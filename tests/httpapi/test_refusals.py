"""What the fourteenth first-hour trial found at the HTTP API's edges (#75): each refusal
is the request's fault said as such (a 4xx in JSON's words), never Redis failing (503)
nor a silent success; nothing is written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.integration.conftest import namespace_keys
from timer import TimerClient
from timer.httpapi import context
from timer.httpapi.schemas import TIMER_FIELDS
from timer.httpapi.tokens import TokenFile
from timer.testing import RedisServer

from .test_serve import Api, serving

Served = tuple[Api, TimerClient, TokenFile]


@pytest.fixture
def quiet(redis_server: RedisServer, namespace: str, tmp_path: Path) -> Iterator[Served]:
    with serving(redis_server, namespace, tmp_path, worker=False) as it:
        yield it


HUGE = "99999999999999999999-0"  # past 2^64: Redis refuses such a stream id


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/groups/g1/retry", {"ref": f"1/{HUGE}", "delay_ms": 100}),
        ("POST", "/groups/g1/ack", {"refs": [f"1/{HUGE}"]}),
        ("POST", "/groups/g1/dead", {"ref": f"1/{HUGE}", "error": "x"}),
        ("GET", f"/dead/1/{HUGE}", None),
    ],
)
def test_a_ref_past_a_stream_ids_range_is_bad_input_not_redis_failing(
    quiet: Served, redis_client: redis.Redis, method: str, path: str, body: Any
) -> None:
    api, c, tokens = quiet
    admin = tokens.create("admin", [c.namespace])[1]
    before = namespace_keys(redis_client, c.namespace)
    status, error = api.call(method, f"/v1/namespaces/{c.namespace}{path}", body, token=admin)
    assert (status, error["kind"], error["exit_code"]) == (400, "InvalidInput", 3), error
    assert "ref must be <shard>/<id>" in error["error"], error
    assert "Redis" not in error["error"] and "script" not in error["error"]
    assert namespace_keys(redis_client, c.namespace) == before


def test_dead_drop_or_redeliver_of_a_filter_without_expect_is_done_as_before_and_said(
    quiet: Served,
) -> None:
    """`POST …/dead/drop {}` drops every dead letter (one with no body is refused), and
    a filter with no `expect` acts on what it selects, as in earlier releases (a client
    relying on it keeps working), but the reply carries a warning saying to send
    `expect`; with it, another count selected by then is a 409 and nothing is done."""
    api, c, tokens = quiet
    from timer import Handlers  # noqa: PLC0415

    made: list[str] = []

    def dead(n: int) -> None:
        for _ in range(n):
            tid = f"d:{c.dead_letters_total()}:{len(made)}"
            made.append(tid)
            c.schedule(tid, 60_000)
            c.cancel(tid)
        h = Handlers(c, group="g", max_attempts=1)
        h.add("cancelled", lambda o: 1 / 0)
        assert h.run(stop_when_idle=True)

    dead(2)
    assert c.dead_letters_total() == 2
    admin = tokens.create("admin", [c.namespace])[1]
    url = f"/v1/namespaces/{c.namespace}/dead"
    for action in ("drop", "redeliver"):  # a body forgotten selects nothing (trial 30)
        for raw in (b"", None):
            status, error = api.call("POST", f"{url}/{action}", raw=raw, token=admin)
            assert (status, error["kind"]) == (400, "InvalidInput"), error
            assert error["error"].startswith("the body is missing: send {"), error
            assert "{} selects every dead letter" in error["error"], error
    assert c.dead_letters_total() == 2
    status, error = api.call("POST", f"{url}/drop", {"group": "g", "expect": 5}, token=admin)
    assert (status, error["kind"]) == (409, "SelectionChanged"), error
    assert c.dead_letters_total() == 2  # another count: nothing was done
    status, done = api.call("POST", f"{url}/drop", {"group": "g"}, token=admin)
    assert status == 200 and done["matched"] == 2, done
    assert "send expect" in done["warning"], done
    assert c.dead_letters_total() == 0
    dead(1)
    status, done = api.call("POST", f"{url}/drop", {}, token=admin)
    assert status == 200 and done["matched"] == 1 and "warning" in done, done
    dead(1)
    status, done = api.call("POST", f"{url}/drop", {"expect": 1}, token=admin)
    assert status == 200 and done["matched"] == 1 and "warning" not in done, done
    assert c.dead_letters_total() == 0


def test_ack_in_a_group_that_never_read_is_a_404(quiet: Served) -> None:
    """A mistyped group acknowledged nothing with a 200 (`{"acked": 0}`); retry and dead
    said 404 for the same ref."""
    api, c, _ = quiet
    status, error = api.call(
        "POST", f"/v1/namespaces/{c.namespace}/groups/never/ack", {"refs": ["1/1-0"]}
    )
    assert (status, error["kind"], error["exit_code"]) == (404, "NotFound", 6), error
    assert 'no consumer group "never"' in error["error"], error


def test_a_batchs_refused_items_say_what_a_single_timers_refusal_says(quiet: Served) -> None:
    api, c, _ = quiet
    items = [
        {"id": "b:1", "delay_ms": "x"},
        {"id": "b:2", "delay_ms": True},
        {"id": "b:3", "delay_ms": 10, "zzz": 1},
        None,
        {"id": 7, "delay_ms": 10},
        {"id": "b:6", "delay_ms": 60_000},
    ]
    status, got = api.call("POST", f"/v1/namespaces/{c.namespace}/timers/batch", {"items": items})
    assert status == 200
    said = [r.get("error", "") for r in got["results"]]
    assert said[0] == 'delay_ms: expected an integer, got "x"', said
    assert said[1] == "delay_ms: expected an integer, got true", said
    assert said[2].startswith('the item: unknown field "zzz": this takes id, '), said
    assert said[3] == "the item: expected an object, got null", said
    assert said[4] == "id: expected a string, got 7", said
    assert got["results"][5]["status"] == 201
    for one in (items[0], items[1], items[2], items[4]):  # the words of POST …/timers alone
        alone = api.call("POST", f"/v1/namespaces/{c.namespace}/timers", one)[1]["error"]
        assert alone.split(": ", 1)[1] == said[items.index(one)].split(": ", 1)[1], alone


def test_a_query_parameter_given_twice_is_refused(quiet: Served) -> None:
    api, c, _ = quiet
    path = f"/v1/namespaces/{c.namespace}/groups/g1/outcomes?consumer=c1&consumer=c2"
    status, error = api.call("GET", path)
    assert (status, error["kind"]) == (400, "InvalidInput"), error
    assert error["error"] == '"consumer" is given twice: give it once'
    status, error = api.call("GET", f"/v1/namespaces/{c.namespace}/timers/x/outcome?timeout_s=100")
    assert error["error"] == "timeout_s: must be at most 60, got 100", error  # not 60.0, 100.0


def test_library_refusals_quote_values_as_json(quiet: Served) -> None:
    """Every door quotes what it was given one way, JSON's: `no timer "nope"`, not
    Python's 'nope' (the library's messages are the CLI's and the API's too)."""
    api, c, _ = quiet
    status, error = api.call("GET", f"/v1/namespaces/{c.namespace}/timers/nope")
    assert status == 404 and f'no timer "nope" in namespace "{c.namespace}"' in error["error"]
    status, error = api.call(
        "POST", f"/v1/namespaces/{c.namespace}/timers",
        {"id": "a:{1}", "delay_ms": 10, "watch": ["other"]},
    )  # fmt: skip
    assert status == 400 and 'watch key "other" routes to shard' in error["error"], error
    assert "'" not in error["error"].split("give both")[0], error


NULLABLE = [n for n in TIMER_FIELDS if n not in ("id", "delay_ms", "payload")]


def test_a_batch_item_with_a_null_field_is_taken_as_before_and_the_log_says_so_once(
    quiet: Served, caplog: pytest.LogCaptureFixture
) -> None:
    """A null optional field: POST …/timers refuses it (its schema); a batch took the
    same item in earlier releases (the library reads null as not given), and a client
    whose serializer writes null for what is unset must keep working on upgrade: the
    field is left out, and the server's log says once that the single POST refuses it."""
    api, c, _ = quiet
    context.SAID_ONCE.discard("nulls")
    ns = f"/v1/namespaces/{c.namespace}"
    items: list[dict[str, Any]] = [{"id": f"n:{n}", "delay_ms": 60_000, n: None} for n in NULLABLE]
    items.append({"id": "n:ok", "delay_ms": 60_000, "payload": None})  # a payload may be null
    with caplog.at_level("WARNING", logger="tickwheel.httpapi"):
        status, got = api.call("POST", f"{ns}/timers/batch", {"items": items})
    assert status == 200, got
    assert [r["status"] for r in got["results"]] == [201] * len(items), got
    said = [r.getMessage() for r in caplog.records if "null" in r.getMessage()]
    assert len(said) == 1 and "leave it out" in said[0], said
    for item in items[:-1]:
        assert c.get(item["id"]) is not None
        status, alone = api.call("POST", f"{ns}/timers", {**item, "id": f"{item['id']}:1"})
        assert (status, alone["kind"]) == (400, "InvalidInput"), alone
        assert c.get(f"{item['id']}:1") is None


def test_an_integral_float_is_the_integer_it_is_for_a_single_timer_and_a_batch(
    quiet: Served,
) -> None:
    """1e3 and 1000.0 are integers to JSON Schema (the schema let them through), but the
    library refused the float: both doors take them as 1000 now; 1.5 stays refused."""
    api, c, _ = quiet
    ns = f"/v1/namespaces/{c.namespace}"
    one = b'{"id": "f:1", "delay_ms": 6e4, "priority": 5.0, "need": 1e0}'
    status, made = api.call("POST", f"{ns}/timers", raw=one)
    assert status == 201, made
    batch = (
        b'{"items": [{"id": "f:2", "delay_ms": 1e3}, {"id": "f:3", "delay_ms": 1.5},'
        b' {"id": "f:4", "deadline_ms": 1.0e12, "max_total_ms": 1e9}]}'
    )
    status, got = api.call("POST", f"{ns}/timers/batch", raw=batch)
    assert [r["status"] for r in got["results"]] == [201, 400, 201], got
    assert got["results"][1]["error"] == "delay_ms: expected an integer, got 1.5", got
    alone = api.call("POST", f"{ns}/timers", raw=b'{"id": "f:3", "delay_ms": 1.5}')[1]
    assert alone["error"] == "delay_ms: expected an integer, got 1.5", alone
    first = c.get("f:1")
    assert first is not None and first.priority == 5 and type(first.priority) is int, first
    assert c.get("f:4").deadline_ms == 10**12  # type: ignore[union-attr]
    status, moved = api.call("POST", f"{ns}/timers/f:2/reschedule", raw=b'{"delay_ms": 2e3}')
    assert status == 200 and moved["rescheduled"], moved
    assert c.get("f:3") is None


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "Infinity", "-Infinity"])
def test_a_query_number_that_is_not_finite_is_refused_by_name(quiet: Served, text: str) -> None:
    api, c, _ = quiet
    status, error = api.call(
        "GET", f"/v1/namespaces/{c.namespace}/timers/x/outcome?timeout_s={text}"
    )
    assert (status, error["kind"], error["exit_code"]) == (400, "InvalidInput", 3), error
    assert error["error"] == f'timeout_s: expected a finite number, got "{text}"', error


def test_a_huge_reclaim_idle_ms_is_the_requests_fault(quiet: Served) -> None:
    """reclaim_idle_ms had no maximum in the schema (nor in the OpenAPI document): the
    library refused past 2**53 in its own words; the schema says it as for any bound."""
    api, c, _ = quiet
    path = f"/v1/namespaces/{c.namespace}/groups/g/outcomes?consumer=c&wait_ms=0"
    for huge in (2**53 + 1, 10**20):
        status, error = api.call("GET", f"{path}&reclaim_idle_ms={huge}")
        assert (status, error["kind"]) == (400, "InvalidInput"), error
        assert error["error"] == f"reclaim_idle_ms: must be at most {2**53}, got {huge}", error
    assert api.call("GET", f"{path}&reclaim_idle_ms={2**53}")[0] == 200


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'{"id": "u\xff", "delay_ms": 1000}', "the body is not UTF-8 (byte 9 is 0xff)"),
        (b"[" * 100_000, "the body nests too deep; at most 503 levels"),
        (b'{"items": ' + b"[" * 5000 + b"]" * 5000 + b"}", "the body nests too deep"),
    ],
)
def test_a_body_not_utf8_or_nested_past_the_parser_is_a_400(
    quiet: Served, redis_client: redis.Redis, raw: bytes, says: str
) -> None:
    """JSON is UTF-8 (RFC 8259): bytes that are not said so (bytes that are UTF-16 or
    UTF-32 are taken, below); a body nested past the parser's own depth said 'maximum
    recursion depth exceeded'."""
    api, c, _ = quiet
    before = namespace_keys(redis_client, c.namespace)
    for path in ("timers", "timers/batch"):
        status, error = api.call("POST", f"/v1/namespaces/{c.namespace}/{path}", raw=raw)
        assert (status, error["kind"], error["exit_code"]) == (400, "InvalidInput", 3), error
        assert error["error"].startswith(says), error
        assert "recursion" not in error["error"], error
    assert namespace_keys(redis_client, c.namespace) == before
    bom = b'\xef\xbb\xbf{"id": "bom", "delay_ms": 60000}'  # a byte order mark: taken, as before
    assert api.call("POST", f"/v1/namespaces/{c.namespace}/timers", raw=bom)[0] == 201


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32"])
def test_a_body_in_utf16_or_utf32_is_taken_as_before_and_logged_once(
    quiet: Served, encoding: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Earlier releases took a body in UTF-16 or UTF-32 (Python's parser guesses them):
    a client sending one keeps working, and the server's log says once to send UTF-8."""
    api, c, _ = quiet
    context.SAID_ONCE.discard("wide")
    with caplog.at_level("WARNING", logger="tickwheel.httpapi"):
        for n in range(2):
            body = json.dumps({"id": f"wide:{encoding}:{n}", "delay_ms": 60_000})
            status, made = api.call(
                "POST", f"/v1/namespaces/{c.namespace}/timers", raw=body.encode(encoding)
            )
            assert status == 201, made
    said = [r for r in caplog.records if "UTF-8" in r.getMessage()]
    assert len(said) == 1, caplog.records
    assert c.get(f"wide:{encoding}:1") is not None
