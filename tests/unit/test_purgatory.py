"""DelayedOperationPurgatory: Kafka's DelayedOperationTest."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from timer import DelayedOperation, DelayedOperationPurgatory, InvalidInput
from timer.engine.clock import MONOTONIC


class MockOp(DelayedOperation):
    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.completable = False
        self.completions = 0
        self.expired = threading.Event()
        self.finished = threading.Event()

    def try_complete(self) -> bool:
        return self.force_complete() if self.completable else False

    def on_complete(self) -> None:
        self.completions += 1
        self.finished.set()

    def on_expiration(self) -> None:
        self.expired.set()


@pytest.fixture
def purgatory() -> Iterator[DelayedOperationPurgatory]:
    p = DelayedOperationPurgatory("mock")
    yield p
    p.shutdown()


def test_try_complete_runs_under_the_operation_lock(purgatory: DelayedOperationPurgatory) -> None:
    """try_complete is called with the operation's lock held, never via safe_try_complete."""
    held: list[bool] = []

    class Op(DelayedOperation):
        def try_complete(self) -> bool:
            held.append(self.lock._is_owned())  # type: ignore[attr-defined]
            return False

        def safe_try_complete(self) -> bool:  # pragma: no cover - must not be used
            raise AssertionError("try_complete_else_watch must not use safe_try_complete")

    purgatory.try_complete_else_watch(Op(100_000), ["key"])
    assert held == [True, True]


def test_safe_try_complete_or_else() -> None:
    """The fallback runs only when the first try fails."""
    calls: list[str] = []
    op = MockOp(100_000)
    assert op.safe_try_complete_or_else(lambda: calls.append("watch")) is False
    assert calls == ["watch"]
    op2 = MockOp(100_000)
    op2.completable = True
    assert op2.safe_try_complete_or_else(lambda: calls.append("never")) is True
    assert calls == ["watch"]


def test_request_satisfaction(purgatory: DelayedOperationPurgatory) -> None:
    """Operations complete exactly when their key is checked after they became completable."""
    r1, r2 = MockOp(100_000), MockOp(100_000)
    assert purgatory.check_and_complete("test1") == 0
    assert purgatory.try_complete_else_watch(r1, ["test1"]) is False
    assert purgatory.check_and_complete("test1") == 0
    assert purgatory.try_complete_else_watch(r2, ["test2"]) is False
    assert purgatory.check_and_complete("test2") == 0
    r1.completable = True
    assert purgatory.check_and_complete("test1") == 1
    assert purgatory.check_and_complete("test1") == 0
    r2.completable = True
    assert purgatory.check_and_complete("test2") == 1
    assert purgatory.check_and_complete("test2") == 0
    assert r1.completions == r2.completions == 1


def test_request_expiry(purgatory: DelayedOperationPurgatory) -> None:
    """An unsatisfied operation expires after its delay, not before; others stay pending."""
    start = MONOTONIC.now_ms()  # the engine's own clock (whole ms), as Kafka's test does
    r1, r2 = MockOp(20), MockOp(200_000)
    assert purgatory.try_complete_else_watch(r1, ["test1"]) is False
    assert purgatory.try_complete_else_watch(r2, ["test2"]) is False
    assert r1.expired.wait(10)
    elapsed_ms = MONOTONIC.now_ms() - start
    assert r1.is_completed and not r2.is_completed
    assert elapsed_ms >= 20
    assert r1.completions == 1


def test_completed_in_try_complete_else_watch_is_not_timed(
    purgatory: DelayedOperationPurgatory,
) -> None:
    """An operation completable at once completes there and never enters the timer."""
    op = MockOp(100_000)
    op.completable = True
    assert purgatory.try_complete_else_watch(op, ["k"]) is True
    assert purgatory.num_delayed == 0 and op.completions == 1


def test_request_purge(purgatory: DelayedOperationPurgatory) -> None:
    """Completed operations leave the timer at once and a watch list when its key is checked."""
    r1, r2, r3 = MockOp(100_000), MockOp(100_000), MockOp(100_000)
    purgatory.try_complete_else_watch(r1, ["test1"])
    purgatory.try_complete_else_watch(r2, ["test1", "test2"])
    purgatory.try_complete_else_watch(r3, ["test1", "test2", "test3"])
    assert purgatory.num_delayed == 3
    assert purgatory.watched == 6

    r2.completable = True
    r2.try_complete()
    assert purgatory.num_delayed == 2
    r3.completable = True
    r3.try_complete()
    assert purgatory.num_delayed == 1

    purgatory.check_and_complete("test1")
    assert purgatory.watched == 4
    purgatory.check_and_complete("test2")
    assert purgatory.watched == 2
    purgatory.check_and_complete("test3")
    assert purgatory.watched == 1
    assert purgatory.keys == 1  # emptied keys are dropped: no leak


def test_purge_interval_sweeps_all_watch_lists() -> None:
    """Past purge_interval completed ops, the reaper drops them from every watch list."""
    p = DelayedOperationPurgatory("purge", purge_interval=2, reaper_enabled=False)
    try:
        ops = [MockOp(100_000) for _ in range(5)]
        for i, op in enumerate(ops):
            p.try_complete_else_watch(op, [f"k{i}", "shared"])
        for op in ops[:4]:
            op.completable = True
            op.try_complete()
        assert p.watched == 10
        p.advance_clock(0)
        assert p.watched == 2 and p.keys == 2
    finally:
        p.shutdown()


def test_cancel_for_key_returns_cancelled_operations(
    purgatory: DelayedOperationPurgatory,
) -> None:
    """cancel_for_key cancels and returns that key's operations, and forgets the key."""
    purgatory.try_complete_else_watch(MockOp(10_000), ["test1"])
    purgatory.try_complete_else_watch(MockOp(10_000), ["test1"])
    purgatory.try_complete_else_watch(MockOp(10_000), ["test2"])
    cancelled = purgatory.cancel_for_key("test1")
    assert len(cancelled) == 2
    assert purgatory.num_delayed == 1
    assert purgatory.watched == 1


def test_cancel_for_unknown_key_is_empty(purgatory: DelayedOperationPurgatory) -> None:
    """cancel_for_key of a key nobody watches returns an empty list."""
    assert purgatory.cancel_for_key("nobody") == []


def test_watch_needs_a_key(purgatory: DelayedOperationPurgatory) -> None:
    """Watching under no key at all is a clear error."""
    with pytest.raises(InvalidInput, match="at least one key"):
        purgatory.try_complete_else_watch(MockOp(1_000), [])


def test_force_complete_has_one_winner() -> None:
    """Of many threads racing force_complete, exactly one wins and on_complete runs once."""
    op = MockOp(100_000)
    barrier = threading.Barrier(16)
    wins: list[bool] = []

    def race() -> None:
        barrier.wait()
        wins.append(op.force_complete())

    threads = [threading.Thread(target=race) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wins.count(True) == 1 and op.completions == 1


def test_try_complete_with_many_threads_loses_no_wake_up(
    purgatory: DelayedOperationPurgatory,
) -> None:
    """Completions raced from 20 threads never miss: every operation ends completed."""
    rng = random.Random(7)
    attempts = 20

    class RacyOp(MockOp):
        def __init__(self, index: int) -> None:
            super().__init__(10_000)
            self.key = f"key{index}"
            self.remaining = attempts
            self.counter_lock = threading.Lock()

        def try_complete(self) -> bool:
            should = self.completable
            time.sleep(rng.random() * 0.002)  # widen the race window, as Kafka's test does
            return self.force_complete() if should else False

    ops = [RacyOp(i) for i in range(100)]
    for op in ops:
        purgatory.try_complete_else_watch(op, [op.key])

    def attempt(op: RacyOp) -> None:
        with op.counter_lock:
            op.remaining -= 1
            if op.remaining == 0:
                op.completable = True
        purgatory.check_and_complete(op.key)

    work = [op for _ in range(attempts) for op in ops]
    rng.shuffle(work)
    with ThreadPoolExecutor(20) as pool:
        list(pool.map(attempt, work))
    assert all(op.is_completed for op in ops)
    assert all(op.completions == 1 for op in ops)
    assert not any(op.expired.is_set() for op in ops)
