"""What the dashboard's API answers beyond the one shape of each value
(:mod:`timer.shapes`): a timer's time left, the lateness histogram, the
namespace's history in bins."""

from __future__ import annotations

from typing import Any

from timer.durable.admin.history import (
    APPROXIMATE,
    GROUP_COUNTS,
    WHY_APPROXIMATE,
    WORKER_COUNTS,
    Minute,
)
from timer.durable.model.models import Outcome, TimerInfo
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
