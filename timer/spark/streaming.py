"""Structured Streaming: a ``foreachBatch`` function that schedules each micro-batch."""

from __future__ import annotations

from typing import Any, Unpack

from .writing import ColumnOptions, Report, schedule_timers


class ScheduleSink:
    """A ``foreachBatch`` function scheduling each micro-batch's rows as timers (made by
    :func:`schedule_sink`); ``reports`` holds what each batch it ran did, in order."""

    def __init__(self, url: str, namespace: str, sink_id: str, options: ColumnOptions) -> None:
        self.url, self.namespace, self.sink_id = url, namespace, sink_id
        self.options = options
        self.reports: list[Report] = []

    def run(self, batch_df: Any, batch_id: int) -> Report:
        """Schedule one micro-batch's rows; what it did."""
        report = schedule_timers(
            batch_df, self.url, self.namespace, token=f"{self.sink_id}:{batch_id}", **self.options
        )
        self.reports.append(report)
        return report

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        """As Spark calls it (``foreachBatch`` takes a function that returns nothing)."""
        self.run(batch_df, batch_id)


def schedule_sink(
    url: str, namespace: str = "default", *, sink_id: str = "sink", **options: Unpack[ColumnOptions]
) -> ScheduleSink:
    """A ``foreachBatch`` function scheduling each micro-batch's rows as timers.

    Exactly once in effect: timers are idempotent by id, and a replayed batch uses the
    same origin token (``sink_id`` and the batch id), so it creates nothing new and
    reports the same counts (``ScheduleSink.reports``). ``options`` are those of
    :func:`schedule_timers`.
    """
    return ScheduleSink(url, namespace, sink_id, options)
