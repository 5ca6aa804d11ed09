"""The documentation site (#42) builds strictly, with its llms.txt and a Markdown twin of
every page, and its generated references say what the code says."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
pytestmark = pytest.mark.slow


def nav_pages() -> list[str]:
    """Every page the site's navigation lists (the tags MkDocs reads are ignored)."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!ENV", lambda loader, node: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)

    def walk(items: list[object]) -> list[str]:
        out: list[str] = []
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            out += walk(value) if isinstance(value, list) else [str(value)]
        return out

    return walk(config["nav"])


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (out / "build.log").write_text(done.stdout + done.stderr)
    return out


def test_every_page_is_in_the_nav_and_has_a_markdown_twin(site: Path) -> None:
    """Each page of docs/ is reachable from the navigation, and llms.txt links each
    one's Markdown twin, which the build wrote."""
    pages = nav_pages()
    written = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if "_hooks" not in p.parts}
    assert written == set(pages), "docs/ pages and mkdocs.yml's nav differ"
    llms = (site / "llms.txt").read_text()
    for page in pages:
        twin = "index.md" if page == "index.md" else page.removesuffix(".md") + "/index.md"
        assert (site / twin).read_text().strip(), twin
        assert f"/{twin})" in llms, f"llms.txt does not link {twin}"
    assert (site / "llms-full.txt").stat().st_size > 100_000


def test_every_table_row_of_a_markdown_twin_keeps_its_code_whole(site: Path) -> None:
    """A Markdown twin (and llms-full.txt) keeps each table row whole: a ``|`` in a cell
    (a choice list, ``--missed [latest|all|skip]``) is escaped. It split the row: the
    formatter cut the cells past the header's (the description and default) and escaped
    the code span's broken backticks, as no whole row has one."""
    for twin in [*site.rglob("index.md"), site / "llms-full.txt"]:
        for line in twin.read_text().splitlines():
            assert not (line.startswith("|") and "\\`" in line), f"{twin}: {line[:160]}"


def test_the_readme_parts_the_site_takes_are_there(site: Path) -> None:
    """The promises, install and tour are one text on GitHub and on the site."""
    start = (site / "getting-started" / "index.md").read_text()
    assert "tickwheel server start" in start and "pip install '.[all]'" in start
    assert "Exactly one outcome" in (site / "index.md").read_text()
    assert "--8<--" not in (site / "llms-full.txt").read_text()


FIRST_SCREEN = (
    "never lost and never fire twice",
    "pip install '.[server,dashboard]'",
    "make demo",
    "make test",
)


def test_the_first_screen_says_what_it_does_how_to_install_and_the_two_commands(
    site: Path,
) -> None:
    """#56: the README opened on Kafka's internals; its first screen (30 lines) and the
    docs home page now say what a user gets, the install line that brings the embedded
    server, and the two commands."""
    first = "\n".join((ROOT / "README.md").read_text().splitlines()[:30])
    home = (site / "index.md").read_text()
    for words in FIRST_SCREEN:
        assert words in first, words
        assert words in home, words
    assert "purgatory" not in first


def test_the_references_cover_the_code(site: Path) -> None:
    """The CLI reference has every command; the HTTP reference every operation of the
    live OpenAPI document; the Python reference the client's calls."""
    from click import Group  # noqa: PLC0415

    from timer.cli.main import main  # noqa: PLC0415
    from timer.httpapi.openapi import document  # noqa: PLC0415

    cli = (site / "reference" / "cli" / "index.md").read_text()
    assert isinstance(main, Group)
    for name in main.commands:
        assert f"tickwheel {name}" in cli, name
    http = (site / "reference" / "http" / "index.md").read_text()
    for path, ops in document()["paths"].items():
        for method in ops:
            assert f"{method.upper()} {path}" in http, (method, path)
    python = (site / "reference" / "python" / "index.md").read_text()
    for call in ("schedule_many", "heartbeat", "wait", "dead_letters", "create_schedules"):
        assert re.search(rf"^#+ {call}\b", python, re.M), call


def test_every_address_the_code_points_at_is_a_page_and_anchor_of_the_site(site: Path) -> None:
    """Help texts, log lines and errors point at pages of the published site (#75): each
    address is a page the build wrote, with the anchor it names."""
    from .test_pointers import pointers  # noqa: PLC0415

    found = 0
    for where, page, anchor in pointers():
        found += 1
        html = site / page / "index.html"
        assert html.is_file(), f"{where}: the site has no page {page}"
        if anchor:
            assert f'id="{anchor}"' in html.read_text(), f"{where}: no #{anchor} on {page}"
    assert found >= 4


def sections_text(page: Path) -> dict[str, str]:
    """A built page's text as a browser shows it, per heading: the heading's id -> the
    text from it to the next heading (whitespace made single spaces)."""

    class Text(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.current = ""
            self.parts: dict[str, list[str]] = {"": []}
            self.skip = 0  # inside <script>/<style>: not shown

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag in ("script", "style"):
                self.skip += 1
            ident = dict(attrs).get("id")
            if re.fullmatch(r"h[1-6]", tag) and ident:
                self.current = ident
                self.parts.setdefault(ident, [])

        def handle_endtag(self, tag: str) -> None:
            if tag in ("script", "style"):
                self.skip -= 1

        def handle_data(self, data: str) -> None:
            if not self.skip:
                self.parts[self.current].append(data)

    parser = Text()
    parser.feed(page.read_text())
    return {k: " ".join("".join(v).split()) for k, v in parser.parts.items()}


def help_texts(
    command: object, prog: str, parent: object = None
) -> Iterator[tuple[str, str, list[str]]]:
    """(prog, its section's id, the texts its --help shows) for the command and each
    subcommand: the description and epilog as click formats them, each option's help
    (without the [default: ...] click adds: the page has a column for it). Backticks go:
    the site shows `code` as code."""
    import click  # noqa: PLC0415

    assert isinstance(command, click.Command)
    assert parent is None or isinstance(parent, click.Context)
    # unwrapped: click broke lines at hyphens ("--max-" / "total-ms"); the parent's
    # context as --help has it (click keeps the first help option a command makes)
    ctx = click.Context(command, info_name=prog.rsplit(" ", 1)[-1], parent=parent,
                        terminal_width=10_000, max_content_width=10_000,
                        **command.context_settings)  # fmt: skip
    texts = []
    for part in (command.format_help_text, command.format_epilog):
        formatter = ctx.make_formatter()
        part(ctx, formatter)
        texts.append(formatter.getvalue())
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is not None and isinstance(param, click.Option) and not param.hidden:
            texts.append(re.sub(r"(?:\s+\[[^\[\]]*\])+$", "", record[1]))
    normal = [" ".join(x.replace("`", "").split()) for x in texts]
    yield prog, prog.replace(" ", "-").lower(), [x for x in normal if x]
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            if not sub.hidden:
                yield from help_texts(sub, f"{prog} {name}", ctx)


def test_the_cli_reference_shows_every_word_of_every_help(site: Path) -> None:
    """The CLI page, as a browser shows it, has every command's --help texts whole (#75:
    `<shard>/<entry>`, `<service>`, `<NAME>` went into the HTML as tags, and the page
    read "REF is / as tickwheel dead list shows it.")."""
    from timer.cli.main import main  # noqa: PLC0415

    shown = sections_text(site / "reference" / "cli" / "index.html")
    seen = 0
    for prog, ident, texts in help_texts(main, "tickwheel"):
        assert ident in shown, f"no section for {prog}"
        page = shown[ident].replace("`", "")
        for text in texts:
            seen += 1
            assert text in page, f"{prog}: the page does not show {text!r}"
    assert seen > 300


def option_rows(page: Path) -> dict[str, dict[str, list[str]]]:
    """The option tables of a built page, per heading: the heading's id -> the text of
    each row's first cell -> the row's cells (whitespace made single spaces)."""

    class Rows(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.current = ""
            self.rows: dict[str, dict[str, list[str]]] = {}
            self.row: list[str] | None = None
            self.cell: list[str] | None = None

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            ident = dict(attrs).get("id")
            if re.fullmatch(r"h[1-6]", tag) and ident:
                self.current = ident
            elif tag == "tr":
                self.row = []
            elif tag == "td" and self.row is not None:
                self.cell = []

        def handle_endtag(self, tag: str) -> None:
            if tag == "td" and self.row is not None and self.cell is not None:
                self.row.append(" ".join("".join(self.cell).split()))
                self.cell = None
            elif tag == "tr" and self.row:
                self.rows.setdefault(self.current, {})[self.row[0]] = self.row
                self.row = None

        def handle_data(self, data: str) -> None:
            if self.cell is not None:
                self.cell.append(data)

    rows = Rows()
    rows.feed(page.read_text())
    return rows.rows


def help_records(
    command: object, prog: str, parent: object = None
) -> Iterator[tuple[str, str, str, str]]:
    """(prog, its section's id, an option's names and metavar, its help with what click
    appends) for each option every command's --help lists, as the terminal shows them:
    the context is the one --help has (its parent's, so `-h` is there too)."""
    import click  # noqa: PLC0415

    assert isinstance(command, click.Command)
    assert parent is None or isinstance(parent, click.Context)
    ctx = click.Context(command, info_name=prog.rsplit(" ", 1)[-1], parent=parent,
                        **command.context_settings)  # fmt: skip
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
        if record is not None:
            yield prog, prog.replace(" ", "-").lower(), record[0], " ".join(record[1].split())
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            if not sub.hidden:
                yield from help_records(sub, f"{prog} {name}", ctx)


def test_the_cli_reference_shows_each_option_as_help_does(site: Path) -> None:
    """Each option of each command has a row on the CLI page with what its --help line
    shows: its names and metavar as --help prints them, its help, and each of the
    default, range and `required` click appends (#75: the page dropped every range, said
    `text` for `--watch KEY` and `ms` for `--max-total DURATION`, lost `-h`, and left
    `handle --max-attempts`'s default in its description)."""
    from timer.cli.main import main  # noqa: PLC0415

    tables = option_rows(site / "reference" / "cli" / "index.html")
    seen = ranges = 0
    for prog, ident, spec, shown in help_records(main, "tickwheel"):
        rows = tables.get(ident, {})
        assert spec in rows, f"{prog}: no row `{spec}` (the page has {sorted(rows)})"
        _, text, extras = rows[spec]
        brackets = re.search(r"(?:\s+\[[^\[\]]*\])+$", shown)
        said = shown[: brackets.start()] if brackets else shown
        assert text.replace("`", "") == said.replace("`", ""), f"{prog} {spec}: {text!r}"
        items = re.findall(r"\[([^\[\]]*)\]", brackets.group(0)) if brackets else []
        assert extras == "; ".join(items), f"{prog} {spec}: {extras!r}, --help says {items}"
        seen += 1
        ranges += "<=" in extras
    assert seen > 300 and ranges > 20, (seen, ranges)
    assert "-h, --help" in tables["tickwheel-schedule"]


def empty_headings(page: Path) -> list[str]:
    """The headings of a built page with nothing under them: the next heading follows at
    once, at the same level or above."""

    class Walk(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.last: tuple[int, str] | None = None  # the open heading, while it is bare
            self.heading: tuple[int, str] | None = None  # the heading being read
            self.main = 0  # inside the page's article (not the navigation)
            self.empty: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "article":
                self.main += 1
            elif self.main and re.fullmatch(r"h[1-6]", tag):
                level, ident = int(tag[1]), dict(attrs).get("id") or ""
                generated = "doc-heading" in (dict(attrs).get("class") or "")  # an API object
                if self.last is not None and level <= self.last[0] and not generated:
                    self.empty.append(self.last[1])
                self.heading = (level, ident)

        def handle_endtag(self, tag: str) -> None:
            if tag == "article":
                self.main -= 1
            elif self.heading is not None and tag == f"h{self.heading[0]}":
                self.last, self.heading = self.heading, None

        def handle_data(self, data: str) -> None:
            if self.main and self.heading is None and data.strip(" \n¶"):
                self.last = None

    walk = Walk()
    walk.feed(page.read_text())
    return walk.empty


def test_no_page_has_an_empty_heading(site: Path) -> None:
    """#75: getting-started's "From a checkout" had nothing under it (the README part it
    took brings its own heading)."""
    for name in nav_pages():
        html = site / ("index.html" if name == "index.md" else name[:-3] + "/index.html")
        assert empty_headings(html) == [], name


def test_make_docs_and_docs_build_install_the_docs_tools_first() -> None:
    """`make docs` serves and `make docs-build` builds (#75: there was no build-only
    target), each after installing the docs extra when its stamp is stale (a dry run that
    takes every target as stale)."""
    for target, runs in (("docs", "mkdocs serve"), ("docs-build", "mkdocs build --strict")):
        dry = subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True,
                             text=True, timeout=60, check=True)  # fmt: skip
        lines = dry.stdout.splitlines()
        install = next(i for i, x in enumerate(lines) if "pip install -qq -e '.[docs]'" in x)
        assert any(runs in x for x in lines[install + 1 :]), dry.stdout


def test_every_test_a_page_names_exists() -> None:
    """A page that says which test checks a promise names one that exists."""
    for page in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        text = page.read_text()
        for path, name in re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", text):
            assert (ROOT / path).exists(), (page.name, path)
            if name:
                assert f"def {name}(" in (ROOT / path).read_text(), (page.name, path, name)


def test_the_openapi_copy_is_what_the_http_reference_renders() -> None:
    """The hook renders docs/openapi.json, which test_serve keeps equal to the live
    document: checked here too, so a stale copy fails with the site's tests."""
    from timer.httpapi.openapi import document  # noqa: PLC0415

    assert json.loads((DOCS / "openapi.json").read_text()) == document()


def test_the_references_show_no_defect(site: Path) -> None:
    """What #56 found on the reference pages: click 8.3's ``Sentinel.UNSET`` as a
    default, raw reStructuredText roles, a build that warns it cannot format
    signatures, and class pages that began with properties."""
    pages = list((site / "reference").rglob("*.html"))  # (the design notes name them)
    for page in pages:
        text = page.read_text()
        assert "Sentinel.UNSET" not in text, page
        role = re.search(r":(?:class|meth|func|attr|exc|mod|data|obj):(?:<code>|`)", text)
        assert role is None, (page, text[role.start() - 80 : role.end() + 40] if role else "")
    log = (site / "build.log").read_text()
    assert "Formatting signatures requires" not in log, log
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.startswith(("ruff", "black")) for d in extra["docs"]), "make docs would warn"
    cli = option_rows(site / "reference" / "cli" / "index.html")  # real defaults
    assert cli["tickwheel-init"]["--shards INTEGER RANGE"][2] == "default: 16; 1<=x<=16384"
    assert cli["tickwheel-heartbeat"]["--extend DURATION"][2] == "required"
    for name, kinds in class_members(site / "reference" / "python" / "index.html").items():
        if "function" in kinds:
            first_other = next(i for i, k in enumerate([*kinds, "end"]) if k != "function")
            assert "function" not in kinds[first_other:], (name, kinds)


def class_members(page: Path) -> dict[str, list[str]]:
    """Each class on the page -> the kinds of its members, in page order."""

    class Walk(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.stack: list[str | None] = []  # per open div: the object kind, if one
            self.classes: dict[str, list[str]] = {}
            self.open: list[list[str]] = []  # members of the classes we are inside
            self.want_id = False

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            a = dict(attrs)
            if tag == "div":
                kind = None
                m = re.fullmatch(r"doc doc-object doc-(\w+)", a.get("class") or "")
                if m:
                    kind = m.group(1)
                    if self.open and self.stack.count("class") == len(self.open):
                        self.open[-1].append(kind)
                    if kind == "class":
                        self.open.append([])
                        self.want_id = True
                self.stack.append(kind)
            elif self.want_id and a.get("id"):
                self.classes[str(a["id"])] = self.open[-1]
                self.want_id = False

        def handle_endtag(self, tag: str) -> None:
            if tag == "div" and self.stack and self.stack.pop() == "class":
                self.open.pop()

    walk = Walk()
    walk.feed(page.read_text())
    assert "timer.TimerClient" in walk.classes, sorted(walk.classes)
    return walk.classes


# a file of the repository, as a page would show it: the site is read where no checkout
# is at hand (a page, or a link's text, names the page instead)
DOCS_FILE = re.compile(r"(?<![\w/.])docs/[\w./-]+\.md\b")
CHECKOUT_FILE = re.compile(r"(?<![\w/.])(?:\.ci/\w+|examples/[\w./-]*|tests/[\w./-]+)")


def shown_pages(site: Path) -> Iterator[tuple[str, Path]]:
    """Every page a reader sees but the changelog (its entries say what changed, then)."""
    for html in sorted(site.rglob("index.html")):
        name = str(html.parent.relative_to(site))
        if name not in (".", "changelog") and not name.startswith(("assets", "search")):
            yield name, html
    yield "index", site / "index.html"


def test_no_page_shows_a_repository_path_a_reader_cannot_follow(site: Path) -> None:
    """No page shows a docs/ file's path (it names the page, or links it with the page's
    name: How it works showed "docs/data-model.md", the Python reference a docstring's
    "docs/design-notes.md"). A first reader's page (getting started, the guides) names a
    file of the checkout (an example, a test, CI's script) only where it says the file is
    in the checkout; getting started showed ".ci/wheel", the Celery, FastAPI and Django
    guides examples/ and tests/ paths as if at hand."""
    found = []
    for name, html in shown_pages(site):
        for section, text in sections_text(html).items():
            where = f"{name}#{section}"
            found += [f"{where}: {m}" for m in DOCS_FILE.findall(text)]
            first_read = name in ("index", "getting-started") or name.startswith("guides/")
            if first_read and "checkout" not in text:
                found += [f"{where}: {m}" for m in CHECKOUT_FILE.findall(text)]
    assert found == []


PIP = re.compile(r'pip\s+install\s+(?:-e\s+)?("\$\(ls [^)]*\)[^"]*"|\S+)')
# the checkout, or the wheel `make wheel` built from it, with extras
INSTALLS = re.compile(r"\.|'\.\[[a-z,]+\]'|\"\$\(ls dist/tickwheel-\*\.whl\)\[[a-z,]+\]\"")


def test_every_install_line_the_site_shows_installs_the_checkout(site: Path) -> None:
    """The rendered pages too (the Python reference shows the docstrings): tickwheel is
    not on PyPI, so `pip install 'tickwheel[x]'` fails in a clean venv; every install
    line installs the checkout, `.`, with its extras (getting started's Install)."""
    found = []
    for name, html in shown_pages(site):
        text = " ".join(sections_text(html).values())
        for m in PIP.finditer(text):
            if not INSTALLS.fullmatch(m.group(1).rstrip("`;,)")):
                found.append(f"{name}: {m.group(0)}")
    assert found == []
