"""The worker's pub/sub listener says a lost connection is a warning only while the worker
is meant to run."""

from __future__ import annotations

import logging
import warnings

import pytest
import redis

from tests.conftest import wait_for
from timer.clock import SYSTEM_TIME
from timer.durable.model.models import DurabilityWarning
from timer.testing.store import FakeStore
from timer.worker import Worker
from timer.worker.settings import WorkerSettings


def refused_listener(stopped: bool) -> tuple[Worker, list[int]]:
    """A worker (stopped if ``stopped``) whose listener's server refuses connections."""
    store = FakeStore(SYSTEM_TIME)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DurabilityWarning)
        store.timer_client("t").init(shards=1)
        worker = Worker(store.timer_client("t"), WorkerSettings(worker_id="w1"))
    tries: list[int] = []

    def refused() -> object:
        tries.append(1)
        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    worker.events._new_pubsub = refused  # type: ignore[assignment]
    if stopped:
        worker.stop()
    worker.events.want({"events-channel"})
    return worker, tries


@pytest.mark.parametrize("stopped", [False, True])
def test_a_lost_connection_warns_unless_the_worker_is_stopping(
    stopped: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker told to stop (SIGTERM) whose server goes away first (a README tour's
    `kill %1` then `server stop`) logs no WARNING that its pub/sub connection was lost
    (it printed "pub/sub connection lost (Error 111 …); reconnecting" one tour in six);
    a running worker still warns."""
    worker, tries = refused_listener(stopped)
    with caplog.at_level(logging.INFO, logger="worker.events"):
        worker.events.start()
        try:
            wait_for(lambda: len(tries) >= 2, what="two tries to connect")
        finally:
            worker.events.stop()
            worker.close()
    lost = [r for r in caplog.records if "connection lost" in r.getMessage()]
    assert lost, caplog.text
    levels = {r.levelno for r in lost}
    assert levels == ({logging.INFO} if stopped else {logging.WARNING}), caplog.text
