"""Least privilege: each role runs its whole job as an ACL user with exactly the rules
``timer.acl`` gives it (and the README prints), against the real server; a user
refused half-way through ``init`` leaves nothing behind."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import wait_for
from timer import Backoff, Handlers, Limit, Outcome, StoreError, TimerClient
from timer.acl import ROLES, acl_rules
from timer.testing import RedisServer
from timer.worker import Worker, WorkerSettings, fire_and_handle
from timer.worker.events import EventListener

from .conftest import namespace_keys

pytestmark = pytest.mark.redis

SECURITY = Path(__file__).resolve().parents[2] / "docs" / "guides" / "security.md"


@pytest.fixture
def users(redis_server: RedisServer, redis_client: redis.Redis) -> Iterator[dict[str, str]]:
    """A URL per role, for users holding exactly that role's rules on this namespace."""
    made: list[str] = []

    def url_of(role: str, namespace: str, rules: list[str] | None = None) -> str:
        name = f"tw-{role}-{namespace}"
        redis_client.execute_command(  # type: ignore[no-untyped-call]
            "ACL", "SETUSER", name, "reset", "on", ">pw-" + role,
            *(rules if rules is not None else acl_rules(role, namespace)),
        )  # fmt: skip
        made.append(name)
        return f"redis://{name}:pw-{role}@127.0.0.1:{redis_server.port}/0"

    yield {"url_of": url_of}  # type: ignore[dict-item]
    for name in made:
        redis_client.execute_command("ACL", "DELUSER", name)  # type: ignore[no-untyped-call]


def fired(client: TimerClient, name: str) -> int:
    info = client.schedules.get(name)
    return 0 if info is None else info.fired


def test_every_role_does_its_job_with_exactly_its_rules(
    users: dict[str, object], redis_client: redis.Redis, namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """operator creates the namespace; client schedules, decides and reads timers;
    worker fires them; handlers handle, retry and dead-letter; operator reports,
    redelivers, drops, trims and deletes the group. None is refused anything."""
    url_of = users["url_of"]
    assert callable(url_of)
    op = TimerClient.from_url(url_of("operator", namespace), namespace)
    op.init(shards=2)
    client = TimerClient.from_url(url_of("client", namespace), namespace)
    client.schedule("due", delay_ms=50, payload={"n": 1})
    client.schedule_many([{"id": f"m{i}", "delay_ms": 60_000} for i in range(5)])
    client.schedule("j:{1}", 60_000, watch=["j:{1}:done"])
    assert client.notify("j:{1}:done") == 1
    assert client.cancel("m0") and client.complete("m1")
    assert client.reschedule("m2", 100) is not None
    assert client.get("m3") is not None
    client.schedules.create("tick", every="1s")
    assert [s.name for s in client.schedules.list()] == ["tick"]
    assert client.timers.count("m*", state="any") == 5  # finding: HSCAN of P:t and P:R:<b>
    assert client.timers.reschedule("m4", shift_ms=1_000).done == 1

    with caplog.at_level(logging.WARNING):
        w = Worker(
            TimerClient.from_url(url_of("worker", namespace), namespace),
            WorkerSettings(worker_id="acl-w", lease_ms=2000),
        )
        runner = threading.Thread(target=w.run, kwargs={"handle_signals": False}, daemon=True)
        runner.start()
        try:
            assert client.wait("due", timeout=20).outcome == "expired"
            assert client.wait("m2", timeout=20).outcome == "expired"
            wait_for(lambda: fired(client, "tick") >= 2, 20, "two occurrences of a schedule")
            assert client.schedules.pause("tick")
        finally:
            w.stop()
            runner.join(20)
            w.client.close()
    refused = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR or "NOPERM" in r.getMessage() or "NOPERM" in str(r.exc_info)
    ]
    assert refused == []

    handlers = Handlers(
        TimerClient.from_url(url_of("handlers", namespace), namespace),
        group="g",
        max_attempts=2,
        backoff=Backoff(initial_s=0.01, max_s=0.02),
        # per-key limits and a rate: their scripts need commands of their own
        limits=[Limit("id", 2), Limit("outcome", name="r", per_s=10_000, burst=100)],
    )
    handled: list[str] = []

    def handle(o: Outcome) -> None:
        if o.id == "due":
            raise RuntimeError("downstream refused")
        handled.append(o.id)

    for kind in ("expired", "cancelled", "completed"):
        handlers.add(kind, handle)
    drained: list[bool] = []
    run = threading.Thread(target=lambda: drained.append(handlers.run(stop_when_idle=True)))
    run.start()
    run.join(30)  # a command the role lacks makes the runner retry for good: bounded here
    if run.is_alive():
        handlers.stop()
        run.join(30)
    assert handlers.client is not None
    handlers.client.close()
    refused = [r.getMessage() for r in caplog.records
               if any(w in f"{r.getMessage()} {r.exc_info}".lower()
                      for w in ("noperm", "permission", "can't run"))]  # fmt: skip
    assert refused == []  # the limits' scripts among them
    assert drained == [True]
    ticks = [h for h in handled if h.startswith("{tick}@")]  # the schedule's occurrences
    assert len(ticks) >= 2 and sorted(set(handled) - set(ticks)) == ["j:{1}", "m0", "m1", "m2"]
    assert handlers.stats.ack_errors == 0

    stats = op.stats()
    assert stats["pending"] == 2
    assert op.memory()["pending"] == 2
    assert len(op.pending_by_due().timers) == 2  # the Timers view's script among them
    (group,) = op.groups()
    assert group.name == "g"
    (dead,) = op.dead_letters()
    assert op.redeliver(dead.ref) is not None
    assert op.drop_dead_letter(dead.ref) is False  # redeliver moved it back already
    assert len(list(op.all_outcomes())) >= 5 and op.recent_outcomes(5)
    assert op.next_due(client.shard_of("m3")) and op.leaders() and op.workers() is not None
    assert namespace in op.namespaces()
    op.trim_outcomes(0, keep_unread=True)
    assert op.migrate()[1] >= 4
    assert op.delete_group("g") == 2
    for c in (op, client):
        c.close()


def test_fire_handlers_runs_handle_fire_with_exactly_its_rules(
    users: dict[str, object], namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The fire-handlers role (tickwheel handle --fire, #55) leads shards and runs
    handlers in one process with exactly its rules: every timer handled once, most handed
    by the fire calls that decided them (XREADGROUP inside fire.lua, which a worker-only
    user may not run: it would be handed nothing), nothing refused."""
    url_of = users["url_of"]
    assert callable(url_of)
    with TimerClient.from_url(url_of("operator", namespace), namespace) as op:
        op.init(shards=2)
    both = TimerClient.from_url(url_of("fire-handlers", namespace), namespace)
    h = Handlers(both, group="g", consumer="me")
    seen: list[str] = []
    h.add("expired", lambda o: seen.append(o.id))
    settings = WorkerSettings(worker_id="acl-fh", lease_ms=2_000)
    done: list[bool] = []
    with caplog.at_level(logging.WARNING):
        t = threading.Thread(
            target=lambda: done.append(fire_and_handle(both, h, settings, concurrency=4))
        )
        t.start()
        try:
            wait_for(lambda: h.hand_off() is not None, 30, "the handlers to start")
            with TimerClient.from_url(url_of("client", namespace), namespace) as client:
                ids = [f"f{i}" for i in range(50)]
                client.schedule_many([{"id": t, "delay_ms": 300 + i} for i, t in enumerate(ids)])
            wait_for(lambda: h.stats.handled == len(ids), 30, "every handler to run")
        finally:
            h.stop()
            t.join(30)
            both.close()
    assert done == [True] and sorted(seen) == sorted(ids)
    assert h.stats.handed_at_fire > len(ids) // 2
    refused = [r.getMessage() for r in caplog.records
               if any(w in f"{r.getMessage()} {r.exc_info}".lower()
                      for w in ("noperm", "permission", "can't run"))]  # fmt: skip
    assert refused == []


def test_a_worker_user_leaves_a_shards_channel(
    users: dict[str, object], redis_client: redis.Redis, namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """A worker that stops leading a shard unsubscribes from its events channel, and the
    worker role may do so (a CI run's worker handed a shard on and was refused UNSUBSCRIBE:
    its listener logged an error and stayed subscribed)."""
    url_of = users["url_of"]
    assert callable(url_of)
    with TimerClient.from_url(url_of("operator", namespace), namespace) as op:
        op.init(shards=1)
    channel = op.keys.shard(0).events
    client = TimerClient.from_url(url_of("worker", namespace), namespace)
    subscribed: list[str] = []
    listener = EventListener(
        client.membership.events_pubsub, lambda channel, data: None, lambda: None, subscribed.append
    )

    def subscribers() -> int:
        return int(redis_client.pubsub_numsub(channel)[0][1])

    with caplog.at_level(logging.WARNING):
        listener.start()
        try:
            listener.want({channel})
            wait_for(lambda: subscribed == [channel] and subscribers() == 1, what="subscribed")
            listener.want(set())
            wait_for(lambda: subscribers() == 0, what="the channel left")
        finally:
            listener.stop()
            client.close()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_roles_cannot_reach_past_their_namespace(
    users: dict[str, object], redis_client: redis.Redis, namespace: str
) -> None:
    """A role's user reaches no other namespace's keys and no server-wide command."""
    url_of = users["url_of"]
    assert callable(url_of)
    other = f"{namespace}-other"
    for name in (namespace, other):
        with TimerClient.from_url(url_of("operator", name), name) as op:
            op.init(shards=1)
    for role in ROLES:
        r = redis.Redis.from_url(url_of(role, namespace))
        for command in (("HGETALL", f"{{tw:{other}}}:meta"), ("FLUSHALL",), ("KEYS", "*"),
                        ("CONFIG", "GET", "*"), ("ACL", "LIST")):  # fmt: skip
            with pytest.raises(redis.exceptions.NoPermissionError):
                r.execute_command(*command)  # type: ignore[no-untyped-call]
        r.close()


def test_init_refused_half_way_leaves_nothing(
    users: dict[str, object], redis_client: redis.Redis, namespace: str
) -> None:
    """An operator without access to tw:namespaces is refused by init, and the namespace
    is left as it was: no meta, no results tables (before, its meta stayed written and
    its tables unstarted)."""
    url_of = users["url_of"]
    assert callable(url_of)
    rules = [r for r in acl_rules("operator", namespace) if r != "~tw:namespaces"]
    c = TimerClient.from_url(url_of("operator", namespace, rules), namespace)
    before = namespace_keys(redis_client, namespace)
    with pytest.raises(StoreError, match=r"NOPERM|permission"):
        c.init(shards=4)
    assert namespace_keys(redis_client, namespace) == before == {}
    c.close()


@pytest.mark.parametrize("role", sorted(ROLES))
def test_the_security_page_gives_each_roles_rules(role: str) -> None:
    """The Security page (docs/guides/security.md) prints each role's rules for namespace `jobs` as
    `tickwheel acl` prints them, so what a reader copies is what the tests ran."""
    line = f"ACL SETUSER tw-{role} on >PASSWORD " + " ".join(acl_rules(role, "jobs"))
    text = " ".join(SECURITY.read_text().split())
    assert " ".join(line.split()) in text, line


def test_a_worker_without_info_runs_and_says_what_went_unchecked(
    users: dict[str, object], namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker user without +info: prepare() meets NOPERM (StoreError.code, #39: it was
    always None, so this branch never ran and the worker could not start), warns that the
    eviction policy and AOF go unchecked, and the worker starts."""
    url_of = users["url_of"]
    assert callable(url_of)
    TimerClient.from_url(url_of("operator", namespace), namespace).init(shards=2)
    rules = [*acl_rules("worker", namespace), "-info"]
    client = TimerClient.from_url(url_of("worker", namespace, rules), namespace)
    try:
        with pytest.raises(StoreError) as refused:
            client.check_durability(allow_eviction=False)
        assert refused.value.code == "NOPERM"
        w = Worker(client, WorkerSettings(worker_id="no-info", lease_ms=2000))
        with caplog.at_level(logging.WARNING):
            w.prepare()
        assert any("may not run INFO" in r.getMessage() for r in caplog.records)
    finally:
        client.close()


def test_an_operator_made_before_groups_read_hkeys_still_lists_them(
    users: dict[str, object], namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator user made by an older `tickwheel acl` (no +hkeys, +zmscore: the groups
    listing reads them since it counts apart the outcomes looked at later) still lists its
    groups, every waiting outcome counted as retrying as before, and is told once how to
    grant them; the user made as the role is now counts them apart."""
    from timer import Later  # noqa: PLC0415
    from timer.durable.groups import admin  # noqa: PLC0415

    url_of = users["url_of"]
    assert callable(url_of)
    client = TimerClient.from_url(url_of("operator", namespace), namespace)
    client.init(shards=2)
    old = [r for r in acl_rules("operator", namespace) if r not in ("+hkeys", "+zmscore")]
    older = TimerClient.from_url(url_of("older", namespace, old), namespace)
    for tid in ("a", "b"):
        client.schedule(tid, 60_000)
        client.cancel(tid)

    def handle(o: Outcome) -> None:
        if o.id == "a":
            raise RuntimeError("the broker is down")
        raise Later(3600, "sent; waiting for the task to start")

    h = Handlers(client, group="g", max_attempts=3, backoff=Backoff(initial_s=3600, max_s=3600))
    h.add("cancelled", handle)
    t = threading.Thread(target=h.run, daemon=True)
    t.start()
    try:
        wait_for(lambda: any(g.retrying + g.later == 2 for g in client.groups()), 10, "parked")
        (now,) = client.groups()
        assert (now.retrying, now.later) == (1, 1)
        monkeypatch.setattr(admin, "_DENIED_SAID", False, raising=False)
        with pytest.warns(UserWarning, match="HKEYS or ZMSCORE"):
            (before,) = older.groups()
        assert (before.pending, before.retrying, before.later) == (2, 2, 0)
    finally:
        h.stop()
        t.join(30)
        client.close()
        older.close()
