"""pytest fixtures for your tests: add ``pytest_plugins = ["timer.testing.fixtures"]`` to
your ``conftest.py`` (needs ``pip install '.[testing]'`` from the checkout)::

    def test_a_timeout(time_skipping):
        time_skipping.client.schedule("job:{1}", delay_ms=60_000)
        time_skipping.advance(60)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..errors import install_line

try:
    from .skipping import TimeSkipping
except ImportError as exc:  # a bare "No module named 'fakeredis'" said nothing to do
    raise ImportError(
        f"timer.testing.fixtures needs the testing extra: {install_line('testing')}"
    ) from exc

__all__ = ["time_skipping"]


@pytest.fixture
def time_skipping() -> Iterator[TimeSkipping]:
    """A :class:`~timer.testing.TimeSkipping` of namespace ``test`` (4 shards), closed
    after the test."""
    with TimeSkipping() as env:
        yield env
