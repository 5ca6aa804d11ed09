"""The dashboard's JSON API refuses a body field a route does not take (a new user's
trial: a schedule's ``jitter`` and ``missed`` were dropped unsaid, an ``extra`` field or
a reschedule's ``foo`` ignored, and each answered 200 having written): 400 naming the
field and the fields the route takes, with the nearest one when one is close, and
nothing written. A schedule is created with the library's whole spec; a pause of a
paused schedule says ``already``. On the real server, as a script calls it (``Authorization:
Bearer``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from tests.conftest import fresh_client
from tests.dashboard.page import BASE, as_page
from tests.integration.conftest import namespace_keys
from timer import TimerClient
from timer.dashboard import create_app
from timer.testing import RedisServer

BEARER = {"Authorization": "Bearer x"}


@pytest.fixture
def client(redis_server: RedisServer, namespace: str) -> Iterator[TimerClient]:
    with fresh_client(redis_server, namespace, shards=2) as c:
        yield c


@pytest.fixture
def script(client: TimerClient) -> Iterator[TestClient]:
    """The API as a script calls it: the shared token ``x`` as a Bearer header."""
    with TestClient(create_app(client, token="x"), base_url=BASE, headers=BEARER) as http:
        yield http


def refused(
    http: TestClient, r: redis.Redis, namespace: str, path: str, body: dict[str, Any]
) -> str:
    """POST ``body`` to ``path``: a 400 InvalidInput, the namespace's keys as before;
    the error said."""
    before = namespace_keys(r, namespace)
    answer = http.post(path, json=body)
    assert (answer.status_code, answer.json()["kind"]) == (400, "InvalidInput"), answer.text
    assert namespace_keys(r, namespace) == before
    error: str = answer.json()["error"]
    return error


@pytest.fixture
def r(redis_server: RedisServer) -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(redis_server.url)
    yield conn
    conn.close()


def test_the_trials_three_bodies_are_refused_naming_the_field_and_writing_nothing(
    client: TimerClient, script: TestClient, r: redis.Redis
) -> None:
    client.schedule("job:{1}", 3_600_000)
    deadline = client.get("job:{1}").deadline_ms  # type: ignore[union-attr]
    ns = client.namespace
    extra = refused(script, r, ns, "/api/schedules", {"name": "d2", "every": "30s", "extra": 1})
    assert extra.startswith('unknown field "extra": creating a schedule takes name, cron, every, ')
    assert "jitter, missed" in extra and "did you mean" not in extra, extra
    typo = refused(script, r, ns, "/api/schedules",
                   {"name": "d3", "every": "30s", "jiter": "5s"})  # fmt: skip
    assert typo.endswith('; did you mean "jitter"?'), typo
    foo = refused(script, r, ns, "/api/timers/job:%7B1%7D/reschedule",
                  {"delay_ms": 60_000, "foo": 1})  # fmt: skip
    assert foo == 'unknown field "foo": reschedule of a timer takes delay_ms', foo
    later = refused(script, r, ns, "/api/timers/job:%7B1%7D/reschedule", {"in": "5m"})
    assert later.startswith('unknown field "in": '), later
    assert client.schedules.list() == []
    assert client.get("job:{1}").deadline_ms == deadline  # type: ignore[union-attr]


def test_every_body_taking_route_refuses_a_field_it_does_not_take(
    client: TimerClient, script: TestClient, r: redis.Redis
) -> None:
    client.schedule("job:{1}", 3_600_000)
    client.schedules.create("nightly", cron="0 2 * * *")
    ns = client.namespace
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("/api/timers/job:%7B1%7D/cancel", {"why": "x"}, "cancel of a timer takes no field"),
        ("/api/bulk/cancel", {"ids": ["job:{1}"], "delay_ms": 5}, "bulk cancel takes ids"),
        ("/api/bulk/reschedule", {"ids": ["job:{1}"], "delay": 5},
         'bulk reschedule takes ids, delay_ms; did you mean "delay_ms"?'),
        ("/api/groups/pause", {"group": "g", "by": "me"}, "pause of a group takes group"),
        ("/api/dead/bulk/drop", {"match": "*", "expect": 0, "grup": "g"},
         'takes refs, group, error, match, expect; did you mean "group"?'),
        ("/api/dead/0/1-0/drop", {"force": True}, "drop of a dead letter takes no field"),
        ("/api/schedules/nightly/pause", {"now": True}, "pause of a schedule takes no field"),
        ("/api/schedules/nightly/backfill", {"start_ms": 0, "end_ms": 1, "limit": 5},
         "backfill of a schedule takes start_ms, end_ms"),
    ]  # fmt: skip
    for path, body, said in cases:
        error = refused(script, r, ns, path, body)
        assert error.startswith("unknown field ") and error.endswith(said), (path, error)
    assert client.get("job:{1}").state == "pending"  # type: ignore[union-attr]
    assert [s.state for s in client.schedules.list()] == ["active"]


def test_an_unknown_bulk_action_is_quoted_as_json_quotes(
    client: TimerClient, script: TestClient, r: redis.Redis
) -> None:
    error = refused(script, r, client.namespace, "/api/bulk/frob", {"ids": ["a"]})
    assert error == 'unknown action "frob": cancel, complete, reschedule or notify', error


def test_a_schedule_is_created_with_the_whole_spec_as_given(
    client: TimerClient, script: TestClient
) -> None:
    body = {"name": "d3", "tz": "UTC", "every": "30s", "payload": {"a": 1}, "jitter": "5s",
            "missed": "skip", "offset": "1s", "catch_up": "10m", "overlap": "skip",
            "group": "mailer", "start": 1_000, "end": 10**13, "watch": ["w:{d3}"]}  # fmt: skip
    made = script.post("/api/schedules", json=body)
    assert made.status_code == 200, made.text
    info = client.schedules.get("d3")
    assert info is not None
    rec = info.spec.recurrence
    assert (rec.every_ms, rec.offset_ms, rec.jitter_ms, rec.tz) == (30_000, 1_000, 5_000, "UTC")
    assert (rec.start_ms, rec.end_ms) == (1_000, 10**13)
    assert (info.spec.missed, info.spec.catch_up_ms, info.spec.overlap, info.spec.group) == (
        "skip", 600_000, "skip", "mailer")  # fmt: skip
    assert info.payload == {"a": 1} and info.watch == ("w:{d3}",)


def test_the_pages_form_still_creates_a_schedule_leaving_unset_fields_to_their_default(
    client: TimerClient,
) -> None:
    """What schedules.js posts (name, tz, every or cron), and a form's empty field."""
    with as_page(create_app(client)) as http:
        for body in (
            {"name": "hb", "tz": "UTC", "every": "30s"},
            {"name": "nightly", "tz": "Europe/Paris", "cron": "0 2 * * *"},
            {"name": "blank", "tz": "UTC", "every": "1m", "cron": "", "jitter": "", "group": None},
        ):
            made = http.post("/api/schedules", json=body)
            assert made.status_code == 200, (body, made.text)
    blank = client.schedules.get("blank")
    assert blank is not None and blank.spec.recurrence.jitter_ms == 0, blank
    assert [s.name for s in client.schedules.list()] == ["blank", "hb", "nightly"]


def test_pausing_a_paused_schedule_says_already(client: TimerClient, script: TestClient) -> None:
    client.schedules.create("nightly", cron="0 2 * * *")
    answers = [
        script.post(f"/api/schedules/nightly/{action}").json()
        for action in ("pause", "pause", "resume", "resume")
    ]
    assert [(a["done"], a["already"]) for a in answers] == [
        (True, False), (True, True), (True, False), (True, True)]  # fmt: skip
    assert script.post("/api/schedules/nope/pause").status_code == 404
