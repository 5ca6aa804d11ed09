"""`tickwheel handle`, `groups`, `dead` and `tail` as a user types them (in-process)."""

from __future__ import annotations

import importlib
import logging
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.cli.conftest import Run, as_json
from tests.conftest import wait_for
from timer import Handlers, TimerClient
from timer.cli.main import main
from timer.testing import RedisServer
from timer.worker import Worker, WorkerSettings

ROOT = Path(__file__).resolve().parents[2]

HANDLERS = """
from timer import Handlers, Outcome

seen = []

def on_timeout(o: Outcome) -> None:
    if (o.payload or {}).get("fail"):
        raise RuntimeError(f"job {o.id}: downstream refused")
    seen.append(o.id)

app = Handlers(group="from-object", max_attempts=1)

@app.on("cancelled")
async def on_cancel(o: Outcome) -> None:
    seen.append("async:" + o.id)
"""


def write_module(workdir: Path, namespace: str) -> str:
    name = f"handlers_{namespace}"
    (workdir / f"{name}.py").write_text(textwrap.dedent(HANDLERS))
    return name


def cancelled(url: str, namespace: str, ids: list[str], payload: object = None) -> TimerClient:
    c = TimerClient.from_url(url, namespace)
    for tid in ids:
        c.schedule(tid, 60_000, payload=payload)
        c.cancel(tid)
    return c


def test_bad_handler_spec_is_refused_and_nothing_is_consumed(
    tw: Run, workdir: Path, redis_server: RedisServer, namespace: str
) -> None:
    tw("init", "--shards", "4")
    module = write_module(workdir, namespace)
    c = cancelled(redis_server.url, namespace, ["a"])
    try:
        out = tw("handle", f"{module}:missing", expect=2).output
        assert f'module "{module}" has no attribute "missing"' in out, out
        out = tw("handle", "no_such_module_here:fn", expect=2).output
        assert 'cannot import module "no_such_module_here"' in out, out
        assert 'run the command from the directory that holds "no_such_module_here"' in out
        assert "is not MODULE:FUNCTION" in tw("handle", "nocolon", expect=2).output
        # a module with no :FUNCTION: what in it a SPEC could name, to copy (it said
        # only "is not MODULE:FUNCTION"), Handlers objects first; a dotted path, the colon
        out = tw("handle", module, expect=2).output
        assert (
            f"is a module, not MODULE:FUNCTION: give one of its handlers, {module}:app (a "
            f"Handlers), {module}:on_timeout or {module}:on_cancel\n"
        ) in out, out
        out = tw("handle", f"{module}.on_timeout", expect=2).output
        assert f"is not MODULE:FUNCTION: give {module}:on_timeout\n" in out, out
        out = tw("handle", f"{module}:missing", expect=2).output
        assert f"; its handlers: {module}:app (a Handlers), {module}:on_timeout or" in out
        (workdir / f"one_{module}.py").write_text("def react(o):\n    pass\nX = 1\n")
        out = tw("handle", f"one_{module}", expect=2).output
        assert f"give one_{module}:react, the one handler in it" in out, out
        (workdir / f"none_{module}.py").write_text(
            "from json import dumps\ndef two(a, b):\n    pass\n"
        )
        out = tw("handle", f"none_{module}", expect=2).output
        assert "it defines no handler to name (a function taking an Outcome)" in out, out
        assert "not a function" in tw("handle", f"{module}:seen", expect=2).output
        out = tw("handle", f"{module}:on_timeout", "--on", "expried", expect=3).output
        assert "--on takes expired, completed, cancelled or all" in out
        assert c.groups() == []  # nothing was read, no group was made
    finally:
        c.close()


def test_a_handler_module_that_fails_to_import_says_why_in_the_users_own_file(
    workdir: Path,
) -> None:
    """`handle` names the line of the user's own file where the import failed, never
    one in tickwheel or importlib (a SyntaxError: "(at …/timer/cli/spec.py:40)"); a
    module that imports something not installed is found, not missing; a module that
    calls sys.exit() on import is said, not a silent exit."""
    pkg = f"proj_{uuid.uuid4().hex[:8]}"
    (workdir / pkg).mkdir()
    (workdir / pkg / "__init__.py").write_text("")
    files = {
        "syntax": "x = 1\ndef f(:\n    pass\n",
        "needs": "import os\nimport nosuchlib_for_tickwheel_tests\n",
        "exits": "import sys\n\nsys.exit(3)\n",
        "deep": 'import json\n\njson.loads("{")\n',  # raised inside the stdlib
    }
    for name, text in files.items():
        (workdir / pkg / f"{name}.py").write_text(text)
    importlib.invalidate_caches()

    def handle(module: str) -> str:
        ran = CliRunner().invoke(main, ["handle", f"{pkg}.{module}:f"])
        assert ran.exit_code == 2, (ran.exit_code, ran.output)
        assert "timer/cli" not in ran.output and "importlib" not in ran.output, ran.output
        return " ".join(ran.output.split())  # the error's lines joined: click wraps them

    out = handle("syntax")
    assert f"SyntaxError: invalid syntax (at {pkg}/syntax.py:2)" in out, out
    out = handle("needs")
    assert f'module "{pkg}.needs" was found, but it imports "nosuchlib_for_tickwheel_tests"' in out
    assert f"a module that is not installed (at {pkg}/needs.py:2)" in out, out
    assert f'cannot import module "{pkg}.needs"' not in out
    out = handle("exits")
    assert f"importing {pkg}.exits called sys.exit(3) (at {pkg}/exits.py:3)" in out, out
    out = handle("deep")
    assert "JSONDecodeError" in out and f"(at {pkg}/deep.py:3)" in out, out
    out = handle("nosuch")  # the user's own module missing: no place to name
    assert f'cannot import module "{pkg}.nosuch": ModuleNotFoundError' in out, out
    assert "(at " not in out, out


def test_handle_retries_dead_letters_and_reports(
    tw: Run, workdir: Path, redis_server: RedisServer, namespace: str
) -> None:
    """A function handler: good outcomes handled, a failing one dead-lettered after
    --max-attempts; the summary says so; `dead` lists, shows, redelivers and drops."""
    tw("init", "--shards", "4")
    module = write_module(workdir, namespace)
    c = cancelled(redis_server.url, namespace, ["ok1", "ok2"])
    cancelled(redis_server.url, namespace, ["bad"], payload={"fail": True}).close()
    try:
        r = tw(
            "--json", "handle", f"{module}:on_timeout", "--on", "cancelled",
            "--max-attempts", "2", "--backoff", "10ms", "--idle-exit",
        )  # fmt: skip
        summary = as_json(r)
        assert summary == {
            "handled": 2,
            "failed": 2,
            "retried": 1,
            "dead_lettered": 1,
            "later": 0,
            "skipped": 0,
            "drained": True,
        }
        (letter,) = as_json(tw("--json", "dead", "list"))
        assert letter["group"] == "handlers" and letter["attempts"] == 2
        assert letter["outcome"]["id"] == "bad" and letter["outcome"]["payload"] == {"fail": True}
        assert letter["error"].startswith("RuntimeError: job bad: downstream refused")
        human = tw("dead", "show", letter["ref"]).output
        assert "RuntimeError: job bad" in human and "attempts  2" in human
        assert "earlier: attempt 1, " in human  # every attempt's error, not the last only
        assert [e["attempt"] for e in letter["earlier"]] == [1]
        assert "No dead letters" not in tw("dead", "list").output
        # bad refs: refused before anything changes
        assert "dead letter ref" in tw("dead", "drop", "nope", letter["ref"], expect=3).output
        assert "or --all" in tw("dead", "drop", expect=2).output
        assert len(c.dead_letters()) == 1
        assert "Redelivered 1" in tw("dead", "redeliver", letter["ref"]).output
        assert c.dead_letters() == []
        r = tw("--json", "handle", f"{module}:on_timeout", "--on", "cancelled",
               "--max-attempts", "1", "--idle-exit")  # fmt: skip
        assert as_json(r)["dead_lettered"] == 1
        assert "Paused group 'handlers'" in tw("groups", "pause", "handlers", "--by", "ops").output
        assert "handlers PAUSED by ops" in tw("groups").output
        assert 'no consumer group "nope"' in tw("groups", "pause", "nope", expect=6).output
        assert "Resumed group 'handlers'" in tw("groups", "resume", "handlers").output
        assert "was not paused" in tw("groups", "resume", "handlers").output
        assert not c.groups()[0].paused
        listed = tw("--json", "dead", "list", "--error", "DOWNSTREAM", "--match", "b?d")
        assert [d["outcome"]["id"] for d in as_json(listed)] == ["bad"]  # any case, a glob
        assert (
            "No dead letters" in tw("dead", "list", "--group", "handlers", "--match", "zz").output
        )
        assert (
            'no consumer group "other"' in tw("dead", "list", "--group", "other", expect=6).output
        )
        said = tw("dead", "drop", "--all", "--error", "x").output
        assert "No dead letters to drop: none matched (nothing changed)" in said, said
        said = tw("dead", "redeliver", "--all", "--error", "x").output
        assert "No dead letters to redeliver: none matched" in said, said
        assert "go with --all" in tw("dead", "redeliver", "1/1-0", "--error", "x", expect=2).output
        asked = tw("dead", "drop", "--all", expect=2)  # it asks; no answer: nothing dropped
        assert "Delete 1 dead letter for good:" in asked.output and "add --yes" in asked.output
        assert len(c.dead_letters()) == 1
        assert "Dropped 1 dead letter" in tw("dead", "drop", "--all", "--yes").output
        assert "No dead letters" in tw("dead", "list").output
        gone = tw("dead", "drop", letter["ref"], "--yes", expect=6).output
        assert f"no dead letter {letter['ref']}" in gone
    finally:
        c.close()


def test_handle_runs_a_handlers_object(
    tw: Run, workdir: Path, redis_server: RedisServer, namespace: str
) -> None:
    """SPEC may name a Handlers: its group and async handler are used."""
    tw("init", "--shards", "4")
    module = write_module(workdir, namespace)
    c = cancelled(redis_server.url, namespace, ["x"])
    try:
        summary = as_json(tw("--json", "handle", f"{module}:app", "--idle-exit"))
        assert summary["handled"] == 1
        assert importlib.import_module(module).seen == ["async:x"]
        assert [g.name for g in c.groups()] == ["from-object"]
    finally:
        c.close()


def test_code_a_handler_calls_finds_the_runners_server(
    tw: Run,
    workdir: Path,
    *,
    redis_server: RedisServer,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A handler's own code that finds Redis by itself (from_url()'s default, as the
    Django backend and a Celery app's claims do) finds the server the runner was given
    with --redis-url, where it found an embedded server, another Redis than the runner's;
    only while the runner runs. Where $TICKWHEEL_REDIS_URL names another server, the code
    finds that one, as it did before (an app may mean it), and one warning says so,
    without the URLs' passwords."""
    name = f"finds_{namespace}"
    (workdir / f"{name}.py").write_text(
        "from timer.redis.local_server import default_url\n"
        "found = []\n"
        "def on(o):\n"
        "    found.append(default_url())\n"
    )
    tw("init", "--shards", "4")
    monkeypatch.delenv("TICKWHEEL_REDIS_URL", raising=False)
    c = cancelled(redis_server.url, namespace, ["x"])
    try:
        tw("handle", f"{name}:on", "--on", "cancelled", "--idle-exit")
        found = importlib.import_module(name).found
        assert found == [redis_server.url]
        assert "TICKWHEEL_REDIS_URL" not in os.environ
        elsewhere = "redis://:s3cret@127.0.0.1:1/0"  # an app's own, nothing listens there
        monkeypatch.setenv("TICKWHEEL_REDIS_URL", elsewhere)
        c.schedule("y", 60_000)
        c.cancel("y")
        found.clear()
        with caplog.at_level(logging.WARNING, logger="tickwheel.client"):
            tw("handle", f"{name}:on", "--on", "cancelled", "--idle-exit")
        assert found == [elsewhere]
        said = [r.getMessage() for r in caplog.records if "as before" in r.getMessage()]
        assert len(said) == 1 and "s3cret" not in said[0], said
    finally:
        c.close()


def test_groups_lists_and_deletes(tw: Run, redis_server: RedisServer, namespace: str) -> None:
    tw("init", "--shards", "4")
    c = cancelled(redis_server.url, namespace, ["a", "b", "c"])
    try:
        assert "No consumer groups" in tw("groups").output
        g = c.consumer("billing", "b1")
        g.ensure()
        got = g.read(1, None)
        (row,) = as_json(tw("--json", "groups"))
        assert row["name"] == "billing" and row["pending"] == len(got)
        assert row["lag"] == 3 - len(got) and row["consumers"][0]["name"] == "b1"
        assert row["stale"] is False
        assert "STALE" in tw("groups", "--retention", "0s").output
        assert "billing" in tw("groups").output
        assert 'no consumer group "nope"' in tw("groups", "delete", "nope", expect=6).output
        assert "add --yes" in tw("groups", "delete", "billing", expect=2).output  # no --yes
        assert c.groups() != []
        assert "on 4 shards" in tw("groups", "delete", "billing", "--yes").output
        assert c.groups() == []
    finally:
        c.close()


def test_tail_without_group_leaves_nothing_and_trim_is_not_held(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    """The issue's reproduction: tail twice, outcomes land, trim removes them all."""
    tw("init", "--shards", "4")
    c = cancelled(redis_server.url, namespace, ["old"])
    try:
        assert tw("tail", "--idle-exit").output == ""  # only new ones: none came
        assert "old" in tw("tail", "--idle-exit", "--history").output
        cancelled(redis_server.url, namespace, ["n1", "n2"]).close()
        assert c.groups() == []
        r = tw("--json", "trim", "--older-than", "0s")
        assert as_json(r) == {
            "removed": 3,
            "held_by_group": [],
            "shards": 4,
            "results_dropped": 0,
            "held_by": [],
        }
        assert "--consumer goes with --group" in tw("tail", "--consumer", "x", expect=2).output
    finally:
        c.close()


def guide_block(after: str) -> list[str]:
    """The first shell block after ``after`` on the handlers guide."""
    text = (ROOT / "docs" / "guides" / "handlers.md").read_text()
    block = text.split(after, 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip()]


def guide_app(
    workdir: Path, redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> TimerClient:
    """What the guide's commands assume: the server and namespace in the environment, the
    guide's `myapp/handlers.py` (its `on_timeout` also writes each id to handled.txt),
    and the namespace."""
    monkeypatch.setenv("TICKWHEEL_REDIS_URL", redis_server.url)
    monkeypatch.setenv("TICKWHEEL_NAMESPACE", namespace)
    text = (ROOT / "docs" / "guides" / "handlers.md").read_text()
    module = text.split("beside where you run the command:", 1)[1]
    module = module.split("```python", 1)[1].split("```", 1)[0]
    assert "def on_timeout(outcome):" in module
    (workdir / "myapp").mkdir()
    (workdir / "myapp" / "handlers.py").write_text(
        "import pathlib\n" + module + "\n\n_guides = on_timeout\n\ndef on_timeout(o):\n"
        "    _guides(o)\n"
        "    with pathlib.Path('handled.txt').open('a') as f:\n"
        "        f.write(o.id + '\\n')\n"
    )
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=4)
    return c


def handled_then_stopped(proc: subprocess.Popen[bytes], handled: Path, n: int) -> bytes:
    """Once the guide's handler wrote ``n`` ids, SIGTERM: the process exits 0; its output."""
    wait_for(
        lambda: handled.exists() and len(handled.read_text().split()) == n,
        30,
        "the handlers to run",
    )
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    return out


def test_readme_handlers_commands_run_as_written(
    workdir: Path, redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handlers guide's commands, as written, beside its `myapp/handlers.py`: `init`
    then `handle --idle-exit`, which handles the expired outcomes there are (printing each,
    as the guide's function does) and returns (exit 0), so the admin lines after it run,
    in order; `dead redeliver --all` asks first (answered yes). Its first line names the
    page's namespace (here the test's own: the guide's is apart from the tour's, whose
    `handle` line reads group `handlers` of `default`: trial 12 shared it); pasted alone
    it initialises that namespace itself (trial 14: not initialised)."""
    export, init, *lines = guide_block("# Handlers: run your code when a timer ends")
    assert export.startswith("export TICKWHEEL_NAMESPACE=handlers-guide"), export
    assert init.split("#")[0].split() == ["tickwheel", "init"], init
    assert lines[0].startswith("tickwheel handle myapp.handlers:on_timeout")
    assert "--idle-exit" in lines[0], "the block goes on past its handle line"
    c = guide_app(workdir, redis_server, namespace, monkeypatch)
    runner = CliRunner()
    assert runner.invoke(main, ["init"], catch_exceptions=False).exit_code == 0
    now = c.server_time_ms()
    c.schedule("late:1", deadline_ms=now - 1000)
    c.schedule("late:2", deadline_ms=now - 1000)
    w = Worker(TimerClient.from_url(redis_server.url, namespace), WorkerSettings(worker_id="w"))
    try:
        wait_for(lambda: w.run_once() or c.outcomes_total() == 2, 20, "the worker's fires")
    finally:
        w.close()
    ran = subprocess.run(
        [sys.executable, "-m", "timer.cli", *shlex.split(lines[0].split("#")[0])[1:]],
        cwd=workdir,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
        check=False,
    )
    out = ran.stdout + ran.stderr
    assert ran.returncode == 0, out.decode()
    assert b"consumer pod-0 stopped: handled 2" in ran.stderr, out.decode()
    # the guide's function ran for each (its prints, from handler threads running at
    # once, interleave word by word: "late:2late:1 expired  None\nexpired None")
    printed = ran.stdout.decode()
    assert "late:1" in printed and "late:2" in printed, out.decode()
    assert printed.count("expired") == 2 and printed.count("None") == 2, out.decode()
    assert sorted((workdir / "handled.txt").read_text().split()) == ["late:1", "late:2"]
    old = Handlers(c, group="old-group", max_attempts=1)
    old.add("expired", lambda o: 1 / 0)
    assert old.run(stop_when_idle=True)
    assert len(c.dead_letters()) == 2
    for line in lines[1:]:
        args = shlex.split(line.split("#")[0])[1:]
        result = runner.invoke(main, args, input="y\n", catch_exceptions=False)
        assert result.exit_code == 0, (line, result.output)
        if args[:3] == ["dead", "redeliver", "--all"]:
            assert "Redeliver 2 dead letters to their groups' handlers? [y/N]" in result.output
    assert sorted(g.name for g in c.groups()) == ["handlers", "old-group"]
    assert c.dead_letters() == []  # redelivered, each to its group
    c.close()


def test_handle_timeout_bounds_a_hung_handler(
    tw: Run, workdir: Path, redis_server: RedisServer, namespace: str
) -> None:
    """--timeout cancels an async handler that hangs; at the last attempt the outcome is
    dead-lettered with the timeout as its error (it was held forever before)."""
    tw("init", "--shards", "4")
    name = f"slow_{namespace}"
    (workdir / f"{name}.py").write_text(
        "import asyncio\n\nasync def hang(o):\n    await asyncio.sleep(3600)\n"
    )
    c = cancelled(redis_server.url, namespace, ["stuck"])
    try:
        r = tw("--json", "handle", f"{name}:hang", "--on", "cancelled", "--timeout", "200ms",
               "--max-attempts", "1",
               "--idle-exit")  # fmt: skip
        assert as_json(r)["dead_lettered"] == 1, r.output
        (letter,) = c.dead_letters()
        assert "HandlerTimedOut: the handler ran past its 0.2s timeout" in letter.error
    finally:
        c.close()


def test_handle_fire_runs_as_written(
    workdir: Path, redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guide's `handle --fire`, as written: with no worker process anywhere, the
    timers fire and their handlers run in this one process, handed by its fire calls;
    SIGTERM releases its shards and exits 0."""
    (line,) = guide_block("## Fire and handle in one process")
    assert line.startswith("tickwheel handle myapp.handlers:on_timeout --fire")
    c = guide_app(workdir, redis_server, namespace, monkeypatch)
    proc = subprocess.Popen(
        [sys.executable, "-m", "timer.cli", *shlex.split(line)[1:]],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        wait_for(lambda: set(c.leaders().values()) - {None}, 30, "its worker to lead")
        c.schedule_many([{"id": f"f{i}", "delay_ms": 200} for i in range(20)])
        out = handled_then_stopped(proc, workdir / "handled.txt", 20)
        assert b"firing in this process" in out and b"stopped: handled 20" in out
        assert set(c.leaders().values()) == {None}  # its shards released at the stop
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ran = (workdir / "handled.txt").read_text().split()
    assert sorted(ran) == sorted(f"f{i}" for i in range(20))


def test_handle_fire_refuses_what_it_cannot_do(tw: Run) -> None:
    """--fire runs until stopped, and --lease is the worker's: each misuse is a usage
    error that says so, before anything starts."""
    idle = tw("handle", "json:dumps", "--fire", "--idle-exit", expect=2)
    assert "cannot --idle-exit" in idle.output
    lease = tw("handle", "json:dumps", "--lease", "2s", expect=2)
    assert "give it with --fire" in lease.output


def test_a_short_webhook_secret_says_where_it_came_from_and_how_to_make_one(
    tw: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret under 16 characters said only that it was: it names where it came from
    ($TICKWHEEL_WEBHOOK_SECRET or --webhook-secret) and how to make one (exit 3)."""
    make = "make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
    hook = ["handle", "--webhook", "http://127.0.0.1:1/hook", "--on", "all", "--idle-exit"]
    monkeypatch.setenv("TICKWHEEL_WEBHOOK_SECRET", "short")
    env = tw(*hook, expect=3).stderr
    assert "the webhook secret (from $TICKWHEEL_WEBHOOK_SECRET) must be" in env, env
    assert make in env and "short" not in env.replace("at least", ""), env
    given = tw(*hook, "--webhook-secret", "tiny", expect=3).stderr  # the option wins
    assert "the webhook secret (from --webhook-secret) must be" in given and make in given
    monkeypatch.delenv("TICKWHEEL_WEBHOOK_SECRET")
    calls = ["handle", "--callbacks", "--callback-host", "h", "--webhook-secret", "x"]
    assert "(from --webhook-secret)" in tw(*calls, "--idle-exit", expect=3).stderr


LATER = """
from timer import Later

def on_cancelled(o):
    if o.attempt == 1:  # as the Celery sender does: sent, looked at again once started
        raise Later(0.05, "not yet")
"""


def test_the_summary_counts_what_a_handler_asked_to_see_again_later(
    tw: Run, workdir: Path, redis_server: RedisServer, namespace: str
) -> None:
    """A handler's Later is neither handled nor failed: the summary counted nothing for
    it (the Celery sender's runner, stopped before a task started, said "handled 0"
    of the tasks it had sent). It says how many, as not failures; as a count of times
    put off over the run, not of outcomes still waiting ("put off by their handler to
    look at again 2" read as two still waiting after both had run)."""
    tw("init", "--shards", "2")
    (workdir / f"later_{namespace}.py").write_text(LATER)
    cancelled(redis_server.url, namespace, ["l1", "l2"]).close()
    r = tw("--json", "handle", f"later_{namespace}:on_cancelled", "--on", "cancelled",
           "--idle-exit")  # fmt: skip
    summary = as_json(r)
    assert (summary["handled"], summary["later"], summary["failed"]) == (2, 2, 0), summary
    assert (
        "handled 2, failed attempts 0, retried 0, dead-lettered 0, put off to look at again "
        "2 times (a handler's Later, not a failure: e.g. a Celery task is looked at again to "
        "confirm it started)" in r.stderr
    ), r.stderr
    assert "put off by their handler" not in r.stderr


LATER_ALWAYS = """
from timer import Later

def on_cancelled(o):
    raise Later(600, "sent; waiting for it to start")
"""


def test_groups_says_later_is_not_stuck(
    tw: Run, workdir: Path, redis_server: RedisServer, namespace: str
) -> None:
    """Beside the Celery sender, `groups` showed `later 30` that never drained (each task
    is looked at again until it starts) and read as stuck (trial 19): it says what later
    is, under the table, only when a group has some; --json is the data alone."""
    tw("init", "--shards", "2")
    assert "later:" not in tw("groups").output
    (workdir / f"always_{namespace}.py").write_text(LATER_ALWAYS)
    c = cancelled(redis_server.url, namespace, ["a1", "a2"])
    proc = subprocess.Popen(  # a runner that keeps running (--idle-exit waits them out)
        [sys.executable, "-m", "timer.cli", "--redis-url", redis_server.url, "--namespace",
         namespace, "handle", f"always_{namespace}:on_cancelled", "--on", "cancelled"],
        cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(workdir)},
    )  # fmt: skip
    try:
        wait_for(lambda: any(g.later == 2 for g in c.groups()), 30, "both put off")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        c.close()
    shown = tw("groups").output
    row = next(line.split() for line in shown.splitlines() if line.startswith("handlers "))
    assert row[2:5] == ["2", "0", "2"], shown  # pending 2, retrying 0, later 2
    assert "later: pending at their handler's request, not stuck" in shown, shown
    assert "later:" not in tw("--json", "groups").stdout
