"""A timer's ``origin`` through HTTP: the batch's own origin field (a retry token, as
``schedule_many(origin=)`` takes it), not the bearer token; empty when the call that
created it gave none, as the document says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from timer.httpapi.openapi import document
from timer.testing import RedisServer

from .test_serve import serving

pytestmark = pytest.mark.redis


def test_origin_is_the_batchs_token_and_empty_when_none_was_given(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    with serving(redis_server, namespace, tmp_path, worker=False) as (api, c, _):
        ns = f"/v1/namespaces/{namespace}/timers"

        def batch(body: dict[str, Any]) -> list[tuple[int, str]]:
            status, got = api.call("POST", f"{ns}/batch", body)
            assert status == 200, got
            return [(r["status"], r["origin"]) for r in got["results"]]

        items = [{"id": f"o{i}", "delay_ms": 60_000} for i in range(2)]
        assert batch({"items": items, "origin": "job-7/1"}) == [(201, "job-7/1")] * 2
        # a retry under another token is told whose they are: the creator's origin
        again = [*items, {"id": "o2", "delay_ms": 60_000}]
        assert batch({"items": again, "origin": "job-7/2"}) == [
            (200, "job-7/1"), (200, "job-7/1"), (201, "job-7/2"),
        ]  # fmt: skip
        assert batch({"items": [{"id": "o3", "delay_ms": 60_000}]}) == [(201, "")]
        status, one = api.call("POST", ns, {"id": "o4", "delay_ms": 60_000})
        assert (status, one["origin"]) == (201, "")  # the bearer token is no origin
        status, one = api.call("POST", ns, {"id": "o0", "delay_ms": 60_000})
        assert (status, one["origin"]) == (200, "job-7/1")
        (made,) = c.schedule_many([{"id": "o0", "delay_ms": 60_000}])
        assert not isinstance(made, Exception) and made.origin == "job-7/1"
    said = document()["components"]["schemas"]["Timer"]["properties"]["origin"]["description"]
    assert "not a bearer token" in said and "Empty when" in said
