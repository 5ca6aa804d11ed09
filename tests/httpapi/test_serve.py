"""The HTTP API through real HTTP: a real uvicorn server on a free port (a thread here; a
`tickwheel serve --workers 2` process in the last test), requests with urllib, the real
test Redis behind it."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis
from starlette.routing import Route

from tests.conftest import wait_for
from tests.integration.conftest import namespace_keys
from timer import TimerClient
from timer.httpapi import create_app
from timer.httpapi.openapi import document
from timer.httpapi.tokens import TokenFile
from timer.testing import RedisServer, free_port
from timer.worker import Worker, WorkerSettings

ROOT = Path(__file__).resolve().parents[2]


class Api:
    """Requests to one server: ``call`` answers (status, JSON body)."""

    def __init__(self, base: str, token: str | None = None) -> None:
        self.base = base
        self.token = token

    def call(
        self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
        token: str | None = None,
    ) -> tuple[int, Any]:  # fmt: skip
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        bearer = token if token is not None else self.token
        if bearer:
            req.add_header("Authorization", f"Bearer {bearer}")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, self._body(r.headers.get("content-type", ""), r.read())
        except urllib.error.HTTPError as e:
            return e.code, self._body(e.headers.get("content-type", ""), e.read())

    @staticmethod
    def _body(kind: str, raw: bytes) -> Any:
        return json.loads(raw) if "json" in kind else raw.decode()


@contextlib.contextmanager
def serving(
    redis_server: RedisServer, namespace: str, tmp_path: Path, *, worker: bool
) -> Iterator[tuple[Api, TimerClient, TokenFile]]:
    """The API on a free port with a token file (and a worker leading every shard)."""
    import uvicorn  # noqa: PLC0415

    if not redis_server.running:
        redis_server.restart()
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=4)
    TimerClient.from_url(redis_server.url, f"{namespace}-b").init(shards=2)
    tokens = TokenFile(tmp_path / "tokens.json")
    _, writer = tokens.create("write", [namespace])
    w = Worker(TimerClient.from_url(redis_server.url, namespace), WorkerSettings(worker_id="w1"))
    runner = threading.Thread(target=w.run, kwargs={"handle_signals": False}, daemon=True)
    if worker:
        runner.start()
    port = free_port()
    web_app = create_app(redis_server.url, tokens=tokens)
    config = uvicorn.Config(
        web_app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    web = threading.Thread(target=server.run, daemon=True)
    web.start()
    try:
        wait_for(lambda: server.started, 20, "the API to listen")
        yield Api(f"http://127.0.0.1:{port}", writer), c, tokens
    finally:
        server.should_exit = True
        web.join(10)
        if worker:
            w.stop()
            runner.join(15)
        w.client.close()
        c.close()


@pytest.fixture
def served(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> Iterator[tuple[Api, TimerClient, TokenFile]]:
    with serving(redis_server, namespace, tmp_path, worker=True) as it:
        yield it


@pytest.fixture
def quiet(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> Iterator[tuple[Api, TimerClient, TokenFile]]:
    """As ``served`` without a worker: nothing else writes to the namespace."""
    with serving(redis_server, namespace, tmp_path, worker=False) as it:
        yield it


def test_every_timer_route_through_real_http(
    served: tuple[Api, TimerClient, TokenFile],
) -> None:
    """schedule (201, then 200 for the same), batch with a bad item in its slot, get,
    notify, cancel, complete, reschedule, and a long-poll wait for what the worker fires."""
    api, c, _ = served
    ns = f"/v1/namespaces/{c.namespace}"
    job = {"id": "job:{42}", "delay_ms": 60_000, "payload": {"job": 42}, "watch": ["job:{42}:done"]}
    status, made = api.call("POST", f"{ns}/timers", job)
    assert status == 201 and made["created"] and made["state"] == "pending"
    assert api.call("POST", f"{ns}/timers", job)[0] == 200  # idempotent per id
    status, batch = api.call("POST", f"{ns}/timers/batch", {"items": [
        {"id": "b1", "delay_ms": 300}, {"id": "", "delay_ms": 1}, {"id": "b2", "delay_ms": 300},
    ]})  # fmt: skip
    assert status == 200
    assert [r["status"] for r in batch["results"]] == [201, 400, 201]
    assert batch["results"][1]["kind"] == "InvalidInput" and batch["results"][1]["exit_code"] == 3
    status, got = api.call("GET", f"{ns}/timers/job:%7B42%7D")
    assert status == 200 and got["payload"] == {"job": 42} and got["watch"] == ["job:{42}:done"]
    status, notified = api.call("POST", f"{ns}/notify", {"keys": ["job:{42}:done"]})
    assert notified == {"completed": 1, "per_key": {"job:{42}:done": 1}}
    decided = api.call("GET", f"{ns}/timers/job:%7B42%7D")[1]
    assert decided["state"] == "completed" and decided["notified"] == ["job:{42}:done"]
    # its outcome keeps no watch keys or need: left out, not shown as none
    assert not {"watch", "need", "max_total_ms"} & set(decided), decided
    api.call("POST", f"{ns}/timers", {"id": "c1", "delay_ms": 60_000})
    assert api.call("POST", f"{ns}/timers/c1/cancel", {})[1] == {"id": "c1", "cancelled": True}
    assert api.call("POST", f"{ns}/timers/c1/cancel", {})[1]["cancelled"] is False
    api.call("POST", f"{ns}/timers", {"id": "d/1", "delay_ms": 60_000})  # an id with a slash
    assert api.call("POST", f"{ns}/timers/d/1/complete", {})[1]["completed"] is True
    api.call("POST", f"{ns}/timers", {"id": "r1", "delay_ms": 60_000})
    status, moved = api.call("POST", f"{ns}/timers/r1/reschedule", {"delay_ms": 200})
    assert status == 200 and moved["rescheduled"] and moved["timer"]["id"] == "r1"
    status, outcome = api.call("GET", f"{ns}/timers/r1/outcome?timeout_s=20")
    assert status == 200 and outcome["outcome"] == "expired" and outcome["lateness_ms"] >= 0
    for tid in ("b1", "b2"):
        assert api.call("GET", f"{ns}/timers/{tid}/outcome?timeout_s=20")[1]["outcome"] == "expired"
    api.call("POST", f"{ns}/timers", {"id": "later", "delay_ms": 60_000})
    status, pending = api.call("GET", f"{ns}/timers/later/outcome?timeout_s=0.05")
    assert status == 408 and pending["kind"] == "WaitTimeout" and pending["exit_code"] == 8
    status, missing = api.call("GET", f"{ns}/timers/nope")
    assert status == 404 and missing["kind"] == "TimerNotFound" and missing["exit_code"] == 6
    status, dup = api.call(
        "POST", f"{ns}/timers", {"id": "later", "delay_ms": 60_000, "payload": 1}
    )
    assert status == 409 and dup["kind"] == "DuplicateTimer" and dup["exit_code"] == 7
    assert 'timer "later" is pending with other parameters: its payload differs' in dup["error"]
    assert "cancel it and schedule it again" in dup["error"]


def test_tokens_are_scoped_to_namespaces_and_actions(
    served: tuple[Api, TimerClient, TokenFile],
) -> None:
    """No token or a wrong one: 401. A read token cannot write; a token for namespace A
    cannot touch B; a revoked token stops working at once; health needs none."""
    api, c, tokens = served
    ns, other = f"/v1/namespaces/{c.namespace}", f"/v1/namespaces/{c.namespace}-b"
    _, reader = tokens.create("read", [c.namespace])
    admin_entry, admin = tokens.create("admin", ["*"])
    assert api.call("POST", f"{ns}/timers", {"id": "x", "delay_ms": 1000}, token="")[0] == 401
    assert api.call("GET", f"{ns}/timers/x", token="tw_000000000000_" + "a" * 43)[0] == 401
    status, refused = api.call("POST", f"{ns}/timers", {"id": "x", "delay_ms": 1000}, token=reader)
    assert status == 403 and "may not write" in refused["error"] and reader not in refused["error"]
    assert api.call("GET", f"{ns}/timers/x", token=reader)[0] == 404  # read: allowed
    assert api.call("POST", f"{other}/timers", {"id": "y", "delay_ms": 1000})[0] == 403
    assert api.call("POST", f"{other}/timers", {"id": "y", "delay_ms": 1000}, token=admin)[0] == 201
    assert tokens.revoke(admin_entry.id)
    assert api.call("GET", f"{other}/timers/y", token=admin)[0] == 401
    assert api.call("GET", "/healthz", token="")[1] == {"live": True}
    assert api.call("GET", "/readyz", token="")[1] == {"ready": True}


@pytest.mark.parametrize(
    "case",
    [
        ("/timers", {"id": "x"}, 400, "give exactly one of delay_ms or deadline_ms"),
        ("/timers", {"id": "x", "delay_ms": 1, "deadline_ms": 2}, 400, "exactly one of"),
        # values quoted as JSON quotes them, the sender's language (not Python's 'soon')
        ("/timers", {"id": "x", "delay_ms": "soon"}, 400, 'expected an integer, got "soon"'),
        ("/timers", {"id": "x", "delay_ms": "it's"}, 400, 'got "it\'s"'),
        ("/timers", {"id": "x", "delay_ms": True}, 400, "expected an integer, got true"),
        ("/timers", {"id": "x", "delay_ms": 1, "colour": "red"}, 400, 'unknown field "colour"'),
        ("/timers", {"id": "x", "delay_ms": 2**53 - 1}, 400, "must be at most 316224000000"),
        ("/timers", {"delay_ms": 1}, 400, 'missing field "id"'),
        ("/timers", {"id": "x", "delay_ms": -5}, 400, "delay_ms"),
        ("/timers", {"id": "x", "delay_ms": 1, "watch": "k"}, 400, "watch"),
        ("/timers", {"id": "j:{1}", "delay_ms": 1, "watch": ["j:{2}"]}, 400, "same hash tag"),
        ("/timers", [1, 2], 400, "expected an object, got [1, 2]"),
        ("/timers/batch", {"items": []}, 400, "items"),
        ("/timers/x/reschedule", {}, 400, "exactly one of delay_ms or deadline_ms"),
        ("/notify", {"keys": []}, 400, "keys"),
    ],
)
def test_bad_requests_get_a_4xx_that_says_what_to_fix_and_write_nothing(
    quiet: tuple[Api, TimerClient, TokenFile],
    redis_client: redis.Redis,
    case: tuple[str, Any, int, str],
) -> None:
    path, body, status, says = case
    api, c, _ = quiet
    before = namespace_keys(redis_client, c.namespace)
    got, error = api.call("POST", f"/v1/namespaces/{c.namespace}{path}", body)
    assert (got, error["kind"], error["exit_code"]) == (status, "InvalidInput", 3), error
    assert says in error["error"], error
    assert namespace_keys(redis_client, c.namespace) == before


def test_malformed_and_oversized_bodies_are_refused(
    quiet: tuple[Api, TimerClient, TokenFile], redis_client: redis.Redis
) -> None:
    api, c, _ = quiet
    before = namespace_keys(redis_client, c.namespace)
    ns = f"/v1/namespaces/{c.namespace}"
    status, error = api.call("POST", f"{ns}/timers", raw=b'{"id": "x", "delay_ms": ')
    assert status == 400 and "not JSON" in error["error"]
    status, error = api.call("POST", f"{ns}/timers", raw=b"[" * 100_000 + b"]" * 100_000)
    assert status == 400
    # a body announced larger than the limit is refused before it is read
    for route, do in (("timers/batch", "send fewer timers"), ("schedules", "a smaller body")):
        conn = http.client.HTTPConnection(api.base.removeprefix("http://"), timeout=30)
        conn.putrequest("POST", f"{ns}/{route}")
        conn.putheader("Authorization", f"Bearer {api.token}")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(5 * 1024 * 1024))
        conn.endheaders()
        reply = conn.getresponse()
        said = json.loads(reply.read())["error"]
        assert reply.status == 413 and "larger than" in said and do in said, said
        conn.close()
    status, error = api.call("GET", "/v1/namespaces/no-such-namespace/timers/x")
    assert status in (400, 403)  # the writer token has no rights on it: refused first
    assert namespace_keys(redis_client, c.namespace) == before


def test_openapi_document_is_the_servers_and_kept_in_the_repo(
    served: tuple[Api, TimerClient, TokenFile],
) -> None:
    """/v1/openapi.json is built from the definitions the server validates with; the
    copy in docs/ is that document; every route of the app is in it, and every documented
    route answers (not 404 or 405)."""
    api, c, _ = served
    status, served_doc = api.call("GET", "/v1/openapi.json")
    assert status == 200 and served_doc == document() and served_doc["openapi"] == "3.1.0"
    kept = json.loads((ROOT / "docs" / "openapi.json").read_text())
    assert kept == document(), "docs/openapi.json is stale: python -m timer.httpapi.openapi > it"
    app = create_app("redis://127.0.0.1:1", tokens=None)
    routes = [r for r in app.routes if isinstance(r, Route)]
    routed = {
        (m, r.path.replace(":path", "").replace(":int", ""))
        for r in routes
        for m in (r.methods or ())
        if m != "HEAD"
    }
    documented = {(m.upper(), p) for p, ops in document()["paths"].items() for m in ops}
    assert routed == documented
    for method, path in documented:
        url = path.replace("{namespace}", c.namespace).replace("{timer_id}", "t1")
        url = url.replace("{group}", "g").replace("{shard}", "0").replace("{entry}", "1-0")
        answered, _ = api.call(method, url, {} if method == "POST" else None)
        assert answered not in (404, 405) or "kind" in _, (method, path, answered)


def test_tickwheel_serve_with_workers_and_tokens(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """`tickwheel tokens create` then `tickwheel serve --workers 2`: the token schedules and
    reads a timer through either process, and /metrics counts both processes' requests;
    SIGTERM stops it (exit 0). Without a token file serve refuses to start, and --no-auth
    is refused beyond loopback."""
    TimerClient.from_url(redis_server.url, namespace).init(shards=2)
    base = [
        sys.executable,
        "-m",
        "timer.cli",
        "--redis-url",
        redis_server.url,
        "--namespace",
        namespace,
    ]
    env = {**os.environ, "TICKWHEEL_TOKENS": str(tmp_path / "tokens.json")}
    refused = subprocess.run(
        [*base, "serve"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert refused.returncode == 4 and "no tokens in" in refused.stderr  # configuration
    wide = subprocess.run([*base, "serve", "--host", "0.0.0.0", "--no-auth"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert wide.returncode == 2 and "beyond loopback" in wide.stderr
    made = subprocess.run([*base, "--json", "tokens", "create", "--scope", "write"], env=env,
                          capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    token = json.loads(made.stdout)["token"]
    listed = subprocess.run(
        [*base, "tokens", "list"], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    assert token not in listed.stdout and "write" in listed.stdout
    port = free_port()
    with (tmp_path / "serve.log").open("wb") as log:
        proc = subprocess.Popen(
            [*base, "serve", "--port", str(port), "--workers", "2"], env=env, stdout=log, stderr=log
        )
    api = Api(f"http://127.0.0.1:{port}", token)

    def up() -> bool:
        try:
            return api.call("GET", "/healthz")[0] == 200
        except OSError:
            return False

    try:
        wait_for(up, 30, "tickwheel serve to answer")
        ns = f"/v1/namespaces/{namespace}"
        for i in range(6):  # spread over the two processes
            assert api.call("POST", f"{ns}/timers", {"id": f"s{i}", "delay_ms": 60_000})[0] == 201
            assert api.call("GET", f"{ns}/timers/s{i}")[1]["state"] == "pending"
        with ThreadPoolExecutor(8) as pool:  # at once: both processes take some
            codes = list(pool.map(lambda i: api.call("GET", f"{ns}/timers/s{i % 6}")[0], range(40)))
        assert codes == [200] * 40
        for _ in range(8):  # whichever process answers, /metrics counts both processes'
            scraped = urllib.request.urlopen(f"{api.base}/metrics", timeout=10).read().decode()
            got = [
                float(line.rsplit(" ", 1)[1])
                for line in scraped.splitlines()
                if line.startswith('tickwheel_http_requests_total{route="getTimer"')
                and 'status="200"' in line
            ]
            assert sum(got) == 46, scraped
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0, (tmp_path / "serve.log").read_text()
    assert token not in (tmp_path / "serve.log").read_text()


def test_readme_curl_lines_run(served: tuple[Api, TimerClient, TokenFile]) -> None:
    """The HTTP guide's lines, against this server, as one shell runs them: its first
    line's API and NS are this server's; its TOKEN line runs as written (trial 17: the
    guide used $TOKEN and never set it, so a reader's curl got a 401), making a token in
    the server's token file, which the curl lines after it then use. They run as pasted,
    with no ``; echo`` after them: each answer ends its own line (a new user's trial saw
    answers run together on one line)."""
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    api, c, tokens = served
    text = (ROOT / "docs" / "guides" / "http.md").read_text()
    block = text.split("# The HTTP API and webhooks", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    lines = [ln.strip() for ln in block.splitlines() if ln.strip()]
    assert lines[0] == "API=http://127.0.0.1:8000 NS=default", lines[0]
    assert lines[1].startswith("TOKEN=$(tickwheel tokens create "), lines[1]
    curls = lines[2:]
    assert len(curls) >= 4 and all(ln.startswith("curl ") for ln in curls), curls
    script = [f"API={api.base} NS={c.namespace}", lines[1]]
    script += [f"{ln} --fail-with-body -sS" for ln in curls]  # as pasted: no `; echo`
    env = {k: v for k, v in os.environ.items() if k != "TOKEN"}  # the block sets it
    path = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"  # tickwheel
    env |= {"TICKWHEEL_TOKENS": str(tokens.path), "PATH": path}
    before = set(tokens.load())
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(script)], env=env,
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert out.returncode == 0, (out.stdout, out.stderr)
    made = [t for tid, t in tokens.load().items() if tid not in before]
    assert [(t.scope, t.namespaces) for t in made] == [("write", (c.namespace,))], made
    assert out.stdout.endswith("\n"), out.stdout  # the prompt after it on a line of its own
    answers = [json.loads(ln) for ln in out.stdout.splitlines()]  # one answer a line
    assert len(answers) == len(curls), out.stdout
    assert answers[0]["created"] is True, answers[0]  # its own id: not one the tour left
    assert answers[-1]["outcome"] == "completed", answers[-1]


def test_serves_help_sets_the_token_its_curl_sends(tmp_path: Path) -> None:
    """`serve --help`'s example sent "Bearer $TOKEN" and never set TOKEN: pasted, the
    curl got a 401 (trial 17). It sets TOKEN before the curl, from `tokens create`'s
    stdout, which is the token alone: one the token file then checks."""
    from click.testing import CliRunner  # noqa: PLC0415

    from timer.cli.main import main  # noqa: PLC0415

    helped = CliRunner().invoke(main, ["serve", "--help"]).output.splitlines()
    sets = [i for i, ln in enumerate(helped) if ln.strip().startswith("TOKEN=$(")]
    uses = [i for i, ln in enumerate(helped) if "$TOKEN" in ln]
    assert sets and uses and sets[0] < uses[0], helped
    line = helped[sets[0]].strip()
    assert line.startswith("TOKEN=$(tickwheel tokens create ") and line.endswith(")"), line
    path = tmp_path / "tokens.json"
    made = subprocess.run([sys.executable, "-m", "timer.cli", *shlex.split(line[8:-1])[1:],
                           "--tokens", str(path)], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    token = TokenFile(path).check(made.stdout.rstrip("\n"))  # as $(...) takes it
    assert token is not None and token.scope == "write", (made.stdout, made.stderr)


def test_a_handler_in_any_language_through_a_group(
    served: tuple[Api, TimerClient, TokenFile],
) -> None:
    """Long-poll batches for a consumer; ack, retry (it comes back with attempt 2) and
    dead-letter by ref; what was acked never comes back; a bad ref is a 400. An admin
    finds the dead letter by filter and drops it at the count confirmed."""
    api, c, tokens = served
    c.schedule_many([{"id": f"h:{i}", "delay_ms": 100, "payload": {"n": i}} for i in range(5)])
    grp = f"/v1/namespaces/{c.namespace}/groups/billing"
    got: dict[str, Any] = {}

    def poll() -> bool:
        status, batch = api.call("GET", f"{grp}/outcomes?consumer=svc-1&count=10&wait_ms=500")
        assert status == 200, batch
        got.update({o["id"]: o for o in batch["outcomes"]})
        return len(got) == 5

    wait_for(poll, 20, "five outcomes for the consumer")
    refs = {tid: o["ref"] for tid, o in got.items()}
    assert got["h:0"]["payload"] == {"n": 0} and got["h:0"]["attempt"] == 1
    assert got["h:0"]["idempotency_key"] == refs["h:0"]
    assert api.call("POST", f"{grp}/ack", {"refs": [refs["h:0"], refs["h:1"], refs["h:2"]]})[1] == {
        "acked": 3
    }
    # again: nothing was pending, and it says so (it answered the count sent)
    assert api.call("POST", f"{grp}/ack", {"refs": [refs["h:0"], refs["h:0"]]})[1] == {"acked": 0}
    # a group that never read: a 404 in its own words, not the script's error from Redis
    status, missing = api.call(
        "POST",
        f"/v1/namespaces/{c.namespace}/groups/never/retry",
        {"ref": refs["h:3"], "delay_ms": 1},
    )
    assert (status, missing["kind"]) == (404, "NotFound"), missing
    assert "no such consumer group" in missing["error"], missing
    assert not re.search(r"NOGROUP|script|user_script|\{tw:", missing["error"]), missing
    assert (
        api.call("POST", f"{grp}/retry", {"ref": refs["h:3"], "delay_ms": 100})[1]["retrying"]
        is True
    )
    status, dead = api.call(
        "POST", f"{grp}/dead", {"ref": refs["h:4"], "error": "no such job", "consumer": "svc-1"}
    )
    assert status == 200 and dead["dead_letter"]
    again: list[dict[str, Any]] = []

    def retried() -> bool:
        _, batch = api.call("GET", f"{grp}/outcomes?consumer=svc-1&count=10&wait_ms=500")
        again.extend(batch["outcomes"])
        return any(o["id"] == "h:3" for o in again)

    wait_for(retried, 20, "the retry to come back")
    assert [(o["id"], o["attempt"]) for o in again] == [("h:3", 2)]
    assert api.call("POST", f"{grp}/ack", {"refs": [again[0]["ref"]]})[0] == 200
    [letter] = c.dead_letters("billing")
    assert letter.outcome is not None and letter.outcome.id == "h:4"
    assert letter.error == "no such job" and letter.consumer == "svc-1"
    dead, admin = f"/v1/namespaces/{c.namespace}/dead", tokens.create("admin", [c.namespace])[1]
    status, listed = api.call("GET", f"{dead}?group=billing&error=NO+SUCH&match=h:*", token=admin)
    assert status == 200 and [d["outcome"]["id"] for d in listed["dead_letters"]] == ["h:4"]
    many = {"group": "billing", "expect": 2}
    status, stale = api.call("POST", f"{dead}/redeliver", many, token=admin)
    assert status == 409 and stale["kind"] == "SelectionChanged" and stale["exit_code"] == 14
    assert len(c.dead_letters("billing")) == 1  # nothing was done
    status, done = api.call("POST", f"{dead}/drop", {"match": "h:4", "expect": 1}, token=admin)
    assert status == 200 and done["matched"] == 1 and len(done["done"]) == 1
    assert c.dead_letters_total() == 0
    status, bad = api.call("POST", f"{grp}/ack", {"refs": ["nope"]})
    assert status == 400 and "outcome ref must be" in bad["error"]
    status, bad = api.call("GET", f"{grp}/outcomes?count=10")
    assert status == 400 and "consumer=" in bad["error"]
    assert api.call("GET", f"{grp}/outcomes?consumer=svc-1&wait_ms=0")[1] == {"outcomes": []}


def test_a_group_whose_name_holds_a_slash(served: tuple[Api, TimerClient, TokenFile]) -> None:
    """A group named ``ops/billing`` is reachable with the '/' as is or sent as %2F: the
    same group reads the outcomes and acks them; no group named ``ops`` appears."""
    api, c, _ = served
    c.schedule_many([{"id": f"sl:{i}", "delay_ms": 50} for i in range(3)])
    got: dict[str, str] = {}

    def poll() -> bool:
        for name in ("ops/billing", "ops%2Fbilling"):
            path = f"/v1/namespaces/{c.namespace}/groups/{name}/outcomes?consumer=a&wait_ms=200"
            status, batch = api.call("GET", path)
            assert status == 200, batch
            got.update({o["id"]: o["ref"] for o in batch["outcomes"]})
        return len(got) == 3

    wait_for(poll, 20, "three outcomes for the group")
    status, acked = api.call(
        "POST",
        f"/v1/namespaces/{c.namespace}/groups/ops%2Fbilling/ack",
        {"refs": list(got.values())},
    )
    assert status == 200 and acked == {"acked": 3}
    names = {g.name for g in c.groups()}
    assert "ops/billing" in names and "ops" not in names


def read_events(base: str, path: str, token: str, want: int, seen: list[dict[str, Any]]) -> None:
    """Follow a Server-Sent Events stream, acknowledging each outcome as it comes, until
    ``seen`` holds ``want`` or the stream ends (the server went away)."""
    req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"})
    ack_path = path.split("/events", 1)[0] + "/ack"
    try:
        with urllib.request.urlopen(req, timeout=30) as stream:
            event: dict[str, str] = {}
            for raw in stream:
                line = raw.decode().rstrip("\n")
                if line:
                    name, _, value = line.partition(": ")
                    event[name] = value
                    continue
                if event.get("event") == "outcome":
                    data = json.loads(event["data"])
                    assert event["id"] == data["ref"]
                    seen.append(data)
                    Api(base, token).call("POST", ack_path, {"refs": [data["ref"]]})
                    if len(seen) >= want:
                        return
                event = {}
    except (OSError, http.client.HTTPException):
        return  # the server stopped: the caller reconnects


def test_the_event_stream_survives_a_server_restart_without_losing_or_doubling(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """A consumer follows the group's events and acks each; the server stops midway and
    another starts: reconnected under the same name, it gets every outcome exactly once
    (those the first server had sent that the reader never took come back once unsettled
    for reclaim_idle_ms; those it acked never do)."""
    path = f"/v1/namespaces/{namespace}/groups/svc/events?consumer=svc-1&reclaim_idle_ms=1000"
    seen: list[dict[str, Any]] = []
    with serving(redis_server, namespace, tmp_path, worker=True) as (api, c, _):
        c.schedule_many([{"id": f"e:{i}", "delay_ms": 100} for i in range(20)])
        assert api.token is not None
        read_events(api.base, path, api.token, 8, seen)
        assert len(seen) == 8
        first_token = api.token
    with serving(redis_server, namespace, tmp_path, worker=True) as (api, c, _):
        c.schedule_many([{"id": f"e:{i}", "delay_ms": 100} for i in range(20, 30)])
        read_events(api.base, path, first_token, 30, seen)
    ids = [o["id"] for o in seen]
    assert sorted(ids) == sorted(f"e:{i}" for i in range(30)), ids


def test_admin_reads_need_an_admin_token_and_act_on_dead_letters(
    served: tuple[Api, TimerClient, TokenFile],
) -> None:
    """stats, groups and dead letters (list, show, redeliver, drop) answer an admin token
    and refuse a write one; /metrics counts the requests by route and status."""
    api, c, tokens = served
    _, admin = tokens.create("admin", [c.namespace])
    ns = f"/v1/namespaces/{c.namespace}"
    assert api.call("GET", f"{ns}/stats")[0] == 403  # a write token
    c.schedule_many([{"id": f"d:{i}", "delay_ms": 50} for i in range(2)])
    grp = f"{ns}/groups/ops"
    got: list[dict[str, Any]] = []

    def poll() -> bool:
        got.extend(api.call("GET", f"{grp}/outcomes?consumer=o1&wait_ms=500")[1]["outcomes"])
        return len(got) == 2

    wait_for(poll, 20, "two outcomes")
    for o in got:
        assert api.call("POST", f"{grp}/dead", {"ref": o["ref"], "error": "boom"})[0] == 200
    status, stats = api.call("GET", f"{ns}/stats", token=admin)
    assert status == 200 and len(stats["shards"]) == 4
    status, groups = api.call("GET", f"{ns}/groups", token=admin)
    assert status == 200 and [g["name"] for g in groups["groups"]] == ["ops"]
    status, dead = api.call("GET", f"{ns}/dead?group=ops", token=admin)
    letters = dead["dead_letters"]
    assert status == 200 and sorted(d["outcome"]["id"] for d in letters) == ["d:0", "d:1"]
    one, two = letters[0]["ref"], letters[1]["ref"]
    status, shown = api.call("GET", f"{ns}/dead/{one}", token=admin)
    assert status == 200 and shown["error"] == "boom" and shown["outcome"]["outcome"] == "expired"
    assert api.call("POST", f"{ns}/dead/{one}/redeliver", {}, token=admin)[1]["redelivered_as"]
    assert api.call("POST", f"{ns}/dead/{two}/drop", {}, token=admin)[1]["dropped"] is True
    status, gone = api.call("GET", f"{ns}/dead/{two}", token=admin)
    assert status == 404 and gone["exit_code"] == 6
    assert api.call("GET", f"{ns}/dead", token=admin)[1]["dead_letters"] == []
    with urllib.request.urlopen(api.base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    assert 'tickwheel_http_requests_total{route="deadLetters",status="200"}' in text
    assert 'tickwheel_http_requests_total{route="stats",status="403"}' in text
    assert 'tickwheel_http_request_seconds_bucket{le="0.005",route="stats"}' in text


def test_tickwheel_serve_speaks_https_with_certfile_and_keyfile(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """--certfile/--keyfile: the API answers HTTPS (the client trusts the test CA), and
    plain HTTP on that port gets no answer; giving one of the two is a usage error."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make test certificates")
    from tests.integration.test_tls import _make_certs  # noqa: PLC0415

    _make_certs(tmp_path)
    TimerClient.from_url(redis_server.url, namespace).init(shards=2)
    base = [
        sys.executable,
        "-m",
        "timer.cli",
        "--redis-url",
        redis_server.url,
        "--namespace",
        namespace,
    ]
    half = subprocess.run([*base, "serve", "--no-auth", "--certfile", str(tmp_path / "server.crt")],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert half.returncode == 2 and "both --certfile and --keyfile" in half.stderr
    port = free_port()
    with (tmp_path / "serve.log").open("wb") as log:
        proc = subprocess.Popen([*base, "serve", "--no-auth", "--port", str(port), "--certfile",
                                 str(tmp_path / "server.crt"), "--keyfile",
                                 str(tmp_path / "server.key")], stdout=log, stderr=log)  # fmt: skip
    context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=5,
                                        context=context) as r:  # fmt: skip
                return bool(r.status == 200)
        except OSError:
            return False

    try:
        wait_for(answers, 30, "the HTTPS API to answer")
        req = urllib.request.Request(
            f"https://127.0.0.1:{port}/v1/namespaces/{namespace}/timers",
            method="POST",
            data=json.dumps({"id": "tls-1", "delay_ms": 60_000}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10, context=context) as r:
            assert r.status == 201
        with pytest.raises((OSError, http.client.HTTPException)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_a_callback_url_needs_a_host_the_server_allows(
    redis_server: RedisServer, namespace: str, redis_client: redis.Redis
) -> None:
    """serve --callback-host: a timer may name a callback on that host; any other host
    is refused with a 400 that says how to allow it (in its slot in a batch), nothing
    written for it."""
    from starlette.testclient import TestClient  # noqa: PLC0415

    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=2)
    app = create_app(redis_server.url, tokens=None, callback_hosts=["hooks.example"])
    ns = f"/v1/namespaces/{namespace}"
    before = namespace_keys(redis_client, namespace)
    with TestClient(app) as http:
        evil = {"id": "a", "delay_ms": 1000, "callback_url": "https://evil.example/x"}
        bad = http.post(f"{ns}/timers", json=evil)
        assert bad.status_code == 400 and "--callback-host" in bad.json()["error"]
        assert namespace_keys(redis_client, namespace) == before
        # a password with a / in it: the parse's host is the user's name, never shown
        hidden = {"id": "a", "delay_ms": 1000, "callback_url": "https://usr:pa/ss@hooks.example/x"}
        bad = http.post(f"{ns}/timers", json=hidden)
        assert bad.status_code == 400 and "must not carry credentials" in bad.json()["error"]
        assert "usr" not in bad.text and "pa/ss" not in bad.text, bad.text
        assert namespace_keys(redis_client, namespace) == before
        good = {"id": "a", "delay_ms": 1000, "callback_url": "https://hooks.example/x"}
        ok = http.post(f"{ns}/timers", json=good)
        assert ok.status_code == 201
        batch = http.post(f"{ns}/timers/batch", json={"items": [
            {"id": "b", "delay_ms": 1000, "callback_url": "https://evil.example/x"},
            {"id": "c", "delay_ms": 1000, "callback_url": "https://hooks.example/y"},
        ]}).json()["results"]  # fmt: skip
        assert [r["status"] for r in batch] == [400, 201]
    info = c.get("a")
    assert info is not None and info.callback_url == "https://hooks.example/x"
    assert c.get("b") is None
    c.close()


def test_every_door_shows_one_value_alike(
    quiet: tuple[Api, TimerClient, TokenFile], redis_server: RedisServer
) -> None:
    """One timer and its outcome (bytes in the payload, watch keys, a trace) read through
    the HTTP API, ``tickwheel get/wait --json`` and the library's shapes are the same
    JSON (#41: they had different fields)."""
    from click.testing import CliRunner  # noqa: PLC0415

    from timer.cli.main import main  # noqa: PLC0415
    from timer.shapes import outcome_json, timer_info_json  # noqa: PLC0415

    api, c, _ = quiet
    ns = f"/v1/namespaces/{c.namespace}"
    trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    note = "nightly export ✓"
    c.schedule("door:{1}", 60_000, payload={"raw": b"\x00\xff", "n": [1, 2]},
               watch=["door:{1}:a"], traceparent=trace, note=note)  # fmt: skip
    base = ["--redis-url", redis_server.url, "--namespace", c.namespace, "--json"]

    def cli(*args: str) -> Any:
        result = CliRunner().invoke(main, [*base, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    info = c.get("door:{1}")
    assert info is not None
    status, over_http = api.call("GET", f"{ns}/timers/door:%7B1%7D")
    assert status == 200
    assert over_http == cli("get", "door:{1}") == timer_info_json(info)
    assert over_http["payload"]["raw"] == {"$bytes": "AP8="}
    assert over_http["traceparent"] == trace and over_http["notified"] == []
    assert c.cancel("door:{1}")
    status, ended = api.call("GET", f"{ns}/timers/door:%7B1%7D/outcome?timeout_s=1")
    assert status == 200
    assert ended == cli("wait", "door:{1}") == outcome_json(c.wait("door:{1}", timeout=1))
    assert ended["traceparent"] == trace and ended["created_ms"] == info.created_ms
    assert ended["outcome"] == "cancelled" and "ref" not in ended
    assert ended["note"] == over_http["note"] == note  # the worked example's field (#41)
    assert cli("get", "door:{1}")["note"] == note  # kept with the outcome
    # ... and set through the CLI and the HTTP API as well, each door by its declaration
    cli("schedule", "door:{2}", "--in", "1m", "--note", "by hand")
    assert api.call("GET", f"{ns}/timers/door:%7B2%7D")[1]["note"] == "by hand"
    # a heartbeat over HTTP (#43): extended; past the cap 409, the one error shape
    cli("schedule", "beat:{5}", "--in", "1m", "--max-total-ms", "90000")
    status, beat = api.call("POST", f"{ns}/timers/beat:%7B5%7D/heartbeat", {"extend_ms": 80_000})
    assert status == 200 and (beat["extended"], beat["moved"]) == (True, True), beat
    # one due later than extend_ms from now stays: taken (extended), not moved (trial 17:
    # "extended": true alone read as if it had moved)
    status, kept = api.call("POST", f"{ns}/timers/beat:%7B5%7D/heartbeat", {"extend_ms": 1000})
    assert status == 200 and (kept["extended"], kept["moved"]) == (True, False), kept
    assert kept["timer"]["deadline_ms"] == beat["timer"]["deadline_ms"], kept
    status, capped = api.call("POST", f"{ns}/timers/beat:%7B5%7D/heartbeat", {"extend_ms": 10**6})
    assert (status, capped["kind"], capped["exit_code"]) == (409, "HeartbeatCapped", 13)
    # ... and a reschedule past the cap (#54: one meaning of the cap): 409, nothing moved
    due = c.get("beat:{5}")
    status, past = api.call("POST", f"{ns}/timers/beat:%7B5%7D/reschedule", {"delay_ms": 10**6})
    assert (status, past["kind"], past["exit_code"]) == (409, "Capped", 13), past
    assert due is not None and c.get("beat:{5}") == due
    assert c.cancel("beat:{5}")  # ended: not taken, nothing moved
    status, ended = api.call("POST", f"{ns}/timers/beat:%7B5%7D/heartbeat", {"extend_ms": 1})
    assert status == 200 and (ended["extended"], ended["moved"]) == (False, False), ended
    status, _ = api.call("POST", f"{ns}/timers/none:%7B5%7D/heartbeat", {"extend_ms": 1})
    assert status == 404
    status, _ = api.call("POST", f"{ns}/timers", {"id": "door:{3}", "delay_ms": 1, "note": "x"})
    assert status == 201 and c.cancel("door:{3}")  # no worker here: decided by hand
    assert cli("wait", "door:{3}")["note"] == "x"
    status, refused = api.call("POST", f"{ns}/timers", {"id": "d:{4}", "delay_ms": 1, "note": 7})
    assert status == 400 and c.get("d:{4}") is None, refused
    # a priority (#43) through each door: the library, the CLI, the HTTP body; kept with
    # the outcome; out of its range refused by each, nothing written
    c.schedule("pri:{6}", 60_000, priority=-7)
    cli("schedule", "pri:{7}", "--in", "1m", "--priority", "42")
    status, _ = api.call("POST", f"{ns}/timers", {"id": "pri:{8}", "delay_ms": 60_000,
                                                  "priority": 100})  # fmt: skip
    assert status == 201
    shown = [api.call("GET", f"{ns}/timers/pri:%7B{i}%7D")[1]["priority"] for i in (6, 7, 8)]
    assert shown == [-7, 42, 100] and cli("get", "pri:{7}")["priority"] == 42
    assert c.cancel("pri:{7}") and cli("wait", "pri:{7}")["priority"] == 42
    assert c.wait("pri:{7}", timeout=1).priority == 42
    status, _ = api.call("POST", f"{ns}/timers", {"id": "pri:{9}", "delay_ms": 1, "priority": 101})
    assert status == 400 and c.get("pri:{9}") is None
    bad = CliRunner().invoke(main, [*base, "schedule", "pri:{9}", "--in", "1m",
                                    "--priority", "-101"])  # fmt: skip
    assert bad.exit_code != 0 and "priority" in bad.output and c.get("pri:{9}") is None
