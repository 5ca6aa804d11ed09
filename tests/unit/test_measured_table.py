"""The *Measured* page's table (docs/measured.md) is the one `python -m benchmarks.table`
renders from the committed `benchmarks/results.json`: one run's figures, nothing copied
by hand."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.table import BEGIN, END, RESULTS, render

PAGE = Path(__file__).resolve().parents[2] / "docs" / "measured.md"


def test_the_measured_page_shows_the_committed_run() -> None:
    """Regenerate with: python -m benchmarks.table, pasted over the marked block."""
    text = PAGE.read_text()
    shown = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert shown == render(json.loads(RESULTS.read_text()))


def test_a_skipped_benchmark_shows_a_dash() -> None:
    """A run without some benchmark (no valgrind: no server_cost) still renders."""
    data = json.loads(RESULTS.read_text())
    data.pop("server_cost", None)
    data.pop("peers", None)
    table = render(data)
    assert "| server instructions a timer" in table and "| — |" in table
