"""A guide's steps, in the order it gives them, work on a reader's own fresh server (#75)."""

from __future__ import annotations

import re

from .examples import ROOT


def test_the_http_guide_initialises_the_namespace_before_it_serves() -> None:
    """Its setup went from `tokens create` to `serve --port 8000`, which on a server
    where `default` was never initialised (the tour keeps to a server of its own) exits
    4 at once: the curl lines after it then found nothing listening."""
    setup = (ROOT / "docs/guides/http.md").read_text().split("```", 1)[0]
    steps = re.findall(r"`(tickwheel (?:init|tokens create|serve --port))", setup)
    assert "tickwheel init" in steps, steps
    assert steps.index("tickwheel init") < steps.index("tickwheel serve --port"), steps
