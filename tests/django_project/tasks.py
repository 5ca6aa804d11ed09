"""The test project's tasks. Each counts its runs in Redis database 1 of the tests' server
(``django:runs``: task name and first argument -> runs), outside tickwheel's keys."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import redis
from django_tasks import TaskContext, task


def _count(name: str) -> None:
    url = os.environ["TICKWHEEL_REDIS_URL"].rsplit("/", 1)[0] + "/1"
    r = redis.Redis.from_url(url)
    r.hincrby("django:runs", name, 1)
    r.close()


@task
def add(x: int, y: int) -> int:
    _count(f"add:{x}")
    return x + y


@task
def fails(what: str) -> None:
    _count(f"fails:{what}")
    raise ValueError(f"{what} failed, as it should")


@task(takes_context=True)
def attempt(context: TaskContext, what: str) -> dict[str, Any]:
    _count(f"attempt:{what}")
    return {"attempt": context.attempt, "id": context.task_result.id}


@task
def held(what: str, hold: str) -> str:
    """Runs while the file ``hold`` exists (a test kills its runner meanwhile)."""
    _count(f"held:{what}")
    while Path(hold).exists():
        time.sleep(0.01)  # the task's own work, held by the test
    return what


@task
def echo(value: Any) -> Any:
    """Returns its argument and counts nothing (for a server without database 1: a
    cluster)."""
    return value
