"""What a schedule's spec, taken as given, does not do as it reads: an end already past
(it never fires), a zero catch-up window (no missed occurrence is ever fired), a group
with ``overlap="allow"`` (waited for by nothing), a zone given to an interval (it moves
nothing). Each is kept, as earlier releases kept it (a script giving it works as it did),
and said by every door: the CLI's warnings, the HTTP API's and the dashboard's
``warnings`` field, each naming the fields in its caller's words (``--end``, ``end``)."""

from __future__ import annotations

from ...errors import InvalidInput, instant_text
from .records import ScheduleSpec


def advice(spec: ScheduleSpec, name: str, now_ms: int) -> list[InvalidInput]:
    """The warnings of ``spec`` (of schedule ``name``) at ``now_ms``: each an error made
    by :meth:`InvalidInput.about`, never raised, so a door names its fields
    (:meth:`~timer.errors.TimerError.naming`) and says it."""
    r, said = spec.recurrence, []
    if r.end_ms is not None and r.end_ms <= now_ms:
        said.append(
            InvalidInput.about(
                f"{{0:{instant_text(r.end_ms)}}} is in the past, so schedule {{name}} never fires",
                "end",
                name=name,
            )
        )
    if spec.catch_up_ms == 0 and spec.missed != "skip":
        said.append(
            InvalidInput.about(
                f"{{0:0s}}: no missed occurrence is ever fired, so {{1:{spec.missed}}} works as "
                "skip; give a window (e.g. {0:1h}) or say {1:skip}",
                "catch_up",
                "missed",
            )
        )
    if spec.group is not None and spec.overlap == "allow":
        said.append(
            InvalidInput.about(
                "{0} {group} does nothing with {1:allow} (the default): each occurrence "
                "fires whatever that group has handled; give {1:skip} or {1:buffer-one} to "
                "wait for it",
                "group",
                "overlap",
                group=spec.group,
            )
        )
    if r.every_ms is not None and r.tz not in ("UTC", "Etc/UTC"):
        said.append(
            InvalidInput.about(
                f"{{0:{r.tz}}} applies to {{1}} schedules only: an {{2}} schedule counts "
                "from its {3} (else from 1970-01-01T00:00:00Z) in absolute time, whatever "
                "the zone",
                "tz",
                "cron",
                "every",
                "start",
            )
        )
    return said
