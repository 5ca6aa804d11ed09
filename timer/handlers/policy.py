"""What a handler runner decides with: retries (``Retry``, ``Backoff``), timeouts
(``HandlerTimedOut``), what it counts (``HandlerStats``), and the outcomes in hand
(``InHand``). Re-exported by :mod:`timer.handlers`, where the guide is."""

from __future__ import annotations

import logging
import random
import threading
import traceback
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..durable.groups.streams import Delivery
from ..durable.model.checks import check_seconds
from ..durable.model.models import Outcome
from ..errors import InvalidInput
from ..histogram import MsHistogram, Stages

log = logging.getLogger("tickwheel.handlers")

Handler = Callable[[Outcome], Any] | Callable[[Outcome], Awaitable[Any]]


class HandlerTimedOut(Exception):
    """A handler ran past its ``timeout_s``: a failed attempt like any other."""


def check_timeout(timeout_s: object) -> float | None:
    if timeout_s is None:  # no timeout
        return None
    return check_seconds("timeout_s", timeout_s, maximum=86_400, positive=True)


class Retry(Exception):
    """Raise from a handler to try the outcome again after ``delay_s`` seconds (default:
    the backoff). It counts as an attempt: the last one dead-letters the outcome."""

    def __init__(self, delay_s: float | None = None, reason: str = "") -> None:
        super().__init__(reason or (f"retry in {delay_s}s" if delay_s is not None else "retry"))
        if delay_s is not None and (not isinstance(delay_s, int | float) or delay_s < 0):
            raise InvalidInput(f"Retry delay must be >= 0 seconds, got {delay_s!r}")
        self.delay_s = delay_s


class Later(Exception):
    """Raise from a handler to look at the outcome again after ``delay_s`` seconds: it
    is not done yet, and that is not a failure (a task sent and not yet confirmed, an
    answer not yet there). Not counted as failed, logged at debug; it does count in
    ``o.attempt``, so ``max_attempts`` still bounds how often (then a dead letter)."""

    def __init__(self, delay_s: float, reason: str = "") -> None:
        if (
            isinstance(delay_s, bool)
            or not isinstance(delay_s, int | float)
            or not (0 <= delay_s <= 86_400)
        ):
            raise InvalidInput(f"Later's delay must be 0 to 86400 seconds, got {delay_s!r}")
        super().__init__(reason or f"again in {delay_s}s")
        self.delay_s = delay_s


@dataclass(frozen=True)
class Backoff:
    """Delay before attempt ``n + 1`` after attempt ``n`` failed:
    ``min(max_s, initial_s * multiplier ** (n - 1))``, each scaled by a random factor
    in ``[1 - jitter, 1]`` so failed outcomes do not retry in lockstep."""

    initial_s: float = 1.0
    multiplier: float = 2.0
    max_s: float = 300.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not (self.initial_s >= 0 and self.max_s >= self.initial_s):
            raise InvalidInput(
                f"backoff needs 0 <= initial ({self.initial_s}s) <= max ({self.max_s}s)"
            )
        if self.multiplier < 1:
            raise InvalidInput(f"backoff multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter <= 1:
            raise InvalidInput(f"backoff jitter must be between 0 and 1, got {self.jitter}")

    def delay_s(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        base = min(self.max_s, self.initial_s * self.multiplier ** max(0, attempt - 1))
        return base * (1 - self.jitter * rand())


HANDLER_STAGES = ("decided_to_read", "read_to_start")


@dataclass
class HandlerStats:
    """What a runner did since it started (read by its metrics)."""

    handled: int = 0  # handler returned; outcome acknowledged
    failed: int = 0  # handler raised (each attempt)
    retried: int = 0  # failed attempts scheduled again
    later: int = 0  # outcomes a handler asked to see again later (Later): not failures
    dead_lettered: int = 0  # moved to the dead letters
    skipped: int = 0  # no handler for its kind: acknowledged unseen
    claimed: int = 0  # due retries, outcomes of dead consumers, our own taken back at start
    lost: int = 0  # taken over by another consumer while our handler still ran
    ack_errors: int = 0  # could not settle with Redis (the outcome will come again)
    acks_unmatched: int = 0  # acknowledged, but nothing was pending (taken over, a stale master)
    timed_out: int = 0  # attempts that ran past their timeout (counted in failed too)
    limit_waits: int = 0  # outcomes that found their key at its limit and waited a slot
    handed_at_fire: int = 0  # read by a fire call of the worker in this process (fire=)
    paused: bool = False  # its group is paused by an operator (pause_group), as last asked
    pause_checks: int = 0  # times it asked Redis whether its group is paused
    duration: MsHistogram = field(default_factory=MsHistogram)  # handler run time
    start_lateness: MsHistogram = field(default_factory=MsHistogram)  # deadline -> start
    # first attempts: decision -> read by this runner -> handler start
    stages: Stages = field(default_factory=lambda: Stages(HANDLER_STAGES))
    by_outcome: dict[str, int] = field(default_factory=dict)  # handled, per outcome kind


def error_text(exc: BaseException) -> str:
    """``Type: message`` first (what a list shows), then the traceback's last frames."""
    head = "".join(traceback.format_exception_only(exc)).strip()
    tb = exc.__traceback__
    tb = tb.tb_next if tb is not None else None  # the runner's own frame says nothing
    frames = "".join(traceback.format_tb(tb)[-5:])
    return f"{head}\n{frames}".strip()


class InHand:
    """The outcomes a runner holds (read or claimed, not yet settled), with the condition
    that guards them and the flag that stops the runner. Shared by ``Handlers`` (``stop``,
    ``in_flight``) and its loop."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.cond = threading.Condition()
        self.held: dict[tuple[int, str], Delivery] = {}

    def __len__(self) -> int:
        with self.cond:
            return len(self.held)

    def keys(self) -> list[tuple[int, str]]:
        with self.cond:
            return list(self.held)


class WorkQueue:
    """Outcomes started, waiting for a handler thread: the highest priority first
    (``Outcome.priority``); within a priority, round robin across the values of
    ``fair_by`` (one tenant's flood does not hold another's outcomes back), each value
    first in, first out; ``None`` (a thread's stop) once nothing else waits. Read ahead,
    a runner holds up to ``read_ahead`` more than it runs, so under a backlog a higher
    priority, or another tenant, it has read overtakes those."""

    def __init__(self, fair_by: Callable[[Outcome], str | None] | None = None) -> None:
        self._cond = threading.Condition(threading.Lock())
        # priority -> fairness key -> its outcomes; a key's turn taken, it goes last
        self._lines: dict[int, OrderedDict[str | None, deque[Delivery]]] = {}
        self._stops = 0
        self._fair_by = fair_by

    def _key(self, o: Outcome) -> str | None:
        if self._fair_by is None:
            return None
        try:
            return self._fair_by(o)
        except Exception:  # a key function's failure is no reason to hold the outcome
            log.warning("fair_by failed for %s; it takes the shared turn", o.id, exc_info=True)
            return None

    def put(self, d: Delivery | None) -> None:
        key = None if d is None else self._key(d.outcome)
        with self._cond:
            if d is None:
                self._stops += 1
            else:
                keys = self._lines.get(d.outcome.priority)
                if keys is None:
                    keys = self._lines[d.outcome.priority] = OrderedDict()
                line = keys.get(key)
                if line is None:
                    line = keys[key] = deque()
                line.append(d)
            self._cond.notify()

    def get(self) -> Delivery | None:
        with self._cond:
            while True:
                if self._lines:
                    top = max(self._lines) if len(self._lines) > 1 else next(iter(self._lines))
                    keys = self._lines[top]
                    key, line = next(iter(keys.items()))
                    d = line.popleft()
                    if not line:
                        del keys[key]
                        if not keys:
                            del self._lines[top]
                    elif len(keys) > 1:
                        keys.move_to_end(key)  # its turn taken: the other keys go next
                    return d
                if self._stops:
                    self._stops -= 1
                    return None
                self._cond.wait()


class Registry(Protocol):
    """What the loop reads of its ``Handlers``."""

    group: str
    consumer: str
    max_attempts: int
    backoff: Backoff
    stats: HandlerStats

    def handler(self, outcome: str) -> Handler | None: ...

    def timeout_of(self, outcome: str) -> float | None: ...

    def functions(self) -> list[Handler]: ...


def span_fields(h: Registry, o: Outcome) -> dict[str, object]:
    """The attributes of a handler run's span (timer/tracing.py)."""
    return {
        "tickwheel.timer_id": o.id,
        "tickwheel.outcome": o.outcome,
        "tickwheel.group": h.group,
        "tickwheel.consumer": h.consumer,
        "tickwheel.attempt": o.attempt,
    }
