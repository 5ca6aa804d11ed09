"""Bad input gets a clear TimerError and writes nothing (DESIGN §5.6)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import redis

from tests.conftest import wait_for
from timer import ConfigError, InvalidInput, StoreError, TimerClient
from timer.redis.redaction import redact_url
from timer.redis.store import RedisSettings
from timer.testing import free_port

from .conftest import namespace_keys

pytestmark = pytest.mark.redis

BAD_SCHEDULES: list[tuple[dict[str, Any], str]] = [
    ({"timer_id": "a", "delay_ms": -1}, "delay_ms must be between 0"),
    ({"timer_id": "a", "delay_ms": 1.5}, "whole number"),
    ({"timer_id": "a", "delay_ms": "10"}, "whole number"),
    ({"timer_id": "a", "delay_ms": 10**15}, "delay_ms must be between 0"),
    ({"timer_id": "a"}, "exactly one of delay_ms"),
    ({"timer_id": "a", "delay_ms": 1, "deadline_ms": 5}, "exactly one of delay_ms"),
    ({"timer_id": "a", "deadline_ms": -5}, "deadline_ms must be"),
    ({"timer_id": "a", "deadline_ms": 10**15}, r"3660d \(about 10 years\) from now"),
    ({"timer_id": "", "delay_ms": 1}, "must not be empty"),
    ({"timer_id": "x" * 257, "delay_ms": 1}, "257 bytes"),
    ({"timer_id": b"bytes", "delay_ms": 1}, "must be text"),
    ({"timer_id": 42, "delay_ms": 1}, "must be text"),
    ({"timer_id": "a", "delay_ms": 1, "watch": [""]}, "watch key must not be empty"),
    ({"timer_id": "a", "delay_ms": 1, "watch": [b"k"]}, "watch key must be text"),
    ({"timer_id": "a", "delay_ms": 1, "watch": "a:k"}, "list of keys"),
    ({"timer_id": "a", "delay_ms": 1, "payload": b"x" * (1024 * 1024 + 1)}, "limit is 1048576"),
    ({"timer_id": "a", "delay_ms": 1, "payload": object()}, "msgpack-serialisable"),
    ({"timer_id": "j:{1}", "delay_ms": 1, "watch": ["j:{1}:a"], "need": 0}, "need must be"),
    ({"timer_id": "j:{1}", "delay_ms": 1, "watch": ["j:{1}:a"], "need": 2}, "only 1 watch key"),
    ({"timer_id": "a", "delay_ms": 1, "need": 2}, "without watch keys"),
    ({"timer_id": "job:{1}", "delay_ms": 1, "watch": ["job:{2}:done"]}, "same hash tag"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_SCHEDULES)
def test_bad_schedule_writes_nothing(
    client: TimerClient, redis_client: redis.Redis, kwargs: dict[str, Any], message: str
) -> None:
    """Each malformed schedule raises InvalidInput with a helpful message; Redis is unchanged."""
    before = namespace_keys(redis_client, client.namespace)
    with pytest.raises(InvalidInput, match=message.replace("{", r"\{")):
        client.schedule(**kwargs)
    assert namespace_keys(redis_client, client.namespace) == before


def test_bad_items_in_schedule_many_write_nothing(
    client: TimerClient, redis_client: redis.Redis
) -> None:
    """schedule_many of only bad items returns their errors and writes nothing."""
    before = namespace_keys(redis_client, client.namespace)
    res = client.schedule_many(
        [{"id": "a", "delay_ms": -1}, {"id": "a", "oops": 1}, "not a mapping"]  # type: ignore[list-item]
    )
    assert all(isinstance(r, InvalidInput) for r in res)
    assert "unknown field" in str(res[1])
    assert namespace_keys(redis_client, client.namespace) == before


def test_uninitialised_namespace(redis_server: Any, redis_client: redis.Redis) -> None:
    """Using a namespace nobody initialised is a ConfigError that says how to init it."""
    c = TimerClient.from_url(redis_server.url, "never-initialised")
    with pytest.raises(ConfigError, match="`tickwheel --namespace never-initialised init` once"):
        c.schedule("a", delay_ms=1)
    assert namespace_keys(redis_client, "never-initialised") == {}
    c.close()


def test_init_with_other_shard_count(client: TimerClient) -> None:
    """Re-initialising with another shard count is refused; the same count is a no-op."""
    assert client.init(shards=4).shards == 4
    with pytest.raises(ConfigError, match="already has 4 shards"):
        client.init(shards=8)


@pytest.mark.parametrize("namespace_name", ["", "a b", "x{y}", "n" * 65])
def test_bad_namespace(redis_server: Any, namespace_name: str) -> None:
    """Namespaces are short plain names (they go inside hash tags)."""
    with pytest.raises(InvalidInput, match="namespace"):
        TimerClient.from_url(redis_server.url, namespace_name)


def test_unreachable_redis_names_host_not_password() -> None:
    """An unreachable server is a StoreError naming host:port, never the password."""
    port = free_port()
    url = f"redis://user:s3cret@127.0.0.1:{port}/0"
    with pytest.raises(StoreError) as err:
        TimerClient.from_url(url, "x", socket_timeout_s=1)
    assert f"127.0.0.1:{port}" in str(err.value)
    assert "s3cret" not in str(err.value)


def test_password_is_redacted_everywhere() -> None:
    """RedisSettings and redact_url hide passwords; a bad scheme error hides it too."""
    url = "rediss://alice:hunter2@cache.example:6380/1"
    assert redact_url(url) == "rediss://alice:***@cache.example:6380/1"
    assert "hunter2" not in repr(RedisSettings.from_url(url))
    with pytest.raises(ConfigError) as err:
        RedisSettings.from_url("http://bob:hunter2@h/0")
    assert "hunter2" not in str(err.value)


def test_acl_user_and_password_work(redis_server: Any, redis_client: redis.Redis) -> None:
    """An ACL user with a password connects through the URL."""
    redis_client.execute_command(  # type: ignore[no-untyped-call]
        "ACL", "SETUSER", "tw-user", "on", ">pa55word", "~*", "&*", "+@all"
    )
    try:
        url = f"redis://tw-user:pa55word@127.0.0.1:{redis_server.port}/0"
        c = TimerClient.from_url(url, "acl-ns")
        c.init(shards=2)
        assert c.schedule("a", delay_ms=60_000).created
        assert "pa55word" not in repr(c)
        c.close()
        with pytest.raises(StoreError) as err:
            TimerClient.from_url(url.replace("pa55word", "wr0ng"), "acl-ns")
        assert "wr0ng" not in str(err.value)
    finally:
        redis_client.execute_command("ACL", "DELUSER", "tw-user")  # type: ignore[no-untyped-call]


def test_old_server_is_refused() -> None:
    """A server older than Redis 6.2 / Valkey 7.2 gets a ConfigError naming the minimum."""

    class OldRedis(redis.Redis):
        def info(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            return {"redis_version": "6.0.16"}

    c = TimerClient(OldRedis(), "old")
    with pytest.raises(ConfigError, match=r"redis 6.0.16 .* too old.*>= 6.2"):
        c.init(shards=1)


SECRET_URLS = [
    "redis://u@127.0.0.1:{port}/0?password=S3CRETpw",
    "redis://u:S3CRETpw@127.0.0.1:{port}/0",
    "redis://S3CRETpw@127.0.0.1:{port}/0",
    "redis://127.0.0.1:{port}/0?username=u&password=S3CRETpw",
]


@pytest.mark.parametrize("form", SECRET_URLS)
def test_a_password_in_any_url_form_is_never_shown(
    redis_server: Any, tmp_path: Any, form: str
) -> None:
    """A wrong password in any form redis-py takes: the client's repr and error, and
    `python -m timer.worker`'s log while it waits for Redis, never show it."""
    url = form.format(port=redis_server.port)
    with pytest.raises(StoreError) as err:
        TimerClient.from_url(url, "x")
    assert "S3CRETpw" not in str(err.value) and "***" in str(err.value)
    assert "S3CRETpw" not in repr(RedisSettings.from_url(url))
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "timer.worker", "--redis-url", url],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: b"waiting for Redis" in log.read_bytes(), 30, "the worker's warning")
    finally:
        proc.kill()
        proc.wait(10)
    text = log.read_text()
    assert "S3CRETpw" not in text and "***" in text, text


def test_a_url_redis_py_would_fail_on_is_a_config_error() -> None:
    """A bad port, a broken IPv6 host, a bad database or an unknown option: ConfigError
    naming the URL (masked), not a traceback from inside redis-py."""
    for url, says in [
        ("redis://127.0.0.1:notaport/0?password=S3CRETpw", "port must be a number"),
        ("redis://127.0.0.1:99999/0", "port must be a number"),
        ("redis://[::1:6379/0", "cannot be parsed"),
        ("redis://127.0.0.1:6379/zero", "database must be a number"),
        ("redis://127.0.0.1:6379/0?bogus=1&password=S3CRETpw", "bogus"),
        ("redis://127.0.0.1:6379/0?ssl_keyfile=k.pem", "need rediss://"),
    ]:
        with pytest.raises(ConfigError, match=says) as err:
            TimerClient.from_url(url, "x")
        assert "S3CRETpw" not in str(err.value)


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda c: c.schedule("a", delay_ms=1, note="x" * 1001),
         "note is 1001 characters; at most 1000"),
        (lambda c: c.schedule("x" * 257, delay_ms=1),
         "timer id is 257 bytes in UTF-8; at most 256"),
        (lambda c: c.schedule("a:{1}", delay_ms=1, watch=["a:{1}:" + "x" * 300]),
         "watch key is 306 bytes in UTF-8; at most 256"),
        (lambda c: c.dead_letters("g" * 300, error="e"),
         "consumer group is 300 bytes in UTF-8; at most 256"),
        (lambda c: c.dead_letters(error="e" * 257), "error is 257 characters; at most 256"),
        (lambda c: c.dead_letters(match="x" * 1025), "match is 1025 bytes in UTF-8; at most"),
        (lambda c: c.schedules.create("s" * 201, every_ms=1000),
         "schedule name is 201 bytes in UTF-8; at most 200"),
    ],
)  # fmt: skip
def test_a_text_too_long_is_said_by_its_length_not_echoed(
    client: TimerClient, redis_client: redis.Redis, call: Any, said: str
) -> None:
    """A note of 1001 characters said "note must be text of at most 1000 characters, got
    str: 'xxxxxxxx…'" (100 of them quoted): every text argument too long says how long
    it is and the most it may be, without the text, and writes nothing."""
    before = namespace_keys(redis_client, client.namespace)
    with pytest.raises(InvalidInput) as refused:
        call(client)
    assert str(refused.value).startswith(said), str(refused.value)
    assert "xxxxx" not in str(refused.value) and "got str" not in str(refused.value)
    assert namespace_keys(redis_client, client.namespace) == before
