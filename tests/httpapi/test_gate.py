"""The HTTP API's one gate (#40): strict JSON, nesting refused at the documented depth,
every value it accepts readable again, a multi-key notify that writes nothing when any
key is bad, a client's mistake answered 404 (not 503), and the one error shape for
unknown routes and methods too. Through real HTTP, the keyspace compared after each
refusal."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.integration.conftest import namespace_keys
from timer import InvalidInput, TimerClient
from timer.durable.model.codec import MAX_PAYLOAD_DEPTH
from timer.testing import RedisServer

from .test_serve import Api, serving

pytestmark = pytest.mark.redis


@pytest.fixture
def quiet(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> Any:  # the serving context's (Api, TimerClient, TokenFile)
    with serving(redis_server, namespace, tmp_path, worker=False) as it:
        yield it


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth - 1):
        value = [value]
    return [value] if depth else value


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'{"id": "n", "delay_ms": 1000, "payload": NaN}', "NaN is not JSON"),
        (b'{"id": "n", "delay_ms": 1000, "payload": Infinity}', "Infinity is not JSON"),
        (b'{"id": "n", "delay_ms": 1000, "payload": [-Infinity]}', "-Infinity is not JSON"),
        (b'{"id": "n", "delay_ms": 1000, "id": "m"}', "appears twice"),
        (b'{"id": "n", "delay_ms": 1000, "payload": {"a": 1, "a": 2}}', "appears twice"),
    ],
)
def test_json_that_is_not_strict_json_is_refused(
    quiet: tuple[Api, TimerClient, Any], redis_client: redis.Redis, raw: bytes, says: str
) -> None:
    """NaN, Infinity, -Infinity and a key twice in one object: 400, nothing written (the
    issue's NaN was stored, then every read of it answered 500)."""
    api, c, _ = quiet
    before = namespace_keys(redis_client, c.namespace)
    status, error = api.call("POST", f"/v1/namespaces/{c.namespace}/timers", raw=raw)
    assert (status, error["kind"], error["exit_code"]) == (400, "InvalidInput", 3), error
    assert says in error["error"], error
    assert namespace_keys(redis_client, c.namespace) == before


def test_nesting_is_refused_past_the_documented_depth_and_readable_within_it(
    quiet: tuple[Api, TimerClient, Any], redis_client: redis.Redis
) -> None:
    """A payload nested MAX_PAYLOAD_DEPTH levels is taken and read back whole by GET,
    the library and a consumer group; one level more is refused (400), as is a body
    nested past its own limit, and 600 levels (which used to be stored, then GET 500)."""
    api, c, _ = quiet
    ns = f"/v1/namespaces/{c.namespace}"
    deep = nested(MAX_PAYLOAD_DEPTH)
    status, made = api.call(
        "POST", f"{ns}/timers", {"id": "deep", "delay_ms": 60_000, "payload": deep}
    )
    assert status == 201, made
    status, got = api.call("GET", f"{ns}/timers/deep")
    assert status == 200 and got["payload"] == deep
    assert c.get("deep").payload == deep  # type: ignore[union-attr]
    assert api.call("POST", f"{ns}/timers/deep/cancel")[0] == 200
    status, batch = api.call("GET", f"{ns}/groups/g/outcomes?consumer=c&count=5&wait_ms=0")
    assert status == 200 and batch["outcomes"][0]["payload"] == deep, batch
    before = namespace_keys(redis_client, c.namespace)
    for depth in (MAX_PAYLOAD_DEPTH + 1, 600):
        status, error = api.call(
            "POST", f"{ns}/timers", {"id": f"d{depth}", "delay_ms": 1000, "payload": nested(depth)}
        )
        assert (status, error["kind"]) == (400, "InvalidInput"), error
        assert "levels deep" in error["error"]
    status, error = api.call("POST", f"{ns}/timers/batch", {"timers": nested(600)})
    assert status == 400 and "levels deep" in error["error"], error
    assert namespace_keys(redis_client, c.namespace) == before
    with pytest.raises(InvalidInput, match="levels deep"):  # the library's own door
        c.schedule("lib", delay_ms=1000, payload=nested(MAX_PAYLOAD_DEPTH + 1))
    with pytest.raises(InvalidInput, match="finite"):
        c.schedule("lib", delay_ms=1000, payload={"x": float("nan")})


def test_a_notify_with_one_bad_key_writes_nothing(
    quiet: tuple[Api, TimerClient, Any], redis_client: redis.Redis
) -> None:
    """Every key is checked before any is notified: a lone surrogate in the second key
    used to leave the first key's timer completed behind a 400."""
    api, c, _ = quiet
    c.schedule("bad:{1}", delay_ms=60_000, watch=["bad:{1}:k"])
    before = namespace_keys(redis_client, c.namespace)
    raw = b'{"keys": ["bad:{1}:k", "\\ud800"]}'
    status, error = api.call("POST", f"/v1/namespaces/{c.namespace}/notify", raw=raw)
    assert (status, error["kind"]) == (400, "InvalidInput"), error
    assert namespace_keys(redis_client, c.namespace) == before
    assert c.get("bad:{1}").state == "pending"  # type: ignore[union-attr]


def test_a_group_that_never_read_is_not_found(quiet: tuple[Api, TimerClient, Any]) -> None:
    """retry and dead on a group that has read nothing: 404 with exit code 6, a client's
    mistake (it was 503, Redis's NOGROUP reported as Redis failing)."""
    api, c, _ = quiet
    group = f"/v1/namespaces/{c.namespace}/groups/never"
    for action, body in (("retry", {"ref": "0/1-0", "delay_ms": 10}),
                         ("dead", {"ref": "0/1-0", "error": "x"})):  # fmt: skip
        status, error = api.call("POST", f"{group}/{action}", body)
        assert (status, error["kind"], error["exit_code"]) == (404, "NotFound", 6), error
        assert "consumer group" in error["error"]


def test_unknown_routes_and_methods_answer_the_one_error_shape(
    quiet: tuple[Api, TimerClient, Any],
) -> None:
    """404 and 405 are JSON {error, kind, exit_code} like every other refusal."""
    api, c, _ = quiet
    status, error = api.call("GET", "/v1/no/such/route")
    assert (status, error["kind"], error["exit_code"]) == (404, "NotFound", 6), error
    status, error = api.call("GET", f"/v1/namespaces/{c.namespace}/dead/x/1-0")
    assert (status, error["kind"]) == (404, "NotFound"), error  # a shard is a number
    status, error = api.call("DELETE", f"/v1/namespaces/{c.namespace}/timers")
    assert (status, error["kind"], error["exit_code"]) == (405, "MethodNotAllowed", 3), error


def test_a_mistyped_route_names_the_route_it_was_likely_meant_for(
    quiet: tuple[Api, TimerClient, Any],
) -> None:
    """`/v1/namespace/…` said only "no route" (trial 24): a path one word off a route
    names it, with the path's own values; a path near none, or near two, names none."""
    api, c, _ = quiet
    ns = c.namespace
    status, error = api.call("GET", f"/v1/namespace/{ns}/timers/j1")
    assert status == 404
    assert f'did you mean "/v1/namespaces/{ns}/timers/j1"?' in error["error"], error
    status, error = api.call("GET", f"/v1/namespaces/{ns}/timer/j1")
    assert f'did you mean "/v1/namespaces/{ns}/timers/j1"?' in error["error"], error
    for far in ("/v1/no/such/route", f"/v1/namespaces/{ns}/zzzzzz"):
        status, error = api.call("GET", far)
        assert status == 404 and "did you mean" not in error["error"], error
    # an action mistyped is a schedule's name to the GET route: a 405 that names the action
    status, error = api.call("POST", f"/v1/namespaces/{ns}/schedules/w10/pasue")
    assert status == 405, error  # trial 30: it said only "it takes GET"
    assert f'did you mean POST "/v1/namespaces/{ns}/schedules/w10/pause"?' in error["error"]
    status, error = api.call("POST", f"/v1/namespaces/{ns}/schedules/w10/zzzzzz")
    assert status == 405 and "did you mean" not in error["error"], error


def test_a_delete_names_the_route_that_removes_it(quiet: tuple[Api, TimerClient, Any]) -> None:
    """`DELETE …/timers/x` said only that DELETE is not a method there (trial 25): it
    says the methods the path takes and, where one removes it, that route."""
    api, c, _ = quiet
    base = f"/v1/namespaces/{c.namespace}"
    status, error = api.call("DELETE", f"{base}/timers/x")
    assert status == 405
    assert f'it takes GET; to remove it: POST "{base}/timers/x/cancel"' in error["error"], error
    status, error = api.call("DELETE", f"{base}/dead/0/1-0")
    assert f'to remove it: POST "{base}/dead/0/1-0/drop"' in error["error"], error
    status, error = api.call("DELETE", f"{base}/timers")  # no removing a collection
    assert status == 405 and "to remove it" not in error["error"], error


@pytest.mark.parametrize(
    ("method", "route", "body"),
    [
        ("GET", "/timers/kept?=", None),  # Schemathesis found one: a parameter named ''
        ("GET", "/timers/kept/outcome?timeout_s=0&timeuot_s=5", None),  # a misspelling
        ("POST", "/timers?id=x", {"id": "q", "delay_ms": 60_000}),  # takes no query
        ("POST", "/timers/kept/cancel?force=1", None),  # a write: it must not happen
    ],
)
def test_a_query_parameter_the_endpoint_does_not_take_is_refused(
    quiet: tuple[Api, TimerClient, Any],
    redis_client: redis.Redis,
    method: str,
    route: str,
    body: Any,
) -> None:
    """An unknown query parameter is a 400 that names it and what the endpoint takes, and
    the request writes nothing (it was ignored: a typo went unnoticed)."""
    api, c, _ = quiet
    c.schedule("kept", delay_ms=60_000)
    before = namespace_keys(redis_client, c.namespace)
    status, error = api.call(method, f"/v1/namespaces/{c.namespace}{route}", body)
    assert (status, error["kind"], error["exit_code"]) == (400, "InvalidInput", 3), error
    assert "unknown query parameter" in error["error"] and "takes" in error["error"]
    assert namespace_keys(redis_client, c.namespace) == before
    assert c.get("kept") is not None and c.get("q") is None


GROUP_TAKES = "it takes consumer=, count=, wait_ms=, reclaim_idle_ms="


@pytest.mark.parametrize(
    ("route", "says"),
    [
        (
            "/groups/g/outcomes?consumer=c1&timeout_s=3",
            'unknown query parameter "timeout_s"; this route waits with wait_ms '
            f"(milliseconds), e.g. wait_ms=3000; {GROUP_TAKES}",
        ),
        (
            "/timers/t1/outcome?wait_ms=2500",
            'unknown query parameter "wait_ms"; this route waits with timeout_s (seconds), '
            "e.g. timeout_s=2.5",  # the one it takes, not said twice
        ),
        (
            "/groups/g/outcomes?consumer=c1&timeout=3",  # no unit: no value to convert
            'unknown query parameter "timeout"; this route waits with wait_ms '
            f"(milliseconds), e.g. wait_ms=1000; {GROUP_TAKES}",
        ),
        (
            "/groups/g/outcomes?consumer=c1&limit=5",
            'unknown query parameter "limit"; this route says how many with count, '
            f"e.g. count=5; {GROUP_TAKES}",
        ),
        (
            "/groups/g/outcomes?consumer=c1&wait_mss=5",  # no near synonym: the list
            'unknown query parameter "wait_mss": this takes consumer=, count=, wait_ms=, '
            "reclaim_idle_ms=",
        ),
    ],
)
def test_an_unknown_query_parameter_names_the_one_of_that_meaning_this_route_takes(
    quiet: tuple[Api, TimerClient, Any], route: str, says: str
) -> None:
    """The timer's long poll waits with timeout_s, the group's with wait_ms: either sent
    to the other is a 400 that names the one it takes, in its unit."""
    api, c, _ = quiet
    status, error = api.call("GET", f"/v1/namespaces/{c.namespace}{route}")
    assert (status, error["error"]) == (400, says), error


ODD_IDS = [
    "new\nline", "odd/outcome", "{t}/cancel", "a b", "100%", "%2F", "q?x=1#f", "tab\there",
    "ümlaut/ü", "..", "batch", "x/", "//", "\x00nul", "🕰️{e}",
]  # fmt: skip


@pytest.mark.parametrize("tid", ODD_IDS)
def test_every_accepted_id_is_reachable_by_every_route(
    quiet: tuple[Api, TimerClient, Any], tid: str
) -> None:
    """An id percent-encoded whole (``/`` as %2F) reaches its own timer through GET,
    wait, reschedule, cancel and complete, whatever it holds: a newline used to miss
    every route (text/plain 404) and ``odd%2Foutcome`` was taken for the wait of
    ``odd``."""
    api, c, _ = quiet
    ns = f"/v1/namespaces/{c.namespace}"
    one = f"{ns}/timers/{urllib.parse.quote(tid, safe='')}"
    status, made = api.call("POST", f"{ns}/timers", {"id": tid, "delay_ms": 60_000})
    assert (status, made["id"]) == (201, tid), made
    status, got = api.call("GET", one)
    assert (status, got["id"], got["state"]) == (200, tid, "pending"), got
    status, got = api.call("POST", f"{one}/reschedule", {"delay_ms": 120_000})
    assert status == 200, got
    status, got = api.call("GET", f"{one}/outcome?timeout_s=0")
    assert (status, got["kind"]) == (408, "WaitTimeout"), got
    status, got = api.call("POST", f"{one}/cancel")
    assert (status, got) == (200, {"id": tid, "cancelled": True}), got
    status, got = api.call("POST", f"{one}/complete")
    assert (status, got["id"], got["completed"]) == (200, tid, False), got
    status, got = api.call("GET", f"{one}/outcome?timeout_s=0")
    assert (status, got["id"], got["outcome"]) == (200, tid, "cancelled"), got
    assert c.get(tid).state == "cancelled"  # type: ignore[union-attr]


def test_a_plain_slash_in_an_id_is_matched_greedily(
    quiet: tuple[Api, TimerClient, Any],
) -> None:
    """Sent with a plain '/', an id still reaches its timer, unless its tail is a route's
    own last word (then %2F says which is meant, as the README tells)."""
    api, c, _ = quiet
    ns = f"/v1/namespaces/{c.namespace}"
    c.schedule("a/b/c", delay_ms=60_000)
    status, got = api.call("GET", f"{ns}/timers/a/b/c")
    assert (status, got["id"]) == (200, "a/b/c"), got
    status, got = api.call("GET", f"{ns}/timers/a/b/c/outcome?timeout_s=0")
    assert (status, got["kind"]) == (408, "WaitTimeout"), got


def test_an_odd_group_name_reaches_its_group(quiet: tuple[Api, TimerClient, Any]) -> None:
    """A consumer group named with '/', a newline and a space reads and settles its
    outcomes through every group route."""
    api, c, _ = quiet
    c.schedule("g1", delay_ms=60_000)
    c.cancel("g1")
    name = "x/outcomes\n y"
    group = f"/v1/namespaces/{c.namespace}/groups/{urllib.parse.quote(name, safe='')}"
    status, batch = api.call("GET", f"{group}/outcomes?consumer=c&wait_ms=0")
    assert status == 200 and [o["id"] for o in batch["outcomes"]] == ["g1"], batch
    status, got = api.call("POST", f"{group}/ack", {"refs": [batch["outcomes"][0]["ref"]]})
    assert status == 200, got
    assert [(g.name, g.pending) for g in c.groups()] == [(name, 0)]


def test_a_piece_that_is_not_utf8_is_no_route(quiet: tuple[Api, TimerClient, Any]) -> None:
    api, c, _ = quiet
    status, error = api.call("GET", f"/v1/namespaces/{c.namespace}/timers/%FF")
    assert (status, error["kind"]) == (404, "NotFound"), error


def raw_call(
    api: Api, method: str, path: str, body: bytes | None, headers: dict[str, str]
) -> tuple[int, Any]:
    req = urllib.request.Request(api.base + path, data=body, method=method, headers=headers)
    if api.token:
        req.add_header("Authorization", f"Bearer {api.token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example", "Content-Type": "application/json"},
        {"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"},
        {"Sec-Fetch-Site": "same-site", "Content-Type": "application/json"},
    ],
)
def test_a_cross_site_page_can_change_nothing(
    quiet: tuple[Api, TimerClient, Any], redis_client: redis.Redis, headers: dict[str, str]
) -> None:
    """What a browser sends for another site's page (its Origin, Sec-Fetch-Site) is
    refused 403 on every endpoint that changes state, token or not: with --no-auth on
    loopback any page could schedule, cancel or consume."""
    api, c, _ = quiet
    ns = f"/v1/namespaces/{c.namespace}"
    c.schedule("kept", delay_ms=60_000)
    before = namespace_keys(redis_client, c.namespace)
    body = json.dumps({"id": "x", "delay_ms": 1000}).encode()
    for method, path, data in (
        ("POST", f"{ns}/timers", body),
        ("POST", f"{ns}/timers/kept/cancel", b""),
        ("GET", f"{ns}/groups/g/outcomes?consumer=c&wait_ms=0", None),
    ):
        status, error = raw_call(api, method, path, data, headers)
        assert (status, error["kind"], error["exit_code"]) == (403, "Forbidden", 4), error
        assert "cross-site" in error["error"]
    assert namespace_keys(redis_client, c.namespace) == before
    own = {"Origin": api.base, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}
    status, made = raw_call(api, "POST", f"{ns}/timers", body, own)
    assert status == 201, made


@pytest.mark.parametrize(
    "kind", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]
)
def test_a_body_that_is_not_json_by_its_type_is_refused(
    quiet: tuple[Api, TimerClient, Any], redis_client: redis.Redis, kind: str
) -> None:
    """A body is application/json (or untyped): the kinds a form sends without a
    preflight answer 415 in the one error shape, and write nothing."""
    api, c, _ = quiet
    before = namespace_keys(redis_client, c.namespace)
    body = json.dumps({"id": "x", "delay_ms": 1000}).encode()
    status, error = raw_call(
        api, "POST", f"/v1/namespaces/{c.namespace}/timers", body, {"Content-Type": kind}
    )
    assert (status, error["kind"], error["exit_code"]) == (415, "InvalidInput", 3), error
    assert namespace_keys(redis_client, c.namespace) == before
    c.schedule("kept", delay_ms=60_000)
    status, done = raw_call(
        api, "POST", f"/v1/namespaces/{c.namespace}/timers/kept/cancel", None, {}
    )
    assert (status, done["cancelled"]) == (200, True), done  # curl -X POST: no type, no body
