"""Webhook delivery (timer/webhook.py) against a real receiver on a free port: signed,
retried with the runner's backoff, dead-lettered after the last attempt, never
following a redirect; and `tickwheel handle --webhook` as a user runs it."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import wait_for
from timer import Backoff, Handlers, InvalidInput, TimerClient
from timer.testing import RedisServer, free_port
from timer.webhook import IDEMPOTENCY, SIGNATURE, WebhookFailed, callbacks, sign, verify, webhook

SECRET = "s3cret-of-the-receiver"


class Receiver:
    """A local HTTP receiver: it answers each POST with the next status of ``plan``
    (then 200), or never answers while ``hang`` is set; it records what it got."""

    def __init__(self, plan: list[int] | None = None, *, hang: bool = False) -> None:
        self.plan = list(plan or [])
        self.hang = hang
        self.release = threading.Event()  # set at teardown: a hung answer ends
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handle(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver.lock:
                    receiver.got.append((dict(self.headers), body))
                    status = receiver.plan.pop(0) if receiver.plan else 200
                if receiver.hang:
                    receiver.release.wait(30)
                    return
                self.send_response(status)
                if status in (301, 302, 307):
                    self.send_header("Location", "http://127.0.0.1:1/elsewhere")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handle)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def bodies(self) -> list[dict[str, Any]]:
        with self.lock:
            return [json.loads(b) for _, b in self.got]


def runner(c: TimerClient, url: str, **kw: Any) -> Handlers:
    h = Handlers(c, group="hooks", max_attempts=kw.pop("max_attempts", 3),
                 backoff=Backoff(initial_s=0.05, max_s=0.1), reclaim_idle_ms=1000)  # fmt: skip
    h.add("expired", webhook(url, SECRET, timeout_s=kw.pop("timeout_s", 5.0)))
    return h


def test_each_outcome_is_posted_signed_and_retried_until_taken(client: TimerClient) -> None:
    """The receiver fails twice (503, 500), then takes it: three deliveries of the same
    outcome, each signed over its body, with the same idempotency key; handled once."""
    client.schedule("job:{1}", 0, payload={"job": 1})
    _fire_all(client)
    with Receiver([503, 500]) as rx:
        h = runner(client, rx.url)
        assert h.run(stop_when_idle=True)
        assert (h.stats.handled, h.stats.retried, h.stats.dead_lettered) == (1, 2, 0)
        assert len(rx.got) == 3
        keys = {headers[IDEMPOTENCY] for headers, _ in rx.got}
        assert len(keys) == 1
        for headers, body in rx.got:
            assert verify(SECRET, headers[SIGNATURE], body)
            assert not verify("another-secret-value", headers[SIGNATURE], body)
        assert [b["attempt"] for b in rx.bodies()] == [1, 2, 3]
        first = rx.bodies()[0]
        assert (first["id"], first["outcome"], first["payload"]) == (
            "job:{1}",
            "expired",
            {"job": 1},
        )
        assert first["idempotency_key"] == keys.pop()


def test_a_receiver_that_never_answers_times_out_and_the_outcome_is_dead_lettered(
    client: TimerClient,
) -> None:
    client.schedule("job:{2}", 0)
    _fire_all(client)
    with Receiver(hang=True) as rx:
        h = runner(client, rx.url, max_attempts=2, timeout_s=0.3)
        assert h.run(stop_when_idle=True)
        assert (h.stats.handled, h.stats.dead_lettered) == (0, 1)
        assert len(rx.got) == 2
    [letter] = client.dead_letters("hooks")
    assert "did not take it" in letter.error and "timed out" in letter.error


def test_a_redirect_is_a_failed_attempt_never_followed(client: TimerClient) -> None:
    client.schedule("job:{3}", 0)
    _fire_all(client)
    with Receiver([302, 302]) as rx:
        h = runner(client, rx.url, max_attempts=2)
        assert h.run(stop_when_idle=True)
        assert h.stats.dead_lettered == 1 and len(rx.got) == 2
    [letter] = client.dead_letters("hooks")
    assert "302" in letter.error


def test_signatures_and_bad_settings() -> None:
    body = b'{"id":"x"}'
    now = int(time.time())
    header = sign(SECRET, now, body)
    assert verify(SECRET, header, body)
    assert not verify(SECRET, header, body + b" ")
    assert not verify(SECRET, sign(SECRET, now - 3600, body), body)  # a replay, too old
    assert not verify(SECRET, "v1=abc", body) and not verify(SECRET, "", body)
    for url in ("ftp://x/y", "http://", "http://user:pw@host/", 7):
        with pytest.raises(InvalidInput):
            webhook(url, SECRET)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="16 characters"):
        webhook("http://127.0.0.1:1/", "short")


def test_tickwheel_handle_webhook_as_a_user_runs_it(
    redis_server: RedisServer, client: TimerClient
) -> None:
    """`tickwheel handle --webhook URL --idle-exit` with the secret in the environment;
    without a secret it is refused with a usage error."""
    client.schedule("job:{4}", 0, payload={"job": 4})
    _fire_all(client)
    base = [sys.executable, "-m", "timer.cli", "--redis-url", redis_server.url, "--namespace",
            client.namespace, "handle"]  # fmt: skip
    with Receiver() as rx:
        bare = {k: v for k, v in os.environ.items() if k != "TICKWHEEL_WEBHOOK_SECRET"}
        no_secret = subprocess.run(
            [*base, "--webhook", rx.url, "--idle-exit"],
            env=bare,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert no_secret.returncode == 2 and "need a secret" in no_secret.stderr
        env = {**os.environ, "TICKWHEEL_WEBHOOK_SECRET": SECRET}
        done = subprocess.run([*base, "--webhook", rx.url, "--idle-exit", "--json"], env=env,
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["handled"] == 1
        assert SECRET not in done.stderr + done.stdout
        [(headers, body)] = rx.got
        assert verify(SECRET, headers[SIGNATURE], body) and json.loads(body)["payload"] == {
            "job": 4
        }


def test_tickwheel_handle_callbacks_as_a_user_runs_it(
    redis_server: RedisServer, client: TimerClient
) -> None:
    """`tickwheel handle --callbacks --callback-host 127.0.0.1 --idle-exit`: each timer's
    outcome goes to its own URL, signed; a host not listed is dead-lettered, never sent;
    with no --callback-host it is a usage error naming the option."""
    with Receiver() as rx:
        client.schedule("cli-cb:1", 0, payload={"n": 1}, callback_url=rx.url + "?job=1")
        client.schedule("cli-cb:2", 0, callback_url="http://elsewhere.example/hook")
        _fire_all(client)
        base = [sys.executable, "-m", "timer.cli", "--redis-url", redis_server.url, "--namespace",
                client.namespace, "handle", "--callbacks", "--max-attempts", "1",
                "--idle-exit"]  # fmt: skip
        env = {**os.environ, "TICKWHEEL_WEBHOOK_SECRET": SECRET}
        no_host = subprocess.run(
            base, env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert no_host.returncode == 2 and "--callback-host" in no_host.stderr
        done = subprocess.run([*base, "--callback-host", "127.0.0.1", "--json"], env=env,
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["handled"] == 1
        assert SECRET not in done.stderr + done.stdout
        [(headers, body)] = rx.got
        assert verify(SECRET, headers[SIGNATURE], body)
        assert json.loads(body)["id"] == "cli-cb:1"
    [letter] = client.dead_letters("handlers")
    assert letter.outcome is not None and letter.outcome.id == "cli-cb:2"


def _fire_all(c: TimerClient) -> None:
    """Expire every due timer of the namespace as a leader would (no worker thread)."""
    from timer.worker import Worker, WorkerSettings  # noqa: PLC0415

    w = Worker(TimerClient.from_url(c.where, c.namespace), WorkerSettings(worker_id="hook-w"))
    try:
        wait_for(lambda: w.run_once() >= 0 and c.stats()["pending"] == 0, 20, "timers fired")
    finally:
        w.close()
        w.client.close()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """urllib honours *_proxy variables: the receiver is local."""
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(var, raising=False)
    yield


def test_callbacks_go_to_each_timers_own_url_on_allowed_hosts(client: TimerClient) -> None:
    """A timer scheduled with a callback_url gets its outcome POSTed there, signed; one
    without is done without a request; one naming a host the runner does not allow is
    dead-lettered with that reason, never sent."""
    with Receiver() as rx:
        client.schedule("cb:1", 0, payload={"n": 1}, callback_url=rx.url + "?job=1")
        client.schedule("cb:none", 0)
        client.schedule("cb:elsewhere", 0, callback_url="http://elsewhere.example/hook")
        _fire_all(client)
        info = client.get("cb:1")
        assert info is not None and info.callback_url == rx.url + "?job=1"
        h = Handlers(client, group="cbs", max_attempts=1, backoff=Backoff(initial_s=0.05))
        h.add("expired", callbacks(SECRET, ["127.0.0.1"], timeout_s=5))
        assert h.run(stop_when_idle=True)
        assert (h.stats.handled, h.stats.dead_lettered) == (2, 1)
        [(headers, body)] = rx.got
        assert verify(SECRET, headers[SIGNATURE], body) and json.loads(body)["id"] == "cb:1"
    [letter] = client.dead_letters("cbs")
    assert letter.outcome is not None and letter.outcome.id == "cb:elsewhere"
    assert "'elsewhere.example' is not allowed" in letter.error
    with pytest.raises(InvalidInput, match="callback_url"):
        client.schedule("cb:bad", 1000, callback_url="ftp://x/y")
    with pytest.raises(InvalidInput, match="credentials"):
        client.schedule("cb:bad", 1000, callback_url="http://u:p@x/y")


TOKEN_IN_PATH = "XoxbPathToken0123"
TOKEN_IN_QUERY = "QueryToken4567xyz"


@pytest.mark.parametrize("answer", ["refused", "500"])
def test_a_failed_delivery_never_shows_a_token_of_its_url(
    client: TimerClient, answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A webhook URL holding a token in its path (Slack-style) and in its query: a failed
    delivery (refused, or answered 500) names the URL as scheme, host and port only. No
    log record, exception message or dead letter kept in Redis holds either token."""
    with Receiver([500, 500]) as rx:  # the direct call's answer, then the runner's
        port = rx.server.server_port if answer == "500" else free_port()
        url = f"http://127.0.0.1:{port}/services/T0/B0/{TOKEN_IN_PATH}?token={TOKEN_IN_QUERY}"
        with pytest.raises(WebhookFailed) as direct:
            webhook(url, SECRET, timeout_s=5)(_outcome())
        shown = str(direct.value)
        assert f"http://127.0.0.1:{port}/…" in shown, shown
        client.schedule("job:{tok}", 0)
        _fire_all(client)
        h = runner(client, url, max_attempts=1)
        caplog.set_level("DEBUG")
        assert h.run(stop_when_idle=True)
        assert h.stats.dead_lettered == 1
    [letter] = client.dead_letters("hooks")
    kept = [
        value
        for shard in range(client.meta.shards)
        for _, fields in client.redis.xrange(client.keys.shard(shard).dead)
        for value in fields.values()
    ]
    logged = [r.getMessage() + str(r.exc_info and r.exc_info[1]) for r in caplog.records]
    assert logged, "the failed attempt was logged"
    for token in (TOKEN_IN_PATH, TOKEN_IN_QUERY):
        assert token not in shown
        assert token not in letter.error, letter.error
        assert not [v for v in kept if token.encode() in v], kept
        assert not [m for m in logged if token in m], logged


def test_a_failed_callback_never_shows_a_token_of_its_url(
    client: TimerClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A timer's callback_url with a token in its path and query, its delivery refused:
    the error (logged, kept with the dead letter) names scheme, host and port only."""
    url = f"http://127.0.0.1:{free_port()}/hook/{TOKEN_IN_PATH}?token={TOKEN_IN_QUERY}"
    client.schedule("cb:{tok}", 0, callback_url=url)
    _fire_all(client)
    h = Handlers(client, group="cbs", max_attempts=1, backoff=Backoff(initial_s=0.05))
    h.add("expired", callbacks(SECRET, ["127.0.0.1"], timeout_s=5))
    caplog.set_level("DEBUG")
    assert h.run(stop_when_idle=True)
    [letter] = client.dead_letters("cbs")
    assert "http://127.0.0.1:" in letter.error and "/…" in letter.error, letter.error
    logged = [r.getMessage() + str(r.exc_info and r.exc_info[1]) for r in caplog.records]
    for token in (TOKEN_IN_PATH, TOKEN_IN_QUERY):
        assert token not in letter.error, letter.error
        assert not [m for m in logged if token in m], logged


def _outcome() -> Any:
    from timer.durable.model.models import Outcome  # noqa: PLC0415

    return Outcome("job:{0}", "expired", 0, 0, None, 0)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.slack.com/services/T0/B0/S3CRET", "https://hooks.slack.com/…"),
        ("http://h.example:8080?token=S3CRET", "http://h.example:8080/…"),
        ("http://h.example#S3CRET", "http://h.example/…"),
        ("http://u:S3CRET@h.example/x", "http://u:***@h.example/…"),
        ("http://h.example", "http://h.example"),
    ],
)
def test_a_url_shown_without_its_path_keeps_scheme_host_and_port(url: str, shown: str) -> None:
    """redact_url(path=False), as a delivery's failure names its URL."""
    from timer.redis.redaction import redact_url  # noqa: PLC0415

    assert redact_url(url, path=False) == shown
