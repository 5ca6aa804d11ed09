"""Every pointer to the docs that a user may read (help texts, log messages, errors: the
string literals of timer/, cli/ and worker/) names a page that exists, and a heading on
it where it names one (#56); none points at a README section (they moved to the docs)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POINTER = re.compile(r"docs/([\w./-]+?\.md)(?:#([\w-]+))?")
STALE = re.compile(r"\(README,|see README|README, [A-Z*]")


def strings() -> Iterator[tuple[str, str]]:
    """(where, text) of every string literal in the packages' code."""
    for package in ("timer", "cli", "worker"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    yield f"{path.relative_to(ROOT)}:{node.lineno}", node.value


def slug(heading: str) -> str:
    """A heading's anchor as the docs site makes it (Python-Markdown's toc)."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[-\s]+", "-", text).strip("-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings (outside its code blocks)."""
    out, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out


def test_every_pointer_to_the_docs_names_a_page_and_heading_that_exist() -> None:
    found = 0
    for where, text in strings():
        assert not STALE.search(text), f"{where}: points at the README: {text[:120]!r}"
        for page, anchor in POINTER.findall(text):
            found += 1
            path = ROOT / "docs" / page
            assert path.is_file(), f"{where}: no page docs/{page}"
            if anchor:
                assert anchor in anchors(path), f"{where}: no heading #{anchor} on docs/{page}"
    assert found >= 5  # the help texts and messages do point somewhere


def test_the_slug_is_the_sites() -> None:
    assert slug("Faults of Redis itself, per durability") == "faults-of-redis-itself-per-durability"
    assert slug("At most N at once per key") == "at-most-n-at-once-per-key"
    assert "webhooks" in anchors(ROOT / "docs" / "guides" / "http.md")
