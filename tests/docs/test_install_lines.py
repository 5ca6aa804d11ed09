"""Every install line the README and the site show works for a reader (#75)."""

from __future__ import annotations

import re

from .examples import ROOT, blocks, pages

# tickwheel is not on PyPI: a reader installs it from a checkout (getting-started's
# Install), so every install line a page shows is `pip install` of the checkout, `.`,
# with its extras, or of the wheel `make wheel` built from it (test_readme.py runs those
# lines); `pip install 'tickwheel[x]'` failed in a clean venv
PIP = re.compile(r'pip\s+install\s+(?:-e\s+)?("[^"]+"|\S+)')
FROM_CHECKOUT = re.compile(r"\.|'\.\[[a-z,]+\]'" + r'|"\$\(ls dist/tickwheel-\*\.whl\)\[[a-z,]+\]"')


def test_every_install_line_installs_the_checkout() -> None:
    seen = 0
    for page in [*pages(), *sorted((ROOT / "examples").rglob("*.md"))]:
        text = " ".join(page.read_text().split())  # a line broken in the middle is one
        for m in PIP.finditer(text):
            seen += 1
            what = m.group(1).rstrip("`")
            assert FROM_CHECKOUT.fullmatch(what), f"{page.relative_to(ROOT)}: {m.group(0)}"
    assert seen >= 10


def test_every_message_that_names_a_missing_extra_installs_the_checkout() -> None:
    """What the code says when an extra is missing (a command's exit 4, an import of
    timer.fastapi, timer.testing.TimeSkipping...) is an install line that works too: it
    said `pip install 'tickwheel[http]'`, which finds nothing on PyPI."""
    sources = {p.resolve() for d in ("timer", "cli") for p in (ROOT / d).rglob("*.py")}
    found = []
    for source in sorted(sources):
        for m in PIP.finditer(source.read_text()):
            what = m.group(1).rstrip('`"').replace("{extra}", "x")
            if "tickwheel" in what or not FROM_CHECKOUT.fullmatch(what):
                found.append(f"{source.relative_to(ROOT.resolve())}: {m.group(0)}")
    assert found == []


# what a page's Python imports that only an extra brings, and that extra
NEEDS_EXTRA = {
    "celery": "celery",
    "timer.celery": "celery",
    "fastapi": "fastapi",
    "timer.fastapi": "fastapi",
    "django": "django",
    "timer.django": "django",
    "timer.testing": "testing",
    "pyspark": "spark",
    "timer.spark": "spark",
}
IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", re.M)


def test_a_page_whose_python_needs_an_extra_says_how_to_install_it() -> None:
    """The testing guide's Celery section imported celery with only the testing extra
    named on its page: pasted as written it failed with ModuleNotFoundError."""
    missing = []
    for page in pages():
        text = page.read_text()
        named = {e for m in re.finditer(r"'\.\[([a-z,]+)\]'", text) for e in m.group(1).split(",")}
        for block in blocks(page, ("python",)):
            for m in IMPORT.finditer(block.code):
                module = m.group(1) or m.group(2)
                extra = NEEDS_EXTRA.get(module) or NEEDS_EXTRA.get(module.split(".")[0])
                if extra and extra not in named and "all" not in named:
                    missing.append(f"{block.where}: imports {module}, needs '.[{extra}]'")
    assert missing == []
