"""The dashboard's JSON API refuses a query parameter a route does not take, as the HTTP
API does: ``/api/pending?after=…`` (the page's own address says ``after``, the API
``cursor``) answered 200 with page 1, and ``/api/dead?bogus=1`` 200. Now 400 naming the
parameter, those the route takes and the nearest; and every parameter the page's own
script sends (``static/*.js``) is still taken. On the real server."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.conftest import fresh_client, wait_for
from tests.dashboard.page import as_page
from timer import Handlers, TimerClient
from timer.dashboard import create_app
from timer.testing import RedisServer
from timer.worker import Worker, WorkerSettings

STATIC = Path(__file__).resolve().parents[2] / "timer" / "dashboard" / "static"
PENDING = "cursor, limit, match, field, value, min_priority, ns"
OUTCOMES = "kind, match, field, value, since_ms, until_ms, shard, group, state, ns"

# Each GET route of the API: an address of it, and the route and what it takes as a
# refusal names them
GET_ROUTES = [
    ("/api/overview", "/api/overview", "ns"),
    ("/api/live", "/api/live", "ns"),
    ("/api/history/60", "/api/history/{minutes}", "ns"),
    ("/api/history/60/group/g", "/api/history/{minutes}/group/{group}", "ns"),
    ("/api/find", "/api/find", "match, state, cursor, ns"),
    ("/api/pending", "/api/pending", PENDING),
    ("/api/timers/job:%7B1%7D", "/api/timers/{timer_id}", "ns"),
    ("/api/shards/0/due", "/api/shards/{shard}/due", "ns"),
    ("/api/dead", "/api/dead", "ns"),
    ("/api/worker", "/api/worker", "id, ns"),
    ("/api/outcomes", "/api/outcomes", OUTCOMES),
    ("/api/dead/matching", "/api/dead/matching", "group, error, match, ns"),
    ("/api/dead/0/1-0", "/api/dead/{shard}/{entry}", "ns"),
    ("/api/schedules", "/api/schedules", "ns"),
]


@pytest.fixture
def client(redis_server: RedisServer, namespace: str) -> Iterator[TimerClient]:
    with fresh_client(redis_server, namespace, shards=2) as c:
        yield c


@pytest.fixture
def http(client: TimerClient) -> Iterator[TestClient]:
    """The app as its own page uses it (same-origin, with its CSRF token)."""
    with as_page(create_app(client)) as page:
        yield page


@pytest.mark.parametrize(("path", "route", "takes"), GET_ROUTES)
def test_an_unknown_parameter_on_each_get_route_is_a_400_naming_it(
    client: TimerClient, http: TestClient, path: str, route: str, takes: str
) -> None:
    client.schedule("job:{1}", 3_600_000)
    r = http.get(path, params={"bogus": "1", "ns": client.namespace})
    assert r.status_code == 400, r.text
    assert r.json() == {
        "error": f'unknown query parameter "bogus": GET {route} takes {takes}',
        "kind": "InvalidInput",
        "exit_code": 3,
    }


def test_the_pages_after_is_said_to_be_cursor_and_a_typo_is_given_its_nearest(
    http: TestClient,
) -> None:
    after = http.get("/api/pending", params={"after": "1:job"})
    assert after.status_code == 400
    assert after.json()["error"] == (
        f'unknown query parameter "after": GET /api/pending takes {PENDING}; '
        '"after" is "cursor" here'
    )
    typo = http.get("/api/pending?limt=5").json()["error"]
    assert typo.endswith('; did you mean "limit"?'), typo
    dead = http.get("/api/dead?bogus=1").json()["error"]
    assert dead == 'unknown query parameter "bogus": GET /api/dead takes ns'
    two = http.get("/api/find?cursr=x&mach=y").json()["error"]
    assert two.startswith('unknown query parameter "cursr", "mach": GET /api/find takes '), two
    assert "did you mean" not in two  # which of the two it would be about is not said
    elsewhere = http.get("/api/outcomes?after=1").json()["error"]  # cursor is pending's
    said = f'unknown query parameter "after": GET /api/outcomes takes {OUTCOMES}'
    assert elsewhere.startswith(said), elsewhere
    assert "cursor" not in elsewhere, elsewhere


def test_a_post_with_an_unknown_parameter_is_refused_before_it_acts(
    client: TimerClient, http: TestClient
) -> None:
    client.schedule("job:{1}", 3_600_000)
    r = http.post("/api/timers/job:%7B1%7D/cancel?bogus=1")
    assert r.status_code == 400 and r.json()["kind"] == "InvalidInput", r.text
    assert r.json()["error"] == (
        'unknown query parameter "bogus": POST /api/timers/{timer_id}/{action} takes ns'
    )
    bulk = http.post("/api/bulk/cancel?idz=1", json={"ids": ["job:{1}"]})
    assert bulk.status_code == 400 and '"idz"' in bulk.json()["error"], bulk.text
    assert client.get("job:{1}").state == "pending"  # type: ignore[union-attr]
    done = http.post("/api/timers/job:%7B1%7D/cancel", params={"ns": client.namespace})
    assert done.status_code == 200 and done.json()["done"] is True, done.text


def js(name: str) -> str:
    return (STATIC / name).read_text()


def test_every_parameter_the_pages_script_sends_is_taken(
    client: TimerClient, http: TestClient
) -> None:
    """Each GET the page's script makes (static/*.js), with every parameter it sends and
    the page's ``ns`` (util.js adds it to each call when the address names one): 200."""
    ns = client.namespace
    for i in range(3):
        client.schedule(f"job:{{{i}}}", 3_600_000 + i, payload={"tenant": "acme"})
    client.schedule("o:1", 60_000, payload={"tenant": "acme"})
    client.cancel("o:1")
    h = Handlers(client, group="g", max_attempts=1)
    h.add("cancelled", lambda o: 1 / 0)  # o:1 dead-lettered by group g
    assert h.run(stop_when_idle=True)
    (letter,) = client.dead_letters()
    worker = Worker(TimerClient.from_url(client.where, ns), WorkerSettings(worker_id="w1"))
    try:
        wait_for(lambda: worker.run_once() >= 0 and "w1" in dict(client.workers()), 20, "w1")
        first = http.get("/api/pending", params={"limit": "1", "ns": ns}).json()
        assert first["cursor"], first  # a page after it: the script's "cursor"
        since = str(client.server_time_ms() - 3_600_000)
        sent = [
            ("/api/overview", {}),  # main.js
            ("/api/dead", {}),
            ("/api/schedules", {}),
            ("/api/history/60", {}),  # overview.js
            ("/api/history/60/group/g", {}),  # groups.js
            ("/api/shards/0/due", {}),  # shards.js
            ("/api/timers/job:%7B1%7D", {}),  # timers.js
            ("/api/find", {"match": "job:*", "state": "pending", "cursor": "p:1:0:0"}),
            (
                "/api/outcomes",
                {
                    "kind": "cancelled",
                    "match": "o:*",
                    "field": "tenant",
                    "value": "acme",
                    "group": "g",
                    "state": "settled",
                    "since_ms": since,
                },
            ),  # timers.js
            (
                "/api/outcomes",
                {"kind": "", "match": "", "field": "", "value": "", "group": "", "state": ""},
            ),  # a search of nothing yet
            (
                "/api/pending",
                {
                    "limit": "50",
                    "match": "job:*",
                    "field": "tenant",
                    "value": "acme",
                    "min_priority": "0",
                    "cursor": first["cursor"],
                },
            ),  # pending.js
            ("/api/dead/matching", {"group": "g", "error": "zero", "match": "o:*"}),  # dead.js
            ("/api/dead/matching", {"group": "", "error": "", "match": ""}),
            (f"/api/dead/{letter.ref}", {}),
            ("/api/worker", {"id": "w1"}),  # workers.js
        ]
        for path, params in sent:
            r = http.get(path, params={**params, "ns": ns})
            assert r.status_code == 200, (path, params, r.text)
        page_two = {"limit": "1", "cursor": first["cursor"], "ns": ns}  # the page after, read
        assert http.get("/api/pending", params=page_two).json()["timers"][0]["id"] == "job:{1}"
        with http.stream("GET", "/api/live", params={"ns": ns}) as live:  # main.js
            assert live.status_code == 200
            data = next(line for line in live.iter_lines() if line.startswith("data: "))
        assert json.loads(data[len("data: ") :])["overview"]["pending"] == 3
    finally:
        worker.close()
        worker.client.close()
    taken = {name for _, params in sent for name in params} | {"ns"}
    assert said_by_the_script() <= taken, said_by_the_script() - taken


def said_by_the_script() -> set[str]:
    """Every query parameter name the page's script writes into an /api/ address: a
    ``params.set("name"``, a ``URLSearchParams({name: …})``'s keys, a literal ``?name=``
    or ``&name=``, and the keys of what ``deadFilter()`` returns (dead.js's query)."""
    names: set[str] = set()
    for path in STATIC.glob("*.js"):
        text = path.read_text()
        names |= set(re.findall(r'params\.set\("(\w+)"', text))
        names |= set(re.findall(r"[?&`}](\w+)=\$\{", text))
        for literal in re.findall(r"new URLSearchParams\(\{([^}]*)\}", text, re.S):
            names |= set(re.findall(r"(\w+):", literal))
    dead_filter = re.search(r"function deadFilter\(\) \{.*?return \{([^}]*)\}", js("dead.js"), re.S)
    assert dead_filter is not None  # dead.js's query is what it returns
    names |= set(re.findall(r"(\w+):", dead_filter.group(1)))
    return names


def test_the_script_reader_finds_what_the_script_sends() -> None:
    """The check above reads what it should: the parameters grep finds today in
    pending.js, timers.js, dead.js, workers.js, main.js and util.js."""
    assert said_by_the_script() == {
        "limit", "match", "field", "value", "min_priority", "cursor",  # pending.js
        "state", "kind", "group", "since_ms",  # timers.js (find, outcomes)
        "error",  # dead.js
        "id",  # workers.js
        "ns",  # util.js, main.js
    }  # fmt: skip
    assert "/api/pending?${params}" in js("pending.js")  # where pending.js's go
