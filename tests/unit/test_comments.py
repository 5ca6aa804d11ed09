"""The comments and docstrings of ``timer/``, ``worker/`` and ``cli/`` say why the code is
as it is now: no issue number and no dated measurement (their history is in git and
docs/design-notes.md, the figures in docs/measured.md), and no module that is not there.

Only comments and docstrings are read (Python through ``tokenize`` and ``ast``, the Lua
scripts' ``--`` comments, the C core's comments and strings), never code or data.
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# timer/worker and timer/cli link to worker/ and cli/: each file is read once, from there
TREES = ("timer", "worker", "cli")

ISSUE = re.compile(r"(?<![\w&/])#\d+\b")  # `#54`; an upstream's `owner/repo#12` is fine
MONTHS = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
# a day (an ISO timestamp, ``2026-01-01T00:00:00Z``, is a value), or a month of a year
DATE = re.compile(rf"\b(?:19|20)\d\d-[01]\d-[0-3]\d\b(?!T)|\b(?:{MONTHS})[a-z]*\.? (?:19|20)\d\d\b")
# a benchmark's log: "(measured in a split: 3,260 of 11,300 ...)", "measured ...: 3.3x"
LOG = re.compile(r"\(measured\b[^)]*\d|\bmeasured\b[^.;]*?\d+(?:\.\d+)?x\b")
LITERAL = re.compile(r"``.*?``", re.DOTALL)  # a value quoted as code, not prose

ROOTS = ("timer", "worker", "cli", "benchmarks", "sim", "tests", "examples")
EXTENSIONS = ("py", "pyi", "lua", "c", "md", "html", "toml", "yml", "yaml", "json")
SLASHED = re.compile(
    rf"(?<![\w./-])((?:{'|'.join((*ROOTS, 'docs', 'deploy'))})/[\w./-]*?"
    rf"(?:\.(?:{'|'.join(EXTENSIONS)})\b|/))"
)
DOTTED = re.compile(rf"(?<![\w./-])((?:{'|'.join(ROOTS)})(?:\.\w+)+)")


def sources() -> Iterator[Path]:
    for tree in TREES:
        for folder, dirs, files in os.walk(ROOT / tree):  # links to folders not followed
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".pyi", ".lua", ".c")):
                    yield Path(folder, name)


def python_prose(text: str) -> Iterator[tuple[int, str]]:
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(text)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            yield node.lineno, node.value.value


LUA_COMMENT = re.compile(r"--\[(=*)\[(.*?)\]\1\]|--([^\n]*)", re.DOTALL)
LUA_STRING = re.compile(r"\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'")


def lua_prose(text: str) -> Iterator[tuple[int, str]]:
    position = 0
    while True:
        comment = LUA_COMMENT.search(text, position)
        if comment is None:
            return
        string = LUA_STRING.search(text, position)
        if string is not None and string.start() < comment.start():
            position = string.end()  # a `--` inside a string is not a comment
            continue
        yield text.count("\n", 0, comment.start()) + 1, comment.group(2) or comment.group(3)
        position = comment.end()


C_PROSE = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"", re.DOTALL)


def c_prose(text: str) -> Iterator[tuple[int, str]]:
    for found in C_PROSE.finditer(text):
        yield text.count("\n", 0, found.start()) + 1, found.group()


@cache
def prose() -> tuple[tuple[str, int, str], ...]:
    """(file, line, text) of every comment and docstring of the three trees."""
    found = []
    for path in sources():
        read = {".lua": lua_prose, ".c": c_prose}.get(path.suffix, python_prose)
        where = str(path.relative_to(ROOT))
        found += [(where, line, words) for line, words in read(path.read_text())]
    return tuple(found)


def found(pattern: re.Pattern[str]) -> list[str]:
    return [
        f"{where}:{line}: {hit.group()!r}"
        for where, line, words in prose()
        for hit in pattern.finditer(LITERAL.sub("``", words))
    ]


def test_no_issue_number() -> None:
    assert found(ISSUE) == []


@pytest.mark.parametrize("pattern", [DATE, LOG], ids=["date", "measurement log"])
def test_no_dated_measurement(pattern: re.Pattern[str]) -> None:
    assert found(pattern) == []


@cache
def names_in(module: Path) -> frozenset[str]:
    """The names a module defines or imports at its top, and those of its classes."""
    tree = ast.parse(module.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __all__, and the lazily imported names of a package
    return frozenset(names)


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module of this repository, or a name one defines."""
    *parts, last = dotted.split(".")
    if last in EXTENSIONS:  # a file's name (``worker.py``), not a module path
        return True
    place = ROOT
    parts.append(last)
    for i, part in enumerate(parts):
        package = (place / part / "__init__.py").is_file() or (i == 0 and (place / part).is_dir())
        if package or (place / f"{part}.py").is_file():
            place = place / part
        else:
            module = place / "__init__.py" if place.is_dir() else place.with_suffix(".py")
            return i > 0 and module.is_file() and part in names_in(module)
    return True


def test_every_module_named_exists() -> None:
    missing = []
    for where, line, words in prose():
        for hit in SLASHED.finditer(words):
            if not (ROOT / hit.group(1)).exists():
                missing.append(f"{where}:{line}: {hit.group(1)}")
        for hit in DOTTED.finditer(words):
            if not resolves(hit.group(1)):
                missing.append(f"{where}:{line}: {hit.group(1)}")
    assert missing == []


def test_the_reader_finds_what_it_looks_for() -> None:
    """The checks above read comments and docstrings, and find what they look for there."""
    text = '"""Doc (#12)."""\nx = "#34"  # see timer/nowhere.py\n'
    assert [words for _, words in python_prose(text)] == ["# see timer/nowhere.py", "Doc (#12)."]
    lua = "local s = '-- not a comment' -- a comment (#5)\n--[[ block\n timer.nowhere ]]\n"
    assert [words for _, words in lua_prose(lua)] == [" a comment (#5)", " block\n timer.nowhere "]
    assert not resolves("timer.nowhere")
    assert not resolves("timer.cluster_route")
    assert resolves("timer.worker.settings.WorkerSettings")
    assert resolves("timer.aio.AsyncTimerClient")
    assert not (ROOT / "timer/cluster_route.py").exists()
    assert [m.group(1) for m in SLASHED.finditer("see timer/cluster_route.py, worker/handle")] == [
        "timer/cluster_route.py"
    ]
    assert ISSUE.findall("(#54 B), celery/celery#7950, &#39;") == ["#54"]
    assert DATE.findall("on 2025-03-01, in March 2025, at 2026-01-01T00:00:00Z") == [
        "2025-03-01",
        "March 2025",
    ]
    logs = LOG.findall("(measured in a split: 3,260 lost), its rate measured every 10 s")
    assert [log[:22] for log in logs] == ["(measured in a split: "]
