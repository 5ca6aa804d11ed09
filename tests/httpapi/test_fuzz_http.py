"""Any request to the HTTP API (hypothesis): an answer below 500, in the one error shape
when refused, and nothing written by a refusal. In-process (Starlette's test client) over
the real test server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tests.conftest import fresh_client
from tests.integration.conftest import namespace_keys
from timer import TimerClient
from timer.durable.model.fields import FIELDS
from timer.httpapi import create_app
from timer.httpapi.schemas import SCHEDULE_FIELDS
from timer.testing import RedisServer

leaves = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64),
                   st.floats(allow_nan=False), st.text(max_size=20))  # fmt: skip
values = st.recursive(leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4),
), max_leaves=10)  # fmt: skip
# every declared field of a timer (#41), and the other bodies' fields (a schedule's too)
fields = st.sampled_from([*FIELDS, "items", "origin", "keys", "other", *SCHEDULE_FIELDS,
                          "name", "start_ms", "end_ms", "keep_armed"])  # fmt: skip
bodies = st.one_of(
    st.dictionaries(
        fields, st.one_of(values, st.just("x"), st.just(1000), st.just(["k"])), max_size=5
    ),
    values,
    st.binary(max_size=30),
)
paths = st.sampled_from([
    "/timers", "/timers/batch", "/timers/x/cancel", "/timers/x/complete",
    "/timers/x/reschedule", "/notify", "/timers/x", "/timers/x/outcome?timeout_s=0",
    "/timers/x/outcome?timeout_s=nope", "/timers/%FF/cancel",
    "/schedules", "/schedules/s", "/schedules/s/pause", "/schedules/s/update",
    "/schedules/s/backfill", "/schedules/s/delete", "/schedules/nope/trigger",
])  # fmt: skip


@pytest.fixture
def client(redis_server: RedisServer, namespace: str) -> Iterator[TimerClient]:
    with fresh_client(redis_server, namespace, shards=2) as c:
        yield c


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(path=paths, body=bodies, method=st.sampled_from(["POST", "GET", "PUT"]))
def test_any_request_is_answered_below_500_and_a_refusal_writes_nothing(  # noqa: PLR0917
    client: TimerClient, redis_client: redis.Redis, redis_server: RedisServer, path: str,
    body: Any, method: str,
) -> None:  # fmt: skip
    client.schedule("x", 3_600_000)
    if client.schedules.get("s") is None:  # an example may have deleted it
        client.schedules.create("s", every="1h")
    before = namespace_keys(redis_client, client.namespace)
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    with TestClient(create_app(redis_server.url, tokens=None)) as http:
        r = http.request(
            method,
            f"/v1/namespaces/{client.namespace}{path}",
            content=content,
            headers={"Content-Type": "application/json"},
        )
    assert r.status_code < 500, (method, path, body, r.text)
    if r.status_code >= 400 and r.status_code != 405:
        error = r.json()
        assert set(error) == {"error", "kind", "exit_code"} and error["error"], error
    if r.status_code >= 400:
        assert namespace_keys(redis_client, client.namespace) == before, (method, path, body)
