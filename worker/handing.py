"""Fire and handle in one process: a worker whose fire calls read the outcomes they
decide for a ``Handlers`` running beside it.

A worker and a separate runner take two hops from a deadline to a handler: the fire
call writes the outcome, then the runner, woken from its blocking read, reads it. Here
the fire call itself reads the new outcomes into this runner's pending list
(``fire.lua``'s hand: ``XREADGROUP`` in the same atomic step), and their handlers start
the moment it answers, on the firer's thread. Nothing else changes: they are in the
group's pending list as a read's would be, so they are touched while they run,
acknowledged after they return, retried, dead-lettered, held to their key's limit; a
crash of this process leaves them to the group's claims (``reclaim_idle_ms``), and the
worker's shards to the others (its lease). The runner reads the streams as any runner
does too: retries, claims, and the outcomes of shards other workers lead. It is handed
only as many as its own read would take (its room, read-ahead included); the rest stay
in the streams for every reader.
"""

from __future__ import annotations

import logging

from timer import TimerClient
from timer.errors import TimerError
from timer.handlers import Handlers
from timer.handlers.loop import READ_AHEAD

from .settings import WorkerSettings
from .worker import Worker

log = logging.getLogger("worker")
START_TIMEOUT_S = 60.0  # the handlers' start (their group made on every shard) at most


def fire_and_handle(
    client: TimerClient,
    handlers: Handlers,
    settings: WorkerSettings | None = None,
    *,
    concurrency: int = 8,
    drain_timeout_s: float = 30.0,
    start: str = "0",
    read_ahead: int = READ_AHEAD,
    handle_signals: bool | None = None,
) -> bool:
    """Run a worker and ``handlers`` in this process until stopped (SIGTERM/SIGINT on
    the main thread, or ``handlers.stop()``), the outcomes its fire calls decide
    handed to the handlers at once. The worker stops first (its shards released), then
    the handlers drain. True if every handler that started finished and was settled.
    ``concurrency``, ``drain_timeout_s``, ``start`` and ``read_ahead`` are
    :meth:`Handlers.run`'s."""
    worker = Worker(client, settings, hand_to=handlers.hand_off)
    outcome: list[bool] = []
    failure: list[BaseException] = []

    def run_handlers() -> None:
        try:
            outcome.append(
                handlers.run(
                    client,
                    concurrency=concurrency,
                    drain_timeout_s=drain_timeout_s,
                    start=start,
                    read_ahead=read_ahead,
                )
            )
        except BaseException as exc:  # given to the caller's thread below
            failure.append(exc)
        finally:
            worker.stop()  # the handlers stopped (or never started): so does the worker

    clock = worker.time
    runner = clock.thread(run_handlers, name="handlers")
    runner.start()
    deadline = clock.monotonic() + START_TIMEOUT_S
    while handlers.hand_off() is None and runner.is_alive():
        if clock.monotonic() > deadline:
            handlers.stop()
            raise TimerError(f"the handlers did not start within {START_TIMEOUT_S:g}s")
        runner.join(0.01)  # until its loop is up: the worker's first fire may hand to it
    try:
        if runner.is_alive():
            worker.run(handle_signals=handle_signals)
    finally:
        worker.stop()
        handlers.stop()
        runner.join()
    if failure:
        raise failure[0]
    log.info("worker %s and consumer %s stopped", worker.id, handlers.consumer)
    return bool(outcome and outcome[0])
