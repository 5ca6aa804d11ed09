"""A step's faults between a process and the store: a connection cut at one script call
(:class:`CutPlan`, :attr:`FakeStore.cut`), and a process that stalls between two of its
round trips (:class:`StallPlan`, :attr:`FakeStore.sent`). Each is armed for one step."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from timer.testing.store import Cut


def runs(script: str, fields: list[bytes], names: dict[bytes, str]) -> bool:
    """Whether command ``fields`` is a call of ``script`` (``"any"``: of any script);
    ``names``: the sha1 of each script as the drivers send it -> its name."""
    cmd = fields[0].upper()
    if cmd == b"EVALSHA":
        name = names.get(fields[1].lower(), "?")
    elif cmd == b"EVAL":
        name = names.get(hashlib.sha1(fields[1]).hexdigest().encode(), "?")
    else:
        return False
    return script in ("any", name)


@dataclass
class CutPlan:
    """One step's connection fault: the first call of ``script`` (any script's, for
    ``"any"``) fails ``kind`` (before it ran, or after it ran with its reply lost); with
    ``out`` the connection stays down through redis-py's own retries of that call, so
    the caller sees the error (else redis-py sends it again and the caller never
    knows)."""

    script: str
    kind: Cut
    out: bool
    names: dict[bytes, str]  # sha1 of each script as the drivers send it -> its name
    retries: int
    hit: bool = False
    left: int = 0  # retries still to fail

    def __call__(self, fields: list[bytes]) -> Cut | None:
        if self.left:
            self.left -= 1
            return "before"
        if self.hit:
            return None
        if not runs(self.script, fields, self.names):
            return None
        self.hit = True
        self.left = self.retries if self.out else 0
        return self.kind


@dataclass
class StallPlan:
    """One step's stall: once a round trip has called ``script`` (any script's, for
    ``"any"``), the process stalls ``ms`` before its next round trip (a GC pause, a VM
    descheduled), and the store's clock moves on meanwhile: an entry it just claimed
    goes idle, a lease it renewed runs down."""

    script: str
    ms: int
    names: dict[bytes, str]
    advance: Callable[[int], None]  # moves the world's clock by ms
    ran: bool = False  # a round trip called the script
    hit: bool = False  # the stall happened

    def command(self, fields: list[bytes]) -> Cut | None:
        """As :attr:`FakeStore.cut`: notes the script's call, never cuts."""
        if not self.ran and runs(self.script, fields, self.names):
            self.ran = True
        return None

    def sent(self) -> None:
        """As :attr:`FakeStore.sent`: the next round trip after the call waits."""
        if self.ran and not self.hit:
            self.hit = True
            self.advance(self.ms)
