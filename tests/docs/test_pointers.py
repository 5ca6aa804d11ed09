"""What a user reads from the code (help texts, log messages, errors: the string literals
of timer/, cli/ and worker/, and the docstrings click shows as help) points at pages of
the published documentation site, never at a file of the repository: a wheel has no
docs/ (#75). Every such address names a page that exists, and a heading on it where it
names one; none points at a README section (#56). tests/docs/test_site.py resolves the
same addresses against the built site."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
# the published site (mkdocs.yml's site_url unless TICKWHEEL_DOCS_URL says otherwise)
SITE = "https://tickwheel.readthedocs.io/"
POINTER = re.compile(re.escape(SITE) + r"([\w/-]*?)(?:#([\w-]+))?(?=[\s).,;:]|$)")
REPO_PATH = re.compile(
    r"\b(?:docs|examples|tests|tools|benchmarks|sim)/[\w./-]+|\b[\w-]+\.md\b|\bREADME\b"
)
STALE = re.compile(r"\(README,|see README|README, [A-Z*]")


def strings() -> Iterator[tuple[str, str]]:
    """(where, text) of every string a user may read: the package's string literals,
    docstrings included (click shows a command's as its help, and `help()` any other's:
    trial 8 read `help(timer.client)` point at docs/data-model.md)."""
    for package in ("timer", "cli", "worker"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            tree = ast.parse(path.read_text(), rel)
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    yield f"{rel}:{node.lineno}", node.value


def pointers() -> Iterator[tuple[str, str, str]]:
    """(where, page path on the site, anchor or "") of every address of the site."""
    for where, text in strings():
        for page, anchor in POINTER.findall(text):
            yield where, page, anchor


def source_of(page: str) -> Path:
    """The docs/ file the site serves at PAGE ("guides/http/" is docs/guides/http.md)."""
    page = page.strip("/")
    return ROOT / "docs" / (f"{page}.md" if page else "index.md")


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


def test_no_text_a_user_reads_names_a_file_of_the_repository() -> None:
    """Before, `handle --help` said "see docs/guides/http.md#webhooks" and `stats
    --memory` "docs/capacity.md": files a wheel user does not have; and `bench --help`
    "benchmarks/ of the source tree" (the benchmarks run from a clone, and say so)."""
    for where, text in strings():
        found = REPO_PATH.search(text.replace(SITE, "SITE/"))
        assert found is None, f"{where}: names {found.group(0)!r}: {text[:120]!r}"
        assert not STALE.search(text), f"{where}: points at the README: {text[:120]!r}"


def test_every_pointer_to_the_site_names_a_page_and_heading_that_exist() -> None:
    found = 0
    for where, page, anchor in pointers():
        found += 1
        assert page == "" or page.endswith("/"), f"{where}: {SITE}{page}: a page ends in /"
        source = source_of(page)
        assert source.is_file(), f"{where}: {SITE}{page}: no page {source.relative_to(ROOT)}"
        if anchor:
            assert anchor in anchors(source), f"{where}: no heading #{anchor} on {source.name}"
    assert found >= 4  # the help texts and messages do point somewhere


def test_the_address_is_the_sites() -> None:
    """The site is built for the address the code points at (unless told otherwise)."""

    class Loader(yaml.SafeLoader):
        pass

    def env(loader: yaml.SafeLoader, node: yaml.Node) -> list[object]:
        assert isinstance(node, yaml.SequenceNode)
        return loader.construct_sequence(node)

    Loader.add_constructor("!ENV", env)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)
    assert config["site_url"] == ["TICKWHEEL_DOCS_URL", SITE]


def test_the_slug_is_the_sites() -> None:
    assert slug("Faults of Redis itself, per durability") == "faults-of-redis-itself-per-durability"
    assert slug("At most N at once per key") == "at-most-n-at-once-per-key"
    assert "webhooks" in anchors(ROOT / "docs" / "guides" / "http.md")
