"""What the dashboard's API answers for each model: plain JSON-ready dicts."""

from __future__ import annotations

from typing import Any

from timer.durable.models import DeadLetter, GroupInfo, Outcome, TimerInfo
from timer.durable.schedules import ScheduleInfo

LATENESS_BOUNDS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


def info_shape(t: TimerInfo, now_ms: int) -> dict[str, Any]:
    return {
        "id": t.id, "shard": t.shard, "state": t.state, "deadline_ms": t.deadline_ms,
        "time_left_ms": t.deadline_ms - now_ms if t.state == "pending" else None,
        "payload": t.payload, "created_ms": t.created_ms, "decided_ms": t.decided_ms,
        "watch": list(t.watch), "need": t.need, "notified": list(t.got),
    }  # fmt: skip


def outcome_shape(o: Outcome) -> dict[str, Any]:
    return {
        "id": o.id, "outcome": o.outcome, "deadline_ms": o.deadline_ms,
        "decided_ms": o.decided_ms, "lateness_ms": o.lateness_ms, "shard": o.shard,
    }  # fmt: skip


def group_shape(g: GroupInfo) -> dict[str, Any]:
    return {
        "name": g.name, "pending": g.pending, "retrying": g.retrying, "lag": g.lag,
        "oldest_pending_age_ms": g.oldest_pending_age_ms,
        "consumers": [{"name": c.name, "pending": c.pending, "idle_ms": c.idle_ms}
                      for c in g.consumers],
    }  # fmt: skip


def dead_shape(d: DeadLetter) -> dict[str, Any]:
    return {
        "ref": d.ref, "group": d.group, "attempts": d.attempts, "failed_ms": d.failed_ms,
        "error": d.error.splitlines()[0] if d.error else "",
        "timer": d.outcome.id if d.outcome else None,
    }  # fmt: skip


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


def schedule_shape(s: ScheduleInfo) -> dict[str, Any]:
    return {
        "name": s.name, "when": s.spec.describe(), "state": s.state, "next_ms": s.next_ms,
        "last_ms": s.last_ms, "fired": s.fired, "missed": s.missed, "skipped": s.skipped,
        "missed_policy": s.spec.missed,
    }  # fmt: skip
