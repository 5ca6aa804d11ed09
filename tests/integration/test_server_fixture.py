"""The test server fixture is a real server that persists across a kill -9; a server that
exits as it starts is said to have, at once, with why."""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest
import redis

from tests.conftest import wait_for
from timer.testing import (
    CLUSTER_BUS_OFFSET,
    RedisServer,
    ServerExited,
    free_port,
    start_cluster_node,
)
from timer.testing.server import last_said, process_alive

pytestmark = pytest.mark.redis


def test_server_answers_and_runs_lua(redis_client: redis.Redis) -> None:
    """The fixture's server answers PING and runs Lua (every state change is a script)."""
    assert redis_client.ping() is True
    assert redis_client.eval("return redis.call('TIME')[1] + 0", 0) > 1_600_000_000


def test_acknowledged_write_survives_kill_9(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str
) -> None:
    """With appendfsync always, a write acknowledged before SIGKILL is there after restart."""
    key = f"{namespace}:durable"
    redis_client.set(key, b"kept")
    old_pid = redis_server.pid
    redis_server.kill()
    assert not redis_server.running
    redis_server.restart()
    assert redis_server.pid != old_pid
    fresh = redis.Redis.from_url(redis_server.url)
    try:
        assert fresh.get(key) == b"kept"
    finally:
        fresh.close()


def unreadable_data(where: Path) -> Path:
    """A data directory whose AOF no server reads: its base file is two bytes."""
    aof = where / "appendonlydir"
    aof.mkdir(parents=True)
    (aof / "appendonly.aof.manifest").write_text("file appendonly.aof.1.base.rdb seq 1 type b\n")
    (aof / "appendonly.aof.1.base.rdb").write_bytes(b"xx")
    return where


@pytest.mark.parametrize("detached", [False, True], ids=["child", "detached"])
def test_a_server_that_exits_at_start_is_said_to_have_exited_and_why(
    tmp_path: Path, server_binary: Path, detached: bool
) -> None:
    """A server that exits as it starts (here: it cannot read its AOF) is said to have
    exited, in one line with the line of its log that says why; a detached one was not
    seen to (its launcher exits 0 once it has forked the daemon), and was said, 15 s
    later, not to have answered."""
    server = RedisServer(unreadable_data(tmp_path), binary=server_binary, detached=detached)
    with pytest.raises(ServerExited) as caught:
        server.start()
    said = str(caught.value)
    assert said.startswith(f"{server_binary.name} exited at start"), said
    assert "Bad file format reading the append only file" in said and "\n" not in said
    assert f"(its log: {server.log_path})" in said and "did not answer" not in said
    assert not detached or "with code" not in said  # the daemon's code is not ours to read
    assert "Bad file format" in caught.value.tail


def test_a_detached_server_that_exits_before_its_pidfile_is_seen_by_its_log(
    tmp_path: Path, server_binary: Path
) -> None:
    """On a port that is taken, Redis 7.0 exits before it writes its pidfile (Valkey 9
    after): the lines it logged, each with its pid, say which process to watch."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = RedisServer(tmp_path, binary=server_binary, port=port, detached=True)
        with pytest.raises(ServerExited, match=f"exited at start: Failed listening on port {port}"):
            server.start()


def test_a_cluster_node_whose_port_is_taken_starts_on_another(
    tmp_path: Path, server_binary: Path
) -> None:
    """start_cluster_node tries other ports when the node's was taken: it looks for why in
    what the node logged, which the one-line error no longer holds."""
    # a port a node may have (its bus, port + 10000, within 65535: an ephemeral port the
    # system picks may be over 55535, which a cluster node refuses at start), then taken
    port = free_port(bus_offset=CLUSTER_BUS_OFFSET)
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", port))
        taken.listen()
        args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
        server = RedisServer(tmp_path, binary=server_binary, port=port, extra_args=args)
        start_cluster_node(server)
        try:
            assert server.running and server.port != port
        finally:
            server.stop()


def test_a_stale_pidfile_is_not_the_new_servers(tmp_path: Path, server_binary: Path) -> None:
    """A pidfile left by a server killed earlier names a pid that is gone, or that another
    process has now: neither is taken for the starting server (as exited, or as its
    pid)."""
    ended = subprocess.Popen(["true"])
    ended.wait()
    for stale in (ended.pid, os.getpid()):
        data = tmp_path / str(stale)
        data.mkdir()
        (data / "server.pid").write_text(f"{stale}\n")
        server = RedisServer(data, binary=server_binary, detached=True).start()
        pid = server.pid
        assert pid is not None and pid != stale
        try:
            with redis.Redis(host=server.host, port=server.port) as r:
                assert r.ping() is True
        finally:
            os.kill(pid, signal.SIGTERM)
            wait_for(functools.partial(process_gone, pid), what="the server to stop")


def process_gone(pid: int) -> bool:
    return not process_alive(pid)


def test_last_said_is_the_logs_last_warning_without_its_pid_and_time() -> None:
    """What a server's log says of why it stopped: its last warning ('#'), where Redis
    and Valkey say why they exit (and a crash, which signal), after which a notice
    may follow; else its last line."""
    prefix = "8:M 02 Dec 2026 11:57:04.872"
    log = "\n".join([
        "8:C 02 Dec 2026 11:57:04.871 # oO0OoO0OoO0Oo Redis is starting oO0OoO0OoO0Oo",
        f"{prefix} # Bad file format reading the append only file a.rdb: make a backup",
        f"{prefix} * notice after it",
        "",
    ])  # fmt: skip
    assert last_said(log) == "Bad file format reading the append only file a.rdb: make a backup"
    crash = f"{prefix} # Redis 7.0.15 crashed by signal: 11, si_code: 1\n=== BUG REPORT END ==="
    assert last_said(crash) == "Redis 7.0.15 crashed by signal: 11, si_code: 1"
    assert last_said(f"{prefix} * Ready to accept connections\n\n") == "Ready to accept connections"
    assert last_said("raw line\n") == "raw line" and last_said("") == ""
