"""``python -m timer.worker``: run one worker process until SIGTERM/SIGINT.

The ``tickwheel worker`` command is the friendly face of the same loop; this entry point
needs nothing but the library, so tests can start real worker processes with it.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import sys

from timer import StoreError, TimerClient, TimerError

from .logs import connect_with_retry
from .settings import WorkerSettings, default_worker_id
from .worker import Worker


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m timer.worker", description=__doc__.splitlines()[0])
    p.add_argument("--redis-url", required=True)
    p.add_argument("--namespace", default="default")
    p.add_argument("--id", default=None, help="worker id (default host-pid-random)")
    p.add_argument("--lease-ms", type=int, default=5_000)
    p.add_argument("--horizon-ms", type=int, default=10_000)
    p.add_argument(
        "--outcome-retention-ms",
        type=int,
        default=WorkerSettings.outcome_retention_ms,
        help="trim acked outcomes older than this (0 keeps them forever)",
    )
    p.add_argument(
        "--result-ttl-ms",
        type=int,
        default=WorkerSettings.result_ttl_ms,
        help="keep each fired timer's outcome this long for get, wait and "
        "retried schedules (default 24 h)",
    )
    p.add_argument(
        "--durability",
        default="none",
        help="when the worker's writes count as done: none, aof, replicas:N, "
        "aof+replicas:N (as TimerClient.from_url)",
    )
    p.add_argument(
        "--history-every-ms",
        type=int,
        default=WorkerSettings.history_every_ms,
        help="add what it counted to the per-minute history this often (100 to 60000; "
        "0: never); a kill -9 loses at most this much of it",
    )
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:  # bad settings are refused before any wait for Redis
        settings = WorkerSettings(
            worker_id=args.id or default_worker_id(),
            lease_ms=args.lease_ms,
            horizon_ms=args.horizon_ms,
            outcome_retention_ms=args.outcome_retention_ms,
            result_ttl_ms=args.result_ttl_ms,
            history_every_ms=args.history_every_ms,
        )
        client = connect_with_retry(
            lambda: TimerClient.from_url(
                args.redis_url, args.namespace, durability=args.durability
            ),
            logger=logging.getLogger("worker"),
            what="worker start-up",
        )
        assert client is not None  # only a stop event ends the wait with None
        worker = Worker(client, settings)
        # no namespace, or a server that may evict timers: refused before "ready"
        with contextlib.suppress(StoreError):  # unreachable again: run() waits for it
            worker.prepare()
    except TimerError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1

    print(f"worker {settings.worker_id} ready", file=sys.stderr, flush=True)
    gc.collect()  # start-up's heap out of the collector's reach (as the CLI's steady_heap)
    gc.freeze()
    try:
        worker.run()  # SIGTERM/SIGINT stop it gracefully
    except TimerError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
