"""Schemathesis against the live ``/v1/openapi.json`` of a real ``serve`` app (#40):
every operation in both modes (positive and negative data), with every response check
(no server error, status codes, content types, response schemas, negative data
rejected), and the keyspace compared after each refusal: a refused request writes
nothing. The seed is pinned (``derandomize``); a failure prints its curl reproduction.

Left out: the SSE stream (``streamOutcomes`` never ends; tests/httpapi/test_serve.py
reads it), and the long polls are given ``timeout_s=0`` / ``wait_ms=0`` (their range is
checked by the negative cases of the other query parameters and by test_gate).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import redis
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis import checks as st_checks

from timer.testing import RedisServer

from .test_serve import serving

pytestmark = [pytest.mark.redis, pytest.mark.slow]

# an operation and mode: 22 x 2 x 12 requests, about 14 s on 2 cores
EXAMPLES = int(os.environ.get("TICKWHEEL_FUZZ_EXAMPLES", "12"))
SKIPPED = {"streamOutcomes"}
# Every response check but positive_data_acceptance: the library refuses what no JSON
# Schema can say (an id over 256 UTF-8 bytes where maxLength counts characters, a
# callback host not on the server's list, a payload nested past 500 levels), each with
# a 400 that test_gate and the library's fuzz tests check.
CHECKS = [
    st_checks.not_a_server_error,
    st_checks.status_code_conformance,
    st_checks.content_type_conformance,
    st_checks.response_headers_conformance,
    st_checks.response_schema_conformance,
    st_checks.negative_data_rejection,
    st_checks.missing_required_header,
    st_checks.ignored_auth,
]
FIXED_QUERY = {"waitTimer": {"timeout_s": 0}, "consumeOutcomes": {"wait_ms": 0}}


def keyspace(r: redis.Redis, namespace: str) -> dict[bytes, Any]:
    """Every key a request here could write (the namespace's, its sibling's that the
    serving fixture makes, the server-wide ``tw:*``) with a dump of its value; not the
    other tests' keys, whose dump would cost more than the requests."""
    keys = [
        *r.scan_iter(match=f"{{tw:{namespace}*", count=1000),
        *r.scan_iter(match="tw:*", count=1000),
    ]
    return {key: r.dump(key) for key in keys}


def curl(case: Any) -> str:
    try:
        return str(case.as_curl_command())
    except Exception as exc:  # a reproduction is a help, not the test
        return f"(no curl reproduction: {exc})"


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_schemathesis_finds_nothing(
    redis_server: RedisServer,
    redis_client: redis.Redis,
    namespace: str,
    tmp_path: Path,
    mode: GenerationMode,
) -> None:
    with serving(redis_server, namespace, tmp_path, worker=False) as (api, c, tokens):
        _, admin = tokens.create("admin", [namespace])
        headers = {"Authorization": f"Bearer {admin}"}
        c.schedule("kept", delay_ms=3_600_000)
        c.schedule("done", delay_ms=3_600_000)
        c.cancel("done")
        schema = schemathesis.openapi.from_url(f"{api.base}/v1/openapi.json")
        ran = 0
        for result in schema.get_all_operations():
            op = result.ok()  # type: ignore[union-attr]  # an Err raises: the document is wrong
            name = op.definition.raw.get("operationId")
            if name in SKIPPED:
                continue
            path = {"namespace": namespace} if "{namespace}" in op.path else None
            strategy = op.as_strategy(
                generation_mode=mode, path_parameters=path, query=FIXED_QUERY.get(name)
            )
            if not run_operation(strategy, api.base, headers, (redis_client, namespace), mode):
                assert op.body is None or not list(op.body), name
                assert not list(op.query) and "{" not in op.path, name
                continue
            ran += 1
        assert ran >= (21 if mode is GenerationMode.POSITIVE else 17), ran


def run_operation(
    strategy: Any, base: str, headers: dict[str, str], where: tuple[redis.Redis, str],
    mode: GenerationMode,
) -> int:  # fmt: skip
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def one(case: Any) -> None:
        before = keyspace(*where)
        response = case.call(base_url=base, headers=headers, timeout=30)
        said = f"\n{case.operation.label} ({mode.value}): {curl(case)}"
        case.validate_response(response, checks=CHECKS)  # raises with every failed check
        if response.status_code >= 400:
            after = keyspace(*where)
            assert after == before, f"a refused request ({response.status_code}) wrote" + said
            body = response.json()
            assert {"error", "kind", "exit_code"} <= set(body), json.dumps(body) + said

    try:
        one()
    except Unsatisfiable:
        return 0  # negative data for an operation that takes nothing (GET /healthz)
    return 1
