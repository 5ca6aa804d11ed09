"""timer.celery (#44): countdowns and beat entries in tickwheel, with real Celery worker
and beat processes (the example app, examples/celery_app/proj.py, run as its docstring
says) on a real server; the broker is that server's database 1."""

from __future__ import annotations

import ast
import datetime as dt
import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery, Task
from celery.schedules import BaseSchedule, crontab, schedule
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import stop_all, wait_for
from timer import ConfigError, InvalidInput, TimerClient, TimerError
from timer.aio import AsyncTimerClient
from timer.celery import (
    Claims,
    ConfirmedTask,
    Scheduler,
    Sender,
    asend_later,
    schedule_spec,
    send_later,
    sender,
    task_call,
)
from timer.celery.claims import claims_of
from timer.celery.sending import _timer_of
from timer.cli import embedded
from timer.durable.model.checks import TEN_YEARS_S
from timer.durable.model.models import Timer
from timer.redis.local_server import embedded_url
from timer.testing import RedisServer

from .conftest import namespace_keys
from .test_aio import with_async
from .test_fuzz_api import anything


def kombu_refuses_this_redis_py() -> str | None:
    """Why kombu's Redis transport cannot run on the redis-py this pass runs (CI's second
    pass runs the oldest redis-py tickwheel declares, 5.3, and kombu 5.7 asks for 6.4 or
    later: pip never installs the two together, so no user has them), else None."""
    from importlib.metadata import requires, version  # noqa: PLC0415

    from packaging.requirements import Requirement  # noqa: PLC0415

    for line in requires("kombu") or ():
        req = Requirement(line)
        for_redis = req.marker is not None and req.marker.evaluate({"extra": "redis"})
        if req.name == "redis" and for_redis and redis.__version__ not in req.specifier:
            return (
                f"kombu {version('kombu')}'s Redis transport needs redis{req.specifier}; "
                f"this pass runs redis-py {redis.__version__} (the first pass runs these)"
            )
    return None


REFUSED = kombu_refuses_this_redis_py()
pytestmark = [pytest.mark.redis, pytest.mark.skipif(REFUSED is not None, reason=str(REFUSED))]

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "examples/celery_app"
GUIDE = ROOT / "docs/guides/celery.md"


def guide_lines() -> list[str]:
    """The guide's shell lines, without their comments."""
    from tests.docs.examples import blocks  # noqa: PLC0415

    lines = [
        ln.split("#", 1)[0].strip() for b in blocks(GUIDE, ("sh",)) for ln in b.code.splitlines()
    ]
    return [ln for ln in lines if ln]


def guide_env() -> dict[str, str]:
    """What the guide's ``export`` lines set (the app's namespace, for the commands)."""
    exports = [ln.removeprefix("export ") for ln in guide_lines() if ln.startswith("export ")]
    return dict(e.split("=", 1) for e in exports)


def guide_commands() -> list[list[str]]:
    """The guide's commands (`tickwheel handle proj:handlers`, `celery -A proj beat
    ...`), as this test runs them: the same words, through this Python."""
    modules = {"tickwheel": "timer.cli", "celery": "celery"}
    return [["-m", modules[ln.split()[0]], *ln.split()[1:]]
            for ln in guide_lines() if not ln.startswith("export ")]  # fmt: skip


class Processes:
    """The example's processes, each with its log; stopped (or killed) at the end."""

    def __init__(self, tmp: Path, url: str, namespace: str) -> None:
        self.tmp, self.url, self.namespace = tmp, url, namespace
        self.broker = url.rsplit("/", 1)[0] + "/1"
        self.env = {
            **os.environ, "TICKWHEEL_REDIS_URL": url, "CELERY_BROKER_URL": self.broker,
            "TICKWHEEL_NAMESPACE": namespace,  # tickwheel's commands read both
            "PYTHONUNBUFFERED": "1",
        }  # fmt: skip
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with (self.tmp / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", *args], cwd=APP, env=self.env,
                                    stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        self.procs[name] = proc
        return proc

    def celery_worker(self, name: str = "celery", loglevel: str = "warning") -> None:
        """The guide's Celery worker; solo: one process to kill, no prefork children."""
        self.guide("celery", "worker", name, "--pool", "solo", "-l", loglevel,
                   "--without-gossip", "--without-mingle", "--without-heartbeat")  # fmt: skip

    def guide(
        self, prog: str, word: str, name: str | None = None, *options: str
    ) -> subprocess.Popen[bytes]:
        """Start the guide's ``prog`` command with ``word`` (the URL and namespace from the
        env), with the test's ``options`` after the guide's words."""
        module = {"tickwheel": "timer.cli", "celery": "celery"}[prog]
        (args,) = [c for c in guide_commands() if c[1] == module and word in c]
        return self.start(name or word, *args[1:], *options)

    def sender(self, name: str = "handle") -> subprocess.Popen[bytes]:
        return self.guide("tickwheel", "handle", name)

    def timer_worker(self) -> None:
        self.guide("tickwheel", "worker")

    def beat(self, name: str) -> subprocess.Popen[bytes]:
        return self.guide("celery", "beat", name)

    def wait(self, predicate: Callable[[], object], what: str) -> None:
        """wait_for, failing with the processes' logs."""
        try:
            wait_for(predicate, 60, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in self.tmp.glob("*.log"))

    def runs(self) -> dict[str, int]:
        r = redis.Redis.from_url(self.broker, decode_responses=True)
        try:
            return {str(k): int(v) for k, v in r.hgetall("proj:runs").items()}
        finally:
            r.close()

    def stop(self) -> None:
        stop_all(self.procs.values())


@pytest.fixture
def processes(
    redis_server: RedisServer, client: TimerClient, tmp_path: Path
) -> Iterator[Processes]:
    p = Processes(tmp_path, redis_server.url, client.namespace)
    with redis.Redis.from_url(p.broker) as r:
        r.flushdb()
    yield p
    p.stop()


def test_send_later_sends_each_task_once_at_its_deadline_and_cancel_revokes_it(
    client: TimerClient, processes: Processes
) -> None:
    """Tasks sent later run once each, under the timer's id (one timer for an id given twice);
    a cancelled one never reaches the broker."""
    processes.celery_worker()
    processes.sender()
    processes.timer_worker()
    timers = [send_later(client, "proj.record", args=["later"], countdown=0.5) for _ in range(12)]
    t = send_later(client, "proj.record", args=["later"], countdown=0.5, id="order:{7}")
    again = send_later(client, "proj.record", args=["later"], countdown=0.5, id="order:{7}")
    assert again.created is False and again.deadline_ms == t.deadline_ms  # one timer
    cancelled = timers[:4]
    for c in cancelled:
        assert client.cancel(c.id)
    sent = [x.id for x in timers[4:]] + [t.id]
    processes.wait(lambda: len(processes.runs()) >= len(sent), "the tasks to run")
    runs = processes.runs()
    assert runs == {f"later|{i}": 1 for i in sent}, processes.logs()
    for c in cancelled:
        info = client.get(c.id)
        assert info is not None and info.state == "cancelled"
    assert client.get(t.id).state == "expired"  # type: ignore[union-attr]


def test_a_task_that_ended_has_its_outcome_acknowledged_at_once(
    client: TimerClient, processes: Processes
) -> None:
    """A task that ran showed as owed (`groups`: pending 1, "later") until the sender's
    next look, the delivery timeout after the send (30 s; trials 25 and 26). The task
    tells the sender it ended (the send's `tickwheel_look` header): with a delivery
    timeout of 10 minutes, the outcomes are acknowledged as soon as the tasks ran."""
    processes.env["PROJ_DELIVERY_TIMEOUT_S"] = "600"
    processes.celery_worker()
    processes.sender()
    processes.timer_worker()
    sent = [send_later(client, "proj.record", args=["told"], countdown=0.2).id for _ in range(3)]
    processes.wait(lambda: len(processes.runs()) >= 3, "the tasks to run")

    def settled() -> bool:
        return all(g.pending == 0 for g in client.groups() if g.name == "celery")

    processes.wait(settled, "the sender to acknowledge each outcome (well inside 600 s)")
    assert processes.runs() == {f"told|{i}": 1 for i in sent}, processes.logs()


def test_a_task_the_broker_lost_is_sent_again_and_a_copy_is_dropped(
    client: TimerClient, processes: Processes
) -> None:
    """Delivery confirmed end to end (#54 E): the sender counts a send only once the task
    has started (ConfirmedTask claims its id). Three tasks reach the broker with no
    Celery worker running; the broker then loses them (the queue is deleted, as kombu's
    Redis transport loses a message a killed worker had just popped, celery#7950) and a
    copy of one is put back twice, as a redelivery would. Once a Celery worker runs,
    the lost ones are sent again after the delivery timeout and each task runs exactly
    once: the copies find its claim and are dropped. The sender then acknowledges them
    (no outcome left pending, none dead)."""
    processes.env["PROJ_DELIVERY_TIMEOUT_S"] = "1"
    processes.sender()
    processes.timer_worker()
    sent = [send_later(client, "proj.record", args=["lost"], countdown=0.2).id for _ in range(3)]
    broker = redis.Redis.from_url(processes.broker)
    try:
        processes.wait(lambda: broker.llen("celery") >= 3, "the three tasks in the broker")
        messages = broker.lrange("celery", 0, -1)
        broker.delete("celery")  # lost by the broker
        broker.lpush("celery", messages[0], messages[0])  # and one delivered twice
        processes.celery_worker()
        processes.wait(lambda: len(processes.runs()) >= 3, "every task to run")

        def settled() -> bool:
            return all(g.pending == 0 for g in client.groups() if g.name == "celery")

        processes.wait(settled, "the sender to acknowledge every outcome")
        processes.wait(lambda: broker.llen("celery") == 0, "every copy taken from the queue")
    finally:
        broker.close()
    assert processes.runs() == {f"lost|{i}": 1 for i in sent}, processes.logs()
    assert client.dead_letters("celery") == []
    assert "sent again" in (processes.tmp / "handle.log").read_text()


def test_the_guide_runs_every_process_the_example_says() -> None:
    """The example's docstring lists the commands that run it, each in a terminal; the
    guide shows each of them (its run left out the Celery worker, so a reader's tasks
    reached the broker and nothing ran them), and the tests start them from the guide."""
    doc = ast.get_docstring(ast.parse((APP / "proj.py").read_text())) or ""
    run = doc.split("::", 1)[1].split("\n\n", 2)[1]
    example = [ln.split("#", 1)[0].strip() for ln in run.splitlines() if ln.strip()]
    assert "celery -A proj worker" in example
    assert [ln for ln in example if ln not in guide_lines()] == []


GUIDES_CODE = "test_the_guides_code_sends_its_task_beside_the_example"


def test_the_guides_code_sends_its_task_beside_the_example(
    server_binary: Path, tmp_path: Path
) -> None:
    """The guide's Python, as written, beside the example run as the guide says, on the
    user's embedded server (``tickwheel server start``; no URL given anywhere, as a user
    runs them): in the namespace the guide exports, `tickwheel init`, the sender
    (`tickwheel handle proj:handlers`), a worker and a Celery worker. The task it sends
    later runs once, under the id it printed; the one it cancels never reaches the broker.
    (Before, the snippet read ``$TICKWHEEL_REDIS_URL``, a KeyError here, and scheduled
    into namespace ``default``, which no sender read.)"""
    from tests.docs.examples import blocks  # noqa: PLC0415

    home = tmp_path / "home"
    user = {
        k: v
        for k, v in os.environ.items()
        if k not in {"TICKWHEEL_REDIS_URL", "CELERY_BROKER_URL", "TICKWHEEL_NAMESPACE"}
    }
    user.update(TICKWHEEL_HOME=str(home), TICKWHEEL_SERVER_BINARY=str(server_binary))

    def tickwheel(*args: str) -> None:
        done = subprocess.run([sys.executable, "-m", "timer.cli", *args], env=user, cwd=APP,
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert done.returncode == 0, (args, done.stdout, done.stderr)

    tickwheel("server", "start")
    url = embedded_url(home)
    assert url is not None
    user.update(guide_env())
    processes = Processes(tmp_path, url, user.get("TICKWHEEL_NAMESPACE", "default"))
    # the sender looks again for the task's start after 1 s (not 30): the test's pace
    processes.env = {**user, "PYTHONUNBUFFERED": "1", "PROJ_DELIVERY_TIMEOUT_S": "1"}
    processes.broker = url  # the example's broker: by default, the same server
    try:
        for args in guide_commands():
            if args[1:3] == ["timer.cli", "init"]:
                tickwheel(*args[2:])
        processes.sender()
        processes.timer_worker()
        processes.celery_worker()
        code = [b for b in blocks(GUIDE, ("python",)) if b.claim and b.claim.endswith(GUIDES_CODE)]
        assert code, "the guide's Python names this test"
        script = tmp_path / "guide.py"
        script.write_text("\n".join(b.code for b in code))
        ran = subprocess.run([sys.executable, str(script)], env=user, cwd=tmp_path,
                             capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert ran.returncode == 0, ran.stderr[-3000:]
        sent = ran.stdout.split()[0]
        processes.wait(lambda: f"later|{sent}" in processes.runs(), "the task sent later to run")
        with TimerClient.from_url(url, processes.namespace) as client:

            def settled() -> bool:  # every outcome read and acknowledged by the sender
                return all(g.pending == 0 and not g.lag for g in client.groups()
                           if g.name == "celery")  # fmt: skip

            processes.wait(settled, "the sender to acknowledge every outcome")
            cancelled = [i.id for i in client.timers.scan(state="cancelled")]
        assert processes.runs() == {f"later|{sent}": 1}, processes.logs()
        assert len(cancelled) == 1 and sent not in cancelled, cancelled
    finally:
        processes.stop()
        tickwheel("server", "stop")


def test_an_app_that_names_no_url_finds_redis_as_the_client_does(
    server_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Celery app with no ``tickwheel_url`` (a ConfirmedTask's claims, the beat
    scheduler) finds Redis as ``from_url()``, the CLI and the Django backend do: the
    running embedded server when $TICKWHEEL_REDIS_URL is not set (it raised "timer.celery
    needs app.conf.tickwheel_url or $TICKWHEEL_REDIS_URL"), and with nothing running a
    ConfigError that says how to start one."""
    monkeypatch.delenv("TICKWHEEL_REDIS_URL", raising=False)
    monkeypatch.setenv("TICKWHEEL_HOME", str(tmp_path))
    app = Celery("no-url")
    with pytest.raises(ConfigError, match="tickwheel server start"):
        claims_of(app)
    embedded.start(tmp_path, binary=str(server_binary))
    try:
        claims = claims_of(app)
        try:
            assert claims.client.where == embedded_url(tmp_path)
            assert claims.client.namespace == "celery"
        finally:
            claims.client.close()
    finally:
        embedded.stop(tmp_path)


def broker_sends(url: str) -> dict[str, int]:
    """How many messages the broker's queue holds, by task id (no Celery worker takes
    them: each one is a send)."""
    with redis.Redis.from_url(url) as r:
        ids = [json.loads(m)["headers"]["id"] for m in r.lrange("celery", 0, -1)]
    return {i: ids.count(i) for i in ids}


def pending(client: TimerClient) -> int:
    return sum(g.pending for g in client.groups() if g.name == "celery")


def not_confirmable(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The sender's warnings that a task cannot confirm its start."""
    return [r.getMessage() for r in caplog.records
            if r.name == "timer.celery" and r.levelno == logging.WARNING
            and "counts as sent when the broker takes it" in r.getMessage()]  # fmt: skip


class InProcessSender:
    """``sender(app)`` run in a thread of this process (its warnings in caplog), beside
    the example's ``tickwheel worker``; the app's broker holds what it sends."""

    def __init__(self, app: Celery, url: str, namespace: str, timeout_s: float) -> None:
        self.handlers = sender(app, delivery_timeout_s=timeout_s)
        self.client = TimerClient.from_url(url, namespace)
        self.thread = threading.Thread(target=self.handlers.run, args=(self.client,))
        self.thread.start()

    def stop(self) -> None:
        self.handlers.stop()
        self.thread.join(30)
        self.client.close()


def app_on(processes: Processes, name: str) -> Celery:
    app = Celery(name, broker=processes.broker)
    app.conf.update(tickwheel_url=processes.url, tickwheel_namespace=processes.namespace)
    return app


def test_a_plain_task_counts_as_sent_when_the_broker_takes_it_with_one_warning(
    client: TimerClient, processes: Processes, caplog: pytest.LogCaptureFixture
) -> None:
    """An app whose tasks are plain Celery tasks (no ConfirmedTask: written before it)
    cannot report a start, so with ``confirm`` (the default) its tasks are sent as
    before: each timer's task and each beat occurrence once, the outcome acknowledged
    when the broker took it and never sent again, however far past the delivery
    timeout. A name the app does not register (a remote worker's task) likewise. One
    warning per task name, naming it and how to opt in."""
    caplog.set_level(logging.WARNING, logger="timer.celery")
    app = app_on(processes, "plain")

    @app.task(name="plain.work")  # type: ignore[untyped-decorator]
    def work(what: str) -> None:  # pragma: no cover - no Celery worker runs here
        pass

    processes.timer_worker()
    run = InProcessSender(app, processes.url, client.namespace, timeout_s=0.1)
    try:
        sent = [send_later(client, "plain.work", args=["later"], countdown=0.1).id
                for _ in range(3)]  # fmt: skip
        sent.append(send_later(client, "remote.work", countdown=0.1).id)
        call = task_call("plain.work", ["beat"])
        client.schedules.create("celery.often", payload={"celery": call}, every=1000)

        def occurrences() -> list[str]:
            return [i for i in broker_sends(processes.broker) if i.startswith("{celery.often}@")]

        processes.wait(lambda: len(occurrences()) >= 2, "two beat occurrences sent")
        client.schedules.delete("celery.often")
        processes.wait(lambda: set(sent) <= set(broker_sends(processes.broker)), "each sent")

        def settled_or_sent_twice() -> bool:
            return pending(client) == 0 or max(broker_sends(processes.broker).values()) > 1

        processes.wait(settled_or_sent_twice, "every outcome acknowledged (or a task sent twice)")
    finally:
        run.stop()
    sends = broker_sends(processes.broker)
    assert set(sends.values()) == {1}, sends  # none sent twice
    assert pending(client) == 0
    assert client.dead_letters("celery") == []
    warned = not_confirmable(caplog)
    assert len(warned) == 2, warned  # one per name, not one per send
    assert "plain.work" in warned[0] + warned[1] and "remote.work" in warned[0] + warned[1]
    assert all("base=timer.celery.ConfirmedTask" in w for w in warned)


def test_a_mixed_app_waits_for_the_start_of_its_confirmed_tasks_only(
    client: TimerClient, processes: Processes, caplog: pytest.LogCaptureFixture
) -> None:
    """In an app where some tasks are ConfirmedTask: those keep their confirmed delivery
    (not started: sent again after the delivery timeout; started: acknowledged), the
    plain ones are sent once, and only they are warned about. A sent one waiting for its
    start is counted by ``groups`` as ``later``, not as retrying: nothing failed."""
    caplog.set_level(logging.WARNING, logger="timer.celery")
    app = app_on(processes, "mixed")

    @app.task(name="mixed.plain")  # type: ignore[untyped-decorator]
    def plain() -> None:  # pragma: no cover - no Celery worker runs here
        pass

    @app.task(name="mixed.confirmed", base=ConfirmedTask)  # type: ignore[untyped-decorator]
    def confirmed() -> None:  # pragma: no cover - no Celery worker runs here
        pass

    processes.timer_worker()
    run = InProcessSender(app, processes.url, client.namespace, timeout_s=0.2)
    try:
        p = send_later(client, "mixed.plain", countdown=0.1).id
        c = send_later(client, "mixed.confirmed", countdown=0.1).id
        # not started (no Celery worker): sent, then sent again after each timeout
        processes.wait(lambda: broker_sends(processes.broker).get(c, 0) >= 3, "three sends")
        assert broker_sends(processes.broker)[p] == 1
        assert pending(client) == 1  # the confirmed one waits for its start
        # and that is no failure: it waits as "later", never as retrying
        [sending] = [g for g in client.groups() if g.name == "celery"]
        assert sending.retrying == 0, sending
        processes.wait(
            lambda: [g.later for g in client.groups() if g.name == "celery"] == [1],
            "the confirmed one counted as later",
        )
        Claims(client).done(c)  # as its ConfirmedTask does when it ran
        processes.wait(lambda: pending(client) == 0, "the confirmed one acknowledged")
    finally:
        run.stop()
    assert broker_sends(processes.broker)[p] == 1
    (warned,) = not_confirmable(caplog)
    assert "mixed.plain" in warned and "mixed.confirmed" not in warned


@pytest.mark.chaos
@pytest.mark.parametrize("at_most_once", [False, True], ids=["at-least-once", "at-most-once"])
def test_a_task_whose_worker_is_killed_mid_run_runs_again_or_never_as_its_mode_says(
    client: TimerClient, processes: Processes, tmp_path: Path, at_most_once: bool
) -> None:
    """#54 E's last window: a task killed (kill -9 of its Celery worker) after it started
    and before it ended. By default (at least once) its claim's lease ends, the sender
    sends it again and a new worker runs it to its end: started twice, ended once, never
    lost. With ``tickwheel_at_most_once`` its start is final: the sender counts it
    delivered, nothing sends or runs it again (a copy put back in the broker is
    dropped), and its claim says ``started``: started once, never twice."""
    processes.env.update(PROJ_DELIVERY_TIMEOUT_S="1", PROJ_CLAIM_LEASE_S="1",
                         PROJ_AT_MOST_ONCE="1" if at_most_once else "0")  # fmt: skip
    processes.sender()
    processes.timer_worker()
    processes.celery_worker()
    hold = tmp_path / "hold"
    hold.touch()
    t = send_later(client, "proj.record", args=["held"], kwargs={"hold": str(hold)},
                   countdown=0.2)  # fmt: skip
    name = f"held|{t.id}"

    def starts() -> int:
        with redis.Redis.from_url(processes.broker) as r:
            return int(r.hget("proj:starts", name) or 0)

    processes.wait(lambda: starts() == 1, "the task to start")
    celery = processes.procs["celery"]
    celery.send_signal(signal.SIGKILL)  # mid-run: started, not ended
    celery.wait()
    hold.unlink()
    processes.celery_worker("celery-2", loglevel="info")  # it says when it drops a copy

    def settled() -> bool:
        return all(g.pending == 0 for g in client.groups() if g.name == "celery")

    processes.wait(settled, "the sender to count the task delivered")
    claims = Claims(client)
    if at_most_once:
        assert claims.state(t.id) == "started"
        # its message redelivered, as kombu restores an unacknowledged one after the
        # visibility timeout (the killed worker took it with acks_late): it is dropped
        with redis.Redis.from_url(processes.broker) as r:
            (unacked,) = r.hvals("unacked")
            message, _exchange, _routing_key = json.loads(unacked)
            r.rpush("celery", json.dumps(message))
        log = processes.tmp / "celery-2.log"
        processes.wait(lambda: "this one is dropped" in log.read_text(), "the copy dropped")
        assert (starts(), processes.runs().get(name)) == (1, None), processes.logs()
    else:
        processes.wait(lambda: processes.runs().get(name) == 1, "the task sent again to end")
        assert starts() == 2 and claims.state(t.id) == "done", processes.logs()
    assert client.dead_letters("celery") == []


@pytest.mark.slow
@pytest.mark.chaos
@pytest.mark.parametrize("plain", [False, True], ids=["confirmed", "plain"])
def test_two_beats_one_killed_send_each_second_once(
    client: TimerClient, processes: Processes, plain: bool
) -> None:
    """Two `celery beat -S timer.celery:Scheduler` processes, one killed with kill -9
    half-way, then the sender killed with kill -9 and another started: the entry of
    every second is sent and run once a second, none twice and none missed, and tasks
    sent later meanwhile run once each. Whether the app's task is a ConfirmedTask or a
    plain Celery task (an app written before ConfirmedTask: with the delivery timeout
    at 1 s, a send that waited for a start would run it again within a second), which
    the sender warns about once.

    A ConfirmedTask's sender is killed wherever it is (a copy it sends again is
    dropped). A plain task is sent at least once: a sender killed after the broker took
    it and before the acknowledgement sends it again, the one window that has, and not
    what this pins; so that sender is killed with nothing in hand (its group paused,
    two seconds of outcomes unread, none pending)."""
    processes.env.update(PROJ_DELIVERY_TIMEOUT_S="1", PROJ_PLAIN="1" if plain else "0")
    processes.celery_worker()
    first = processes.sender()
    processes.timer_worker()
    a = processes.beat("beat-a")
    processes.beat("beat-b")
    later = [send_later(client, "proj.record", args=["later"], countdown=c).id
             for c in (1, 2, 3, 5, 8, 12)]  # fmt: skip

    def ticks() -> list[str]:
        return sorted(k for k in processes.runs() if k.startswith("tick|"))

    def twice() -> bool:
        return any(n > 1 for n in processes.runs().values())

    processes.wait(lambda: len(ticks()) >= 3, "three ticks")
    a.send_signal(signal.SIGKILL)
    a.wait()
    seen = len(ticks())
    processes.wait(lambda: len(ticks()) >= seen + 3 or twice(), "three more ticks")
    if plain:
        client.pause_group("celery")

        def quiet() -> bool:
            (g,) = [g for g in client.groups() if g.name == "celery"]
            return (g.pending == 0 and (g.lag or 0) >= 2) or twice()

        processes.wait(quiet, "the sender idle, its group paused")
    first.send_signal(signal.SIGKILL)
    first.wait()
    processes.sender("handle-2")
    if plain:
        client.resume_group("celery")
    seen = len(ticks())

    def through() -> bool:
        nominal = [int(k.rsplit("@", 1)[1]) for k in ticks()]
        gapless = nominal == list(range(nominal[0], nominal[-1] + 1, 1000))
        ran = all(f"later|{i}" in processes.runs() for i in later)
        return (gapless and len(nominal) >= seen + 3 and ran) or twice()

    processes.wait(through, "three ticks after the sender's kill, and every task sent later")
    runs = processes.runs()
    assert set(runs.values()) == {1}, runs  # none twice
    nominal = [int(k.rsplit("@", 1)[1]) for k in ticks()]
    assert nominal == list(range(nominal[0], nominal[-1] + 1, 1000)), nominal  # none missed
    info = client.schedules.get("celery.tick")
    assert info is not None and info.fired >= len(nominal)
    for log in ("handle", "handle-2"):
        text = (processes.tmp / f"{log}.log").read_text()
        warned = text.count("counts as sent when the broker takes it")
        assert warned == (1 if plain else 0), text
        assert plain is ("task proj.record cannot confirm its start" in text)
    assert client.dead_letters("celery") == []


def test_scheduler_keeps_tickwheel_schedules_as_the_entries_say(
    client: TimerClient, redis_server: RedisServer
) -> None:
    """Entries become schedules celery.<name>; a changed entry updates its schedule, an
    unchanged one is left as it is (no new occurrence), a removed one is deleted."""
    app = Celery("t", broker="memory://")
    app.conf.update(tickwheel_url=redis_server.url, tickwheel_namespace=client.namespace,
                    beat_schedule={
                        "a": {"task": "t.a", "schedule": 60.0, "args": (1,)},
                        "b": {"task": "t.b", "schedule": crontab(minute="*/5", hour="9-17",
                                                                  day_of_week="mon-fri"),
                              "options": {"queue": "q"}},
                    })  # fmt: skip
    first = Scheduler(app)
    a = client.schedules.get("celery.a")
    b = client.schedules.get("celery.b")
    assert a is not None and b is not None
    assert a.payload == {"celery": {"task": "t.a", "args": [1], "kwargs": {}, "options": {}}}
    assert b.spec.recurrence.cron == "*/5 9-17 * * mon-fri"
    Scheduler(app).close()  # a second beat: nothing changes
    assert client.schedules.get("celery.a") == a
    app.conf.beat_schedule = {"a": {"task": "t.a", "schedule": 30.0, "args": (2,)}}
    Scheduler(app).close()
    changed = client.schedules.get("celery.a")
    assert changed is not None and changed.payload["celery"]["args"] == [2]
    assert changed.version > a.version
    assert client.schedules.get("celery.b") is None
    assert first.tick() == first.max_interval  # it never sends anything itself
    first.close()


def test_asend_later_keeps_the_same_timer_as_send_later(client: TimerClient) -> None:
    """From an asyncio app (a FastAPI endpoint): the same checks, the same timer; an eta
    is the deadline; a naive eta is refused before anything is written."""
    when = dt.datetime(2031, 5, 1, 12, 0, tzinfo=dt.UTC)

    async def body(ac: AsyncTimerClient) -> Timer:
        with pytest.raises(InvalidInput, match="aware datetime"):
            await asend_later(ac, "proj.record", eta=when.replace(tzinfo=None), id="a:{1}")
        return await asend_later(ac, "proj.record", args=["x"], eta=when, id="a:{1}")

    t = with_async(client, body)
    assert t.created and t.deadline_ms == int(when.timestamp() * 1000)
    again = send_later(client, "proj.record", args=["x"], eta=when, id="a:{1}")
    assert again.created is False
    info = client.get("a:{1}")
    assert info is not None and info.payload == {
        "celery": {"task": "proj.record", "args": ["x"], "kwargs": {}, "options": {}}
    }


class Sunrise(BaseSchedule):  # type: ignore[misc]
    pass


@pytest.mark.parametrize("countdown", [-1, math.nan, math.inf, "5", True, TEN_YEARS_S + 1])
def test_a_countdown_is_seconds_from_0_to_ten_years(countdown: object) -> None:
    """The same bound as every other delay (the one ten years), through the one check."""
    timing: dict[str, object] = {"eta": None, "timer_id": None, "args": (), "kwargs": {}}
    assert _timer_of("t", countdown=TEN_YEARS_S, **timing)[1]["delay_ms"] == TEN_YEARS_S * 1000
    with pytest.raises(InvalidInput, match="countdown must be"):
        _timer_of("t", countdown=countdown, **timing)


def test_a_schedule_tickwheel_cannot_keep_is_refused_clearly() -> None:
    app = Celery("t", broker="memory://")
    assert schedule_spec(crontab(minute="0", hour="2"), app) == {"cron": "0 2 * * *", "tz": "UTC"}
    assert schedule_spec(schedule(dt.timedelta(seconds=1.5)), app) == {"every": 1500}
    with pytest.raises(InvalidInput, match="crontab, a number of seconds or a timedelta"):
        schedule_spec(Sunrise(), app)  # solar and the like: no cron, no fixed period
    with pytest.raises(InvalidInput, match="countdown"):
        task_call("t", (), {}, {"countdown": 5})
    with pytest.raises(InvalidInput, match="cannot travel"):
        task_call("t", (), {}, {"link": "x"})


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sig=st.one_of(st.just("proj.record"), anything,
                  st.fixed_dictionaries({"task": st.one_of(st.just("t"), anything),
                                         "args": anything, "kwargs": anything,
                                         "options": anything})),
    countdown=st.one_of(st.none(), st.floats(allow_nan=True), anything),
    eta=st.one_of(st.none(), st.datetimes(), st.datetimes(timezones=st.just(dt.UTC)), anything),
    tid=st.one_of(st.none(), st.just("job:{1}"), anything),
    args=st.one_of(st.just(()), anything),
)  # fmt: skip
def test_send_later_of_any_input_is_a_timer_or_a_clear_refusal_that_writes_nothing(  # noqa: PLR0917
    client: TimerClient, sig: object, countdown: object, eta: object, tid: object, args: object
) -> None:
    keys = namespace_keys(client.redis, client.namespace)
    try:
        t = send_later(client, sig, countdown=countdown, eta=eta, id=tid,  # type: ignore[arg-type]
                       args=args)  # type: ignore[arg-type]  # fmt: skip
    except TimerError:
        assert namespace_keys(client.redis, client.namespace) == keys
        return
    info = client.get(t.id)
    assert info is not None and info.payload["celery"]["task"] in ("proj.record", "t")
    client.cancel(t.id)


def test_a_confirmed_task_called_eagerly_or_directly_claims_nothing() -> None:
    """ConfirmedTask claims only what a broker delivered: a task run eagerly (tests,
    `task_always_eager`) or called as a function needs no tickwheel Redis at all."""
    app = Celery("eager", broker="memory://", task_cls="timer.celery:ConfirmedTask")
    app.conf.task_always_eager = True  # and no tickwheel_url: a claim would fail
    ran: list[int] = []

    @app.task(name="eager.add")  # type: ignore[untyped-decorator]
    def add(x: int) -> int:
        ran.append(x)
        return x + 1

    assert add.delay(1).get() == 2
    assert add(2) == 3
    assert ran == [1, 2]


def test_the_sender_knows_a_task_confirms_from_its_class_in_the_app_and_warns_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A task confirms its start if its class in the sender's app is a ConfirmedTask,
    also one in a module of the app's ``imports`` (registered when Celery's worker
    imports it, and so by the sender); a plain task, one with a base of its own and a
    name the app does not know do not, each warned about once however often asked; with
    ``confirm=False`` nothing waits and nothing is warned."""
    caplog.set_level(logging.WARNING, logger="timer.celery")
    (tmp_path / "tw_imported_tasks.py").write_text(
        "from timer.celery import ConfirmedTask\n"
        "from tw_confirms_app import app\n\n"
        "@app.task(name='imported.confirmed', base=ConfirmedTask)\n"
        "def confirmed():\n    pass\n"
    )
    (tmp_path / "tw_confirms_app.py").write_text(
        "from celery import Celery\n\n"
        "app = Celery('tw_confirms_app', broker='memory://')\n"
        "app.conf.imports = ['tw_imported_tasks']\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from tw_confirms_app import app  # type: ignore[import-not-found]  # noqa: PLC0415

    class Own(Task):  # type: ignore[misc]
        pass

    @app.task(name="t.plain")  # type: ignore[untyped-decorator]
    def plain() -> None:  # pragma: no cover - never run
        pass

    @app.task(name="t.own", base=Own)  # type: ignore[untyped-decorator]
    def own() -> None:  # pragma: no cover - never run
        pass

    @app.task(name="t.confirmed", base=ConfirmedTask)  # type: ignore[untyped-decorator]
    def confirmed() -> None:  # pragma: no cover - never run
        pass

    send = Sender(app)
    names = ["t.confirmed", "imported.confirmed", "t.plain", "t.own", "remote.thing"]
    for _ in range(3):
        assert [send.confirms(n) for n in names] == [True, True, False, False, False]
    warned = not_confirmable(caplog)
    assert len(warned) == 3, warned
    assert [n for n in names if any(f"task {n} " in w for w in warned)] == names[2:]
    caplog.clear()
    assert Sender(app, confirm=False).confirms("t.plain") is False
    assert not_confirmable(caplog) == []
