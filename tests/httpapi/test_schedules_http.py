"""Recurring schedules through the HTTP API (``…/schedules``), on a real server over
real HTTP: every route, the one shape a schedule has at both doors, the refusals (a bad
cron, an unknown name, a read token, another site's page) writing nothing, and the HTTP
guide's schedule lines run as written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.integration.conftest import namespace_keys
from timer import TimerClient
from timer.httpapi.tokens import TokenFile
from timer.shapes import schedule_json

from .test_serve import ROOT, Api, quiet  # noqa: F401 - quiet: the fixture

pytestmark = pytest.mark.redis

Served = tuple[Api, TimerClient, TokenFile]


def test_every_schedule_route(quiet: Served) -> None:  # noqa: F811
    api, c, _ = quiet
    at = f"/v1/namespaces/{c.namespace}/schedules"
    spec = {"name": "report", "cron": "0 2 * * *", "tz": "Europe/Paris", "payload": {"r": 1}}
    status, made = api.call("POST", at, spec)
    assert status == 201, made
    assert made["name"] == "report" and made["state"] == "active" and made["cron"] == "0 2 * * *"
    assert made["tz"] == "Europe/Paris" and made["payload"] == {"r": 1} and made["armed"]
    # the one shape: the library's schedule as the dashboard shows it
    assert made == schedule_json(c.schedules.get("report"))  # type: ignore[arg-type]
    assert api.call("POST", at, spec) == (200, made)  # the same again: as it is
    status, said = api.call("POST", at, {**spec, "cron": "0 3 * * *"})
    assert status == 409 and said["kind"] == "DuplicateTimer", said
    assert "POST …/schedules/report/update" in said["error"], said
    assert c.schedules.get("report").spec.recurrence.cron == "0 2 * * *"  # type: ignore[union-attr]

    assert api.call("POST", at, {"name": "beat", "every": "1s", "missed": "skip"})[0] == 201
    status, listed = api.call("GET", at)
    assert status == 200 and [s["name"] for s in listed["schedules"]] == ["beat", "report"]
    assert api.call("GET", f"{at}/report") == (200, made)

    for _ in range(2):  # pausing a paused one again changes nothing
        status, paused = api.call("POST", f"{at}/report/pause")
        assert status == 200 and paused["state"] == "paused" and paused["armed"] is None, paused
    status, resumed = api.call("POST", f"{at}/report/resume")
    assert status == 200 and resumed["state"] == "active" and resumed["next_ms"], resumed

    status, changed = api.call("POST", f"{at}/report/update", {"every": 60_000})
    assert status == 200 and changed["every_ms"] == 60_000 and changed["cron"] is None
    assert changed["version"] > resumed["version"] and changed["payload"] is None

    status, fired = api.call("POST", f"{at}/report/trigger")
    assert status == 200 and fired["name"] == "report", fired
    tid = fired["timer"]["id"]
    assert tid.startswith("{report}@") and tid.endswith("-manual") and fired["timer"]["created"]
    assert c.get(tid) is not None and c.get(tid).state == "pending"  # type: ignore[union-attr]

    now = c.server_time_ms()
    window = {"start_ms": now - 5_500, "end_ms": now - 501}  # 5 whole seconds
    status, back = api.call("POST", f"{at}/beat/backfill", window)
    assert status == 200 and back["name"] == "beat", back
    ids = [r["id"] for r in back["results"]]
    assert len(ids) == 5 and all(r["status"] == 201 for r in back["results"]), back
    assert all(i.startswith("{beat}@") and c.get(i) is not None for i in ids)
    status, again = api.call("POST", f"{at}/beat/backfill", window)  # none fired twice
    assert status == 200 and [(r["id"], r["status"]) for r in again["results"]] == [
        (i, 200) for i in ids
    ]

    assert api.call("POST", f"{at}/report/delete") == (200, {"name": "report", "deleted": True})
    assert c.schedules.get("report") is None
    for method, path in [
        ("GET", "report"), ("POST", "report/pause"), ("POST", "report/resume"),
        ("POST", "report/trigger"), ("POST", "report/delete"), ("POST", "nope/update"),
    ]:  # fmt: skip
        body = {"every": "1m"} if path.endswith("update") else None
        status, said = api.call(method, f"{at}/{path}", body)
        assert status == 404 and said["kind"] == "ScheduleNotFound", (path, said)
        assert "no schedule" in said["error"] and c.namespace in said["error"], said
    status, said = api.call("POST", f"{at}/nope/backfill", window)
    assert status == 404 and said["kind"] == "ScheduleNotFound", said


_MEANT = 'did you mean "Europe/Paris"?'  # the library's words, at every door
_LONG = {"start_ms": 1_577_836_800_000, "end_ms": 1_609_459_200_000}  # 2020: 525,600 minutes


def test_a_bad_spec_is_a_400_that_says_what_to_write_and_writes_nothing(
    quiet: Served,  # noqa: F811
    redis_client: redis.Redis,
) -> None:
    api, c, _ = quiet
    at = f"/v1/namespaces/{c.namespace}/schedules"
    assert api.call("POST", at, {"name": "kept", "every": "1m"})[0] == 201
    before = namespace_keys(redis_client, c.namespace)
    refused = [
        ("POST", at, {"name": "bad", "cron": "61 * * * *"}, 'cron "61 * * * *" is not valid'),
        ("POST", at, {"name": "bad", "cron": "0 2 * * *", "tz": "Mars/Olympus"}, "time zone"),
        ("POST", at, {"name": "bad", "cron": "0 2 * * *", "tz": "europe/paris"}, _MEANT),
        ("POST", at, {"name": "bad", "cron": "0 2 * * *", "every": "1m"}, "exactly one of"),
        ("POST", at, {"name": "bad"}, "exactly one of"),
        ("POST", at, {"name": "a{b}", "every": "1m"}, "may not contain"),
        ("POST", at, {"name": "bad", "every": "1m", "colour": 1}, "unknown field"),
        ("POST", f"{at}/kept/update", {"cron": "not a cron"}, "is not valid"),
        ("POST", f"{at}/kept/backfill", {"start_ms": 10, "end_ms": 5}, "before its start"),
        ("POST", f"{at}/kept/backfill", _LONG | {"limit": 5}, "(or raise limit, at most 1,000)"),
        ("POST", f"{at}/kept/backfill", _LONG, "backfill it in parts, each a shorter range"),
        ("POST", f"{at}/kept/delete", {"keep_armed": "yes"}, "keep_armed"),
    ]
    for method, path, body, words in refused:
        status, said = api.call(method, path, body)
        assert status == 400 and said["kind"] == "InvalidInput", (body, said)
        assert words in said["error"], (body, said)
    assert "write 5 fields" in api.call("POST", at, refused[0][2])[1]["error"]
    assert namespace_keys(redis_client, c.namespace) == before
    assert c.schedules.get("bad") is None


def test_a_read_token_may_read_schedules_and_change_none(
    quiet: Served,  # noqa: F811
    redis_client: redis.Redis,
) -> None:
    api, c, tokens = quiet
    at = f"/v1/namespaces/{c.namespace}/schedules"
    made = api.call("POST", at, {"name": "s", "every": "1m"})[1]
    _, reader = tokens.create("read", [c.namespace])
    assert api.call("GET", at, token=reader) == (200, {"schedules": [made]})
    assert api.call("GET", f"{at}/s", token=reader) == (200, made)
    before = namespace_keys(redis_client, c.namespace)
    for path, body in [
        (at, {"name": "t", "every": "1m"}), (f"{at}/s/pause", None), (f"{at}/s/resume", None),
        (f"{at}/s/trigger", None), (f"{at}/s/update", {"every": "2m"}), (f"{at}/s/delete", None),
        (f"{at}/s/backfill", {"start_ms": 0, "end_ms": 1}),
    ]:  # fmt: skip
        status, said = api.call("POST", path, body, token=reader)
        assert status == 403 and "may not write" in said["error"], (path, said)
    assert namespace_keys(redis_client, c.namespace) == before


def _post(url: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    for k, v in {"Content-Type": "application/json", **headers}.items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_another_sites_page_is_refused_and_delete_says_post(
    quiet: Served,  # noqa: F811
    redis_client: redis.Redis,
) -> None:
    api, c, _ = quiet
    at = f"{api.base}/v1/namespaces/{c.namespace}/schedules"
    assert api.call("POST", at[len(api.base) :], {"name": "s", "every": "1m"})[0] == 201
    before = namespace_keys(redis_client, c.namespace)
    auth = {"Authorization": f"Bearer {api.token}"}
    for headers in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        for url, body in [(at, {"name": "t", "every": "1m"}), (f"{at}/s/delete", {})]:
            status, said = _post(url, {**auth, **headers}, body)
            assert status == 403 and "cross-site" in said["error"], (url, said)
    assert namespace_keys(redis_client, c.namespace) == before
    status, said = api.call("DELETE", f"{at[len(api.base) :]}/s")
    assert status == 405 and "POST" in said["error"] and "/s/delete" in said["error"], said


def test_a_name_with_a_slash_is_reachable_percent_encoded(quiet: Served) -> None:  # noqa: F811
    api, c, _ = quiet
    at = f"/v1/namespaces/{c.namespace}/schedules"
    assert api.call("POST", at, {"name": "team/a b", "every": "1h"})[0] == 201
    status, got = api.call("GET", f"{at}/team%2Fa%20b")
    assert status == 200 and got["name"] == "team/a b", got
    status, paused = api.call("POST", f"{at}/team%2Fa%20b/pause")
    assert status == 200 and paused["name"] == "team/a b" and paused["state"] == "paused"
    assert c.schedules.get("team/a b").state == "paused"  # type: ignore[union-attr]


def test_the_guides_schedule_lines_run(quiet: Served) -> None:  # noqa: F811
    """The HTTP guide's Schedules block, after its first block's API, NS and TOKEN lines
    (the same shell), as pasted: each answer on a line of its own."""
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    api, c, tokens = quiet
    text = (ROOT / "docs" / "guides" / "http.md").read_text()
    first = text.split("```sh", 1)[1].split("```", 1)[0]
    token_line = next(ln.strip() for ln in first.splitlines() if ln.startswith("TOKEN="))
    block = text.split("## Schedules", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    curls = [ln.strip() for ln in block.splitlines() if ln.strip()]
    assert len(curls) >= 4 and all(ln.startswith("curl ") for ln in curls), curls
    script = [f"API={api.base} NS={c.namespace}", token_line]
    script += [f"{ln} --fail-with-body -sS" for ln in curls]
    env = {k: v for k, v in os.environ.items() if k != "TOKEN"}
    path = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"  # tickwheel
    env |= {"TICKWHEEL_TOKENS": str(tokens.path), "PATH": path}
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(script)], env=env,
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert out.returncode == 0, (out.stdout, out.stderr)
    answers = [json.loads(ln) for ln in out.stdout.splitlines()]
    assert len(answers) == len(curls), out.stdout
    made, *_, deleted = answers
    assert made["name"] == "nightly-report" and made["tz"] == "Europe/Paris", made
    assert [a.get("state") for a in answers[1:3]] == ["active", "paused"], answers
    assert answers[3]["timer"]["id"].startswith("{nightly-report}@"), answers[3]
    assert deleted == {"name": "nightly-report", "deleted": True}
    assert c.schedules.get("nightly-report") is None


def test_a_namespace_never_initialised_says_how_to_initialise_it(quiet: Served) -> None:  # noqa: F811
    api, c, tokens = quiet
    _, reader = tokens.create("read", ["*"])
    never = f"{c.namespace}-never"
    status, said = api.call("GET", f"/v1/namespaces/{never}/schedules", token=reader)
    assert status == 400 and said["kind"] == "ConfigError", said
    assert f'"{never}" is not initialised' in said["error"], said
    assert f"tickwheel --namespace {never} init" in said["error"], said


def test_a_spec_that_does_not_do_what_it_reads_as_is_warned_of_in_the_reply(
    quiet: Served,  # noqa: F811
) -> None:
    """An end already past is taken (as before) and said, as the CLI says it (trial 30:
    a 201 with no word, then a schedule `active` that never fires); a spec with nothing
    to say has no `warnings`."""
    api, c, _ = quiet
    at = f"/v1/namespaces/{c.namespace}/schedules"
    status, made = api.call("POST", at, {"name": "gone", "every": "30s", "end": 1})
    assert status == 201, made
    assert made["warnings"] == [
        'end="1970-01-01T00:00:00.001Z" is in the past, so schedule gone never fires'
    ], made
    assert made["next_ms"] is None and made["end_ms"] == 1, made
    status, changed = api.call("POST", f"{at}/gone/update", {"every": "1m", "group": "g"})
    assert status == 200 and len(changed["warnings"]) == 1, changed
    assert changed["warnings"][0].startswith('group g does nothing with overlap="allow"')
    status, fine = api.call("POST", at, {"name": "fine", "every": "30s"})
    assert status == 201 and "warnings" not in fine, fine
    assert api.call("GET", f"{at}/gone")[1].get("warnings") is None  # a create's, not a read's
