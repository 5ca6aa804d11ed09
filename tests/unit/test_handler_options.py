"""Handlers' options of any value: accepted as given, or an InvalidInput (nothing runs)."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from timer import Handlers, InvalidInput, Outcome

anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
)


def handle(o: Outcome) -> None:
    """A handler that is never run here."""


@given(timeout=anything, kind=st.one_of(st.sampled_from(["expired", "cancelled"]), anything))
def test_handler_timeout_of_any_value(timeout: Any, kind: Any) -> None:
    """A timeout (the runner's default, or one handler's) is None or seconds in
    (0, 86400]; anything else, and any outcome kind but the three, is InvalidInput."""
    good = timeout is None or (
        isinstance(timeout, int | float)
        and not isinstance(timeout, bool)
        and math.isfinite(timeout)
        and 0 < timeout <= 86_400
    )
    try:
        h = Handlers(timeout_s=timeout)
    except InvalidInput:
        assert not good
    else:
        assert good and h.timeout_s == (None if timeout is None else float(timeout))
    h = Handlers()
    try:
        h.add(kind, handle, timeout_s=timeout)
    except InvalidInput:
        assert not good or kind not in ("expired", "cancelled")
    else:
        assert good and h.timeout_of(kind) == (None if timeout is None else float(timeout))
