"""What an operator does to a Redis Cluster, done to the tests' own: a master killed, a
graceful failover, a master restarted, a new master added, slots moved as
``redis-cli --cluster reshard`` moves them (one slot at a time: IMPORTING, MIGRATING,
its keys moved in batches with MIGRATE, then the slot given to its new owner), a move
stopped half-way and finished later as ``redis-cli --cluster fix`` would."""

from __future__ import annotations

from pathlib import Path

import redis

from tests.conftest import wait_for
from timer.testing import CLUSTER_BUS_OFFSET, RedisServer, free_port, start_cluster_node

MIGRATE_BATCH = 10  # keys a MIGRATE moves at once (redis-cli's --cluster-pipeline default)


def node(server: RedisServer) -> redis.Redis:
    return redis.Redis(host=server.host, port=server.port, decode_responses=True, socket_timeout=5)


def node_id(server: RedisServer) -> str:
    with node(server) as r:
        return str(r.execute_command("CLUSTER", "MYID"))


def owner_port(seen_from: RedisServer, slot: int) -> int | None:
    """The port of the master that ``seen_from`` says serves ``slot``."""
    with node(seen_from) as r:
        for start, end, master, *_ in r.execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return int(master[1])
    return None


def is_master(server: RedisServer) -> bool:
    with node(server) as r:
        return bool(r.info("replication").get("role") == "master")


def wait_promoted(replica: RedisServer, seen_from: list[RedisServer], timeout_s: float) -> None:
    """Until ``replica`` is a master and every node in ``seen_from`` knows it."""

    def promoted() -> bool:
        if not is_master(replica):
            return False
        with node(replica) as r:
            slots = r.execute_command("CLUSTER", "SLOTS")
        mine = [s for s in slots if int(s[2][1]) == replica.port]
        return bool(mine) and all(owner_port(s, mine[0][0]) == replica.port for s in seen_from)

    wait_for(promoted, timeout_s, f"replica :{replica.port} promoted")


def add_master(root: Path, template: RedisServer, cluster: list[RedisServer]) -> RedisServer:
    """A new empty master joined to the cluster (no slots yet)."""
    new = RedisServer(
        root,
        binary=template.binary,
        port=free_port(bus_offset=CLUSTER_BUS_OFFSET),
        extra_args=template.extra_args,
    )
    start_cluster_node(new)
    with node(cluster[0]) as r:
        r.execute_command("CLUSTER", "MEET", new.host, new.port)
    live = [s for s in cluster if s.running]
    wait_for(
        lambda: all(_knows(s, new) for s in live) and _knows(new, live[0]),
        20,
        "the new master known to every node",
    )
    # and the slot map known to it (a MIGRATE to it fails with CLUSTERDOWN before)
    wait_for(lambda: _state(new) == "ok", 20, "the new master to know every slot")
    return new


def _state(server: RedisServer) -> str:
    with node(server) as r:
        return str(r.cluster("INFO").get("cluster_state"))


def add_replica(root: Path, master: RedisServer, cluster: list[RedisServer]) -> RedisServer:
    """A new node joined as ``master``'s replica, once its link to it is up."""
    replica = add_master(root, master, cluster)  # a node with no slots, then
    # REPLICATE names the master by id: the new node must have learnt it (gossip) first,
    # else "Unknown node" (a master added a moment before: CI's pass on Redis 7.0 met it)
    wait_for(lambda: _knows(replica, master), 20, "the new node to know its master")
    with node(replica) as r:
        r.execute_command("CLUSTER", "REPLICATE", node_id(master))
    wait_for(lambda: _link_up(replica), 20, "the new replica to sync")
    return replica


def _link_up(replica: RedisServer) -> bool:
    with node(replica) as r:
        return bool(r.info("replication").get("master_link_status") == "up")


def _knows(server: RedisServer, other: RedisServer) -> bool:
    with node(server) as r:
        text = r.execute_command("CLUSTER", "NODES")
    return any(f":{other.port}@" in line and "handshake" not in line for line in text.splitlines())


def open_slot(src: RedisServer, dst: RedisServer, slot: int) -> None:
    with node(dst) as d, node(src) as s:
        d.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(src))
        s.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(dst))


def move_keys(src: RedisServer, dst: RedisServer, slot: int, limit: int | None = None) -> int:
    """Move the slot's keys from ``src`` to ``dst`` in batches, at most ``limit``; how
    many moved."""
    moved = 0
    with node(src) as s:
        while limit is None or moved < limit:
            count = MIGRATE_BATCH if limit is None else min(MIGRATE_BATCH, limit - moved)
            keys = s.execute_command("CLUSTER", "GETKEYSINSLOT", slot, count)
            if not keys:
                break
            s.execute_command("MIGRATE", dst.host, dst.port, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)
    return moved


def close_slot(src: RedisServer, dst: RedisServer, slot: int, masters: list[RedisServer]) -> None:
    """Give the slot to ``dst``: on it first, then on the source, then on every master."""
    owner = node_id(dst)
    for server in [dst, src, *[m for m in masters if m not in (src, dst) and m.running]]:
        with node(server) as r:
            r.execute_command("CLUSTER", "SETSLOT", slot, "NODE", owner)


def move_slot(src: RedisServer, dst: RedisServer, slot: int, masters: list[RedisServer]) -> None:
    """One slot moved whole, as ``redis-cli --cluster reshard`` does."""
    open_slot(src, dst, slot)
    move_keys(src, dst, slot)
    close_slot(src, dst, slot, masters)
