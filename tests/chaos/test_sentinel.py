"""Sentinel: a master, two replicas and three Sentinels (real processes); workers and
clients reach the master by a ``redis+sentinel://`` URL and follow every failover."""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import redis
import redis.sentinel
from starlette.testclient import TestClient

from tests.chaos.conftest import ROOT, Workers, assert_exactly_once, read_all_outcomes
from tests.conftest import stop_all, wait_for
from timer import ConfigError, StoreError, TimerClient
from timer.aio import AsyncTimerClient
from timer.httpapi.app import create_app
from timer.redis.connections import AsyncFollowingSentinel, FollowingSentinel
from timer.redis.redaction import redact_url
from timer.redis.store import RedisSettings
from timer.testing import RedisServer, SentinelSet, redis_sentinel

# No lateness bound (it waits on the Sentinels, never on a clock): it runs in the
# parallel part of make test, beside the others.
pytestmark = [pytest.mark.redis]


@pytest.fixture(scope="module")
def sentinel_set(
    tmp_path_factory: pytest.TempPathFactory, server_binary: Path
) -> Iterator[SentinelSet]:
    with redis_sentinel(tmp_path_factory.mktemp("sentinel"), binary=server_binary) as s:
        yield s


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://127.0.0.1:26379", "must name the service"),
        ("redis+sentinel://127.0.0.1:26379/", "must name the service"),
        ("redis+sentinel://127.0.0.1/mymaster", "is not host:port"),
        ("redis+sentinel://a:1,b/mymaster", "is not host:port"),
        ("redis+sentinel://a:99999/mymaster", "is not host:port"),
        ("redis+sentinel://a:1/mymaster/x", "database number"),
        ("redis+sentinel://a:1/mymaster/0/9", "database number"),
        ("redis+sentinel://a:1/mymaster?bogus=1", "bogus"),
    ],
)
def test_a_bad_sentinel_url_says_its_form(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as refused:
        TimerClient.from_url(url, "x")
    assert "redis+sentinel://" in str(refused.value)


def test_a_sentinel_url_keeps_its_secrets() -> None:
    """The data nodes' password and the Sentinels' own are read and never shown."""
    url = "rediss+sentinel://app:S3CRET@h1:26379,h2:26380/svc/3?sentinel_password=T0KEN"
    rs = RedisSettings.from_url(url)
    target = rs.sentinel
    assert target is not None
    assert target.sentinels == (("h1", 26379), ("h2", 26380))
    assert (target.service, target.ssl) == ("svc", True)
    assert target.master_options()["password"] == "S3CRET"
    assert target.master_options()["db"] == 3
    assert target.sentinel_password == "T0KEN"
    for shown in (rs.safe_url, repr(rs), repr(target), redact_url(url)):
        assert "S3CRET" not in shown and "T0KEN" not in shown, shown


def test_no_master_named_yet_is_a_wait_not_a_wrong_server(sentinel_set: SentinelSet) -> None:
    """While the Sentinels name no master (a failover under way; here a service they do
    not monitor) the first call is a StoreError, which a worker waits out, never the
    ConfigError of a server too old for HELLO, which ends it (CI saw a worker end so when
    its first call met a kill -9 of the master)."""
    hosts = sentinel_set.url.partition("://")[2].partition("/")[0]
    c = TimerClient.from_url(f"redis+sentinel://{hosts}/not-monitored", "x")
    try:
        with pytest.raises(StoreError, match="names a master") as failed:
            c.meta  # noqa: B018 - the first call checks the server's version
        assert not isinstance(failed.value, ConfigError)
    finally:
        c.close()


class Run:
    """A worker on the set and a client that schedules with replicas:1, counting what
    was acknowledged."""

    def __init__(self, url: str, namespace: str, tmp_path: Path, made: list[Workers]) -> None:
        self.c = TimerClient.from_url(url, namespace, durability="replicas:1")
        self.c.init(shards=4)
        self.url, self.namespace = url, namespace
        workers = Workers(url, namespace, tmp_path, lease_ms=2000, horizon_ms=60_000)
        made.append(workers)
        self.made = made
        workers.start("w1")
        self.acked: set[str] = set()

    def schedule(self, prefix: str, n: int, delay_ms: int = 1500) -> None:
        items = [{"id": f"{prefix}{i}", "delay_ms": delay_ms + 10 * i} for i in range(n)]
        for item, reply in zip(items, self.c.schedule_many(items), strict=True):
            if not isinstance(reply, Exception):
                self.acked.add(str(item["id"]))

    def schedule_async(self, name: str) -> None:
        async def one() -> None:
            a = await AsyncTimerClient.connect(self.url, self.namespace, durability="replicas:1")
            try:
                self.acked.add((await a.schedule(name, delay_ms=1000)).id)
            finally:
                await a.aclose()

        asyncio.run(one())

    def check(self, expected: int) -> None:
        assert len(self.acked) == expected, "every schedule was acknowledged (clients followed)"

        def all_decided() -> bool:
            try:
                return {o.id for o in read_all_outcomes(self.c)} >= self.acked
            except StoreError:
                return False  # a failover in progress

        try:
            wait_for(all_decided, 60, "every timer to fire")
        except AssertionError:
            seen = {o.id for o in read_all_outcomes(self.c)}
            missing = sorted(self.acked - seen)
            logs = "\n".join(w.log_text()[-4000:] for made in self.made for w in made.all)
            raise AssertionError(f"{len(missing)} never fired: {missing[:20]}\n{logs}") from None
        assert_exactly_once(read_all_outcomes(self.c), self.acked)
        self.c.close()


def test_a_sentinel_failover_is_followed_and_every_timer_fires_once(
    sentinel_set: SentinelSet, tmp_path: Path, namespace: str, workers_factory: list[Workers]
) -> None:
    """SENTINEL FAILOVER (the old master stays writable for seconds before the Sentinels
    demote it): the clients and the worker move to the new master, and every timer
    acknowledged before and after fires exactly once, never early."""
    sentinel_set.wait_settled()  # a failover started before can be undone (see settled)
    run = Run(sentinel_set.url, namespace, tmp_path, workers_factory)
    run.schedule("a", 100)
    old = sentinel_set.master()
    with redis.Redis(host=sentinel_set.sentinels[1].host, port=sentinel_set.sentinels[1].port) as s:
        s.execute_command("SENTINEL", "FAILOVER", sentinel_set.service)
    sentinel_set.wait_for_master(not_=old)
    run.schedule("c", 100)
    run.schedule_async("async1")
    run.check(201)
    sentinel_set.wait_settled()  # the old master demoted, and every Sentinel has seen it


def test_the_sentinel_leading_a_failover_does_not_send_clients_back_to_the_old_master(
    sentinel_set: SentinelSet,
) -> None:
    """The Sentinel leading a failover names the old master, flagged only
    ``failover_in_progress``, until the failover ends, while the others already name the
    promoted replica. redis-py follows the first Sentinel it asks: a client asking the
    leader first went on writing to (and acknowledging outcomes on) a master being
    replaced. tickwheel's discovery (blocking and asyncio), asking the leader first too,
    never names the old master once a Sentinel has named the new one."""
    sentinel_set.wait_settled()  # a failover started before can be undone (see settled)
    old = sentinel_set.master()
    live = [s for s in sentinel_set.sentinels if s.running]
    leader = live[0]
    addrs = [(s.host, s.port) for s in live]  # the leader asked first
    service = sentinel_set.service
    found: dict[str, list[tuple[str, int] | None]] = {"ours": [], "async": [], "redis-py": []}

    async def follow() -> None:
        kinds: dict[str, Any] = {  # untyped in redis-py
            "ours": FollowingSentinel,
            "async": AsyncFollowingSentinel,
            "redis-py": redis.sentinel.Sentinel,
        }
        managers = {k: m(addrs, sentinel_kwargs={"socket_timeout": 1.0}) for k, m in kinds.items()}
        views = [redis.Redis(host=h, port=p, socket_timeout=1.0) for h, p in addrs]

        async def named(kind: str) -> tuple[str, int] | None:
            try:
                got = managers[kind].discover_master(service)
                return cast("tuple[str, int]", await got if kind == "async" else got)
            except redis.sentinel.MasterNotFoundError:
                return None

        for kind in managers:
            assert await named(kind) == (old.host, old.port)
        with redis.Redis(host=leader.host, port=leader.port) as r:
            r.execute_command("SENTINEL", "FAILOVER", service)
        new_named, deadline = False, time.monotonic() + 30
        try:
            while True:
                states = [cast("dict[str, Any]", v.sentinel_masters())[service] for v in views]
                new_named = new_named or any(st["port"] != old.port for st in states)
                for kind in managers:
                    got = await named(kind)
                    if new_named:
                        found[kind].append(got)
                if all(st["port"] != old.port for st in states) and (
                    "failover_in_progress" not in states[0]["flags"]
                ):
                    return
                assert time.monotonic() < deadline, (
                    f"the failover did not end in 30 s: {states}\n{sentinel_set.log_tail()}"
                )
                await asyncio.sleep(0.01)  # polling the Sentinels: no readiness signal
        finally:
            for v in views:
                v.close()
            for kind in ("ours", "redis-py"):
                for s in managers[kind].sentinels:
                    s.close()
            for s in managers["async"].sentinels:
                await s.aclose()

    asyncio.run(follow())
    theirs = found["redis-py"].count((old.host, old.port))
    new = sentinel_set.wait_for_master(not_=old)
    for kind in ("ours", "async"):
        back = found[kind].count((old.host, old.port))
        assert back == 0, (
            f"{kind}: {back} of {len(found[kind])} discoveries after a Sentinel named the new "
            f"master named the old one (redis-py's: {theirs})"
        )
        assert found[kind][-1] == (new.host, new.port)
    sentinel_set.wait_settled()


def test_a_master_killed_with_a_sentinel_gone_loses_no_acknowledged_timer(
    sentinel_set: SentinelSet, tmp_path: Path, namespace: str, workers_factory: list[Workers]
) -> None:
    """kill -9 of the first Sentinel the clients ask, then of the master: with replicas:1
    every acknowledged timer is on the promoted replica and fires exactly once."""
    sentinel_set.wait_settled()
    run = Run(sentinel_set.url, namespace, tmp_path, workers_factory)
    run.schedule("a", 100)
    sentinel_set.sentinels[0].kill()
    old = sentinel_set.master()
    old.kill()  # kill -9 of the master
    sentinel_set.wait_for_master(not_=old)
    run.schedule("b", 100)  # the client follows the new master
    run.schedule_async("async1")
    run.check(201)


def test_the_cli_reaches_a_sentinel_set(
    sentinel_set: SentinelSet, namespace: str, tmp_path: Path
) -> None:
    """The deployment guide's Sentinel block (the README's is the same), with this set's
    Sentinels and service: the URL from the environment, `init`, then a worker that
    fires a timer scheduled through the same URL."""
    guide = (ROOT / "docs" / "guides" / "deployment.md").read_text()
    block = guide.split("## With Sentinel", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    readme = (ROOT / "README.md").read_text().split("## In production", 1)[1]
    assert readme.split("```sh\n", 1)[1].split("```", 1)[0] == block  # one block, run here
    lines = block.strip().splitlines()
    assert lines[0].startswith("export TICKWHEEL_REDIS_URL='redis+sentinel://")
    env = {**os.environ, "TICKWHEEL_REDIS_URL": sentinel_set.url}  # this set's service
    env["TICKWHEEL_NAMESPACE"] = namespace

    def tw(args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "timer.cli", *args],
            capture_output=True, text=True, timeout=60, check=False, env=env,
        )  # fmt: skip

    init = shlex.split(lines[1])
    assert init[0] == "tickwheel"
    done = tw(init[1:])
    assert done.returncode == 0, done.stderr
    worker_args = shlex.split(lines[2])[1:]
    log = (tmp_path / "w.log").open("wb")
    worker = subprocess.Popen(
        [sys.executable, "-m", "timer.cli", *worker_args],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    try:
        assert tw(["schedule", "job1", "--in", "500ms"]).returncode == 0
        with TimerClient.from_url(sentinel_set.url, namespace) as c:
            wait_for(lambda: {o.id for o in read_all_outcomes(c)} == {"job1"}, 30, "job1 fired")
    finally:
        stop_all([worker])


def test_the_http_api_reaches_a_sentinel_set(sentinel_set: SentinelSet, namespace: str) -> None:
    """`tickwheel serve`'s app on a redis+sentinel:// URL: /readyz, a timer scheduled
    and read back over HTTP (the HTTP door's clients are made from the URL as every
    other door's)."""
    with TimerClient.from_url(sentinel_set.url, namespace, durability="replicas:1") as c:
        c.init(shards=2)
    with TestClient(create_app(sentinel_set.url, tokens=None)) as http:
        assert http.get("/readyz").status_code == 200
        made = http.post(
            f"/v1/namespaces/{namespace}/timers", json={"id": "h1", "delay_ms": 60_000}
        )
        assert made.status_code in (200, 201), made.text
        got = http.get(f"/v1/namespaces/{namespace}/timers/h1")
        assert got.status_code == 200 and got.json()["state"] == "pending", got.text


def test_a_sentinel_url_at_a_plain_server_says_it_is_not_a_sentinel(
    redis_server: RedisServer,
) -> None:
    """A redis+sentinel:// URL aimed at a Redis server (not a Sentinel) said the server
    "does not answer HELLO ... tickwheel needs Redis >= 6.2": it says the address is not a
    Sentinel and what to give instead, and keeps the URL's password to itself."""
    port = redis_server.url.rsplit(":", 1)[1].split("/", 1)[0]
    url = f"redis+sentinel://u:S3CRET@127.0.0.1:{port}/mymaster"
    client = TimerClient.from_url(url, "not-a-sentinel")
    try:
        with pytest.raises(ConfigError) as refused:
            client.meta  # noqa: B018 - the first call asks the server
    finally:
        client.close()
    said = str(refused.value)
    assert "not a Sentinel" in said and "redis://" in said, said
    assert "HELLO" not in said and "6.2" not in said, said
    assert "S3CRET" not in said, said
