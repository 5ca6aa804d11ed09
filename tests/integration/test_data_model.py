"""docs/data-model.md is true to the store: every key of a busy namespace is on the page
with its type, and every key the page lists for this release is found in one."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import wait_for
from timer import Backoff, Handlers, Limit, Outcome, TimerClient
from timer.django import TickwheelBackend
from timer.durable.model.codec import text
from timer.testing import RedisServer
from timer.worker import Worker, WorkerSettings

pytestmark = pytest.mark.redis

PAGE = Path(__file__).resolve().parents[2] / "docs" / "data-model.md"
PLACEHOLDERS = {"<n>": r"\d+", "<m>": r"\d+", "<b>": r"\d+", "<key>": r".+", "<group>": r".+",
                "<limit>": r".+", "<value>": r".+", "<length>": r"\d+", "<id>": r".+",
                "<minute ms>": r"\d+", "<worker id>": r".+"}  # fmt: skip


def documented(namespace: str) -> dict[str, tuple[re.Pattern[str], str]]:
    """The page's first table: key as written -> (a pattern for it here, its type)."""
    section = PAGE.read_text().split("## Keys of a namespace", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[re.Pattern[str], str]] = {}
    for line in section.splitlines():
        m = re.match(r"\| `([^`]+)` \| (\w+)", line)
        if not m:
            continue
        written, kind = m.groups()
        pattern = re.escape(written)
        for name, rx in PLACEHOLDERS.items():
            pattern = pattern.replace(re.escape(name), rx)
        pattern = pattern.replace(re.escape("<ns>"), re.escape(namespace))
        pattern = re.sub(r"^P", lambda _: re.escape(f"{{tw:{namespace}:") + r"\d+\}", pattern)
        rows[written] = (re.compile(f"^{pattern}$"), kind)
    assert len(rows) >= 15, "the page's key table was not found"
    return rows


@pytest.fixture
def busy(redis_server: RedisServer, namespace: str) -> Iterator[TimerClient]:
    """A namespace with a leading worker (one shard handed over to it), timers pending
    near and far, a watch key, a
    recurring schedule, outcomes retained, a group with a retry waiting and a dead
    letter, a handler running under a per-key limit (holding its slot), a Django
    task's result and a Celery task's claim."""
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=2)
    c.schedule("near", 60_000)
    c.schedule("far", 3 * 3_600_000)
    c.schedule("j:{1}", 60_000, watch=["j:{1}:done"])
    c.schedules.create("hourly", every="1h")  # a recurring schedule and its armed occurrence
    for i in range(4):
        c.schedule(f"due{i}", 0)
    handed = c.shard_store(1).acquire("w0", 5_000)  # a worker that stopped gracefully
    assert c.shard_store(1).release("w0", handed.epoch)
    w = Worker(TimerClient.from_url(redis_server.url, namespace), WorkerSettings(worker_id="w1"))
    runner = threading.Thread(target=w.run, kwargs={"handle_signals": False}, daemon=True)
    runner.start()
    try:
        for i in range(4):
            assert c.wait(f"due{i}", timeout=20).outcome == "expired"

        def fail(o: Outcome) -> None:
            raise RuntimeError("downstream refused")

        dead = Handlers(c, group="dead", max_attempts=1)
        dead.add("expired", fail)
        assert dead.run(stop_when_idle=True)
        assert c.pause_group("dead", by="ops")  # a paused group
        retrying = Handlers(c, group="retrying", backoff=Backoff(initial_s=3600, max_s=3600))
        retrying.add("expired", fail)
        thread = threading.Thread(target=retrying.run, daemon=True)
        thread.start()
        wait_for(lambda: retrying.stats.retried >= 4, 20, "the retries to be scheduled")
        retrying.stop()
        thread.join(20)
        holding, release = threading.Event(), threading.Event()

        def hold(o: Outcome) -> None:
            holding.set()
            release.wait(20)

        limited = Handlers(c, group="limited", limits=[Limit("outcome", 1, per_s=0.01)])
        limited.add("expired", hold)
        held = threading.Thread(target=limited.run, kwargs={"concurrency": 1}, daemon=True)
        held.start()
        wait_for(holding.is_set, 20, "a handler holding its key's slot")
        django = TickwheelBackend("default", {"OPTIONS": {"URL": redis_server.url,
                                                          "NAMESPACE": namespace}})  # fmt: skip
        django._save("0f1e2d", {"s": "SUCCESSFUL", "t": "proj.tasks.add", "a": [], "k": {}})
        django.close()  # a Django task's result, as its runner writes it
        from timer.celery import Claims  # noqa: PLC0415 - the celery extra

        assert Claims(c).claim("5e6f7a")  # a Celery task running (ConfirmedTask's claim)
        assert c.pending_by_due().timers  # the Timers view: the shards' heads filled
        try:
            yield c
        finally:
            release.set()
            limited.stop()
            held.join(20)
    finally:
        w.stop()
        runner.join(20)
        w.client.close()
        c.close()


def test_every_key_is_on_the_page(busy: TimerClient, redis_client: redis.Redis) -> None:
    """Each key of the busy namespace matches one row of the page, with its type; each
    row is a key the namespace has, but those the page says never exist (and never do)."""
    rows = documented(busy.namespace)
    keys = [text(k) for k in redis_client.scan_iter(match=f"{{tw:{busy.namespace}*", count=1000)]
    keys += ["tw:namespaces"]
    seen: set[str] = set()
    for key in keys:
        matches = [w for w, (rx, _) in rows.items() if rx.match(key)]
        assert len(matches) == 1, f"{key} matches {matches} rows of docs/data-model.md"
        kind = text(redis_client.type(key))
        if kind == "none" and key != "tw:namespaces":
            continue  # gone since the scan: the running worker emptied that bucket
        assert kind == rows[matches[0]][1], f"{key} is a {kind}, the page says otherwise"
        seen.add(matches[0])
    never = {w for w, (_, kind) in rows.items() if kind == "never"}  # P:guard: a written
    assert never, "the guard key is on the page"  # one would match no row of that type
    assert seen == set(rows) - never, f"on the page, not in the store: {set(rows) - seen}"
