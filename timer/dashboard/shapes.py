"""What the dashboard's API answers beyond the one shape of each value
(:mod:`timer.shapes`): a timer's time left, the lateness histogram, the
namespace's history in bins, what needs attention."""

from __future__ import annotations

import os
import shlex
from typing import Any

from timer.durable.admin.history import (
    APPROXIMATE,
    GROUP_COUNTS,
    WHY_APPROXIMATE,
    WORKER_COUNTS,
    Minute,
)
from timer.durable.model.models import Outcome, TimerInfo
from timer.durable.model.namespace import NAMESPACE_ENV
from timer.shapes import timer_info_json

LATENESS_BOUNDS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


def info_shape(t: TimerInfo, now_ms: int) -> dict[str, Any]:
    """A timer as every door shows it, and the time it has left (the page's own)."""
    left = t.deadline_ms - now_ms if t.state == "pending" else None
    return {**timer_info_json(t), "time_left_ms": left}


def lateness_histogram(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    """Expired outcomes per lateness bucket (the metrics' bounds, ms): how long after
    its deadline each fired, or after it was scheduled when that came later (a backfill
    or a catch-up is scheduled already due: its deadline's age is not lateness)."""
    counts = [0] * (len(LATENESS_BOUNDS_MS) + 1)
    for o in outcomes:
        if o.outcome != "expired":
            continue
        late = max(0, o.decided_ms - max(o.deadline_ms, o.created_ms or 0))
        i = next((i for i, b in enumerate(LATENESS_BOUNDS_MS) if late <= b), len(counts) - 1)
        counts[i] += 1
    labels = [f"≤{b} ms" for b in LATENESS_BOUNDS_MS] + [f">{LATENESS_BOUNDS_MS[-1]} ms"]
    return [{"bucket": label, "count": n} for label, n in zip(labels, counts, strict=True)]


COUNTS = (*WORKER_COUNTS, *GROUP_COUNTS)
# A period the page offers: its minutes and the minutes a point of its charts sums.
PERIODS = {60: 1, 360: 5, 1440: 10}


def history_shape(minutes: list[Minute], step: int) -> dict[str, Any]:
    """The history as the page charts it: a point each ``step`` minutes (counts summed,
    pending the last reading, lateness quantiles of the bin's expired timers; ``null``
    where no process wrote), the totals and each group's totals over the period, and
    which counts are ``approximate`` (they may be short: the page marks them) and why
    each is (``why_approximate``, the page's tooltip)."""
    points: list[dict[str, Any]] = []
    for i in range(0, len(minutes), step):
        part = minutes[i : i + step]
        late: dict[float, int] = {}
        for m in part:
            for bound, n in m.late:
                late[bound] = late.get(bound, 0) + n
        merged = Minute(part[0].at_ms, late=tuple(sorted(late.items())))
        readings = [m.pending for m in part if m.pending is not None]
        points.append(
            {
                "at_ms": part[0].at_ms,
                **{k: sum(getattr(m, k) for m in part) for k in COUNTS},
                "pending": readings[-1] if readings else None,
                "lateness_p50_ms": _finite(merged.lateness_ms(0.5)),
                "lateness_p99_ms": _finite(merged.lateness_ms(0.99)),
            }
        )
    groups: dict[str, dict[str, int]] = {}
    for m in minutes:
        for name, counts in m.groups.items():
            into = groups.setdefault(name, dict.fromkeys(GROUP_COUNTS, 0))
            for k, n in counts.items():
                into[k] += n
    approx = list(minutes[0].approximate if minutes else APPROXIMATE)
    return {
        "step_minutes": step,
        "points": points,
        "totals": {k: sum(getattr(m, k) for m in minutes) for k in COUNTS},
        "groups": [{"group": name, **groups[name]} for name in sorted(groups)],
        "approximate": approx,
        "why_approximate": {k: WHY_APPROXIMATE[k] for k in approx},
    }


def group_minute(m: Minute, group: str) -> Minute:
    """A minute as one group's runners saw it: its handled, failed and dead alone (each
    short by what a runner killed before its flush had counted)."""
    own = m.groups.get(group, {})
    handled, failed, dead = (own.get(k, 0) for k in GROUP_COUNTS)
    groups = {group: own} if own else {}
    return Minute(
        m.at_ms, handled=handled, failed=failed, dead=dead, groups=groups, approximate=GROUP_COUNTS
    )


def _finite(ms: float | None) -> float | None:
    """A quantile past the last bucket as that bucket's bound (JSON has no infinity)."""
    return None if ms is None else min(ms, 60_000.0)


LATE_MS = 5000  # a shard whose sweep is this far behind needs attention

Part = dict[str, str]  # a piece of an attention item's text; "view" or "group" links it


def attention(overview: dict[str, Any]) -> list[dict[str, Any]]:
    """What an operator may have to act on (the Overview's list), one item a cause: its
    ``kind``, its ``text``, and its ``parts`` as the page writes them (a part with a
    ``view`` links to that view, one with a ``group`` to that group).

    With no live worker that one cause is one item, saying what follows from it (shards
    with no leader, pending timers that wait): the lapsed leases and late sweeps it
    leaves are not repeated as items of their own."""
    items: list[dict[str, Any]] = []

    def add(kind: str, *parts: Part) -> None:
        text = "".join(p["text"] for p in parts)
        items.append({"kind": kind, "text": text, "parts": list(parts)})

    dead = int(overview["dead_letters"])
    if dead:
        link = {"text": _count(dead, "dead letter"), "view": "/dead-letters"}
        add("dead_letters", link, {"text": " to re-deliver or drop"})
    for g in overview["groups"]:
        if g["paused_since_ms"]:
            lag = "?" if g["lag"] is None else f"{g['lag']:,}"
            name = {"text": g["name"], "group": g["name"]}
            add("group_paused", {"text": "group "}, name, {"text": f" is paused ({lag} waiting)"})
    shards = overview["shards"]
    leaderless = [s for s in shards if not s["leader"]]
    if not overview["workers"]:
        idle = _idle(len(leaderless), int(overview["pending"]))
        start = _worker_command(overview["namespace"])
        link = {"text": "no live worker", "view": "/workers"}
        add("no_worker", link, {"text": f": {idle}; start one: {start}"})
        return items
    if leaderless:
        has = _count(len(leaderless), "shard has", "shards have")
        # their timers wait only if they have any (a shard between leaders may have none)
        waiting = sum(int(s["pending"]) for s in leaderless)
        why = (
            f": {_count(waiting, 'pending timer waits', 'pending timers wait')}" if waiting else ""
        )
        add("leaderless", {"text": f"{has} no leader", "view": "/shards"}, {"text": why})
    late = sum(1 for s in shards if s["lag_ms"] > LATE_MS)
    if late:
        sweep = _count(late, "shard sweeps", "shards sweep")
        add("late", {"text": f"{sweep} more than {LATE_MS // 1000} s late", "view": "/shards"})
    return items


def _idle(leaderless: int, pending: int) -> str:
    """What no live worker leaves: shards with no leader (a worker gone may hold its
    leases until they lapse), and the pending timers that wait or, with none, that
    timers scheduled now would."""
    led = f"{_count(leaderless, 'shard has', 'shards have')} no leader" if leaderless else ""
    if pending:
        waits = _count(pending, "pending timer waits", "pending timers wait")
        return f"{led} and {waits}" if led else waits
    later = "timers scheduled now will wait until one starts"
    return f"{led}; {later}" if led else later


def _count(n: int, one: str, more: str = "") -> str:
    """``n`` and what it counts: ``one`` for one, else ``more`` (or ``one`` with an s)."""
    return f"{n:,} {one if n == 1 else more or one + 's'}"


def _worker_command(namespace: str) -> str:
    """The command that starts a worker on ``namespace``, as a shell takes it (no option
    for ``default``, the CLI's own, unless this process's environment names another in
    TICKWHEEL_NAMESPACE: a shell that exported it would start one on that namespace)."""
    exported = os.environ.get(NAMESPACE_ENV) or "default"
    if namespace == "default" == exported:
        return "tickwheel worker"
    return f"tickwheel --namespace {shlex.quote(namespace)} worker"
