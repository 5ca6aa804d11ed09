"""A Redis Cluster of real server processes on loopback, for tests (``redis_cluster``)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis

from ..errors import StoreError
from .server import CLUSTER_BUS_OFFSET, RedisServer, ServerExited, free_port


@contextlib.contextmanager
def redis_cluster(
    base: str | os.PathLike[str],
    *,
    binary: str | os.PathLike[str] | None = None,
    masters: int = 3,
    replicas: int = 0,
    node_timeout_ms: int = 5000,
    require_full_coverage: bool = False,
    timeout_s: float = 30.0,
) -> Iterator[list[RedisServer]]:
    """A Redis Cluster of ``masters`` primaries, each with ``replicas`` replicas, on
    loopback, for tests.

    Slots are split evenly with CLUSTER ADDSLOTSRANGE, the nodes joined with CLUSTER
    MEET and each replica attached with CLUSTER REPLICATE; it yields once every node
    reports ``cluster_state:ok`` and every replica's link to its master is up. The list
    holds the masters first, then master i's replicas at ``masters + i * replicas``.
    ``node_timeout_ms`` is ``cluster-node-timeout``: how long a master may be silent
    before its replica is promoted. With ``require_full_coverage=False`` (the default)
    the live masters keep serving their own slots when one dies. Any node's ``url``
    reaches the cluster (``TimerClient.from_url`` detects it).
    """
    args = (
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        str(node_timeout_ms),
        "--cluster-require-full-coverage",
        "yes" if require_full_coverage else "no",
        # a replica's sync starts at once (the default waits 5 s for more replicas)
        "--repl-diskless-sync-delay",
        "0",
    )
    root = Path(base)
    total = masters * (1 + replicas)
    servers = [
        RedisServer(
            root / f"n{i}",
            binary=binary,
            port=free_port(bus_offset=CLUSTER_BUS_OFFSET),
            extra_args=args,
        )
        for i in range(total)
    ]
    nodes: list[Any] = []
    try:
        for server in servers:
            start_cluster_node(server)
        nodes = [redis.Redis(host=s.host, port=s.port, decode_responses=True) for s in servers]
        per = 16384 // masters
        for i, node in enumerate(nodes[:masters]):
            last = 16383 if i == masters - 1 else (i + 1) * per - 1
            node.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, last)
        _wait_cluster(
            nodes,
            total,
            timeout_s,
            lambda: True,
            "every node to join",
            each_round=_meeting(nodes[0], servers[1:]),
        )
        for r, node in enumerate(nodes[masters:]):
            master_id = nodes[r // replicas].execute_command("CLUSTER", "MYID")
            node.execute_command("CLUSTER", "REPLICATE", master_id)
        _wait_cluster(
            nodes,
            total,
            timeout_s,
            lambda: all(
                node.info("replication").get("master_link_status") == "up"
                for node in nodes[masters:]
            ),
            "every replica to sync",
        )
        yield servers
    finally:
        for node in nodes:
            node.close()
        for server in servers:
            server.stop()


def _meeting(first: Any, others: list[RedisServer]) -> Callable[[], None]:
    """A check for ``_wait_cluster`` that (re)sends ``CLUSTER MEET`` to each node
    ``first`` does not know yet, every 2 s: a handshake not done within the node timeout
    is dropped for good (a loaded machine, a short timeout), and a node met once then
    never joins."""
    last = [float("-inf")]

    def meet() -> None:
        if time.monotonic() - last[0] < 2.0:
            return
        last[0] = time.monotonic()
        known = {
            line.split()[1].split("@")[0]
            for line in first.execute_command("CLUSTER", "NODES").splitlines()
            if line and "handshake" not in line.split()[2]
        }
        for server in others:
            if f"{server.host}:{server.port}" not in known:
                first.execute_command("CLUSTER", "MEET", server.host, server.port)

    return meet


def _wait_cluster(
    nodes: list[Any],
    total: int,
    timeout_s: float,
    more: Callable[[], bool],
    what: str,
    *,
    each_round: Callable[[], None] = lambda: None,
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        each_round()
        if all(_cluster_ok(node, total) for node in nodes) and more():
            return
        if time.monotonic() > deadline:
            raise StoreError(f"the {total}-node cluster did not get {what} in {timeout_s:.0f}s")
        time.sleep(0.05)  # polling the nodes: the cluster bus has no readiness signal


def start_cluster_node(server: RedisServer, attempts: int = 3) -> None:
    """Start a cluster node, on other ports if its own were taken meanwhile (a port is
    chosen free, then bound by the server a moment later: another process may get there
    first)."""
    for attempt in range(attempts):
        try:
            server.start()
            return
        except StoreError as exc:
            # what it logged at this start (the error says only its last warning)
            said = exc.tail if isinstance(exc, ServerExited) else str(exc)
            if "Address already in use" not in said or attempt == attempts - 1:
                raise
            server.port = free_port(server.host, bus_offset=CLUSTER_BUS_OFFSET)


def _cluster_ok(node: Any, total: int) -> bool:
    info = node.cluster("INFO")
    return bool(
        info.get("cluster_state") == "ok" and int(info.get("cluster_known_nodes", 0)) == total
    )
