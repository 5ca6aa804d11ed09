"""``tickwheel demo --sentinel``: the demo on a highly available Redis of its own.

A master, two replicas and three Sentinels, started on loopback from the embedded
server's binary (or a ``redis-server``/``valkey-server`` on PATH) in a directory beside
the embedded server's data, and removed after the run. The demo's clients, workers and
handler process reach it by its ``redis+sentinel://`` URL with durability
``replicas:1``, and besides a worker it kills the master with SIGKILL: the Sentinels
promote a replica, everyone follows it, and no acknowledged timer is lost.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from timer.testing import SentinelSet, find_server_binary, redis_sentinel

from .. import embedded

SERVICE = "demo"
DURABILITY = "replicas:1"
KILL_AT = 0.6  # the master is killed once this share of the outcomes is in


@contextlib.contextmanager
def sentinel_set(say: Callable[[str], None]) -> Iterator[SentinelSet]:
    """The demo's Sentinel set, up and in sync; stopped and removed afterwards."""
    binary = find_server_binary()
    home = embedded.home()
    home.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="demo-sentinel-", dir=home))
    say(f"Starting a Sentinel set from {binary.name}: a master, 2 replicas, 3 Sentinels")
    try:
        with redis_sentinel(root, binary=binary, service=SERVICE) as s:
            yield s
    finally:
        shutil.rmtree(root, ignore_errors=True)


class MasterKill:
    """kill -9 of the set's master once, then the time until the Sentinels name another."""

    def __init__(self, s: SentinelSet) -> None:
        self.s = s
        self.killed: float | None = None  # monotonic time of the kill
        self.old: str | None = None
        self.new: str | None = None
        self.promoted_ms: int | None = None

    def step(self, due: bool) -> None:
        if self.killed is None and due:
            master = self.s.master()
            self.old = f"{master.host}:{master.port}"
            master.kill()
            self.killed = time.monotonic()
        elif self.killed is not None and self.promoted_ms is None:
            addr = self.s.master_address()
            if addr is not None and f"{addr[0]}:{addr[1]}" != self.old:
                self.new = f"{addr[0]}:{addr[1]}"
                self.promoted_ms = int((time.monotonic() - self.killed) * 1000)

    def summary(self) -> dict[str, object]:
        """The summary's lines: whether the master was killed, and how soon (ms) the
        Sentinels named a replica in its place."""
        return {
            "redis_master_killed": self.killed is not None,
            "redis_failover_ms": self.promoted_ms,
        }
