"""The dashboard's JSON API on the real server (Starlette's test client, in-process)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import urllib.parse
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tests.conftest import fresh_client, wait_for
from tests.dashboard.page import BASE, as_page
from timer import Handlers, Limit, StoreError, TimerClient, __version__
from timer.dashboard import create_app
from timer.httpapi.tokens import TokenFile
from timer.testing import RedisServer
from timer.worker import Worker, WorkerSettings


@pytest.fixture
def client(redis_server: RedisServer, namespace: str) -> Iterator[TimerClient]:
    with fresh_client(redis_server, namespace, shards=4) as c:
        yield c


def web(c: TimerClient, **options: Any) -> TestClient:
    """The app as its own page uses it (``as_page``)."""
    return as_page(create_app(c, **options))


def namespace_dump(r: redis.Redis, namespace: str) -> dict[bytes, object]:
    return {k: r.dump(k) for k in r.scan_iter(match=f"{{tw:{namespace}*", count=1000)}


def test_overview_shows_the_per_key_limits_in_use(client: TimerClient) -> None:
    """A runner with a per-key limit, one handler holding its tenant's slot: the overview
    lists that tenant, its limit and the runner; once the handler returns, nothing."""
    import threading  # noqa: PLC0415

    client.schedule("job:{2}", 60_000, payload={"tenant": "acme"})
    client.cancel("job:{2}")
    holding, release = threading.Event(), threading.Event()

    def hold(_: object) -> None:
        holding.set()
        release.wait(20)

    h = Handlers(client, group="a:b", consumer="r1", limits=[Limit("payload.tenant", 2)])
    h.add("cancelled", hold)
    t = threading.Thread(target=h.run, kwargs={"stop_when_idle": True}, daemon=True)
    t.start()
    try:
        wait_for(holding.is_set, 20, "the handler holding its slot")
        with web(client) as http:
            limits = http.get("/api/overview").json()["limits"]
        assert limits == [{"group": "a:b", "limit": "payload.tenant", "value": "acme",
                           "running": 1, "runners": ["r1"]}]  # fmt: skip
    finally:
        release.set()
        t.join(20)
    with web(client) as http:
        assert http.get("/api/overview").json()["limits"] == []


def test_overview_shows_leaders_pending_workers_and_groups(client: TimerClient) -> None:
    client.schedule("job:{1}", 3_600_000)
    client.schedule("gone", 3_600_000)
    client.cancel("gone")
    w = Worker(TimerClient.from_url(client.where, client.namespace), WorkerSettings(worker_id="w1"))
    try:
        wait_for(lambda: w.run_once() >= 0 and all(client.leaders().values()), 20, "leases")
        g = client.consumer("billing", "b1")
        g.ensure()
        with web(client) as http:
            o = http.get("/api/overview").json()
    finally:
        w.close()
        w.client.close()
    assert o["namespace"] == client.namespace and o["pending"] == 1
    assert {s["leader"] for s in o["shards"]} == {"w1"}
    assert sum(s["pending"] for s in o["shards"]) == 1
    assert [w["id"] for w in o["workers"]] == ["w1"] and o["workers"][0]["shards_led"] == 4
    assert [g["name"] for g in o["groups"]] == ["billing"] and o["groups"][0]["lag"] == 1
    assert o["outcomes_last_minute"]["cancelled"] == 1
    assert [r["id"] for r in o["recent"]] == ["gone"]
    assert client.namespace in o["namespaces"]
    assert all(s["lease_ttl_ms"] is None or s["lease_ttl_ms"] > 0 for s in o["shards"])


def test_a_workers_view_says_what_it_said_of_itself_and_outlives_it(client: TimerClient) -> None:
    """By its id (any text: a query), a worker's card (version, host, pid, its led shards,
    its last error) and heartbeat; after it leaves, its card is still read, not live."""
    settings = WorkerSettings(worker_id="pod-7/w", history_every_ms=100)
    w = Worker(TimerClient.from_url(client.where, client.namespace), settings)
    try:
        wait_for(lambda: w.run_once() >= 0 and all(client.leaders().values()), 20, "leases")
        w.ctx.note_error(StoreError("Redis went away"))  # as the loop records one it met

        def card() -> dict[str, Any]:
            w.run_once()
            return client.worker_cards().get("pod-7/w") or {}

        wait_for(lambda: card().get("last_error"), 20, "a card with the error")
        with web(client) as http:
            one = http.get("/api/worker", params={"id": "pod-7/w"}).json()
            assert one["live"] is True and one["heartbeat_age_ms"] is not None
            assert one["card"]["pid"] == os.getpid() and one["card"]["version"] == __version__
            assert one["card"]["last_error"] == "StoreError: Redis went away"
            assert [s["shard"] for s in one["shards"]] == [0, 1, 2, 3]
            assert sorted(one["card"]["led"]) == ["0", "1", "2", "3"]
            missing = http.get("/api/worker", params={"id": "nobody"})
            assert missing.status_code == 404 and 'no worker "nobody"' in missing.json()["error"]
            assert http.get("/api/worker", params={"id": ""}).status_code == 400
    finally:
        w.close()
        w.client.close()
    with web(client) as http:
        gone = http.get("/api/worker", params={"id": "pod-7/w"}).json()
    assert gone["live"] is False and gone["card"]["host"] and gone["shards"] == []


def test_another_namespace_by_query(client: TimerClient, redis_server: RedisServer) -> None:
    """?ns= shows another namespace on the same server; an unknown one is a clear 400."""
    other = TimerClient.from_url(redis_server.url, client.namespace + "-b")
    other.init(shards=2)
    other.schedule("x", 60_000)
    try:
        with web(client) as http:
            o = http.get(f"/api/overview?ns={other.namespace}").json()
            assert (o["namespace"], o["pending"], len(o["shards"])) == (other.namespace, 1, 2)
            assert other.namespace in o["namespaces"]
            assert http.get(f"/api/timers/x?ns={other.namespace}").json()["state"] == "pending"
            missing = http.get("/api/overview?ns=never-made")
            assert missing.status_code == 400 and "not initialised" in missing.json()["error"]
            bad = http.get("/api/overview?ns=bad name!")
            assert bad.status_code == 400 and "namespace must be" in bad.json()["error"]
    finally:
        other.close()


def test_lookup_cancel_reschedule_and_bad_input(
    client: TimerClient, redis_client: redis.Redis
) -> None:
    client.schedule("job:{7}", 3_600_000, payload={"job": 7}, watch=["job:{7}:done"])
    with web(client) as http:
        t = http.get("/api/timers/job:{7}").json()
        assert (t["state"], t["payload"], t["watch"]) == ("pending", {"job": 7}, ["job:{7}:done"])
        assert 0 < t["time_left_ms"] <= 3_600_000
        due = http.get(f"/api/shards/{client.shard_of('job:{7}')}/due").json()["due"]
        assert [t["id"] for t in due] == ["job:{7}"] and due[0]["time_left_ms"] > 0
        assert http.get("/api/shards/99/due").status_code == 400
        before = namespace_dump(redis_client, client.namespace)
        bad = http.post("/api/timers/job:{7}/reschedule", json={"delay_ms": "30s"})
        assert bad.status_code == 400 and "delay_ms must be a whole number" in bad.json()["error"]
        assert http.post("/api/timers/job:{7}/explode").status_code == 400
        assert http.post("/api/timers/job:{7}/cancel", content=b"{nope").status_code == 400
        assert namespace_dump(redis_client, client.namespace) == before  # nothing written
        missing = http.get("/api/timers/nope")
        assert missing.status_code == 404 and 'no timer "nope"' in missing.json()["error"]
        moved = http.post("/api/timers/job:{7}/reschedule", json={"delay_ms": 60_000}).json()
        assert moved["done"] and moved["time_left_ms"] <= 60_000
        # decided, its outcome keeps the keys notified, not its watch keys, need or cap
        client.schedule("w:{7}", 60_000, watch=["w:{7}:a", "w:{7}:b"], need=2, max_total_ms=90_000)
        client.notify("w:{7}:a")
        assert http.get("/api/timers/w:{7}").json()["watch"] == ["w:{7}:a", "w:{7}:b"]
        client.notify("w:{7}:b")
        decided = http.get("/api/timers/w:{7}").json()
        assert (decided["state"], decided["notified"]) == ("completed", ["w:{7}:a", "w:{7}:b"])
        assert not {"watch", "need", "max_total_ms"} & set(decided), decided
        # past a timer's cap (#54): refused with the library's error, nothing moved, one
        # timer or a selection
        client.schedule("cap:{7}", 60_000, max_total_ms=90_000)
        before = namespace_dump(redis_client, client.namespace)
        past = http.post("/api/timers/cap:{7}/reschedule", json={"delay_ms": 10**6})
        assert past.status_code == 409 and "its cap" in past.json()["error"], past.text
        bulk = http.post("/api/bulk/reschedule",
                         json={"ids": ["cap:{7}"], "delay_ms": 10**6}).json()  # fmt: skip
        assert bulk["done"] == 0 and len(bulk["errors"]) == 1, bulk
        assert namespace_dump(redis_client, client.namespace) == before
        done = http.post("/api/timers/job:{7}/cancel").json()
        assert done["done"] is True and done["state"] == "cancelled"
        again = http.post("/api/timers/job:{7}/cancel").json()
        assert again["done"] is False and again["state"] == "cancelled"
        page = http.get("/")
        assert page.status_code == 200 and "tickwheel dashboard" in page.text


@pytest.mark.parametrize("tid", ["new\nline", "odd/cancel", "100%", "a b/"])
def test_any_id_is_reachable_percent_encoded(client: TimerClient, tid: str) -> None:
    """The page sends ids with encodeURIComponent: a newline used to miss the route and
    ``odd%2Fcancel`` was read as the cancel of ``odd``."""
    client.schedule(tid, 3_600_000)
    one = f"/api/timers/{urllib.parse.quote(tid, safe='')}"
    with web(client) as http:
        got = http.get(one)
        assert (got.status_code, got.json()["id"]) == (200, tid), got.text
        done = http.post(f"{one}/cancel").json()
        assert done["done"] is True and done["state"] == "cancelled", done
    assert client.get(tid).state == "cancelled"  # type: ignore[union-attr]


def test_read_only_refuses_every_action_and_writes_nothing(
    client: TimerClient, redis_client: redis.Redis
) -> None:
    client.schedule("job:{1}", 3_600_000)
    client.schedules.create("nightly", cron="0 2 * * *")
    before = namespace_dump(redis_client, client.namespace)
    with web(client, read_only=True) as http:
        assert http.get("/api/overview").json()["read_only"] is True
        assert [s["name"] for s in http.get("/api/schedules").json()] == ["nightly"]
        for path in (
            "/api/timers/job:{1}/cancel",
            "/api/dead/0/1-0/drop",
            "/api/schedules/nightly/pause",
            "/api/schedules/nightly/delete",
            "/api/bulk/cancel",
            "/api/groups/pause",
            "/api/dead/bulk/drop",
        ):
            r = http.post(path, json={"ids": ["job:{1}"], "group": "g", "expect": 0})
            assert r.status_code == 403 and "read-only" in r.json()["error"]
    assert namespace_dump(redis_client, client.namespace) == before


def test_a_schedule_created_as_its_list_reads_it(client: TimerClient) -> None:
    """The page sends what its one spec field holds as the cron unless it is a bare
    duration: `every 1m`, as the list beside it reads, is the interval 1m (it was refused
    as a cron of two fields)."""
    with web(client) as http:
        made = http.post("/api/schedules", json={"name": "tick", "tz": "UTC", "cron": "every 1m"})
        assert made.status_code == 200, made.text
    info = client.schedules.get("tick")
    assert info is not None and info.spec.recurrence.every_ms == 60_000, info


def test_schedules_list_and_act(client: TimerClient) -> None:
    client.schedules.create("nightly", cron="0 2 * * *", tz="Europe/Paris")
    with web(client) as http:
        (row,) = http.get("/api/schedules").json()
        assert row["name"] == "nightly" and row["state"] == "active" and row["next_ms"]
        assert http.post("/api/schedules/nightly/pause").json()["done"] is True
        assert http.get("/api/schedules").json()[0]["state"] == "paused"
        assert http.post("/api/schedules/nightly/resume").json()["done"] is True
        assert http.post("/api/schedules/nightly/trigger").json()["done"] is True
        now = client.server_time_ms()
        back = http.post(
            "/api/schedules/nightly/backfill",
            json={"start_ms": now - 3 * 86_400_000, "end_ms": now},
        ).json()
        assert len(back["created"]) == 3 and all(
            i.startswith("{nightly}@") for i in back["created"]
        )
        bad = http.post("/api/schedules/nightly/backfill", json={"start_ms": "yesterday"})
        assert bad.status_code == 400 and "start" in bad.json()["error"]
        made = http.post("/api/schedules", json={"name": "hb", "every": "30s"}).json()
        assert made["name"] == "hb" and made["state"] == "active"
        dup = http.post("/api/schedules", json={"name": "hb", "every": "30s"})
        assert dup.status_code == 409 and "exists" in dup.json()["error"]
        assert http.post("/api/schedules", json={"name": "x"}).status_code == 400
        assert http.post("/api/schedules/hb/delete").json()["done"] is True
        bad = http.post("/api/schedules/nightly/explode")
        assert bad.status_code == 400 and "pause, resume, trigger" in bad.json()["error"]
        assert http.post("/api/schedules/nightly/delete").json()["done"] is True
        assert http.post("/api/schedules/nightly/delete").status_code == 404
        assert http.get("/api/schedules").json() == []


def dead_lettered(client: TimerClient, *ids: str, payload: object = None) -> None:
    """An outcome for each id (cancelled at once), dead-lettered by group g's one attempt
    (ZeroDivisionError)."""
    for tid in ids:
        client.schedule(tid, 60_000, payload=payload)
        client.cancel(tid)
    h = Handlers(client, group="g", max_attempts=1)
    h.add("cancelled", lambda o: 1 / 0)
    assert h.run(stop_when_idle=True)


def test_dead_letters_redeliver_and_drop(client: TimerClient) -> None:
    dead_lettered(client, "a", "b")
    with web(client) as http:
        dead = http.get("/api/dead").json()
        assert len(dead) == 2 and "ZeroDivisionError" in dead[0]["error"]
        first, second = (d["ref"] for d in dead)
        one = http.get(f"/api/dead/{first}").json()  # one, whole: what its own view shows
        assert one == dead[0] and 'File "' in one["error"]  # its message, then its frames
        assert "lambda" in one["error"] and one["outcome"]["id"] in ("a", "b")
        missing = http.get("/api/dead/0/1-0")
        assert missing.status_code == 404 and 'no dead letter "0/1-0"' in missing.json()["error"]
        assert http.get("/api/dead/0/not-an-id").status_code == 400
        assert http.post(f"/api/dead/{first}/redeliver").json()["done"] is True
        assert http.post(f"/api/dead/{second}/drop").json()["done"] is True
        assert http.post(f"/api/dead/{second}/drop").json()["done"] is False
        assert http.post("/api/dead/99/1-0/drop").status_code == 400  # no such shard
        assert http.get("/api/dead").json() == []


def test_dead_letters_by_filter_and_bulk_at_the_confirmed_count(
    client: TimerClient, redis_client: redis.Redis
) -> None:
    """A filter's count and first rows; a bulk action with another count than the one
    confirmed is refused (409) and changes nothing; with it, done, and Redis agrees."""
    dead_lettered(client, "job:1", "job:2", "mail:1")
    with web(client) as http:
        got = http.get("/api/dead/matching?group=g&error=zerodivision&match=job:*").json()
        assert (got["matching"], got["more"], len(got["dead_letters"])) == (2, False, 2)
        assert http.get("/api/dead/matching?group=other").json()["matching"] == 0
        bad = http.get("/api/dead/matching?group=" + "x" * 300)
        assert bad.status_code == 400 and "consumer group" in bad.json()["error"]
        before = namespace_dump(redis_client, client.namespace)
        stale = http.post("/api/dead/bulk/drop", json={"match": "job:*", "expect": 3})
        assert stale.status_code == 409 and stale.json()["kind"] == "SelectionChanged"
        assert "2 dead letters are selected now, not the 3" in stale.json()["error"]
        unsaid = http.post("/api/dead/bulk/drop", json={"match": "job:*"})
        assert unsaid.status_code == 400 and "expect" in unsaid.json()["error"]
        assert namespace_dump(redis_client, client.namespace) == before
        done = http.post("/api/dead/bulk/drop", json={"match": "job:*", "expect": 2}).json()
        assert (done["matched"], done["done"], done["missing"]) == (2, 2, [])
        (last,) = client.dead_letters()
        back = http.post("/api/dead/bulk/redeliver", json={"refs": [last.ref], "expect": 1})
        assert back.json()["done"] == 1 and client.dead_letters_total() == 0


def test_outcomes_are_searched_and_bad_queries_refused(client: TimerClient) -> None:
    for tid, tenant in (("o:1", "acme"), ("o:2", "beta")):
        client.schedule(tid, 60_000, payload={"tenant": tenant})
        client.cancel(tid)
    with web(client) as http:
        got = http.get("/api/outcomes", params={"field": "tenant", "value": "acme"}).json()
        assert [o["id"] for o in got["outcomes"]] == ["o:1"] and got["stopped"] is False
        for bad in (
            {"kind": "late"},
            {"since_ms": "yesterday"},
            {"shard": "9"},
            {"match": "x" * 2000},
        ):
            r = http.get("/api/outcomes", params=bad)
            assert r.status_code == 400 and r.json()["kind"] == "InvalidInput", (bad, r.text)


def test_a_group_is_paused_and_resumed_saying_who(client: TimerClient) -> None:
    """The pause names the token's user (here none: "dashboard"); an unknown group is a
    404 and a bad action a 400."""
    client.consumer("mailer", "m1").ensure()
    with web(client) as http:
        r = http.post("/api/groups/pause", json={"group": "mailer"})
        assert r.json() == {"group": "mailer", "action": "pause", "done": True}
        (g,) = http.get("/api/overview").json()["groups"]
        assert g["paused_by"] == "dashboard" and g["paused_since_ms"] > 0
        assert http.post("/api/groups/pause", json={"group": "nope"}).status_code == 404
        assert http.post("/api/groups/bogus", json={"group": "mailer"}).status_code == 400
        assert http.post("/api/groups/pause", json={}).status_code == 400
        assert http.post("/api/groups/resume", json={"group": "mailer"}).json()["done"] is True
    assert not client.groups()[0].paused


def test_token_is_required_when_set(client: TimerClient) -> None:
    with web(client, token="s3cret") as http:
        assert http.get("/api/overview").status_code == 401
        assert http.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = http.get("/api/overview", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert http.get("/login?token=wrong").status_code == 401
        http.get("/login?token=s3cret")  # sets the cookie
        assert http.get("/api/overview").status_code == 200


def test_a_wrong_bearer_token_is_told_from_none(client: TimerClient, tmp_path: Path) -> None:
    """A wrong ``Authorization: Bearer`` token is refused saying that token was not
    accepted, not that none was given (a script's author looked for a missing header),
    with the one shared token and with a token file alike; the token is never said."""
    with web(client, token="s3cret") as http:
        none = http.get("/api/overview").json()["error"]
        wrong = http.get("/api/overview", headers={"Authorization": "Bearer n0pe"})
        assert wrong.status_code == 401 and wrong.json()["error"] != none
        assert wrong.json()["error"].startswith("the Bearer token given was not accepted")
        assert "n0pe" not in wrong.text
    tokens = TokenFile(tmp_path / "tokens.json")
    tokens.create("read", [client.namespace], name="viewer")
    with TestClient(create_app(client, tokens=tokens), base_url=BASE) as http:
        none = http.get("/api/overview").json()["error"]
        assert none.startswith("sign in")
        secret = "tw_0123456789ab_" + "x" * 43
        for accept in ("application/json", "text/html"):  # a script's refusal, page or not
            wrong = http.get("/", headers={"Authorization": f"Bearer {secret}", "Accept": accept})
            assert wrong.status_code == 401 and wrong.json()["error"] != none
            said = wrong.json()["error"]
            assert said.startswith("the Bearer token given was not accepted"), said
            assert "`tickwheel tokens list` names them only" in said
            assert secret not in wrong.text


def test_the_sign_in_page_says_a_wrong_token_was_not_accepted(
    client: TimerClient, tmp_path: Path
) -> None:
    """A browser that signs in with a wrong token gets the sign-in page again, saying on
    it that the token was not accepted and what to do (as the JSON refusal says), never
    showing the token typed; the page opened before any try says nothing of the kind."""
    tokens = TokenFile(tmp_path / "tokens.json")
    tokens.create("read", [client.namespace], name="viewer")
    html = {"Accept": "text/html,application/xhtml+xml"}
    typed = "tw_0123456789ab_<b>typed" + "x" * 40
    with TestClient(create_app(client, tokens=tokens), base_url=BASE) as http:
        first = http.get("/", headers=html)
        assert first.status_code == 401 and "not accepted" not in first.text
        r = http.get("/login", params={"token": typed}, headers=html)
        assert r.status_code == 401 and r.headers["content-type"].startswith("text/html")
        assert '<form method="post" action="/login">' in r.text
        assert 'role="alert">That token was not accepted.' in r.text
        for told in ("tickwheel tokens list</code> shows the tokens' names only",
                     "make a new one with <code>tickwheel tokens create</code>"):  # fmt: skip
            assert told in r.text
        assert "typed" not in r.text and "0123456789ab" not in r.text
        script = http.get("/login", params={"token": typed})  # a script still gets the JSON
        assert script.status_code == 401 and script.json()["error"].startswith("wrong token")


def test_a_browser_gets_a_sign_in_page_with_the_one_shared_token_too(client: TimerClient) -> None:
    """With TICKWHEEL_DASHBOARD_TOKEN (one shared token), a browser opening the page got
    raw JSON, and /login with no token said "wrong token" (trial 15): it gets the
    sign-in page, asking for the dashboard's token; a wrong one is said on it (never
    shown); the right one signs in; a script still gets the JSON words."""
    html = {"Accept": "text/html,application/xhtml+xml"}
    with web(client, token="s3cret") as http:
        first = http.get("/", headers=html)
        assert first.status_code == 401 and first.headers["content-type"].startswith("text/html")
        assert "TICKWHEEL_DASHBOARD_TOKEN" in first.text and "not accepted" not in first.text
        empty = http.get("/login", headers=html)
        assert empty.status_code == 401 and '<form method="post" action="/login">' in empty.text
        assert http.get("/login").json()["error"].startswith("no token given"), "a script's"
        wrong = http.get("/login", params={"token": "n0pe<i>"}, headers=html)
        assert wrong.status_code == 401 and 'role="alert">That token was not accepted' in wrong.text
        assert "n0pe" not in wrong.text
        assert (
            http.get("/login", params={"token": "n0pe"}).json()["error"].startswith("wrong token")
        )
        signed = http.get(
            "/login", params={"token": "s3cret"}, headers=html, follow_redirects=False
        )
        assert signed.status_code == 303 and "tickwheel_token" in signed.headers["set-cookie"]


def test_the_sign_in_form_posts_its_token_and_refuses_another_sites(
    client: TimerClient, tmp_path: Path
) -> None:
    """The sign-in page's form sent the token in the query (GET), so it landed in the
    browser's history and any proxy's log: it POSTs it, and a POST signs in as the link
    does (303 and the cookie), for a token file's token and the one shared token. A
    sign-in POSTed by another site's page is refused and sets no cookie (it would sign
    the user in as the attacker); a body that is not a form, or too big, is refused."""
    tokens = TokenFile(tmp_path / "tokens.json")
    _, viewer = tokens.create("read", [client.namespace], name="viewer")
    own = {"Origin": BASE, "Sec-Fetch-Site": "same-origin", "Accept": "text/html"}
    for app, token in ((create_app(client, tokens=tokens), viewer),
                       (create_app(client, token="s3cret"), "s3cret")):  # fmt: skip
        with TestClient(app, base_url=BASE) as http:
            page = http.get("/", headers={"Accept": "text/html"})
            assert '<form method="post" action="/login">' in page.text
            wrong = http.post("/login", data={"token": "n0pe"}, headers=own)
            assert wrong.status_code == 401 and "not accepted" in wrong.text
            assert "set-cookie" not in wrong.headers and "n0pe" not in wrong.text
            evil = {**own, "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
            forged = http.post("/login", data={"token": token}, headers=evil)
            assert forged.status_code == 403 and "set-cookie" not in forged.headers
            assert forged.json()["error"].startswith("refused a cross-site sign-in")
            as_json = http.post("/login", json={"token": token}, headers=own)
            assert as_json.status_code == 415 and "set-cookie" not in as_json.headers
            big = http.post("/login", data={"token": token, "x": "y" * 5000}, headers=own)
            assert big.status_code == 413 and "set-cookie" not in big.headers
            assert http.put("/login", headers=own).status_code == 405
            assert http.get("/api/overview").status_code == 401, "nothing signed in yet"
            signed = http.post("/login", data={"token": token}, headers=own, follow_redirects=False)
            assert signed.status_code == 303 and signed.headers["location"] == "/"
            assert "tickwheel_token" in signed.headers["set-cookie"]
            assert http.get("/api/overview").status_code == 200


def test_each_user_signs_in_with_a_token_and_a_read_token_changes_nothing(
    client: TimerClient,
    redis_client: redis.Redis,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With the HTTP API's token file, each user signs in with their own token, scoped to
    namespaces: a read token sees everything (the page is told it is read-only) and every
    action it tries is refused, writing nothing; a write token acts, and the log says
    which token did; a token for another namespace, a wrong one and none get nothing."""
    tokens = TokenFile(tmp_path / "tokens.json")
    _, viewer = tokens.create("read", [client.namespace], name="on-call viewer")
    _, operator = tokens.create("write", [client.namespace], name="ops")
    _, elsewhere = tokens.create("admin", ["another"], name="other team")
    client.schedule("job:{1}", 3_600_000)
    client.schedule("job:{2}", 3_600_000)
    before = namespace_dump(redis_client, client.namespace)
    app = create_app(client, tokens=tokens)
    with TestClient(app, base_url=BASE) as anonymous:
        assert anonymous.get("/api/overview").status_code == 401
        assert anonymous.get("/login?token=tw_0123456789ab_" + "x" * 43).status_code == 401
        # a browser opening the page gets a page to sign in on, not the JSON refusal
        page = anonymous.get("/", headers={"Accept": "text/html,application/xhtml+xml"})
        assert page.status_code == 401 and page.headers["content-type"].startswith("text/html")
        assert '<form method="post" action="/login">' in page.text
        bare = anonymous.get("/login")
        assert bare.status_code == 401 and bare.json()["error"].startswith("no token given")
    caplog.set_level("INFO", logger="tickwheel.dashboard")
    with as_page(app, viewer) as http:  # signed in through /login, as a browser is
        overview = http.get("/api/overview").json()
        assert overview["read_only"] is True and overview["pending"] == 2
        assert '<body class="read-only">' in http.get("/").text  # no action at first paint
        assert http.get(f"/api/timers/{urllib.parse.quote('job:{1}')}").status_code == 200
        paths = ("/api/timers/job:{1}/cancel", "/api/bulk/cancel", "/api/schedules")
        for path in (*paths, "/api/dead/0/1-0/drop", "/api/groups/pause", "/api/dead/bulk/drop"):
            r = http.post(
                path,
                json={"ids": ["job:{1}"], "name": "n", "every": "1m", "group": "g", "expect": 0},
            )
            assert r.status_code == 403, (path, r.text)
            assert 'token "on-call viewer" may only read' in r.json()["error"]
    assert namespace_dump(redis_client, client.namespace) == before
    with TestClient(app, base_url=BASE) as http:  # refused at sign-in: no cookie
        r = http.get(f"/login?token={elsewhere}", follow_redirects=False)
        assert r.status_code == 403 and "not for namespace" in r.json()["error"]
        assert "set-cookie" not in r.headers
        r = http.get("/api/overview", headers={"Authorization": f"Bearer {elsewhere}"})
        assert r.status_code == 403 and "not for namespace" in r.json()["error"]
    with as_page(app, operator) as http:
        assert http.get("/api/overview").json()["read_only"] is False
        assert "<body>" in http.get("/").text
        r = http.post("/api/timers/job:{2}/cancel", json={})
        assert r.status_code == 200, r.text
        r = http.post("/api/dead/0/1-0/drop")  # no such dead letter: still an action asked
        assert r.status_code == 200 and r.json()["done"] is False, r.text
    cancelled = client.get("job:{2}")
    assert cancelled is not None and cancelled.state == "cancelled"
    said = [r.getMessage() for r in caplog.records if r.name == "tickwheel.dashboard"]
    ns = client.namespace
    refused = [m for m in said if "403 refused" in m]  # each action refused, logged as one done
    assert len(refused) == 6 and all(
        m.startswith("'on-call viewer' POST /api/") and "may only read" in m for m in refused
    ), refused
    said = [m for m in said if m not in refused]
    assert said == [
        f"'ops' cancel timer 'job:{{2}}' in namespace {ns!r}: 200",
        f"'ops' drop dead letter '0/1-0' in namespace {ns!r}: 200, nothing done",
    ], said
    assert viewer not in caplog.text and operator not in caplog.text  # names, never secrets


def test_a_token_for_another_namespace_is_refused_at_sign_in_saying_whose_it_is(
    client: TimerClient, redis_server: RedisServer, tmp_path: Path
) -> None:
    """A sign-in with a token that may not read the dashboard's namespace was let in (303,
    its cookie set), then every page was raw JSON: it gets the sign-in page again (401, no
    cookie) saying the token is not for that namespace and naming those it is for (never
    the secret); a script gets the JSON refusal. A sign-in asking for a namespace of the
    token's (``?ns=``, kept by the page's form) is let in there; a browser opening a page
    of a namespace its token is not for gets that page with the reason, not JSON."""
    other = TimerClient.from_url(redis_server.url, client.namespace + "-b")
    other.init(shards=2)
    ns, ons = client.namespace, other.namespace
    tokens = TokenFile(tmp_path / "tokens.json")
    _, theirs = tokens.create("write", [ons, "third"], name="other <team>")
    _, ours = tokens.create("read", [ns], name="viewer")
    html = {"Accept": "text/html,application/xhtml+xml"}
    own = {"Origin": BASE, "Sec-Fetch-Site": "same-origin", **html}
    said = (  # values quoted as every error quotes them (JSON-style), not Python's repr
        f'token "other <team>" is not for namespace "{ns}" (it is for namespaces "{ons}", "third")'
    )
    app = create_app(client, tokens=tokens)
    with TestClient(app, base_url=BASE) as http:
        for r in (http.post("/login", data={"token": theirs}, headers=own),
                  http.get("/login", params={"token": theirs}, headers=html)):  # fmt: skip
            assert r.status_code == 401 and r.headers["content-type"].startswith("text/html")
            assert "set-cookie" not in r.headers and theirs not in r.text
            assert '<form method="post" action="/login">' in r.text
            assert (f'role="alert">Token &quot;other &lt;team&gt;&quot; is not for namespace '
                    f"<code>{ns}</code>: it is for <a href=\"/?ns={ons}\">{ons}</a>, "
                    '<a href="/?ns=third">third</a> (follow one of those links and sign in '
                    "there with it)") in r.text  # fmt: skip
        script = http.get("/login", params={"token": theirs}, follow_redirects=False)
        assert script.status_code == 403 and "set-cookie" not in script.headers
        assert script.json() == {"error": said, "kind": "Forbidden", "exit_code": 4}
        assert http.get("/api/overview").status_code == 401, "nothing signed in"
        asked = http.get("/", params={"ns": ons}, headers=html)
        assert f'<form method="post" action="/login?ns={ons}">' in asked.text
        signed = http.post(f"/login?ns={ons}", data={"token": theirs}, headers=own,
                           follow_redirects=False)  # fmt: skip
        assert signed.status_code == 303 and signed.headers["location"] == f"/?ns={ons}"
        assert http.get("/api/overview", params={"ns": ons}).json()["namespace"] == ons
        for path in ("/static/main.js", "/static/dashboard.css", "/favicon.svg"):  # no ?ns=
            assert http.get(path).status_code == 200, path  # were refused: a blank page
        page = http.get("/", headers=html)  # signed in, at a namespace the token is not for
        assert page.status_code == 403 and page.headers["content-type"].startswith("text/html")
        assert "is not for namespace" in page.text and "{" not in page.text.split("<body>")[1]
        assert '<form method="post" action="/login">' in page.text and theirs not in page.text
        api = http.get("/api/overview")  # the page's own requests: the JSON refusal
        assert api.status_code == 403 and api.json()["kind"] == "Forbidden"
    with as_page(app, ours) as http:
        page = http.get("/", params={"ns": ons}, headers=html)
        assert page.status_code == 403 and "viewer&quot; is not for namespace" in page.text
        assert f'<form method="post" action="/login?ns={ons}">' in page.text
    other.close()


def test_a_sign_in_goes_on_to_the_page_asked_for_and_only_to_one_of_its_own(
    client: TimerClient, tmp_path: Path
) -> None:
    """A sign-in always landed on `/`: a user who opened /timers (or a shared link to a
    timer) signed in and lost the page. The sign-in page shown at the address asked for
    carries it (its path and query) to /login as `next`, and the 303 goes there, with the
    fragment the page's script added to it; /login?token=…&next=… too. A `next` that is
    not a path of this dashboard (another site's address, `//host`, a backslash, a
    scheme, /login itself) is ignored: the sign-in goes home, as it did."""
    tokens = TokenFile(tmp_path / "tokens.json")
    _, viewer = tokens.create("read", [client.namespace], name="viewer")
    html = {"Accept": "text/html,application/xhtml+xml"}
    own = {"Origin": BASE, "Sec-Fetch-Site": "same-origin", **html}
    shared = ("/timers#timer=job%3A%7B1%7D", "/timers#timer=job%3A%7B1%7D")
    attempts = [
        "//evil.example/", "https://evil.example/", "/\\evil.example", "\\\\evil.example",
        "/\\/evil.example", "/\t/evil.example", "javascript:alert(1)", "evil.example",
        "http:/evil.example", "/login?token=x", "#timer=1", "/" + "x" * 3000,
    ]  # fmt: skip
    for app, token in ((create_app(client, tokens=tokens), viewer),
                       (create_app(client, token="s3cret"), "s3cret")):  # fmt: skip
        with TestClient(app, base_url=BASE) as http:
            for asked, carried in (
                ("/timers", "/timers"),
                ("/groups?x=1&y=2", "/groups?x=1&amp;y=2"),
            ):
                page = http.get(asked, headers=html)
                assert page.status_code == 401
                assert f'<input type="hidden" name="next" value="{carried}">' in page.text
            page = http.get("/timers", headers=html)  # its one script, allowed by its hash
            script = page.text.split("<script>")[1].split("</script>")[0]
            digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
            policy = page.headers["content-security-policy"]
            assert f"script-src 'sha256-{digest}'" in policy and "unsafe-inline'; f" not in policy
            assert "location.hash" in script
            for sent, goes in (("/timers", "/timers"), ("/timers?ns=" + client.namespace,
                               "/timers?ns=" + client.namespace), shared):  # fmt: skip
                r = http.post("/login", data={"token": token, "next": sent}, headers=own,
                              follow_redirects=False)  # fmt: skip
                assert r.status_code == 303 and r.headers["location"] == goes, (sent, r.headers)
            for evil in attempts:
                r = http.post("/login", data={"token": token, "next": evil}, headers=own,
                              follow_redirects=False)  # fmt: skip
                assert r.status_code == 303 and r.headers["location"] == "/", (evil, r.headers)
                r = http.get("/login", params={"token": token, "next": evil},
                             follow_redirects=False)  # fmt: skip
                assert r.status_code == 303 and r.headers["location"] == "/", (evil, r.headers)
            r = http.get("/login", params={"token": token, "next": "/dead-letters"},
                         follow_redirects=False)  # fmt: skip
            assert r.status_code == 303 and r.headers["location"] == "/dead-letters"
            # a wrong token: the page shown again at /login keeps where the user was going
            wrong = http.post("/login", data={"token": "n0pe", "next": shared[0]}, headers=own)
            assert wrong.status_code == 401 and "not accepted" in wrong.text
            kept = '<input type="hidden" name="next" value="/timers#timer=job%3A%7B1%7D">'
            assert kept in wrong.text
            wrong = http.post("/login", data={"token": "n0pe", "next": "//evil.example"},
                              headers=own)  # fmt: skip
            assert '<input type="hidden" name="next" value="">' in wrong.text


def test_the_namespace_menu_lists_only_those_the_token_may_read(
    client: TimerClient, redis_server: RedisServer, tmp_path: Path
) -> None:
    """A token for one namespace was offered every namespace in the page's menu (picking
    another's dropped the user at the sign-in page): the overview and the live stream
    list only the namespaces the signed-in token may read (a `*` token: all); with the
    one shared token, or none, every namespace, as before."""
    other = TimerClient.from_url(redis_server.url, client.namespace + "-b")
    other.init(shards=2)
    ns, ons = client.namespace, other.namespace
    tokens = TokenFile(tmp_path / "tokens.json")
    _, ours = tokens.create("read", [ns], name="ours")
    _, both = tokens.create("write", [ns, ons], name="both")
    _, every = tokens.create("read", ["*"], name="every")
    app = create_app(client, tokens=tokens)

    def menu(http: TestClient, **params: str) -> list[str]:
        names = http.get("/api/overview", params=params).json()["namespaces"]
        with http.stream("GET", "/api/live", params=params) as r:
            data = next(line for line in r.iter_lines() if line.startswith("data: "))
        assert json.loads(data[len("data: ") :])["overview"]["namespaces"] == names
        return [n for n in names if n in (ns, ons)]  # other tests' namespaces aside

    try:
        every_namespace = client.namespaces()
        assert {ns, ons} <= set(every_namespace)
        with as_page(app, ours) as http:
            assert http.get("/api/overview").json()["namespaces"] == [ns]
            assert menu(http) == [ns]
        with as_page(app, both) as http:
            assert menu(http) == [ns, ons] and menu(http, ns=ons) == [ns, ons]
        with as_page(app, every) as http:
            assert http.get("/api/overview").json()["namespaces"] == every_namespace
        shared = TestClient(create_app(client, token="s3cret"), base_url=BASE,
                            headers={"Authorization": "Bearer s3cret"})  # fmt: skip
        for http in (shared, web(client)):
            assert http.get("/api/overview").json()["namespaces"] == every_namespace
            assert menu(http) == [ns, ons]
    finally:
        other.close()


def test_every_refusal_is_one_shape_naming_its_kind(client: TimerClient, tmp_path: Path) -> None:
    """The guard's refusals were ``{"error"}`` where the routes' errors are ``{"error",
    "kind", "exit_code"}``: every error the dashboard answers has all three, the guard's
    kind naming why (its error's words as they were)."""
    tokens = TokenFile(tmp_path / "tokens.json")
    _, viewer = tokens.create("read", [client.namespace], name="viewer")
    evil = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
    bearer = {"Authorization": "Bearer tw_0123456789ab_" + "x" * 43}
    files = TestClient(create_app(client, tokens=tokens), base_url=BASE)
    shared = TestClient(create_app(client, token="s3cret"), base_url=BASE)
    cases = [
        (TestClient(create_app(client), base_url="http://attacker.example").get("/"),
         400, "UnknownHost", "this dashboard does not answer for host"),
        (files.get("/api/overview"), 401, "NotSignedIn", "sign in on the page"),
        (shared.get("/api/overview"), 401, "NotSignedIn", "this dashboard needs its token"),
        (files.get("/api/overview", headers=bearer), 401, "WrongToken", "the Bearer token"),
        (shared.get("/login?token=n0pe"), 401, "WrongToken", "wrong token"),
        (files.post("/login", data={"token": viewer}, headers=evil), 403, "CrossSite",
         "refused a cross-site sign-in"),
        (web(client).post("/api/bulk/cancel", headers=evil, json={"ids": ["a"]}), 403,
         "CrossSite", "refused a cross-site request"),
        (as_page(create_app(client, tokens=tokens), viewer).post("/api/bulk/cancel"), 403,
         "Forbidden", 'token "viewer" may only read'),
        (web(client, read_only=True).post("/api/bulk/cancel"), 403, "Forbidden",
         "this dashboard is read-only"),
        (web(client).post("/api/bulk/cancel", content=b"{"), 400, "InvalidInput",
         "the body must be JSON"),
        (web(client).get("/api/bulk/cancel"), 405, "MethodNotAllowed", '"GET" is not a method'),
        (web(client).get("/api/nothing"), 404, "NotFound", "no such page or endpoint"),
        (web(client).get("/static/nothing.js"), 404, "NotFound", "no such file"),
        (files.post("/login", json={"token": viewer}, headers={"Origin": BASE}), 415,
         "InvalidInput", "sign in with the form's body"),
        (files.put("/login"), 405, "MethodNotAllowed", "sign in with GET"),
    ]  # fmt: skip
    for r, status, kind, words in cases:
        body = r.json()
        assert (r.status_code, body["kind"]) == (status, kind), (r.request.url, body)
        assert body["error"].startswith(words), body
        assert body["exit_code"] == {"InvalidInput": 3, "MethodNotAllowed": 3, "NotFound": 6}.get(
            kind, 4
        ), body
        assert set(body) == {"error", "kind", "exit_code"}, body


def test_each_action_is_logged_once_with_who_what_and_on_what(
    client: TimerClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Every route that changes state logs one INFO line when it is done: who asked (the
    shared token, or anyone when no token is set), the action, its target (from the
    path or the body) and the answer's status, a refusal by the library too. A target is
    quoted, so an id holding a newline cannot forge a line; a secret is never said."""
    client.schedule("job:{1}", 3_600_000)
    client.schedule("a\nb", 3_600_000)
    client.schedule_many([{"id": f"job:{{{n}}}", "delay_ms": 3_600_000} for n in (3, 4)])
    caplog.set_level("INFO", logger="tickwheel.dashboard")
    asks = [
        ("/api/timers/job:{1}/complete", {}),
        ("/api/timers/a%0Ab/cancel", {}),
        ("/api/bulk/reschedule", {"ids": ["job:{1}", "x:1"], "delay_ms": 1000}),
        ("/api/schedules", {"name": "nightly", "cron": "0 3 * * *"}),
        ("/api/schedules/nightly/pause", {}),
        ("/api/schedules/nightly/pause", {}),  # what the answer says it did, said too
        ("/api/bulk/cancel", {"ids": ["job:{3}", "job:{4}"]}),
        ("/api/groups/pause", {"group": "mailer"}),
        ("/api/dead/0/1-0/drop", {}),
        ("/api/dead/bulk/redeliver", {"group": "billing", "expect": 0}),
        ("/api/dead/bulk/drop", {"refs": ["0/1-0"], "expect": 1}),
        ("/api/timers/job:{1}/explode", {}),  # refused by the library: logged as tried
        ("/api/timers/job:{1}/ex%0Aplode", {}),
    ]
    with web(client, token="s3cret") as http:
        http.headers["Authorization"] = "Bearer s3cret"
        for path, body in asks:
            http.post(path, json=body)
    with web(client) as http:
        http.post("/api/schedules/nightly/resume", json={})
    ns = repr(client.namespace)
    said = [r.getMessage() for r in caplog.records if r.name == "tickwheel.dashboard"]
    assert all(r.levelname == "INFO" for r in caplog.records if r.name == "tickwheel.dashboard")
    by = "the shared token"
    assert said == [
        f"{by} complete timer 'job:{{1}}' in namespace {ns}: 200",
        f"{by} cancel timer 'a\\nb' in namespace {ns}: 200",
        f"{by} reschedule 2 timers ('job:{{1}}', 'x:1') in namespace {ns}: 200, nothing done",
        f"{by} create schedule 'nightly' in namespace {ns}: 200",
        f"{by} pause schedule 'nightly' in namespace {ns}: 200",
        f"{by} pause schedule 'nightly' in namespace {ns}: 200, already so",
        f"{by} cancel 2 timers ('job:{{3}}', 'job:{{4}}') in namespace {ns}: 200, 2 done",
        f"{by} pause group 'mailer' in namespace {ns}: 404 refused: 'no consumer group "
        f'"mailer" in namespace "{client.namespace}" (groups: none)\'',
        f"{by} drop dead letter '0/1-0' in namespace {ns}: 200, nothing done",
        f"{by} redeliver all dead letters matching group 'billing' (expect 0) in namespace {ns}"
        ": 200, nothing done",
        f"{by} drop 1 dead letter ('0/1-0') in namespace {ns}: 200, nothing done",
        # a refusal said as one, and why (trial 33: "explode timer …: 400" read as done)
        f"{by} explode timer 'job:{{1}}' in namespace {ns}: 400 refused: 'unknown action "
        '"explode": cancel, complete or reschedule\'',
        f"{by} 'ex\\nplode' timer 'job:{{1}}' in namespace {ns}: 400 refused: 'unknown "
        'action "ex\\\\nplode": cancel, complete or reschedule\'',
        f"anyone (no token set) resume schedule 'nightly' in namespace {ns}: 200",
    ], said
    assert "s3cret" not in caplog.text


def test_password_never_shown(redis_server: RedisServer, namespace: str) -> None:
    admin = redis.Redis.from_url(redis_server.url)
    admin.acl_setuser("dash", enabled=True, passwords=["+hunter2pw"], keys=["*"],
                      channels=["*"], commands=["+@all"])  # fmt: skip
    try:
        url = redis_server.url.replace("redis://", "redis://dash:hunter2pw@")
        c = TimerClient.from_url(url, namespace)
        c.init(shards=2)
        with web(c) as http:
            body = http.get("/api/overview").text + http.get("/").text
        c.close()
        assert "hunter2pw" not in body and "dash" in body
    finally:
        admin.acl_deluser("dash")
        admin.close()


CROSS_SITE = [
    ({"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, "Origin"),
    ({"Origin": "http://evil.example"}, "Origin"),
    ({"Sec-Fetch-Site": "cross-site"}, "Sec-Fetch-Site"),
    ({"Sec-Fetch-Site": "same-site", "Origin": BASE}, "Sec-Fetch-Site"),
    ({}, "no Origin"),
    ({"Origin": BASE, "Sec-Fetch-Site": "same-origin", "X-CSRF-Token": "guess"}, "CSRF"),
    ({"Origin": BASE, "Sec-Fetch-Site": "same-origin"}, "CSRF"),
]


@pytest.mark.parametrize(("headers", "why"), CROSS_SITE)
def test_cross_site_actions_are_refused(
    client: TimerClient, redis_client: redis.Redis, headers: dict[str, str], why: str
) -> None:
    """A POST that is not from the dashboard's own page (another Origin, a cross-site
    fetch, no CSRF token or a wrong one) is refused with 403 and changes nothing: the
    issue's `curl -X POST -H 'Origin: http://evil.example' …/cancel` cancelled a timer."""
    client.schedule("job:{9}", 60_000)
    client.schedules.create("nightly", cron="0 2 * * *")
    before = namespace_dump(redis_client, client.namespace)
    http = TestClient(create_app(client), base_url=BASE)
    http.get("/")  # the page's cookie is in the jar: a cross-site form would send it
    for path in (
        "/api/timers/job:{9}/cancel",
        "/api/dead/0/1-0/drop",
        "/api/schedules/nightly/trigger",
        "/api/schedules/nightly/delete",
        "/api/bulk/cancel",
    ):
        r = http.post(path, headers=headers, json={"ids": ["job:{9}"]})
        assert r.status_code == 403, r.text
        assert why in r.json()["error"]
    assert namespace_dump(redis_client, client.namespace) == before
    assert web(client).post("/api/timers/job:{9}/cancel").json()["done"] is True


def test_a_scripts_post_is_told_what_to_send_as_the_dashboard_is_set_up(
    client: TimerClient, tmp_path: Path
) -> None:
    """A script's POST (no Origin, no Sec-Fetch-Site) was told "use the page, or the Bearer
    token" on a dashboard with no token (a new user's trial): it says to send an
    Authorization: Bearer header, any value while no token is set (and how to require
    one), and that header then passes; with a shared token or a token file, to send that
    token (a cookie signed the script in here, so the check is reached)."""
    client.schedule("job:{90}", 60_000)
    path = "/api/timers/job%3A%7B90%7D/cancel"
    said = TestClient(create_app(client), base_url=BASE).post(path, json={})
    assert (said.status_code, said.json()["kind"]) == (403, "CrossSite"), said.text
    assert said.json()["error"] == (
        "refused a cross-site request: no Origin or Sec-Fetch-Site header (use the page; a "
        "script sends an Authorization: Bearer header, any value while the dashboard has no "
        "token (start it with TICKWHEEL_DASHBOARD_TOKEN set, or --tokens FILE, to require one))"
    )
    told = TestClient(create_app(client), base_url=BASE, headers={"Authorization": "Bearer x"})
    assert told.post(path, json={}).json()["done"] is True  # as it said: any value
    tokens = TokenFile(tmp_path / "tokens.json")
    _, writer = tokens.create("write", [client.namespace], name="ops")
    for app, token, send in (
        (create_app(client, token="s3cret"), "s3cret",
         "the token the dashboard was started with (TICKWHEEL_DASHBOARD_TOKEN)"),
        (create_app(client, tokens=tokens), writer, "a write token of `tickwheel tokens create`"),
    ):  # fmt: skip
        http = TestClient(app, base_url=BASE)
        assert http.get(f"/login?token={token}", follow_redirects=False).status_code == 303
        r = http.post(path, json={})
        assert r.status_code == 403, r.text
        assert r.json()["error"].endswith(
            f"(use the page; a script sends Authorization: Bearer <token>, {send})"
        ), r.text
        assert "any value" not in r.text


def test_an_unknown_host_is_quoted_as_every_error_quotes(client: TimerClient) -> None:
    """The refusal of a host quoted it as Python does ('evil.example'); every other error
    quotes a value JSON-style ("evil.example"), as this does, and so do the board's."""
    r = TestClient(create_app(client), base_url="http://evil.example").get("/api/overview")
    assert r.status_code == 400 and r.json()["error"].startswith(
        'this dashboard does not answer for host "evil.example"; start it'
    ), r.text
    with web(client) as http:
        bad = http.post("/api/timers/job:1/reschedule", json={"delay_ms": "soon"})
        assert bad.json()["error"] == 'delay_ms must be a whole number of ms, got "soon"'
        half = http.post("/api/timers/job:1/reschedule", json={"delay_ms": 1.5})
        assert half.json()["error"] == "delay_ms must be a whole number of ms, got 1.5"
        # JSON has one number type: 60000.0 is 60,000 ms, as the HTTP API takes it
        client.schedule("job:{9}", 1_000)
        moved = http.post("/api/timers/job:%7B9%7D/reschedule", json={"delay_ms": 60000.0})
        assert moved.status_code == 200 and moved.json()["done"] is True, moved.text
        bulk = http.post("/api/bulk/reschedule", json={"ids": ["job:{9}"], "delay_ms": 9e4})
        assert bulk.status_code == 200 and bulk.json()["done"] == 1, bulk.text
        odd = http.post("/api/dead/bulk/explode", json={})
        assert odd.json()["error"].startswith('unknown action "explode": '), odd.text
        big = http.get("/api/pending", params={"limit": "ten"})
        assert big.json()["error"] == 'limit must be a whole number, got "ten"', big.text


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:8080", "10.0.0.1"])
def test_rebound_host_is_refused(client: TimerClient, host: str) -> None:
    """A request for a host name the dashboard does not serve (DNS rebinding: a page of
    attacker.example resolved to 127.0.0.1) is refused, reads included."""
    http = TestClient(create_app(client), base_url=f"http://{host}")
    for path in ("/", "/api/overview"):
        r = http.get(path)
        assert r.status_code == 400 and "does not answer for host" in r.json()["error"]
    ok = TestClient(create_app(client), base_url="http://[::1]:8080").get("/api/overview")
    assert ok.status_code == 200
    named = create_app(client, allowed_hosts=["timers.internal"])
    assert TestClient(named, base_url="http://timers.internal").get("/").status_code == 200


def test_bearer_token_skips_the_page_checks(client: TimerClient) -> None:
    """With a token set, a script that sends it as a Bearer header acts without the
    page's CSRF token (a browser never adds that header cross-site); the cookie a
    login set is not enough on its own."""
    client.schedule("job:{10}", 60_000)
    app = create_app(client, token="s3cret")
    script = TestClient(app, base_url=BASE, headers={"Authorization": "Bearer s3cret"})
    assert script.post("/api/timers/job:{10}/cancel").json()["done"] is True
    browser = TestClient(app, base_url=BASE)
    assert browser.get("/login?token=s3cret", follow_redirects=False).status_code == 303
    r = browser.post("/api/timers/job:{10}/complete", headers={"Origin": "http://evil.example"})
    assert r.status_code == 403


PATHS = [
    "/api/timers/job:{9}/cancel", "/api/timers/job:{9}/complete",
    "/api/timers/job:{9}/reschedule", "/api/dead/0/1-0/redeliver", "/api/dead/0/1-0/drop",
    "/api/overview", "/api/shards/0/due", "/api/dead", "/login", "/",
    "/api/schedules", "/api/schedules/nightly/pause", "/api/schedules/nightly/trigger",
    "/api/schedules/nightly/bogus", "/api/schedules/none/resume",
    "/api/schedules/nightly/backfill", "/api/find", "/api/find?match=job:*&state=any",
    "/api/find?state=late", "/api/find?cursor=x", "/api/bulk/cancel", "/api/bulk/bogus",
    "/api/bulk/reschedule", "/api/dead/matching?group=g&error=x&match=a*",
    "/api/dead/matching?match=%5B", "/api/dead/bulk/drop", "/api/dead/bulk/redeliver",
    "/api/dead/bulk/bogus", "/api/groups/pause", "/api/groups/resume", "/api/groups/bogus",
    "/api/worker?id=w1", "/api/worker", "/api/worker?id=%0A",
    "/api/outcomes?kind=late", "/api/outcomes?since_ms=x&shard=99", "/api/outcomes?match=%5B",
    "/api/outcomes?field=tenant&value=acme&kind=cancelled",
    "/api/pending", "/api/pending?cursor=x", "/api/pending?cursor=1:job&limit=0",
    "/api/pending?min_priority=-101&match=%5B", "/api/pending?field=tenant&value=acme",
]  # fmt: skip
printable = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30)
json_bodies = st.dictionaries(
    st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=8), st.none()), max_size=3
).map(lambda d: json.dumps(d).encode())


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    """A request as anyone might send it: any method, path, body and the headers the
    dashboard's checks read (Origin, Sec-Fetch-Site, X-CSRF-Token, Host, Authorization)."""
    odd_path = printable.map(lambda p: "/api/timers/" + p.replace("?", "").replace("#", ""))
    return {
        "method": draw(st.sampled_from(["GET", "POST", "PUT", "DELETE"])),
        "url": draw(st.one_of(st.sampled_from(PATHS), odd_path)),
        "content": draw(st.one_of(st.none(), st.binary(max_size=20), json_bodies)),
        "headers": draw(st.dictionaries(
            st.sampled_from(["Origin", "Sec-Fetch-Site", "X-CSRF-Token", "Host",
                             "Authorization"]), printable, max_size=3)),
    }  # fmt: skip


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(request=requests())
def test_any_request_is_answered_below_500_and_a_refusal_writes_nothing(
    client: TimerClient, redis_client: redis.Redis, request: dict[str, Any]
) -> None:
    """Whatever a request holds (method, path, body, Origin, CSRF token, Host, token), the
    dashboard answers it with a status below 500, and one it refuses changes nothing."""
    client.schedule("job:{9}", 60_000)
    if client.schedules.get("nightly") is None:
        client.schedules.create("nightly", cron="0 2 * * *")
    before = namespace_dump(redis_client, client.namespace)
    http = TestClient(create_app(client), base_url=BASE, raise_server_exceptions=False)
    r = http.request(**request)
    assert r.status_code < 500, (request, r.text)
    if r.status_code >= 400:
        assert namespace_dump(redis_client, client.namespace) == before
        assert {"error", "kind", "exit_code"} <= set(r.json()), (request, r.text)  # one shape


def test_find_and_bulk_actions(client: TimerClient, redis_client: redis.Redis) -> None:
    """/api/find pages the search box's selection; /api/bulk acts on the ids the page
    selected; bad input is a 400 that writes nothing."""
    client.schedule_many([{"id": f"tenant-7:{i}", "delay_ms": 3_600_000} for i in range(5)])
    client.schedule("other", 3_600_000)
    with web(client) as http:
        found = http.get("/api/find", params={"match": "tenant-7:*"}).json()
        assert sorted(t["id"] for t in found["timers"]) == [f"tenant-7:{i}" for i in range(5)]
        assert found["cursor"] is None and all(t["state"] == "pending" for t in found["timers"])
        done = http.post("/api/bulk/cancel", json={"ids": ["tenant-7:0", "tenant-7:1", "nope"]})
        assert done.json() == {"action": "cancel", "selected": 2, "done": 2, "skipped": 0,
                               "errors": []}  # fmt: skip
        decided = http.get("/api/find", params={"match": "tenant-7:*", "state": "cancelled"})
        assert sorted(t["id"] for t in decided.json()["timers"]) == ["tenant-7:0", "tenant-7:1"]
        before = namespace_dump(redis_client, client.namespace)
        for path, body in (
            ("/api/bulk/reschedule", {"ids": ["tenant-7:2"], "delay_ms": "soon"}),
            ("/api/bulk/bogus", {"ids": ["tenant-7:2"]}),
            ("/api/bulk/cancel", {"ids": "tenant-7:2"}),
            ("/api/bulk/cancel", {"ids": [""]}),
        ):
            r = http.post(path, json=body)
            assert r.status_code == 400, (path, r.text)
        assert http.get("/api/find", params={"state": "late"}).status_code == 400
        assert namespace_dump(redis_client, client.namespace) == before
        moved = http.post("/api/bulk/reschedule", json={"ids": ["tenant-7:2"], "delay_ms": 60_000})
        assert moved.json()["done"] == 1


def test_live_stream_pushes_what_the_page_shows(client: TimerClient) -> None:
    """/api/live is a Server-Sent Events stream whose events hold the overview, the dead
    letters and the schedules; an unknown namespace is refused before any stream."""
    client.schedule("job:{1}", 3_600_000)
    client.schedules.create("nightly", cron="0 2 * * *")
    dead_lettered(client, "dies", payload={"blob": "x" * 10_000})
    with web(client) as http:
        with http.stream("GET", "/api/live") as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            data = next(line for line in r.iter_lines() if line.startswith("data: "))
        snap = json.loads(data[len("data: ") :])
        assert snap["overview"]["pending"] == 2
        (row,) = snap["dead"]  # as its row shows it: no payload, no traceback, each second
        assert row["error"] == "ZeroDivisionError: division by zero"
        assert row["outcome"] == {"id": "dies"} and "x" * 100 not in data  # nor in recent
        assert [s["name"] for s in snap["schedules"]] == ["nightly"]
        assert http.get("/api/live", params={"ns": "no-such-namespace"}).status_code == 400


STATIC = Path(__file__).resolve().parents[2] / "timer" / "dashboard" / "static"


def test_the_page_scripts_parse(tmp_path: Path) -> None:
    """The page's JavaScript is valid (a syntax error leaves a blank page and no error
    from the server): `node --check` on each module, where Node is installed."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the browser tests still load the page")
    scripts = sorted(STATIC.glob("*.js"))
    assert len(scripts) >= 5, scripts
    for script in scripts:  # .mjs: checked as the ES module the page loads it as
        copy = tmp_path / (script.stem + (".js" if script.name == "theme.js" else ".mjs"))
        copy.write_text(script.read_text())
        checked = subprocess.run([node, "--check", str(copy)], capture_output=True,
                                 text=True, check=False, timeout=60)  # fmt: skip
        assert checked.returncode == 0, (script.name, checked.stderr)


class Inline(HTMLParser):
    """What of a page is inline script or style: a <script> with a body, a <style>, a
    style= or on…= attribute, a javascript: link; and what it loads."""

    def __init__(self) -> None:
        super().__init__()
        self.inline: list[str] = []
        self.loads: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        self._in_script = tag == "script"
        if tag == "style":
            self.inline.append("<style>")
        for name, value in attrs:
            if name == "style" or name.startswith("on"):
                self.inline.append(f"<{tag} {name}=...>")
            if name in ("href", "src") and (value or "").strip().lower().startswith("javascript:"):
                self.inline.append(f"<{tag} {name}={value}>")
        if tag == "script" and named.get("src"):
            self.loads.append(str(named["src"]))
        if tag == "link" and named.get("rel") == "stylesheet":
            self.loads.append(str(named["href"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline.append(f"<script> {data.strip()[:40]}")


def test_the_page_is_parts_served_as_they_are_under_a_strict_policy(client: TimerClient) -> None:
    """Every view's address serves the page; the page has no inline script or style (its
    policy allows only what the dashboard serves: script-src 'self', no 'unsafe-inline'),
    and loads its stylesheet and modules, each of at most 450 lines, served with their
    types and revalidated (no-cache, an ETag: 304 when unchanged); an unknown file is a 404."""
    views = ["/", "/timers", "/groups", "/dead-letters", "/schedules", "/workers", "/shards"]
    with web(client) as http:
        for path in views:
            page = http.get(path)
            assert page.status_code == 200 and "tickwheel dashboard" in page.text, path
            policy = page.headers["content-security-policy"]
            assert "script-src 'self';" in policy and "style-src 'self';" in policy, policy
            assert "unsafe" not in policy and "frame-ancestors 'none'" in policy, policy
        parsed = Inline()
        parsed.feed(http.get("/").text)
        assert parsed.inline == [], parsed.inline
        assert "/static/dashboard.css" in parsed.loads and "/static/main.js" in parsed.loads
        served = {}
        for name in [p.name for p in STATIC.iterdir() if p.suffix in (".js", ".css")]:
            got = http.get(f"/static/{name}")
            assert got.status_code == 200, name
            kind = "text/css" if name.endswith(".css") else "text/javascript"
            assert got.headers["content-type"].startswith(kind), (name, got.headers)
            assert got.headers["cache-control"] == "no-cache"
            again = http.get(f"/static/{name}", headers={"If-None-Match": got.headers["etag"]})
            assert again.status_code == 304 and not again.content, name
            served[name] = got.text.count("\n")
        imported = {
            m for text in (STATIC / n for n in served) for m in
            re.findall(r'from "\./([\w.]+)"', text.read_text())
        }  # fmt: skip
        assert imported <= set(served), imported - set(served)  # every module it imports
        too_long = {n: lines for n, lines in served.items() if lines > 450}
        assert not too_long, too_long
        for missing in ("/static/nope.js", "/static/index.html", "/static/..%2Fapp.py"):
            assert http.get(missing).status_code == 404, missing


def test_lateness_counts_from_when_a_timer_was_scheduled_if_that_came_later(
    client: TimerClient,
) -> None:
    """A timer scheduled already a minute past its deadline (a backfill, a catch-up)
    fires at once: the dashboard's lateness histogram counted it '>10000 ms' late."""
    from tests.integration.test_worker import make_worker, running  # noqa: PLC0415

    now = client.server_time_ms()
    client.schedule("backfilled", deadline_ms=now - 60_000)
    with running(make_worker(client, "w1")):
        assert client.wait("backfilled", timeout=20).outcome == "expired"
    with web(client) as http:
        buckets = {b["bucket"]: b["count"] for b in http.get("/api/overview").json()["lateness"]}
    assert sum(buckets.values()) == 1 and buckets[">10000 ms"] == 0, buckets
    seen = [o for o in client.recent_outcomes(10) if o.id == "backfilled"]
    assert seen and seen[0].created_ms is not None and seen[0].created_ms >= now
    assert seen[0].lateness_ms >= 60_000  # the outcome still says how far past its deadline


def test_history_in_bins_with_totals_and_a_bad_period_refused(
    client: TimerClient, redis_client: redis.Redis
) -> None:
    """What the workers and runners added, as the page charts it: a point a minute for the
    hour (60), a point each 10 minutes for the day; any other period is a 400 that says
    which exist, and writes nothing."""
    counts = {"scheduled": 9, "expired": 7, "late:5": 6, "late:250": 1, "handled:g": 6}
    client.add_history({**counts, "dead:g": 1}, {"pending:0": 2, "pending:3": 1})
    with web(client) as http:
        hour = http.get("/api/history/60").json()
        day = http.get("/api/history/1440").json()
        before = namespace_dump(redis_client, client.namespace)
        refused = http.get("/api/history/61")
        assert namespace_dump(redis_client, client.namespace) == before
    assert (len(hour["points"]), hour["step_minutes"], len(day["points"])) == (60, 1, 144)
    [now] = [p for p in hour["points"] if p["expired"]]  # this minute's (or the last's)
    assert (now["scheduled"], now["expired"], now["handled"], now["dead"]) == (9, 7, 6, 1)
    assert (now["pending"], now["lateness_p50_ms"], now["lateness_p99_ms"]) == (3, 5, 250)
    assert hour["points"][0]["pending"] is None and hour["points"][0]["expired"] == 0
    assert hour["totals"] == day["totals"] == {
        "scheduled": 9, "expired": 7, "cancelled": 0, "completed": 0,
        "handled": 6, "failed": 0, "dead": 1,
    }  # fmt: skip
    assert hour["groups"] == [{"group": "g", "handled": 6, "failed": 0, "dead": 1}]
    # each count may be short, so the page marks it, saying why: heard over pub/sub, or
    # counted by a process that a kill -9 stops before its flush
    assert hour["approximate"] == [*hour["totals"]]
    heard, flushed = ("scheduled", "cancelled", "completed"), ("expired", "handled", "dead")
    assert all("no leader heard" in hour["why_approximate"][k] for k in heard)
    assert all("killed" in hour["why_approximate"][k] for k in flushed)
    assert "last seconds" in hour["why_approximate"]["expired"]
    with web(client) as http:  # one group's own: its counts alone; a group never seen, 0
        own = http.get("/api/history/60/group/g").json()
        other = http.get("/api/history/60/group/a%2Fb").json()
        assert http.get("/api/history/7/group/g").status_code == 400
    assert own["totals"] == {**dict.fromkeys(hour["totals"], 0), "handled": 6, "dead": 1}
    assert other["totals"] == dict.fromkeys(hour["totals"], 0) and other["groups"] == []
    assert own["approximate"] == ["handled", "failed", "dead"]  # a runner's, flushed
    assert own["why_approximate"]["dead"] == hour["why_approximate"]["dead"]
    assert refused.status_code == 400
    assert "history is kept for 60, 360, 1440 minutes" in refused.json()["error"]


def test_the_page_paints_the_overviews_counts_at_once(
    client: TimerClient, redis_server: RedisServer
) -> None:
    """The page itself carries the Overview's counts, so its first paint shows them: it
    showed a dash in each until its script's first fetch or live event came back. A
    namespace that does not exist still gets the page, with its dashes."""
    for n in range(3):
        client.schedule(f"job:{{{n}}}", 3_600_000)
    client.cancel("job:{0}")
    http = web(client)
    page = http.get("/").text
    shown = dict(re.findall(r'id="(pending|workers-count|pm-\w+|dead-count)">([^<]*)<', page))
    assert shown == {"pending": "2", "workers-count": "0", "pm-expired": "0",
                     "pm-completed": "0", "pm-cancelled": "1", "dead-count": "0"}  # fmt: skip
    elsewhere = http.get("/?ns=never-made")
    assert elsewhere.status_code == 200
    assert 'id="pending">\N{EN DASH}<' in elsewhere.text
