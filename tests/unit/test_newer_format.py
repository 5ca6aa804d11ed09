"""A namespace a newer tickwheel wrote: the hint says how to upgrade."""

from __future__ import annotations

import pytest

from timer.durable.model.codec import FORMAT_VERSION
from timer.durable.model.namespace import meta_from
from timer.errors import ConfigError


def test_a_newer_data_format_says_to_upgrade_from_a_wheel_first() -> None:
    """The hint said only `pip install . in a newer checkout of its source`: one who
    installed a wheel has no checkout. It names a newer release's wheel first (tickwheel is
    not published on PyPI, so not `pip install -U tickwheel`), then the checkout."""
    stored = {b"version": str(FORMAT_VERSION + 1).encode(), b"shards": b"4", b"bucket_ms": b"100"}
    with pytest.raises(ConfigError) as error:
        meta_from(stored, "billing", "redis://h:1/0")
    assert str(error.value) == (
        f'namespace "billing" at redis://h:1/0 holds data format {FORMAT_VERSION + 1}, '
        f"written by a newer tickwheel; this one reads format {FORMAT_VERSION}: upgrade "
        "tickwheel: give pip the wheel of a newer release, or pip install . in a newer "
        "checkout of its source"
    )
