"""Django's Tasks framework on tickwheel: ``enqueue`` and ``run_after`` are durable
timers, and a ``tickwheel handle`` runner executes the task functions.

::

    # settings.py
    TASKS = {
        "default": {
            "BACKEND": "timer.django.TickwheelBackend",
            # no URL: $TICKWHEEL_REDIS_URL, else your running embedded server
            "OPTIONS": {"URL": "redis://localhost:6379/0", "NAMESPACE": "django"},
        }
    }

    # anywhere
    result = send_report.using(run_after=tomorrow_9am).enqueue(user_id=7)
    send_report.get_result(result.id).status       # READY, RUNNING, SUCCESSFUL, FAILED

and the runner, with the project's settings (it calls ``django.setup()``)::

    DJANGO_SETTINGS_MODULE=proj.settings tickwheel --namespace django \\
        handle timer.django.runner:handlers

Django 6's own ``django.tasks`` is used where it is installed, else the ``django-tasks``
backport (the same API; Django 5.2 and Python 3.11, where this is tested). A task runs
at least once: a runner killed while it runs makes another run it again (its
``attempts`` and ``worker_ids`` say so). A result is kept ``RESULT_TTL`` seconds (24 h).
Install with ``pip install '.[django]'`` from the checkout.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import threading
import traceback
import uuid
from typing import Any

import msgpack

from ..errors import install_line

try:  # Django 6's own tasks framework
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:
    try:  # the backport, for Django 4.2 to 5.2
        from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskError
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
    except ImportError as exc:  # pragma: no cover - the message is the point
        raise ImportError(
            "timer.django needs Django 6's tasks framework or the django-tasks backport: "
            f"{install_line('django')}"
        ) from exc

from django.utils.module_loading import import_string

from ..client import TimerClient
from ..durable.model.keys import check_name, shard_of
from ..durable.model.steps import Command, Op
from ..errors import ConfigError
from ..redis.local_server import default_url

KEY = "django"  # a task's timer payload: {"django": {"task", "args", "kwargs", ...}}
DEFAULT_RESULT_TTL_S = 24 * 3600

__all__ = ["TickwheelBackend", "task_backends"]


def _ms(at: dt.datetime | None) -> int | None:
    return None if at is None else round(at.timestamp() * 1000)


def _at(ms: int | None) -> dt.datetime | None:
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def _now_ms() -> int:
    return round(dt.datetime.now(dt.UTC).timestamp() * 1000)


# A result's reads and writes are operations the client's driver runs, like every other
# call: on a cluster they follow a moved slot and a failover, and an error is a TimerError.
def _get(key: str) -> Op[bytes | None]:
    reply = yield Command("get", (key,))
    return None if reply is None else bytes(reply)


def _set(key: str, value: bytes, ttl_ms: int) -> Op[None]:
    yield Command("set", (key, value), {"px": ttl_ms})


class TickwheelBackend(BaseTaskBackend):  # type: ignore[misc]
    """A Django Tasks backend whose tasks wait as tickwheel timers.

    OPTIONS: ``URL`` (else ``$TICKWHEEL_REDIS_URL``, else your running embedded server,
    as ``TimerClient.from_url()`` and the CLI find Redis), ``NAMESPACE`` (``django``; made
    by ``tickwheel init``), ``RESULT_TTL`` (seconds a result is kept, 24 h).
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # None: found when the client is first made, as TimerClient.from_url() does
        self.url: str | None = self.options.get("URL") or None
        self.namespace = self.options.get("NAMESPACE", "django")
        ttl = self.options.get("RESULT_TTL", DEFAULT_RESULT_TTL_S)
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 1:
            raise ConfigError(
                f"TASKS[{alias!r}]['OPTIONS']['RESULT_TTL'] is whole seconds >= 1, got {ttl!r}"
            )
        self.result_ttl_ms = ttl * 1000
        self.worker_id = f"{socket.gethostname()}-{os.getpid()}"
        self._client: TimerClient | None = None
        self._lock = threading.Lock()

    @property
    def client(self) -> TimerClient:
        with self._lock:
            if self._client is None:
                url = self.url
                if url is None:  # $TICKWHEEL_REDIS_URL, else the embedded server
                    try:
                        url = default_url()
                    except ConfigError as exc:
                        raise ConfigError(
                            f"TASKS[{self.alias!r}] has no OPTIONS['URL']: {exc}"
                        ) from None
                self._client = TimerClient.from_url(url, self.namespace)
            return self._client

    # -- enqueue ---------------------------------------------------------------------------

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Keep the call as a timer due at ``run_after`` (else now). Everything is checked
        before anything is written: the task (Django's checks) and its arguments (JSON)."""
        self.validate_task(task)
        # TaskResult makes the arguments JSON: a TypeError here, before anything is written
        result = TaskResult(
            task=task,
            id=uuid.uuid4().hex,
            status=TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        body = {
            "task": task.module_path,
            "args": result.args,
            "kwargs": result.kwargs,
            "queue": task.queue_name,
            "context": task.takes_context,
            "backend": self.alias,
        }
        payload = {KEY: body}
        if task.run_after is None:
            self.client.schedule(result.id, 0, payload=payload)
        else:
            self.client.schedule(result.id, deadline_ms=_ms(task.run_after), payload=payload)
        object.__setattr__(result, "enqueued_at", _at(_now_ms()))
        task_enqueued.send(type(self), task_result=result)
        return result

    # -- results ---------------------------------------------------------------------------

    def _key(self, result_id: str) -> str:
        client = self.client
        return client.keys.shard(shard_of(result_id, client.meta.shards)).task_result(result_id)

    def _record(self, result_id: str) -> dict[str, Any] | None:
        raw = self.client._run(_get(self._key(result_id)))
        return None if raw is None else dict(msgpack.unpackb(raw, raw=False))

    def _save(self, result_id: str, record: dict[str, Any]) -> None:
        self.client._run(_set(self._key(result_id), msgpack.packb(record), self.result_ttl_ms))

    def get_result(self, result_id: str) -> TaskResult:
        """The task's result: READY until a runner starts it, then RUNNING, then
        SUCCESSFUL (with its return value) or FAILED (with its errors)."""
        try:
            check_name("result id", result_id)
        except Exception as exc:
            raise TaskResultDoesNotExist(str(exc)) from None
        record = self._record(result_id)
        if record is None:
            info = self.client.get(result_id)
            if info is None or not isinstance(info.payload, dict) or KEY not in info.payload:
                raise TaskResultDoesNotExist(result_id)
            body = info.payload[KEY]
            waiting = info.state in ("pending", "expired")  # not yet started by a runner
            status = TaskResultStatus.READY if waiting else TaskResultStatus.FAILED
            record = {
                "s": str(status),
                "t": body["task"],
                "a": body["args"],
                "k": body["kwargs"],
                "e": info.created_ms,
                "w": [],
                "x": [],
            }
        return self._result(result_id, record)

    def _result(self, result_id: str, record: dict[str, Any]) -> TaskResult:
        try:
            task = import_string(record["t"])
        except ImportError:
            raise TaskResultDoesNotExist(
                f"{result_id}: its task {record['t']!r} is no longer importable"
            ) from None
        result = TaskResult(
            task=task,
            id=result_id,
            status=TaskResultStatus(record["s"]),
            enqueued_at=_at(record.get("e")),
            started_at=_at(record.get("st")),
            finished_at=_at(record.get("f")),
            last_attempted_at=_at(record.get("la")),
            args=record["a"],
            kwargs=record["k"],
            backend=self.alias,
            errors=[TaskError(exception_class_path=p, traceback=tb) for p, tb in record["x"]],
            worker_ids=list(record.get("w", [])),
        )
        object.__setattr__(result, "_return_value", record.get("r"))
        return result

    # -- running (the runner: timer.django.runner) -------------------------------------------

    def run(
        self, result_id: str, body: dict[str, Any], enqueued_ms: int | None = None
    ) -> TaskResult:
        """Run one task (a runner's handler calls it): RUNNING, then its outcome, each
        written before the next step, so a runner killed half-way leaves RUNNING and the
        next attempt (the outcome redelivered) adds itself to ``worker_ids``."""
        record = self._record(result_id) or {
            "t": body["task"],
            "a": body["args"],
            "k": body["kwargs"],
            "w": [],
            "x": [],
        }
        now = _now_ms()
        record.setdefault("e", enqueued_ms or now)  # the timer's creation (Redis ms)
        record.setdefault("st", now)
        record.update(s=str(TaskResultStatus.RUNNING), la=now)
        record["w"] = [*record.get("w", []), self.worker_id]
        self._save(result_id, record)
        result = self._result(result_id, record)
        task_started.send(type(self), task_result=result)
        try:
            if body.get("context"):
                value = result.task.call(
                    TaskContext(task_result=result), *result.args, **result.kwargs
                )
            else:
                value = result.task.call(*result.args, **result.kwargs)
            record.update(s=str(TaskResultStatus.SUCCESSFUL), r=json.loads(json.dumps(value)))
        except Exception as exc:  # the task's failure is its result, not the runner's
            path = f"{type(exc).__module__}.{type(exc).__qualname__}"
            record["x"] = [*record.get("x", []), [path, traceback.format_exc()]]
            record["s"] = str(TaskResultStatus.FAILED)
            # inside the except, as Django's own backends do: task_finished's receiver
            # logs a failure with logger.exception, which takes the active exception
            return self._finish(result_id, record)
        return self._finish(result_id, record)

    def _finish(self, result_id: str, record: dict[str, Any]) -> TaskResult:
        """Write the task's outcome, then send ``task_finished`` with it."""
        record["f"] = _now_ms()
        self._save(result_id, record)
        result = self._result(result_id, record)
        task_finished.send(type(self), task_result=result)
        return result

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
