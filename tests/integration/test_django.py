"""timer.django (#44): a Django Tasks backend on tickwheel, with a real Django project
(tests/django_project), a real server, a tickwheel worker and the runner as a real
process (`tickwheel handle timer.django.runner:handlers`), killed with kill -9 once."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import stop_all, wait_for
from timer import TimerClient, TimerError
from timer.testing import RedisServer
from timer.worker import Worker, WorkerSettings

from .conftest import namespace_keys
from .test_fuzz_api import anything

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs/guides/django.md"
NAMESPACE = "django"  # the guide's


def guide_runner() -> tuple[dict[str, str], list[str]]:
    """The guide's runner line, as this test runs it: its environment (with this test's
    project for the settings) and its command through this Python (`-m timer.cli`), taking
    outcomes back after 1 s instead of 5."""
    from tests.docs.examples import blocks  # noqa: PLC0415

    (line,) = [b.code.strip() for b in blocks(GUIDE, ("sh",)) if "timer.django.runner" in b.code]
    words = line.split()
    env = dict(w.split("=", 1) for w in words if "=" in w and w[0].isupper())
    env["DJANGO_SETTINGS_MODULE"] = "tests.django_project.settings"
    command = [w for w in words if not ("=" in w and w[0].isupper())]
    assert command[0] == "tickwheel", line
    return env, ["-m", "timer.cli", *command[1:], "--reclaim-idle", "1s"]


def forget_backend(task_backends: Any) -> None:
    """Drop the process's cached ``default`` backend: it is made once, from the settings
    and environment of the moment (a task's import validates against it), so a module
    that sets its own environment must not find one another module made."""
    with contextlib.suppress(AttributeError):
        task_backends["default"].close()
        del task_backends["default"]


@pytest.fixture(scope="module")
def project(redis_server: RedisServer) -> Iterator[Any]:
    """The test project set up in this process (Django's settings are the process's),
    its namespace made, and a tickwheel worker firing its timers."""
    with pytest.MonkeyPatch.context() as env:  # put back for the tests after this module
        env.setenv("TICKWHEEL_REDIS_URL", redis_server.url)
        env.setenv("TICKWHEEL_NAMESPACE", NAMESPACE)
        env.setenv("DJANGO_SETTINGS_MODULE", "tests.django_project.settings")
        import django  # noqa: PLC0415

        django.setup()
        from timer.django import task_backends  # noqa: PLC0415

        forget_backend(task_backends)  # one another test made (a task's import makes it)
        from tests.django_project import tasks  # noqa: PLC0415

        client = TimerClient.from_url(redis_server.url, NAMESPACE)
        client.init(shards=4)  # `tickwheel init`: a no-op once made
        w = Worker(TimerClient.from_url(redis_server.url, NAMESPACE),
                   WorkerSettings(worker_id="dj"))  # fmt: skip
        runner = threading.Thread(target=w.run, kwargs={"handle_signals": False}, daemon=True)
        runner.start()
        yield tasks
        w.stop()
        runner.join(10)
        w.client.close()
        client.close()
        task_backends["default"].close()  # the backend's own client, made in this thread
        forget_backend(task_backends)


class Runner:
    def __init__(self, tmp: Path) -> None:
        self.tmp, self.procs = tmp, list[subprocess.Popen[bytes]]()

    def start(self) -> subprocess.Popen[bytes]:
        log = self.tmp / f"runner-{len(self.procs)}.log"
        with log.open("wb") as out:
            env, command = guide_runner()
            proc = subprocess.Popen(
                [sys.executable, *command],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
            )
        self.procs.append(proc)
        return proc

    def logs(self) -> str:
        return "\n".join(p.read_text()[-3000:] for p in sorted(self.tmp.glob("runner-*.log")))

    def stop(self) -> None:
        stop_all(self.procs)


@pytest.fixture
def runner(project: Any, tmp_path: Path) -> Iterator[Runner]:
    r = Runner(tmp_path)
    yield r
    r.stop()


def runs(name: str) -> int:
    r = redis.Redis.from_url(os.environ["TICKWHEEL_REDIS_URL"].rsplit("/", 1)[0] + "/1")
    try:
        return int(r.hget("django:runs", name) or 0)
    finally:
        r.close()


def finished(task: Any, result_id: str, runner: Runner) -> Any:
    def done() -> Any:
        result = task.get_result(result_id)
        return result if result.is_finished else None

    try:
        return wait_for(done, 60, f"task result {result_id}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{runner.logs()}") from None


def test_tasks_run_once_with_results_failures_context_and_run_after(
    project: Any, runner: Runner
) -> None:
    from django_tasks import TaskResultStatus  # noqa: PLC0415

    tasks = project
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1.5)
    deferred = tasks.add.using(run_after=later).enqueue(40, 2)
    assert tasks.add.get_result(deferred.id).status == TaskResultStatus.READY
    now = tasks.add.enqueue(2, 3)
    failing = tasks.fails.enqueue("f1")
    context = tasks.attempt.enqueue("c1")
    runner.start()

    ok = finished(tasks.add, now.id, runner)
    assert ok.status == TaskResultStatus.SUCCESSFUL and ok.return_value == 5
    assert ok.attempts == 1 and runs("add:2") == 1
    bad = finished(tasks.fails, failing.id, runner)
    assert bad.status == TaskResultStatus.FAILED and runs("fails:f1") == 1  # not retried
    assert bad.errors[0].exception_class is ValueError
    assert "f1 failed, as it should" in bad.errors[0].traceback
    ctx = finished(tasks.attempt, context.id, runner)
    assert ctx.return_value == {"attempt": 1, "id": context.id}
    late = finished(tasks.add, deferred.id, runner)
    assert late.return_value == 42 and late.started_at >= later
    assert late.enqueued_at < later and late.finished_at >= late.started_at


def test_a_failed_tasks_log_record_carries_its_exception(
    project: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """django_tasks logs a failure (task_finished) with logger.exception: the signal is
    sent while the task's exception is being handled, so the record has its traceback,
    not "NoneType: None"."""
    import uuid  # noqa: PLC0415

    from timer.django import task_backends  # noqa: PLC0415

    body = {"task": project.fails.module_path, "args": ["log1"], "kwargs": {},
            "queue": "default", "context": False, "backend": "default"}  # fmt: skip
    with caplog.at_level(logging.INFO, logger="django_tasks"):
        result = task_backends["default"].run(uuid.uuid4().hex, body)
    assert result.status == "FAILED"
    (record,) = [r for r in caplog.records if "state=FAILED" in r.getMessage()]
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert record.exc_info[0] is ValueError and "log1 failed" in str(record.exc_info[1])
    started = [r for r in caplog.records if "state=RUNNING" in r.getMessage()]
    assert len(started) == 1 and started[0].exc_info is None


def tickwheel(line: str) -> str:
    """Run a `tickwheel ...` command line through this Python, in this environment; its
    stderr (what it said)."""
    words = line.split()
    assert words[0] == "tickwheel", line
    done = subprocess.run([sys.executable, "-m", "timer.cli", *words[1:]], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, (line, done.stdout, done.stderr)
    return done.stderr


def test_the_guides_runner_line_runs_tasks_on_the_embedded_server_with_no_url(
    server_binary: Path, tmp_path: Path
) -> None:
    """A reader's run of the guide, in a project made of its code: `proj/settings.py` with
    the guide's TASKS, `proj/tasks.py` as the guide writes it; no URL anywhere (no
    OPTIONS['URL'], no $TICKWHEEL_REDIS_URL), HOME and TICKWHEEL_HOME their own.
    `tickwheel --namespace django init` starts the embedded server; the guide's worker
    and runner line run as real processes; the guide's enqueue code, run as a script as
    written, sees its task due later READY and its task due now SUCCESSFUL with 5. (Before,
    the backend wanted a URL: `enqueue` raised ConfigError, and in the runner each task
    failed with it 5 times and was dead-lettered; and the guide's code was an excerpt of
    the tests, with their helpers, that a reader could not run.)"""
    from tests.docs.examples import blocks  # noqa: PLC0415

    home = tmp_path / "tickwheel-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TICKWHEEL_", "DJANGO_"))}
    env.update(HOME=str(tmp_path / "user"), TICKWHEEL_HOME=str(home),
               TICKWHEEL_SERVER_BINARY=str(server_binary),
               PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))  # fmt: skip
    guide = GUIDE.read_text()
    init, worker = (f"tickwheel --namespace {NAMESPACE} {c}" for c in ("init", "worker"))
    assert f"`{init}`" in guide and f"`{worker}`" in guide  # the commands it names
    python = [b.code for b in blocks(GUIDE, ("python",))]
    settings_code = next(c for c in python if "TASKS = {" in c)
    tasks_code = next(c for c in python if "def add(" in c)
    script = next(c for c in python if "enqueue(" in c)
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "__init__.py").write_text("")
    (proj / "settings.py").write_text(
        'import os\n\nSECRET_KEY = "a reader\'s project"\nUSE_TZ = True\n'
        'INSTALLED_APPS = ["django_tasks"]\n' + settings_code
    )
    (proj / "tasks.py").write_text(tasks_code)
    (tmp_path / "enqueue.py").write_text(script)
    line = next(b.code.strip() for b in blocks(GUIDE, ("sh",)) if "timer.django.runner" in b.code)
    words = line.split()
    line_env = dict(w.split("=", 1) for w in words if "=" in w and w[0].isupper())
    assert line_env == {"DJANGO_SETTINGS_MODULE": "proj.settings"}, line
    command = [w for w in words if not ("=" in w and w[0].isupper())]
    project_env = {**env, **line_env}

    def tickwheel(args: list[str]) -> str:
        done = subprocess.run([sys.executable, "-m", "timer.cli", *args], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=60,
                              check=False)  # fmt: skip
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stderr

    procs = list[subprocess.Popen[bytes]]()
    logs = tmp_path / "logs"
    logs.mkdir()
    try:
        assert "Started the embedded server" in tickwheel(init.split()[1:])
        for name, args in (("worker", worker.split()[1:]), ("runner", command[1:])):
            with (logs / f"{name}.log").open("wb") as out:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "timer.cli", *args], cwd=tmp_path,
                    env=project_env, stdout=out, stderr=subprocess.STDOUT,
                ))  # fmt: skip
        ran = subprocess.run([sys.executable, "enqueue.py"], cwd=tmp_path, env=project_env,
                             capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        said = "\n".join(p.read_text()[-2000:] for p in sorted(logs.glob("*.log")))
        assert ran.returncode == 0, f"{ran.stderr[-3000:]}\n{said}"
        url = embedded_url_of(home)
        with TimerClient.from_url(url, NAMESPACE) as client:
            assert list(client.dead_letters()) == []
    finally:
        stop_all(procs)
        tickwheel(["server", "stop"])


def embedded_url_of(home: Path) -> str:
    from timer.redis.local_server import embedded_url  # noqa: PLC0415

    url = embedded_url(home)
    assert url is not None, "the embedded server stopped"
    return url


@pytest.mark.slow
@pytest.mark.chaos
def test_a_runner_killed_mid_task_leaves_it_to_another_that_finishes_it(
    project: Any, runner: Runner, tmp_path: Path
) -> None:
    """kill -9 of the runner while the task runs: the result says RUNNING; a new runner
    takes the outcome back and runs it again (attempts 2, two worker ids), once more."""
    from django_tasks import TaskResultStatus  # noqa: PLC0415

    tasks = project
    hold = tmp_path / "hold"
    hold.touch()
    result = tasks.held.enqueue("k1", str(hold))
    first = runner.start()
    wait_for(lambda: runs("held:k1") == 1, 60, "the task to start")
    assert tasks.held.get_result(result.id).status == TaskResultStatus.RUNNING
    first.send_signal(signal.SIGKILL)
    first.wait()
    hold.unlink()
    runner.start()
    done = finished(tasks.held, result.id, runner)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == "k1"
    assert done.attempts == 2 and runs("held:k1") == 2


def test_an_unknown_or_malformed_result_id_is_task_result_does_not_exist(project: Any) -> None:
    from django_tasks.exceptions import TaskResultDoesNotExist  # noqa: PLC0415

    for bad in ("no-such-id", "", "x" * 300):
        with pytest.raises(TaskResultDoesNotExist):
            project.add.get_result(bad)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(args=st.lists(anything, max_size=3), kwargs=st.dictionaries(st.text(max_size=5), anything,
                                                                   max_size=2))  # fmt: skip
def test_enqueue_of_any_arguments_is_a_result_or_a_refusal_that_writes_nothing(
    project: Any, args: list[Any], kwargs: dict[str, Any]
) -> None:
    """Through a backend on a namespace no worker runs in (a worker's heartbeats would
    change its keys), so that a refusal's "nothing written" is the whole keyspace."""
    from timer.django import TickwheelBackend  # noqa: PLC0415

    url = os.environ["TICKWHEEL_REDIS_URL"]
    backend = TickwheelBackend("default", {"OPTIONS": {"URL": url, "NAMESPACE": "django-fuzz"}})
    backend.client.init(shards=2)
    task = project.fails.using(run_after=dt.datetime(2099, 1, 1, tzinfo=dt.UTC))
    keys = namespace_keys(backend.client.redis, "django-fuzz")
    try:
        result = backend.enqueue(task, args, kwargs)
    except (TypeError, ValueError, TimerError):
        assert namespace_keys(backend.client.redis, "django-fuzz") == keys
        backend.close()
        return
    info = backend.client.get(result.id)
    assert info is not None and info.payload["django"]["args"] == result.args
    assert info.deadline_ms == 4_070_908_800_000  # its run_after
    backend.client.cancel(result.id)
    backend.close()
