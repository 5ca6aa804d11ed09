"""Repeated warnings (a Redis outage) are logged once per interval, with a count."""

from __future__ import annotations

import logging

import pytest

from timer.worker.logs import RateLimitedLog


def test_repeats_are_counted_not_printed(caplog: pytest.LogCaptureFixture) -> None:
    """A warning repeated 100 times within 3 s is printed once; the next interval says
    how many were held back."""
    now = [0.0]
    log = RateLimitedLog(logging.getLogger("t"), every_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="t"):
        for _ in range(100):
            log.warning("redis down: %s", "refused")
            now[0] += 0.03
        assert len(caplog.records) == 1
        now[0] = 12.0
        assert log.warning("redis down: %s", "refused") is True
        log.warning("another: %s", "x")  # another message has its own interval
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "redis down: refused",
        "redis down: refused (and 99 more like it in the last 12s)",
        "another: x",
    ]
