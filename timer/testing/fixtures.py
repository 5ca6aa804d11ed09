"""pytest fixtures for your tests: add ``pytest_plugins = ["timer.testing.fixtures"]`` to
your ``conftest.py`` (needs ``pip install '.[testing]'`` from the checkout)::

    def test_a_timeout(time_skipping):
        time_skipping.client.schedule("job:{1}", delay_ms=60_000)
        time_skipping.advance(60)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .skipping import TimeSkipping

__all__ = ["time_skipping"]


@pytest.fixture
def time_skipping() -> Iterator[TimeSkipping]:
    """A :class:`~timer.testing.TimeSkipping` of namespace ``test`` (4 shards), closed
    after the test."""
    with TimeSkipping() as env:
        yield env
