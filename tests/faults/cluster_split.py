"""A Redis Cluster whose master M0 can be partitioned from its replica and from the
cluster bus while clients still reach it: the split of tests/faults/split.py, on a
Cluster. ``run_split`` runs it the same way (the set has the same five calls).

Three masters, a replica each. Every node announces its bus port as a proxy's
(``cluster-announce-bus-port``), and M0 its client port too (``cluster-announce-port``),
so every bus link and every connection to M0, its replica's included, goes through a
proxy. The cut drops, on M0's bus proxy, every link; on the others', the links M0 opened
(their first message names M0 as its sender); on M0's client proxy, its replica's link
only. The majority sees M0 fail and promotes its replica, while the clients that know
M0 keep writing there until M0, alone, calls the cluster down (after the node timeout).
On healing, M0 learns its slots' new owner and becomes its replica: what it alone
acknowledged is gone.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from tests.conftest import wait_for
from timer.testing import CLUSTER_BUS_OFFSET, RedisServer, free_port, start_cluster_node

from .partition import Proxy

MASTERS = 3
NODE_TIMEOUT_MS = 1000


@dataclass
class ClusterSplitSet:
    servers: list[RedisServer]  # the masters M0..M2, then their replicas R0..R2
    to_m0: Proxy  # M0's address as the cluster announces it (clients and R0 use it)
    buses: list[Proxy]  # each node's bus, as announced
    m0_id: str

    @property
    def url(self) -> str:
        return self.servers[1].url  # any node but M0 finds the cluster

    def cut(self) -> None:
        self.to_m0.cut("replicas")
        self.buses[0].cut("all")
        for bus in self.buses[1:]:
            bus.cut(f"node:{self.m0_id}")

    def heal(self) -> None:
        for proxy in (self.to_m0, *self.buses):
            proxy.heal()

    def promoted(self) -> bool:
        """M0's replica says it is a master now."""
        return _role(self.servers[MASTERS]) == "master"

    def demoted(self) -> bool:
        """M0 says it is a replica now (it learned its slots' new owner after the heal)."""
        return _role(self.servers[0]) == "slave"


def _role(server: RedisServer) -> str | None:
    with (
        redis.Redis(host=server.host, port=server.port, socket_timeout=1) as r,
        contextlib.suppress(redis.RedisError),
    ):
        return str(r.info("replication").get("role"))
    return None


@contextlib.contextmanager
def cluster_split_set(base: Path, *, binary: str | Path | None = None) -> Iterator[ClusterSplitSet]:
    """Three masters and a replica each, every bus behind a proxy, M0 behind one more."""
    common = (
        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
        "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
        "--cluster-require-full-coverage", "no",
        "--repl-diskless-sync-delay", "0",
    )  # fmt: skip
    total = MASTERS * 2
    ports = [free_port(bus_offset=CLUSTER_BUS_OFFSET) for _ in range(total)]
    to_m0 = Proxy(("127.0.0.1", ports[0]))
    buses = [Proxy(("127.0.0.1", port + CLUSTER_BUS_OFFSET)) for port in ports]
    servers: list[RedisServer] = []
    nodes: list[Any] = []
    try:
        for i, port in enumerate(ports):
            announce: tuple[str, ...] = ("--cluster-announce-bus-port", str(buses[i].port))
            if i == 0:
                announce += ("--cluster-announce-port", str(to_m0.port))
            server = RedisServer(
                base / f"n{i}", binary=binary, port=port, extra_args=(*common, *announce)
            )
            start_cluster_node(server)  # (it may move to other ports: the proxies follow)
            buses[i].target = (server.host, server.port + CLUSTER_BUS_OFFSET)
            servers.append(server)
        to_m0.target = (servers[0].host, servers[0].port)
        nodes = [redis.Redis(host=s.host, port=s.port, decode_responses=True) for s in servers]
        per = 16384 // MASTERS
        for i, node in enumerate(nodes[:MASTERS]):
            last = 16383 if i == MASTERS - 1 else (i + 1) * per - 1
            node.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, last)
        for i, server in enumerate(servers[1:], start=1):  # through the proxies from the start
            nodes[0].execute_command("CLUSTER", "MEET", server.host, server.port, buses[i].port)
        ids = [str(node.execute_command("CLUSTER", "MYID")) for node in nodes]

        met = [time.monotonic()]

        def meet_again() -> None:
            """MEET again, every 2 s, each node M0 does not know by its id yet: a handshake
            not done within the node timeout is dropped for good (a loaded machine), and
            a node met once then never joins (as timer.testing.cluster does)."""
            if time.monotonic() - met[0] < 2.0:
                return
            met[0] = time.monotonic()
            listed = str(nodes[0].execute_command("CLUSTER", "NODES"))
            known = {
                line.split()[0]
                for line in listed.splitlines()
                if line and "handshake" not in line.split()[2]
            }
            for i, server in enumerate(servers[1:], start=1):
                if ids[i] not in known:
                    nodes[0].execute_command(
                        "CLUSTER", "MEET", server.host, server.port, buses[i].port
                    )

        def joined() -> bool:
            meet_again()
            infos = [node.cluster("INFO") for node in nodes]  # one INFO a node a round
            return all(
                i.get("cluster_state") == "ok" and int(i.get("cluster_known_nodes", 0)) == total
                for i in infos
            )

        wait_for(joined, 30, "every node of the split cluster to join")
        for r, node in enumerate(nodes[MASTERS:]):
            node.execute_command("CLUSTER", "REPLICATE", ids[r])
        wait_for(lambda: all(
            node.info("replication").get("master_link_status") == "up"
            for node in nodes[MASTERS:]), 30, "every replica to sync")  # fmt: skip
        # the cut must find M0's traffic on the proxies: its replica's link, and its bus
        # links to every other node (opened by M0: its id as sender) and from them
        wait_for(lambda: (
            to_m0.links("replicas") > 0
            and all(bus.links(f"node:{ids[0]}") > 0 for bus in buses[1:])
            and all(buses[0].links(f"node:{ids[i]}") > 0 for i in range(1, total))),
            30, "M0's links to go through the proxies")  # fmt: skip
        yield ClusterSplitSet(servers, to_m0, buses, ids[0])
    finally:
        for proxy in (to_m0, *buses):
            proxy.close()
        for node in nodes:
            node.close()
        for server in servers:
            server.stop()
