"""Outcomes in hand waiting for a slot of their key (per-key limits and rates): the
order they wait in, when each may be asked again, and the round that admits those whose
keys have room now.

The runner's reading thread asks every ``LIMIT_RETRY_S`` (another runner's slot frees
without a word); a handler thread that gave back slots asks at once for the outcomes
waiting for those, so a slot of this runner passes to the next outcome of its key without
a wait. ``Slots`` (``limits.py``) holds the slots in Redis; this holds the line.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..clock import SYSTEM_TIME, Time
from ..durable.groups.streams import Delivery

if TYPE_CHECKING:
    from .limits import Slots

LIMIT_RETRY_S = 0.05  # how often outcomes waiting for a key's slot try again (at most)


class Waiting:
    """The outcomes waiting for their key's slot, in the order read; changed under
    ``lock`` (by the reading thread and the handler threads)."""

    def __init__(
        self,
        slots: Slots,
        stopping: threading.Event,
        admit: Callable[[Delivery], float | None],
        *,
        time: Time = SYSTEM_TIME,
    ) -> None:
        self.time = time
        self.slots = slots
        self.stopping = stopping
        self.admit = admit  # Slots.admit under the runner's guard: None once admitted
        self.line: deque[Delivery] = deque()
        # one refused by a rate: not asked again before this (monotonic s)
        self.not_before: dict[tuple[int, str], float] = {}
        self.lock = threading.Lock()
        self.next_round = 0.0

    def __len__(self) -> int:
        return len(self.line)

    def add(self, d: Delivery, retry_s: float) -> None:
        """``d`` was refused: a rate's wait (``retry_s`` > 0) or a slot's (0)."""
        with self.lock:
            if retry_s > 0:
                self.not_before[(d.outcome.shard, d.entry_id)] = self.time.monotonic() + retry_s
            self.line.append(d)

    def on_rate(self) -> bool:
        """Whether any outcome waits for a rate (not only for a slot)."""
        return bool(self.not_before)

    def rate_due(self, now: float) -> bool:
        """Whether an outcome refused by a rate may be asked again now."""
        with self.lock:
            return any(t <= now for t in self.not_before.values())

    def soonest(self) -> float:
        """When the first outcome waiting on a rate may be asked again (monotonic s)."""
        with self.lock:  # one past (asked late) is due now
            return min(self.not_before.values(), default=self.time.monotonic() + LIMIT_RETRY_S)

    def clear(self) -> list[Delivery]:
        """Empty the line (a stop): the outcomes that were in it."""
        with self.lock:
            left = list(self.line)
            self.line.clear()
            self.not_before.clear()
        return left

    def admit_round(self, start: Callable[[Delivery], None], freed: list[str] | None) -> None:
        """Start (``start``, under the lock, in the order read) the waiting outcomes whose
        keys have room now: all of them every LIMIT_RETRY_S (``freed`` None), or at once
        those waiting for the slots ``freed`` just gave back."""
        if freed is None:
            now = self.time.monotonic()
            # Slots of other runners are polled every LIMIT_RETRY_S; a rate says when
            # its next start is allowed, and is asked again then, not up to a poll later
            # (a start late by that is lost for good: GCRA does not carry it over).
            if now < self.next_round and not self.rate_due(now):
                return
            self.next_round = now + LIMIT_RETRY_S
        # keys found at their limit this round, not asked again: when a rate allows the
        # next start (monotonic s), or None for a slot (freed when a handler returns)
        full: dict[str, float | None] = {}
        with self.lock:
            now = self.time.monotonic()
            for d in list(self.line):
                if self.stopping.is_set():
                    break
                at = (d.outcome.shard, d.entry_id)
                if self.not_before.get(at, 0.0) > now:
                    continue
                keys = [k for k, _ in self.slots.needed(d)]
                rates = [k for k, _, _ in self.slots.rates(d)]
                if freed is not None and not any(k in freed for k in keys):
                    continue
                behind = [full[k] for k in (*keys, *rates) if k in full]
                if behind:  # after one of its keys' outcomes: asked when that one is
                    if None in behind:
                        self.not_before.pop(at, None)
                    else:
                        self.not_before[at] = max(t for t in behind if t is not None)
                    continue
                retry_s = self.admit(d)
                if retry_s is None:
                    self.line.remove(d)
                    self.not_before.pop(at, None)
                    start(d)
                elif retry_s > 0:
                    self.not_before[at] = now + retry_s
                    full.update(dict.fromkeys(rates, now + retry_s))
                else:  # waits for a slot now, not for its rate
                    self.not_before.pop(at, None)
                    full.update(dict.fromkeys(keys))
