"""What the dashboard's API answers beyond the one shape of each value
(:mod:`timer.durable.shapes`): a timer's time left, the lateness histogram."""

from __future__ import annotations

from typing import Any

from timer.durable.models import Outcome, TimerInfo
from timer.durable.shapes import timer_info_json

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
