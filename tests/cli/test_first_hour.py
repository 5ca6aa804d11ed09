"""What a new user meets in the first hour of the CLI: a retried schedule that says what
it kept, time options that all take durations, errors in the words of the flags, `get`
showing only what the record keeps, and a busy port refused in one line. Against the
real test server."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import redis
from click.testing import CliRunner

from timer import Backoff, TimerClient
from timer.cli import embedded
from timer.cli.demo.command import demo
from timer.cli.demo.progress import Progress
from timer.cli.main import main
from timer.durable.model.models import Outcome
from timer.errors import InvalidInput
from timer.testing import RedisServer
from timer.webhook import WebhookFailed, callbacks, webhook

from ..conftest import wait_for
from .conftest import Run, as_json

pytestmark = pytest.mark.redis


def test_a_pending_id_scheduled_again_with_in_says_it_kept_its_deadline(tw: Run) -> None:
    """--in is not compared with the pending timer's deadline (an idempotent retry must
    not fail): the answer says so on stderr, points at reschedule, and exits 0 as ever."""
    tw("init", "--shards", "2")
    first = as_json(tw("--json", "schedule", "job:{1}", "--in", "0s"))
    again = tw("schedule", "job:{1}", "--in", "2h")
    assert again.stdout.startswith("Already pending: job:{1}"), again.output
    assert "kept its deadline" in again.stderr and "tickwheel reschedule" in again.stderr
    assert "--in 2h" in again.stderr, again.stderr
    assert as_json(tw("--json", "get", "job:{1}"))["deadline_ms"] == first["deadline_ms"]
    # --at is compared: another deadline is a conflict (exit 7), unchanged
    tw("schedule", "job:{1}", "--at", "2100-01-01T00:00:00Z", expect=7)


def test_a_pending_id_scheduled_again_says_which_options_it_kept(tw: Run) -> None:
    """--priority, --note and --max-total are kept with a timer, not compared (a retry
    with others must not fail): scheduled again with others, the answer says which it
    kept and how to change them (trial 11: they were dropped without a word); the same
    ones again say nothing."""
    tw("init", "--shards", "2")
    tw("schedule", "job:{1}", "--in", "1h", "--priority", "5")
    again = tw("schedule", "job:{1}", "--in", "1h", "--priority", "50", "--note", "hi",
               "--max-total", "10s")  # fmt: skip
    assert again.stdout.startswith("Already pending: job:{1}"), again.output
    assert "keeps its own --priority 5 (not 50), --note none (not 'hi'), --max-total none" in (
        again.stderr
    ), again.stderr
    assert "cancel it and schedule it again" in again.stderr
    got = as_json(tw("--json", "get", "job:{1}"))
    assert got["priority"] == 5 and got["note"] is None
    same = tw("schedule", "job:{1}", "--in", "1h", "--priority", "5")
    assert "keeps its own" not in same.stderr, same.stderr


def test_max_total_takes_a_duration_and_a_bare_number_stays_milliseconds(tw: Run) -> None:
    """`--max-total-ms 1h` and `--max-total 90s` read as durations; `--max-total-ms
    120000`, as scripts wrote it, is still 120000 ms."""
    tw("init", "--shards", "2")
    for args, cap in [
        (["--max-total-ms", "1h"], 3_600_000),
        (["--max-total", "90s"], 90_000),
        (["--max-total-ms", "120000"], 120_000),
    ]:
        tid = f"cap:{{{cap}}}"
        t = as_json(tw("--json", "schedule", tid, "--in", "30s", *args))
        assert as_json(tw("--json", "get", tid))["max_total_ms"] == cap, (args, t)
    bad = tw("schedule", "cap:{x}", "--in", "30s", "--max-total", "soon", expect=2)
    assert '"soon" is not a duration' in bad.output, bad.output
    assert "(a bare number is milliseconds)" in bad.output, bad.output
    shown = tw("schedule", "--help").output
    assert "--max-total, --max-total-ms DURATION" in shown, shown


def test_the_demos_lease_ms_takes_a_bare_number_as_milliseconds() -> None:
    """`demo --lease-ms 2000` is 2000 ms, as its name says (a duration like 2s too)."""
    (lease,) = (p for p in demo.params if p.name == "lease_ms")
    ctx = click.Context(demo)
    assert lease.type_cast_value(ctx, "2000") == 2000
    assert lease.type_cast_value(ctx, "2s") == 2000


def test_errors_are_in_the_words_of_the_flags(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    """The CLI names --every and --need/--watch, with limits as durations; the library
    (and so the HTTP API) names its own fields, durations reading as well."""
    tw("init", "--shards", "2")
    every = tw("schedules", "create", "z", "--every", "0s", expect=3)
    assert "Error: --every must be at least 1s (got 0s)" in every.stderr, every.output
    need = tw("schedule", "job:{y}", "--in", "1h", "--need", "2", "--watch", "job:{y}:a", expect=3)
    assert "Error: --need 2, but only 1 --watch key was given" in need.stderr, need.output
    alone = tw("schedule", "job:{y}", "--in", "1h", "--need", "2", expect=3)
    assert "--need 2 makes no sense without --watch keys" in alone.stderr, alone.output
    rank = tw("schedule", "job:{y}", "--in", "1h", "--priority", "101", expect=3)
    assert "--priority must be between -100 and 100, got 101" in rank.stderr, rank.output
    # a word where a number goes was told only "not a valid integer": the range too
    word = tw("schedule", "job:{y}", "--in", "1h", "--priority", "high", expect=2)
    assert (
        "Invalid value for '--priority': \"high\" is not a whole number: give an integer from "
        "-100 (last) to 100 (first)"
    ) in word.stderr, word.output
    many = tw("schedule", "job:{y}", "--in", "1h", "--need", "2.5", expect=2)
    assert '"2.5" is not a whole number: give an integer from 1 to 256' in many.stderr
    with TimerClient.from_url(redis_server.url, namespace) as c:
        with pytest.raises(InvalidInput, match=r"^every must be at least 1s \(got 0s\)$"):
            c.schedules.create("z", every=0)
        with pytest.raises(InvalidInput, match=r"^every must be at most 3660d \(got 3661d\)$"):
            c.schedules.create("z", every=3661 * 86_400_000)
        with pytest.raises(InvalidInput, match=r"^need 2, but only 1 watch key was given$"):
            c.schedule("job:{y}", 1000, need=2, watch=["job:{y}:a"])


def test_get_of_a_decided_timer_shows_only_what_its_record_keeps(tw: Run) -> None:
    """Decided, the record keeps no watch keys, need or cap: `get` leaves them out of its
    text and its JSON (no `watch []` beside `notified`, as if it had none)."""
    tw("init", "--shards", "2")
    tw("schedule", "job:{42}", "--in", "1h", "--watch", "job:{42}:done", "--need", "1")
    pending = tw("get", "job:{42}").stdout
    assert any(line.split()[:1] == ["watch"] for line in pending.splitlines()), pending
    tw("notify", "job:{42}:done")
    decided = tw("get", "job:{42}").stdout
    names = [line.split()[0] for line in decided.splitlines() if line.strip()]
    assert "notified" in names and "watch" not in names and "need" not in names, decided
    assert "max_total_ms" not in names, decided
    shown = as_json(tw("--json", "get", "job:{42}"))
    assert shown["state"] == "completed" and shown["notified"] == ["job:{42}:done"]
    assert not {"watch", "need", "max_total_ms"} & set(shown), shown
    tw("schedule", "job:{43}", "--in", "1h", "--watch", "job:{43}:done", "--max-total", "2h")
    pending = as_json(tw("--json", "get", "job:{43}"))
    assert (pending["watch"], pending["need"]) == (["job:{43}:done"], 1), pending
    assert pending["max_total_ms"] == 7_200_000, pending


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port this test holds open (listening), so nothing else can bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield int(held.getsockname()[1])


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["dashboard", "--port"], "--port"),
        (["serve", "--no-auth", "--port"], "--port"),
        (["worker", "--metrics-port"], "--metrics-port"),
        (["handle", "timer.examples.handlers:on_timeout", "--metrics-port"], "--metrics-port"),
    ],
    ids=["dashboard", "serve", "worker", "handle"],
)
def test_a_busy_port_is_one_error_naming_the_option(
    tw: Run, busy_port: int, args: list[str], flag: str
) -> None:
    """A port already in use: one line naming the option (and its host), no line saying
    it serves, exit 4 (configuration), as the worker's metrics port already did."""
    tw("init", "--shards", "2")
    out = tw(*args, str(busy_port), expect=4)
    assert out.stdout == "", out.stdout
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), out.stderr
    assert f"127.0.0.1:{busy_port}" in lines[0] and f"{flag} " in lines[0], lines
    assert "in use" in lines[0], lines


def test_the_demo_refuses_a_lease_the_workers_would_refuse_before_starting_anything(
    tw: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`demo --lease 0s`: the workers' own check, up front, in the flag's words (it
    started the workers, which died, and waited for outcomes for ever)."""

    def no_process(*_: object, **__: object) -> None:
        raise AssertionError("the demo started a process")

    monkeypatch.setattr("timer.cli.demo.command.start_worker", no_process)
    monkeypatch.setattr("timer.cli.demo.command.Reaction", no_process)
    out = tw("demo", "--lease", "0s", expect=3)
    assert "Error: --lease must be at least 300ms (got 0s)" in out.stderr, out.output
    assert "starting" not in out.stderr, out.stderr
    tw("get", "job:{1}", expect=4)  # the namespace was not even initialised


@pytest.mark.parametrize(("args", "said"), [
    (["--lease", "2", "--timers", "1", "--min-delay", "0.5s"],
     "--min-delay 500ms is below 1s (the least a demo timer waits): give 1s or more"),
    (["--min-delay", "500ms", "--max-delay", "800ms"],
     "--min-delay 500ms and --max-delay 800ms are below 1s (the least a demo timer waits): "
     "give each 1s or more"),
    (["--max-delay", "3s"],  # below the default --min-delay, 5s
     "--max-delay 3s is below --min-delay 5s: give a --max-delay of 5s or more, or a smaller "
     "--min-delay"),
])  # fmt: skip
def test_the_demo_says_the_delays_given_and_what_to_give(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], said: str
) -> None:
    """`demo --min-delay 0.5s` said `need 1s <= --min-delay <= --max-delay`: it says the
    values given, read as durations, and what to give instead, before it starts
    anything (no server, no process)."""

    def no_process(*_: object, **__: object) -> None:
        raise AssertionError("the demo started a process")

    monkeypatch.setattr("timer.cli.demo.command.start_worker", no_process)
    monkeypatch.setattr("timer.cli.demo.command.Reaction", no_process)
    out = CliRunner().invoke(main, ["demo", *args])
    assert out.exit_code == 2, out.output
    assert out.stderr.splitlines()[-1] == f"Error: {said}", out.stderr
    assert embedded.status(workdir / ".tickwheel") is None  # no server was started


def test_the_demos_lease_is_named_as_typed(redis_server: RedisServer, namespace: str) -> None:
    """`demo --lease 5` warned about "--lease-ms 5", an option the user did not type (and
    `--lease-ms 5` was refused as "--lease"): the warning and the error name the alias on
    the command line. Run as a process, as a user does (a test's argv is pytest's)."""
    for typed in ("--lease", "--lease-ms"):
        out = subprocess.run(
            [sys.executable, "-m", "timer.cli", "--redis-url", redis_server.url,
             "--namespace", namespace, "demo", typed, "5", "--timers", "1"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert out.returncode == 3, out.stderr
        warned = (
            []
            if typed.endswith("-ms")
            else [  # --lease-ms says its unit itself
                f"Warning: {typed} 5 is 5 milliseconds; write 5ms to say so, or 5s if you meant "
                "seconds"
            ]
        )
        assert out.stderr.splitlines() == [
            *warned,
            f"Error: {typed} must be at least 300ms (got 5ms)",
        ], out.stderr


def _children(pid: int) -> set[int]:
    """The live processes whose parent is ``pid`` (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == pid and state != "Z":
            found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _cmdline(pid: int) -> bytes:
    """The process's command line as /proc has it; empty once it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_sigterm_to_the_demo_stops_every_process_it_started(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str, workdir: Path
) -> None:
    """The workers and the handler run in sessions of their own (a Ctrl-C in the
    terminal reaches the demo alone); SIGTERM to the demo stops them all, and the demo
    still ends as SIGTERM ends a process. The Redis URL's password is on no command line
    of theirs (`ps` shows those to every user): the demo gave them its URL that way."""
    password = "Hunter2Secret" + namespace
    redis_client.acl_setuser(
        namespace, enabled=True, passwords=[f"+{password}"], keys=["*"], channels=["*"],
        commands=["+@all"],
    )  # fmt: skip
    url = redis_server.url.replace("redis://", f"redis://{namespace}:{password}@", 1)
    demo_proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "timer.cli",
            "--redis-url",
            url,
            "--namespace",
            namespace,
            "demo",
            "--workers",
            "2",
            "--timers",
            "20",
            "--min-delay",
            "1h",
            "--max-delay",
            "2h",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
    )
    started: set[int] = set()
    try:
        # two workers and the handler: three children, each past its exec (a child just
        # forked shows the demo's own command line, which the user typed, until it
        # execs: read before then, it failed on a busy machine)
        demo_line = _cmdline(demo_proc.pid)

        def execed() -> bool:
            kids = _children(demo_proc.pid)
            return len(kids) >= 3 and all(_cmdline(k) not in (demo_line, b"") for k in kids)

        wait_for(execed, 60, "the workers and the handler")
        started = _children(demo_proc.pid)
        for pid in started:
            line = _cmdline(pid).replace(b"\0", b" ")
            assert b"timer.cli" in line and password.encode() not in line, line
        demo_proc.send_signal(signal.SIGTERM)
        assert demo_proc.wait(60) == -signal.SIGTERM
        left = {pid for pid in started if _alive(pid)}
        assert not left, f"still running after the demo ended: {left}"
    finally:
        for pid in started:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if demo_proc.poll() is None:
            demo_proc.kill()
            demo_proc.wait()
        redis_client.acl_deluser(namespace)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["worker", "--lease", "0s"], "--lease must be at least 300ms (got 0s)"),
        (["worker", "--lease-ms", "0"], "--lease-ms must be at least 300ms (got 0s)"),
        # handle's worker too (--lease 0s was taken as no lease given: 5s)
        (
            ["handle", "json:dumps", "--fire", "--lease", "0s"],
            "--lease must be at least 300ms (got 0s)",
        ),
        (
            ["handle", "json:dumps", "--fire", "--lease-ms", "0"],
            "--lease-ms must be at least 300ms (got 0s)",
        ),
        (["worker", "--horizon", "0s"], "--horizon must be at least 100ms (got 0s)"),
        (["worker", "--result-ttl", "0s"], "--result-ttl must be from 1 second to 3660 days"),
        (["init", "--bucket", "0s"], "--bucket must be between 1ms and 1h, got 0s"),
        (
            ["schedule", "x:{3}", "--in", "30s", "--max-total", "0s"],
            "--max-total must be at least 1ms, got 0s",  # not "and 104249991d8h59m991ms"
        ),
        (
            ["handle", "timer.examples.handlers:on_timeout", "--timeout", "0s"],
            "--timeout must be above 0s, at most 1d, got 0s",
        ),
        (  # --reclaim-idle 0s was taken as none given (5s)
            ["handle", "timer.examples.handlers:on_timeout", "--reclaim-idle", "0s"],
            "--reclaim-idle must be at least 100ms, got 0s",
        ),
        (
            ["handle", "timer.examples.handlers:on_timeout", "--reclaim-idle", "50ms"],
            "--reclaim-idle must be at least 100ms, got 50ms",
        ),
        (
            ["schedules", "create", "z5", "--every", "1m", "--jitter", "2m"],
            "--jitter (2m) must be shorter than --every (1m)",
        ),
        (
            ["schedules", "create", "z5", "--every", "1m", "--offset", "2m"],
            "--offset (2m) must be shorter than --every (1m)",
        ),
    ],
    ids=lambda v: "-".join(v) if isinstance(v, list) else None,
)
def test_option_errors_name_the_flag_and_read_as_durations(
    tw: Run, args: list[str], said: str
) -> None:
    """Each error names the flag as typed (not the field it sets, lease_ms) and its
    limits and value as durations (not raw milliseconds); exit 3 as before."""
    if args[0] != "init":
        tw("init", "--shards", "2")
    out = tw(*args, expect=3)
    assert f"Error: {said}" in out.stderr, out.stderr
    assert "_ms" not in out.stderr and "_s " not in out.stderr, out.stderr


def test_a_missing_timer_and_trim_speak_of_the_retention_as_its_flag(tw: Run) -> None:
    """`get` of an unknown id and `trim` say the retention in the words of
    --result-ttl, not the library's field result_ttl."""
    tw("init", "--shards", "2")
    missing = tw("get", "job:{nosuch}", expect=6)
    assert "its retention (worker --result-ttl)" in missing.stderr, missing.stderr
    assert "result_ttl" not in missing.stderr.replace("--result-ttl", "")
    trimmed = tw("trim", "--older-than", "1h").output
    assert "past their retention (worker --result-ttl)" in trimmed, trimmed


def test_schedule_help_speaks_in_flags_not_fields_or_exception_classes(tw: Run) -> None:
    """`schedule --help` says --max-total and --in, not max_total_ms, delay_ms or the
    library's exception classes (a CLI user sees exit codes)."""
    shown = " ".join(tw("schedule", "--help").output.split())
    for word in ("max_total_ms", "delay_ms", "Capped", "created +", "now +"):
        assert word not in shown, (word, shown)
    assert "never past its --max-total cap" in shown, shown


ROOT = Path(__file__).resolve().parents[2]


def test_the_fastapi_readme_runs_as_written_beside_the_tours_old_job(
    redis_server: RedisServer, workdir: Path
) -> None:
    """examples/fastapi/README.md's commands, as a person pastes them (on a free port,
    against the test server): the first request waits until uvicorn listens, and the
    job is the example's own, not the README tour's job:{42} left in `default`; pasted
    a second time it runs again (the first left uvicorn running: trial 12's second run
    could not bind, and its requests went to the first one's)."""
    with TimerClient.from_url(redis_server.url, "default") as tour:
        tour.init(shards=16)
        tour.schedule("job:{42}", 60_000)
        tour.cancel("job:{42}")  # the tour's old job, decided
    text = (ROOT / "examples/fastapi/README.md").read_text()
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [line for line in block.splitlines() if line.strip()]
    assert lines[0].startswith("pip install") and lines[1] == "tickwheel server start"
    assert lines[-1].startswith("kill %1"), "the block stops the uvicorn it started"
    (written,) = {w.split("--port ")[1].split()[0] for w in lines if w.startswith("uvicorn ")}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    script = "\n".join(
        ["set -euo pipefail", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT"]
        + [line.replace(f":{written}/", f":{port}/").replace(f"--port {written}", f"--port {port}")
           for line in lines[2:]]
    )  # fmt: skip
    assert f":{written}" not in script and f"--port {written}" not in script, script
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "TICKWHEEL_REDIS_URL": redis_server.url,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
    }
    for _ in range(2):  # pasted again: its last line stopped the uvicorn it started
        done = subprocess.run(
            ["bash", "-c", script],
            check=False,
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert "address already in use" not in done.stderr, done.stderr
        last = done.stdout.strip().splitlines()[-1]
        assert '"state":"pending"' in last, done.stdout


def test_a_bucket_finer_than_a_tick_is_taken_with_a_warning(tw: Run) -> None:
    """`init --bucket 1ms` still works (the library takes it, and a namespace made so
    keeps working) but says it buys nothing; the default says nothing."""
    fine = tw("init", "--shards", "2", "--bucket", "1ms")
    assert "Warning: 1ms buckets fire nothing sooner than 100ms ones" in fine.stderr, fine.output
    assert as_json(tw("--json", "init", "--shards", "2", "--bucket", "1ms"))["bucket_ms"] == 1


def test_a_bucket_given_to_a_namespace_made_already_is_said_kept_in_json_quotes(
    tw: Run, namespace: str
) -> None:
    """The warning that an existing namespace keeps its buckets quoted the namespace as
    Python does (`namespace 'billing' keeps…`); it quotes it as every error does."""
    tw("init", "--shards", "2")
    again = tw("init", "--shards", "2", "--bucket", "2s")
    assert (
        f'Warning: namespace "{namespace}" keeps its 1s buckets: --bucket applies only when '
        "it is created"
    ) in again.stderr, again.output


def test_the_default_bucket_says_nothing(tw: Run) -> None:
    assert "Warning" not in tw("init", "--shards", "2").stderr


def test_catch_up_0s_says_no_missed_occurrence_is_fired(tw: Run) -> None:
    """`--catch-up 0s` with --missed latest fires no missed occurrence: the schedule is
    made as asked (exit 0), with a warning, and shown as what it does."""
    tw("init", "--shards", "2")
    made = tw("schedules", "create", "z7", "--every", "1m", "--catch-up", "0s")
    assert "Warning: --catch-up 0s: no missed occurrence is ever fired" in made.stderr, made.output
    assert "within 0" not in made.stdout and "none is fired (--catch-up 0s)" in made.stdout
    shown = tw("schedules", "get", "z7")
    assert "Warning" not in shown.stderr, shown.stderr
    skip = tw("schedules", "create", "z8", "--every", "1m", "--catch-up", "0s", "--missed", "skip")
    assert "Warning" not in skip.stderr, skip.stderr


SECRET = "s3cretPW"


@pytest.mark.parametrize(
    "url",
    [f"ftp://u:{SECRET}@hooks.example/x", f"u:{SECRET}@hooks.example/x", f"https://u:{SECRET}@/x"],
    ids=["scheme", "no-scheme", "no-host"],
)
def test_a_refused_webhook_url_never_shows_its_password(
    tw: Run, url: str, monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer, namespace: str
) -> None:
    """`handle --webhook URL` and a timer's callback_url refuse a URL of another scheme
    or without a host by saying what is wrong with it, never by showing it (the
    refusal printed the URL, password and all)."""
    monkeypatch.setenv("TICKWHEEL_WEBHOOK_SECRET", "0123456789abcdef")
    tw("init", "--shards", "2")
    out = tw("handle", "--webhook", url, "--on", "all", "--idle-exit", expect=3)
    assert "the webhook URL must" in out.stderr, out.output
    assert SECRET not in out.output, out.output
    with TimerClient.from_url(redis_server.url, namespace) as c:
        with pytest.raises(InvalidInput, match="callback_url must") as refused:
            c.schedule("job:{1}", 1000, callback_url=url)
        assert SECRET not in str(refused.value), refused.value
        with pytest.raises(InvalidInput, match=r"at most 2048 bytes, got 2099$") as long:
            c.schedule("job:{1}", 1000, callback_url=f"https://u:{SECRET}@h/" + "x" * 2078)
        assert SECRET not in str(long.value), long.value


def test_a_bare_init_of_a_namespace_made_with_other_shards_keeps_them(tw: Run) -> None:
    """`tickwheel init` as the guides run it (no --shards), on a namespace made with
    4: the namespace as it is, exit 0 (it said "cannot be re-initialised with 16", a
    count the user never gave, exit 4). Another --shards given is still refused, and a
    --bucket that cannot apply any more says so."""
    tw("init", "--shards", "4")
    again = tw("init")
    assert "(initialised already): 4 shards" in again.stdout, again.output
    assert as_json(tw("--json", "init"))["shards"] == 4
    other = tw("init", "--shards", "16", expect=4)
    assert "already has 4 shards; it cannot be re-initialised with 16" in other.stderr
    bucket = tw("init", "--bucket", "5s")
    assert "keeps its 1s buckets: --bucket applies only when it is created" in bucket.stderr
    assert "Warning" not in tw("init").stderr


def test_a_wrong_on_is_named_as_the_flag(tw: Run) -> None:
    """`handle --on bogus` says what --on takes (it said "outcome must be one of ...",
    the library's argument), exit 3 as before."""
    tw("init", "--shards", "2")
    out = tw("handle", "timer.examples.handlers:on_timeout", "--on", "expired,bogus", expect=3)
    assert "Error: --on takes expired, completed, cancelled or all, comma-separated, got " in (
        out.stderr
    ), out.output


HIDDEN = "pa/ss?w#rd"  # a password with / ? # in it
# what no refusal may show (a parse without // takes the user's name for the scheme)
SHOWN = ("pa/ss", "pa?ss", "pa#ss", "123/ss", "u/pa", ":pa", "'u'")


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("https://u:pa/ss@hooks.example/hook", "must not carry credentials"),
        ("https://u:pa?ss@hooks.example/hook", "must not carry credentials"),
        ("https://u:pa#ss@hooks.example/hook", "must not carry credentials"),
        ("https://u:123/ss@hooks.example/hook", "must not carry credentials"),
        ("https://u/pa/ss@hooks.example/hook", "must not carry credentials"),
        ("https://hooks.example:pa/ss/hook", "must have a port that is a number from 1 to 65535"),
        ("https://hooks.example:99999/hook", "must have a port that is a number from 1 to 65535"),
        ("u:pa/ss@hooks.example/hook", "must be http:// or https:// with a host, got no scheme"),
    ],
    ids=["slash", "question", "hash", "numeric-start", "no-colon", "port", "port-range", "user"],
)
def test_a_url_whose_userinfo_the_parse_cannot_place_is_refused_unshown(
    tw: Run, url: str, said: str, redis_server: RedisServer, namespace: str
) -> None:
    """A webhook or callback URL with a / ? # in its password parses as host `u` with
    a port that is not a number (or a path holding an @): it was accepted, and its
    delivery failed with a message holding part of the password. It is refused up
    front now, said without the URL; so is a port that is not one."""
    tw("init", "--shards", "2")
    secret = ["--webhook-secret", "0123456789abcdef"]
    out = tw("handle", "--webhook", url, *secret, "--on", "all", "--idle-exit", expect=3)
    assert f"Error: the webhook URL {said}" in out.stderr, out.output
    for piece in SHOWN:
        assert piece not in out.output, out.output
    with TimerClient.from_url(redis_server.url, namespace) as c:
        with pytest.raises(InvalidInput, match=f"callback_url {said}") as refused:
            c.schedule("job:{1}", 1000, callback_url=url)
        for piece in SHOWN:
            assert piece not in str(refused.value), refused.value
        assert c.get("job:{1}") is None  # nothing written


@pytest.mark.parametrize(
    "stored",
    [
        f"http://u:{HIDDEN}@127.0.0.1:{{port}}/hook",  # taken before such URLs were refused
        f"http://u:{SECRET}@127.0.0.1:{{port}}/hook",
        f"http://127.0.0.1:{{port}}/hook?token={SECRET}",
    ],
    ids=["unplaced", "userinfo", "query-token"],
)
def test_no_delivery_failure_shows_a_urls_credentials(stored: str) -> None:
    """A callback_url stored before the checks refused it fails its delivery with a
    message (what the dead letter keeps and the runner logs) that shows no userinfo and
    no secret of its query; a URL that passes the checks fails with it masked too."""
    with socket.socket() as s:  # a port nobody listens on: the delivery is refused
        s.bind(("127.0.0.1", 0))
        url = stored.format(port=s.getsockname()[1])
    deliver = callbacks("0123456789abcdef", ["127.0.0.1", "u"], timeout_s=5)
    outcome = Outcome("job:{1}", "expired", 0, 0, None, 0, callback_url=url)
    with pytest.raises(WebhookFailed) as failed:
        deliver(outcome)
    said = str(failed.value)
    for piece in ("pa/", "ss?", SECRET, "u:"):
        assert piece not in said, said
    with pytest.raises(WebhookFailed) as failed:  # a checked URL, its query's secret masked
        webhook(f"http://127.0.0.1:{url.rsplit(':', 1)[1]}", "0123456789abcdef")(outcome)
    assert SECRET not in str(failed.value), failed.value


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--backoff", "1m", "--max-backoff", "1s"],
            "--max-backoff (1s) must be at least --backoff (1m)",
        ),
        (
            ["--max-backoff", "500ms"],
            "--max-backoff (500ms) must be at least --backoff (1s, its default)",
        ),
    ],
    ids=["both", "default-backoff"],
)
def test_a_max_backoff_below_the_backoff_is_refused_in_the_flags_words(
    tw: Run, args: list[str], said: str, redis_server: RedisServer, namespace: str
) -> None:
    """`handle --backoff 1m --max-backoff 1s` was taken, the longest delay silently
    raised to 1m; it is refused now, naming both flags, exit 3 as the other flag
    errors, no group made. The library's Backoff refuses the same values."""
    tw("init", "--shards", "2")
    out = tw("handle", "timer.examples.handlers:on_timeout", *args, "--idle-exit", expect=3)
    assert f"Error: {said}" in out.stderr, out.output
    with TimerClient.from_url(redis_server.url, namespace) as c:
        assert c.groups() == []
    with pytest.raises(InvalidInput, match=r"backoff needs 0 <= initial \(60s\) <= max \(1s\)"):
        Backoff(initial_s=60, max_s=1)
    # --backoff alone past the default longest delay (5m) raises that delay with it
    tw("handle", "timer.examples.handlers:on_timeout", "--backoff", "10m", "--idle-exit")


def test_server_start_on_a_running_server_says_its_binary_option_was_not_applied(
    workdir: Path, server_binary: Path
) -> None:
    """`server start --binary /nope` while the server runs said "Already running" and
    nothing of the option it ignored: it says now that the option was not applied and
    how to apply it (stop the server first); the same binary says nothing more."""
    runner = CliRunner()
    started = runner.invoke(main, ["--json", "server", "start", "--binary", str(server_binary)])
    assert started.exit_code == 0, started.output
    try:
        other = runner.invoke(main, ["server", "start", "--binary", "/nope"])
        assert other.exit_code == 0 and other.stdout.startswith("Already running:"), other.output
        # in the words an automatic start says it (it named only the binary)
        assert other.stdout.startswith(f"Already running: the embedded server ({server_binary})")
        assert (
            f"Warning: --binary /nope was not applied: the running server keeps its binary "
            f"({server_binary}); `tickwheel server stop` first to start it with another"
        ) in other.stderr, other.output
        quiet = runner.invoke(main, ["--json", "server", "start", "--binary", "/nope"])
        assert json.loads(quiet.stdout)["started"] is False  # --json: stdout stays JSON
        assert "was not applied" in quiet.stderr
        same = runner.invoke(main, ["server", "start", "--binary", str(server_binary)])
        assert same.exit_code == 0 and same.stderr == "", same.output
    finally:
        embedded.stop(workdir / ".tickwheel")


@pytest.mark.parametrize("given", ["nosuch", "it's here"])
def test_a_server_binary_not_found_is_quoted_as_every_value_said_back(
    workdir: Path, given: str
) -> None:
    """`server start --binary nosuch` said `server binary 'nosuch' was not found`, in
    Python's quotes, where every other error quotes what it was given as JSON does."""
    out = CliRunner().invoke(main, ["server", "start", "--binary", given])
    assert out.exit_code == 4, out.output
    assert out.stderr.startswith(
        f'Error: server binary "{given}" was not found; give a path to a redis-server'
    ), out.stderr
    assert embedded.status(workdir / ".tickwheel") is None


def test_wait_and_probe_timeouts_read_as_durations_in_their_help(tw: Run) -> None:
    """`wait --timeout` and `probe --timeout` take `10s` (and a bare number of seconds),
    and their help says DURATION and shows the default as one, as the other duration
    flags do (it said SECONDS and 30.0)."""
    for command, default in (("wait", "30s"), ("probe", "3s")):
        shown = " ".join(tw(command, "--help").output.split())
        assert "--timeout DURATION" in shown and "SECONDS" not in shown, shown
        assert f"[default: {default}]" in shown, shown
        (timeout,) = (p for p in main.commands[command].params if p.name == "timeout")
        ctx = click.Context(main.commands[command])
        assert timeout.type_cast_value(ctx, "10s") == timeout.type_cast_value(ctx, "10") == 10


def test_the_log_levels_default_is_shown_in_the_case_of_its_choices(tw: Run) -> None:
    """`--log-level` lists debug|info|warning|error and now shows its default as `info`
    (it showed INFO); either case is still taken."""
    for command in ("worker", "handle", "dashboard"):
        shown = " ".join(tw(command, "--help").output.split())
        assert "--log-level [debug|info|warning|error]" in shown, shown
        assert "[default: info]" in shown and "[default: INFO]" not in shown, shown
    (level,) = (p for p in main.commands["worker"].params if p.name == "log_level")
    ctx = click.Context(main.commands["worker"])
    assert level.type_cast_value(ctx, "WARNING").lower() == "warning"


def test_the_demo_shows_its_progress_in_counts_where_no_bar_can_be_drawn(tw: Run) -> None:
    """`tickwheel demo` with stderr not a terminal (`make demo` under a pipe, a CI log)
    printed only "Scheduling" and "Waiting for outcomes" for its whole run (click's bar
    draws nothing there): it says how many of how many now, at the start, every few
    seconds and at the end. --json stays quiet (the reduced demo test reads its JSON)."""
    out = tw("demo", "--timers", "20", "--workers", "1", "--min-delay", "1s",
             "--max-delay", "1s", "--lease", "1s", "--no-kill", "--seed", "1")  # fmt: skip
    assert "Scheduling: 0 of 20" in out.stderr and "Scheduling: 20 of 20" in out.stderr
    assert "Waiting for outcomes: 0 of 20" in out.stderr, out.stderr
    assert "Waiting for outcomes: 20 of 20" in out.stderr, out.stderr


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_lines_come_every_few_seconds_and_a_terminal_gets_a_bar_with_counts() -> None:
    """Off a terminal: a line at the start, one when a count changed and `every_s` went
    by since the last, the last count at the end; nothing when hidden (--json). On a
    terminal: click's bar, with the count beside it."""
    clock, file = _Clock(), io.StringIO()
    with Progress("Waiting", 10, hidden=False, file=file, every_s=2.0, clock=clock) as p:
        p.update(3)  # at once: not yet every_s since the first line
        clock.now = 2.5
        p.update(5)
        clock.now = 3.0
        p.update(6)
        clock.now = 9.0
        p.update(6)  # changed since the last line, which is every_s old
        clock.now = 12.0
        p.update(6)  # no change: no line
        clock.now = 12.5
        p.update(10)  # said here, so not again at the end
    assert file.getvalue().splitlines() == [
        "Waiting: 0 of 10",
        "Waiting: 5 of 10",
        "Waiting: 6 of 10",
        "Waiting: 10 of 10",
    ]
    clock.now, file = 0.0, io.StringIO()
    with Progress("Waiting", 10, hidden=False, file=file, every_s=2.0, clock=clock) as p:
        p.update(10)  # at once: said at the end
    assert file.getvalue().splitlines() == ["Waiting: 0 of 10", "Waiting: 10 of 10"]
    quiet = io.StringIO()
    with Progress("Waiting", 10, hidden=True, file=quiet, clock=clock) as p:
        p.update(10)
    assert quiet.getvalue() == ""
    term = _Terminal()
    with Progress("Waiting", 10, hidden=False, file=term, clock=clock) as p:
        p.update(4)
    assert "4/10" in term.getvalue(), term.getvalue()


def test_demo_spark_without_the_spark_extra_says_so_before_starting_anything(
    tw: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`demo --spark` where pyspark is missing: one line naming the extra, before any
    worker or namespace (it started three workers, made its namespace and said it was
    registering from a DataFrame, then failed)."""

    def no_process(*_: object, **__: object) -> None:
        raise AssertionError("the demo started a process")

    monkeypatch.setattr("timer.cli.demo.command.start_worker", no_process)
    monkeypatch.setattr("timer.cli.demo.command.Reaction", no_process)
    monkeypatch.setitem(sys.modules, "pyspark", None)  # its import raises ImportError
    out = tw("demo", "--spark", "--timers", "10", expect=4)
    assert "needs the spark extra" in out.stderr, out.output
    assert "pip install '.[spark]'" in out.stderr, out.output
    assert "starting" not in out.stderr and "Registering" not in out.stderr, out.stderr


@pytest.mark.parametrize("count", ["0", "-1"])
def test_tail_refuses_a_count_that_is_not_positive(tw: Run, count: str) -> None:
    """`tail --count -1` was taken and meant no limit (0 stopped after one outcome)."""
    out = tw("tail", "--count", count, "--idle-exit", expect=2)
    assert "Invalid value for '--count'" in out.stderr, out.output


def test_bench_help_names_every_benchmark_it_takes(tw: Run) -> None:
    """`bench nope` listed `simulation`, which `bench --help` did not name."""
    from timer.cli.bench_cmd import NAMES  # noqa: PLC0415

    helped = " ".join(tw("bench", "--help").stdout.split())
    assert [n for n in NAMES if n not in helped] == []


def test_bench_outside_a_checkout_is_a_configuration_error(
    tw: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """From a wheel (no benchmarks/ beside the package) it is exit 4, as every other
    missing part is; it was exit 1, the code of an unexpected error."""
    monkeypatch.setattr("timer.cli.bench_cmd.SOURCE_ROOT", tmp_path)
    out = tw("bench", "engine", expect=4)
    assert "come with tickwheel's source" in out.stderr, out.output
    assert "benchmarks/" not in out.stderr  # no path of the repository a wheel user lacks


def test_an_unknown_benchmark_is_quoted_as_every_value_said_back() -> None:
    """`bench nope` said `No benchmark 'nope'`, in Python's quotes."""
    out = CliRunner().invoke(main, ["bench", "nope"])
    assert out.exit_code == 2 and 'Error: No benchmark "nope": choose one of ' in out.stderr


def test_a_password_the_server_refuses_is_said_so_not_as_unreachable(
    tw: Run, redis_server: RedisServer
) -> None:
    """Wrong credentials were reported as `cannot reach Redis …; is the server running,
    and is that its address?`: the server ran, at that address, and said no."""
    host_port = redis_server.url.split("://", 1)[1].split("/", 1)[0]
    url = f"redis://nobody:s3cretpw@{host_port}/0"
    out = tw("--redis-url", url, "stats", base=False, expect=5)
    assert "refused the credentials" in out.stderr, out.output
    assert "is the server running" not in out.stderr, out.output
    assert "s3cretpw" not in out.output


def test_a_note_comes_where_the_run_is_between_the_counts() -> None:
    """What happened during the wait (the demo's kill of a worker at 40%) is printed as it
    happens, after the count it happened at and before the later ones: it came after
    `Waiting for outcomes: 2000 of 2000`, as if the kill was at the end. On a terminal the
    bar's line is cleared for it and drawn again below it."""
    clock, file = _Clock(), io.StringIO()
    with Progress("Waiting", 10, hidden=False, file=file, every_s=2.0, clock=clock) as p:
        p.update(4)
        p.note("Killed worker w0")
        clock.now = 5.0
        p.update(10)
    assert file.getvalue().splitlines() == [
        "Waiting: 0 of 10",
        "Waiting: 4 of 10",
        "Killed worker w0",
        "Waiting: 10 of 10",
    ]
    term = _Terminal()
    with Progress("Waiting", 10, hidden=False, file=term, clock=clock) as p:
        p.update(4)
        p.note("Killed worker w0")
        p.update(10)
    text = term.getvalue()
    assert text.index("4/10") < text.index("\r\x1b[KKilled worker w0\n") < text.index("10/10")
    quiet = io.StringIO()
    with Progress("Waiting", 10, hidden=True, file=quiet, clock=clock) as p:
        p.note("Killed worker w0")
    assert quiet.getvalue() == ""


def test_a_note_too_long_is_said_by_its_length(tw: Run) -> None:
    """`schedule --note` of 1001 characters said "note must be text of at most 1000
    characters, got str: 'xxxxxxxx…'", quoting 100 of them: it says the note's length
    and the most, and schedules nothing."""
    tw("init", "--shards", "2")
    out = tw("schedule", "n:{1}", "--in", "1h", "--note", "x" * 1001, expect=3)
    assert out.output.splitlines()[-1] == "Error: note is 1001 characters; at most 1000"
    tw("get", "n:{1}", expect=6)


def test_trial_12s_mistakes_are_said_as_the_user_typed_them(tw: Run) -> None:
    """A reversed --from/--to is said in the options' words and times (it named the
    API's deadline_from_ms and bare ms); a --group that names no group and no dead
    letter is exit 6, as `groups delete` of it is (it listed nothing, exit 0, as an empty
    group does); `schedules delete` of a missing schedule says so before asking; a
    heartbeat that leaves a later deadline says it stayed (it said "now falls due")."""
    tw("init", "--shards", "2")
    out = tw("timers", "cancel", "job:*", "--from", "2031-01-01T00:00:00Z", "--to",
             "2030-01-01T00:00:00Z", "--dry-run", expect=2)  # fmt: skip
    assert "--from 2031-01-01T00:00:00.000Z is after --to 2030-01-01T00:00:00.000Z" in out.stderr
    assert "deadline_from_ms" not in out.output
    for args in (["dead", "list", "--group", "nosuch"],
                 ["dead", "redeliver", "--group", "nosuch", "--all"]):  # fmt: skip
        assert 'no consumer group "nosuch"' in tw(*args, expect=6).stderr
    gone = tw("schedules", "delete", "nosuch", expect=6)  # no terminal: it asked before
    assert 'no schedule "nosuch"' in gone.stderr and "--yes" not in gone.stderr, gone.output
    tw("schedule", "job:{50}", "--in", "1h")
    stayed = tw("heartbeat", "job:{50}", "--extend", "1s")
    assert "job:{50} stays due" in stayed.stdout and "--earlier" in stayed.stdout, stayed.output
    assert "now falls due" in tw("heartbeat", "job:{50}", "--extend", "2h").stdout
