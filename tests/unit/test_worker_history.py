"""What a worker's history writer sends out of turn (on a drop, on stop), with a client
that records or refuses the additions: no Redis needed."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from timer.errors import StoreError
from timer.worker.context import WorkerContext
from timer.worker.history import HistoryWriter
from timer.worker.settings import WorkerSettings


class Recording:
    """The one client call the writer makes: recorded, or refused while ``down``."""

    def __init__(self) -> None:
        self.added: list[dict[str, int]] = []
        self.calls = 0
        self.down = False

    def add_history(self, counts: Mapping[str, int], gauges: Mapping[str, int]) -> None:
        self.calls += 1
        if self.down:
            raise StoreError("connection refused")
        self.added.append({k: n for k, n in counts.items() if n})  # as add() writes


@pytest.fixture
def writer() -> Iterator[tuple[HistoryWriter, Recording]]:
    client = Recording()
    ctx = WorkerContext(client, WorkerSettings(worker_id="u"), "u")  # type: ignore[arg-type]
    yield HistoryWriter(ctx), client
    ctx.timer.close()
    ctx.raised.close()


def test_a_drop_sends_only_what_is_new(writer: tuple[HistoryWriter, Recording]) -> None:
    """Nothing new counted: no write (16 shards dropped on stop are one write, not 16)."""
    w, client = writer
    w.ctx.stats.fired = 3
    w.flush_now("a lease lost")
    w.flush_now("a shard released")
    assert client.added == [{"expired": 3}]


def test_after_a_failed_send_only_the_stop_tries_again(
    writer: tuple[HistoryWriter, Recording],
) -> None:
    """Redis unreachable: the first drop's write fails (logged, not raised); the other
    drops do not wait on Redis again; the stop's write tries, and sends it all once."""
    w, client = writer
    client.down = True
    w.ctx.stats.fired = 2
    w.flush_now("a lease lost")
    w.ctx.stats.swept = 1
    w.flush_now("a lease lost")
    w.flush_now("a lease lost")
    assert client.calls == 1 and client.added == []
    client.down = False
    w.flush_now("stopping", last=True)
    assert client.added == [{"expired": 3}]
