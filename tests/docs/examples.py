"""The docs' examples as the test suite runs them (#42): every Python and shell block of
the README and of each page of docs/.

A page's Python blocks run in order, in one namespace, as one reader would paste them,
with ``TICKWHEEL_REDIS_URL`` naming a real server whose namespace ``default`` is
initialised (as the guides assume: ``tickwheel init``). A block that another test runs
as written, or that is not a program, says so on the line before it::

    <!-- example: tests/cli/test_readme.py::test_readme_tour_runs -->
    <!-- example: excerpt of timer/durable/timers/ops.py -->

and that claim is checked: the test exists and reads this page; the excerpt's lines are
in the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from timer import TimerClient

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
CLAIM = re.compile(r"<!-- example: (.+?) -->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    lang: str
    code: str
    line: int  # where the block starts on its page (1-based)
    claim: str | None  # who runs it instead, or what it is an excerpt of

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """The README and every page of the site."""
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md") if "_hooks" not in p.parts)
    return [ROOT / "README.md", *docs]


def blocks(page: Path, langs: tuple[str, ...] = ("python", "sh")) -> list[Block]:
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        if m.group(1) not in langs:
            continue
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        claim = CLAIM.search(before)
        line = text.count("\n", 0, m.start()) + 1
        out.append(Block(page, m.group(1), m.group(2), line, claim and claim.group(1)))
    return out


def check_claim(block: Block) -> None:
    """A block run elsewhere names a test that exists and reads this page; an excerpt's
    lines are all in the file it names."""
    assert block.claim is not None
    excerpt = re.fullmatch(r"excerpt of (\S+)", block.claim)
    if excerpt:
        source = (ROOT / excerpt.group(1)).read_text()
        for line in block.code.splitlines():
            assert line.strip() in source, f"{block.where}: not in {excerpt.group(1)}: {line}"
        return
    m = re.fullmatch(r"(tests/[\w/]+\.py|\.ci/\w+)(?:::(\w+))?", block.claim)
    assert m, f"{block.where}: a claim is a test (tests/x.py::name) or an excerpt"
    source = (ROOT / m.group(1)).read_text()
    if m.group(2):
        assert f"def {m.group(2)}(" in source, f"{block.where}: no test {block.claim}"
    page = block.page.relative_to(ROOT)
    named = [str(page), page.name] if page.name == "README.md" else [page.name, page.stem]
    quoted = [f'"{n}"' for n in named]  # a test reads the page by name
    if m.group(1).startswith(".ci/"):  # a shell script names it bare
        quoted = [f"/{n}" for n in named]
    assert any(q in source for q in quoted), f"{block.where}: {m.group(1)} does not read {page}"


def run_python(page: Path, scope: dict[str, object] | None = None) -> int:
    """Run the page's Python blocks in order in one namespace; how many ran."""
    scope = {} if scope is None else scope
    scope.setdefault("__name__", "__docs__")
    ran = 0
    for block in blocks(page, ("python",)):
        if block.claim is not None:
            check_claim(block)
            continue
        code = compile(block.code, block.where, "exec")
        exec(code, scope)  # the docs' own examples, run as a reader would
        ran += 1
    for value in scope.values():  # a page's clients end with the reader's process; here
        if isinstance(value, TimerClient):  # the next test's garbage collection would
            value.close()  # report their sockets (ResourceWarning, an error)
    return ran
