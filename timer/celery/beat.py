"""``celery beat -S timer.celery:Scheduler``: beat's entries kept as tickwheel schedules,
fired by the workers and sent by a :func:`~timer.celery.sender` runner."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from celery import Celery, beat
from celery.schedules import crontab
from celery.schedules import schedule as every_schedule

from ..client import TimerClient
from ..durable.schedules.records import ScheduleSpec
from ..errors import DuplicateTimer, InvalidInput
from .sending import KEY, PREFIX, task_call

log = logging.getLogger("timer.celery")


def schedule_spec(entry_schedule: object, app: Celery) -> dict[str, Any]:
    """A beat entry's schedule as tickwheel's ``cron``/``tz`` or ``every`` (ms)."""
    if isinstance(entry_schedule, crontab):
        c = entry_schedule
        cron = " ".join(
            str(part)
            for part in (
                c._orig_minute,
                c._orig_hour,
                c._orig_day_of_month,
                c._orig_month_of_year,
                c._orig_day_of_week,
            )
        )
        return {"cron": cron, "tz": str(c.tz or app.timezone)}
    if isinstance(entry_schedule, every_schedule):
        ms = round(entry_schedule.run_every.total_seconds() * 1000)
        return {"every": ms}
    raise InvalidInput(
        f"a beat entry's schedule must be a crontab, a number of seconds or a timedelta "
        f"for tickwheel, got {entry_schedule!r}"
    )


class Scheduler(beat.Scheduler):  # type: ignore[misc]
    """``celery beat -S timer.celery:Scheduler``: the app's beat entries kept as tickwheel
    schedules named ``celery.<entry>``, which the workers fire (each occurrence once,
    fenced) and a :func:`sender` runner sends. The beat sends nothing itself, so any
    number of beats may run, and killing one loses nothing.

    Its conf: ``tickwheel_url`` (else ``$TICKWHEEL_REDIS_URL``) and
    ``tickwheel_namespace`` (default ``celery``). A ``celery.`` schedule whose entry
    is gone from the conf is deleted.
    """

    def __init__(self, app: Celery, *args: Any, **kwargs: Any) -> None:
        self._client: TimerClient | None = None
        super().__init__(app, *args, **kwargs)

    @property
    def client(self) -> TimerClient:
        if self._client is None:
            # tickwheel_url, else what from_url() finds (the environment's, else the
            # running embedded server), as the client and the CLI do
            url = self.app.conf.get("tickwheel_url") or None
            namespace = self.app.conf.get("tickwheel_namespace") or "celery"
            self._client = TimerClient.from_url(url, namespace)
        return self._client

    def setup_schedule(self) -> None:
        super().setup_schedule()
        self.sync_schedules()

    def sync_schedules(self) -> None:
        """Create, change or delete tickwheel schedules until they match the entries."""
        schedules = self.client.schedules
        wanted = {}
        for name, entry in self.schedule.items():
            spec = schedule_spec(entry.schedule, self.app)
            call = task_call(entry.task, entry.args, entry.kwargs, entry.options)
            wanted[PREFIX + name] = (spec, {KEY: call})
        for name, (spec, payload) in wanted.items():
            info = schedules.get(name)
            if info is None:
                with contextlib.suppress(DuplicateTimer):  # another beat made it first
                    schedules.create(name, payload=payload, **spec)
                    log.info("beat: schedule %s created", name)
                continue
            if info.payload != payload or info.spec != ScheduleSpec.of(**spec):
                schedules.update(name, payload=payload, **spec)
                log.info("beat: schedule %s updated", name)
        for info in schedules.list():
            if info.name.startswith(PREFIX) and info.name not in wanted:
                schedules.delete(info.name)
                log.info("beat: schedule %s deleted (no such entry)", info.name)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Nothing to send: the workers fire the schedules. Look again later."""
        return float(self.max_interval)

    def close(self) -> None:
        super().close()
        if self._client is not None:
            self._client.close()
            self._client = None

    @property
    def info(self) -> str:
        return f"    . tickwheel schedules: {PREFIX}* in namespace {self.client.namespace}"
