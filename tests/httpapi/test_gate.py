"""The HTTP API's one gate (#40): strict JSON, nesting refused at the documented depth,
every value it accepts readable again, a multi-key notify that writes nothing when any
key is bad, a client's mistake answered 404 (not 503), and the one error shape for
unknown routes and methods too. Through real HTTP, the keyspace compared after each
refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from tests.integration.conftest import namespace_keys
from timer import InvalidInput, TimerClient
from timer.durable.codec import MAX_PAYLOAD_DEPTH
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
    status, made = api.call("POST", f"{ns}/timers", {"id": "deep", "delay_ms": 60_000,
                                                     "payload": deep})  # fmt: skip
    assert status == 201, made
    status, got = api.call("GET", f"{ns}/timers/deep")
    assert status == 200 and got["payload"] == deep
    assert c.get("deep").payload == deep  # type: ignore[union-attr]
    assert api.call("POST", f"{ns}/timers/deep/cancel")[0] == 200
    status, batch = api.call("GET", f"{ns}/groups/g/outcomes?consumer=c&count=5&wait_ms=0")
    assert status == 200 and batch["outcomes"][0]["payload"] == deep, batch
    before = namespace_keys(redis_client, c.namespace)
    for depth in (MAX_PAYLOAD_DEPTH + 1, 600):
        status, error = api.call("POST", f"{ns}/timers", {"id": f"d{depth}", "delay_ms": 1000,
                                                          "payload": nested(depth)})  # fmt: skip
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
