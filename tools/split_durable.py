"""Split ``timer/durable/`` into sub-packages: move the modules, rewrite every path to them.

Run from anywhere, as often as wanted (a second run changes nothing)::

    python tools/split_durable.py            # move and rewrite, then ruff (isort, format)
    python tools/split_durable.py --check    # exit 1 and list what a run would change

The layout (``model`` <- ``timers``, ``groups``, ``shards`` <- ``schedules`` <- ``admin``;
siblings never import each other) is the table :data:`MOVES`. What the script does:

1. Rewrites every text file the repository tracks (and new files git does not ignore),
   before anything moves, so that each file's relative imports are read from where it
   is now: Python imports (absolute and relative, ``from timer.durable import ops`` as
   much as ``from .calls import text``), ``import timer.durable.x``; dotted paths in any
   text (``timer.durable.x.name``: docstrings, monkeypatch strings, ``python -m``);
   relative Sphinx roles in docstrings (``:mod:`.calls```: a sibling's stays relative,
   anything further becomes its full name); slashed paths
   (``timer/durable/x.py``, ``durable/lua/``); the Lua directory as the tests spell it
   (``"durable" / "lua"``, ``resources.files("timer.durable") / "lua"``).
   A name that moved between modules (:data:`SYMBOLS`) follows its new module in
   ``from`` imports and dotted paths.
2. Moves the modules with ``git mv`` (a plain rename for a file git does not track),
   ``lua/`` with them, and writes each new package's ``__init__.py`` when it has none.
3. Runs ruff on the Python files it changed: import order, then the format.

It reads a file already moved the same way (its imports relative to its new place, or,
when they resolve to nothing there, to its old one: an edit merged from a branch made
before the split), so a run after merging such a branch fixes what it brought.
``CHANGELOG.md`` is history and keeps the names of its day.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = "timer"
PKG = "timer.durable"
# the repository's worker/ and cli/ are timer.worker and timer.cli (timer/ links to them)
LINKED = {"worker": "timer.worker", "cli": "timer.cli"}
SKIP = {"CHANGELOG.md", "tools/split_durable.py"}

# old module (under timer.durable) -> its new name (under timer.durable, or absolute)
MOVES: dict[str, str] = {
    # model: what is stored and how, no operation; imports only timer.errors
    "keys": "model.keys",
    "codec": "model.codec",
    "fields": "model.fields",
    "models": "model.models",
    "entries": "model.entries",
    "checks": "model.checks",
    "durations": "model.durations",
    "globs": "model.globs",
    "steps": "model.steps",
    "scripts": "model.scripts",
    "namespace": "model.namespace",
    # a timer's operations
    "items": "timers.items",
    "calls": "timers.calls",
    "ops": "timers.ops",
    "finding": "timers.finding",
    # consumer groups on the outcome streams, and their dead letters
    "group_calls": "groups.calls",
    "groups": "groups.streams",
    "reader": "groups.reader",
    "group_admin": "groups.admin",
    "dead_filter": "groups.dead",
    # a shard as its leader and the worker see it
    "shard_calls": "shards.calls",
    "shard_ops": "shards.ops",
    # recurring schedules
    "recurrence": "schedules.recurrence",
    "schedule_records": "schedules.records",
    "schedule_ops": "schedules.ops",
    # the operator's: a namespace made and converted, the servers, views, history, search
    "setup": "admin.setup",
    "server_checks": "admin.server",
    "views": "admin.views",
    "history": "admin.history",
    "outcome_search": "admin.search",
    "pending_page": "admin.pending",  # the dashboard's timers by next due, across shards
    # the doors' JSON (the HTTP API, the dashboard, the CLI), not storage
    "shapes": "timer.shapes",
}
DIRS = {"lua": "model/lua"}  # data directories, under timer/durable

# (old module, name) -> the old module the name moved to (then MOVES applies)
SYMBOLS: dict[tuple[str, str], str] = {
    ("calls", "text"): "codec",
    ("calls", "error_or"): "steps",
    ("ops", "server_time_ms"): "steps",
    ("ops", "server_time_us"): "steps",
    ("finding", "check_glob"): "globs",
    ("finding", "MAX_PATTERN_BYTES"): "globs",
    ("shard_calls", "get_call"): "calls",
    ("ops", "Delivery"): "groups",
    ("ops", "ack"): "groups",
    ("ops", "init"): "setup",
    ("ops", "read_meta"): "setup",
    ("ops", "migrate"): "setup",
    ("ops", "MIGRATE_BUDGET"): "setup",
}

PACKAGES: dict[str, str] = {
    "model": '''"""The data model: what is stored in Redis and how, and no operation on it.

Keys and channels, records and payloads (msgpack), the values the clients return, a
timer's fields declared once, the argument checks, the Lua scripts (``lua/``) by name,
the steps an operation yields to its driver, and a namespace as the builders see it. It
imports nothing of ``timer.durable``'s other sub-packages.
"""
''',
    "timers": '''"""A timer's operations: its gate, the client's scripts' calls, the clients'
operations, and finding timers by pattern, state and deadline. Over ``model`` only."""
''',
    "groups": '''"""Consumer groups on the outcome streams: their scripts' calls, reading and
settling (streams), one consumer's reader, the operator's side and the dead letters.
Over ``model`` only."""
''',
    "shards": '''"""A shard as its leader and the worker see it: the leader's scripts' calls
(leases, fire, sweep, trim, the results table, migration) and the worker's reads.
Over ``model`` only."""
''',
    "schedules": '''"""Recurring schedules: when their occurrences fall, their records and the
leader's plans, and the clients' operations on them. Over ``model``, ``timers``,
``groups`` and ``shards``."""
''',
    "admin": '''"""The operator's side: a namespace made and converted (setup), what a server is
asked before writing, views, the per-minute history, and the search of outcomes. It may
import any other part of ``timer.durable``."""
''',
}
GROUP_SUBS = frozenset(v.split(".")[1] for v in MOVES.values() if v.startswith("groups."))


def old(name: str) -> str:
    return f"{PKG}.{name}"


def new(name: str) -> str:
    target = MOVES[name]
    return target if target.startswith(TOP + ".") else f"{PKG}.{target}"


OLD_TO_NEW = {old(k): new(k) for k in MOVES}
NEW_TO_OLD = {v: k for k, v in OLD_TO_NEW.items()}
NEW_PACKAGES = {f"{PKG}.{p}" for p in PACKAGES}


# -- where things are --------------------------------------------------------------------


def module_of(rel: str) -> str | None:
    """The dotted module a repository path holds (timer.worker for worker/...)."""
    if not rel.endswith(".py"):
        return None
    parts = rel[:-3].split("/")
    if parts[0] in LINKED:
        parts = [*LINKED[parts[0]].split("."), *parts[1:]]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def path_of(module: str) -> Path:
    return ROOT / (module.replace(".", "/") + ".py")


def known_modules() -> set[str]:
    """Every module and package of timer/ there is now or will be after the moves."""
    found = set(NEW_PACKAGES) | set(OLD_TO_NEW.values()) | {TOP}
    for base in (TOP, *LINKED):
        for path in (ROOT / base).rglob("*.py"):
            name = module_of(path.relative_to(ROOT).as_posix())
            if name:
                found.add(name)
    return found


def groups_module_on_disk() -> bool:
    """Whether timer/durable/groups.py (the module, not yet the package) is there."""
    return path_of(old("groups")).exists()


# -- what a name means now -----------------------------------------------------------------


@dataclass
class World:
    known: set[str]
    groups_is_module: bool  # a bare timer.durable.groups is the old module

    def canon(self, module: str, name: str | None = None) -> str:
        """The new name of ``module`` (the module ``name`` is imported from, if given)."""
        short = module.removeprefix(PKG + ".") if module.startswith(PKG + ".") else None
        if short is None or short not in MOVES:
            return module
        if short == "groups" and not self.is_old_groups(name):
            return module
        if name is not None and (short, name) in SYMBOLS:
            short = SYMBOLS[(short, name)]
        return new(short)

    def is_old_groups(self, attr: str | None) -> bool:
        if attr is None:
            return self.groups_is_module
        return attr not in GROUP_SUBS

    def exists(self, module: str) -> bool:
        return module in self.known or module in OLD_TO_NEW


def resolve(anchor: str, is_package: bool, level: int, module: str | None) -> str:
    parts = anchor.split(".") if is_package else anchor.split(".")[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, module] if module else parts)


def relative(package: str, target: str) -> str:
    """``target`` as a relative module name seen from inside ``package``."""
    here, there = package.split("."), target.split(".")
    common = 0
    while common < min(len(here), len(there)) and here[common] == there[common]:
        common += 1
    return "." * (len(here) - common + 1) + ".".join(there[common:])


# -- Python imports --------------------------------------------------------------------------


def attrs_of(tree: ast.AST, local: str) -> set[str]:
    return {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == local
    }


@dataclass(frozen=True)
class Place:
    """Where a file's module is now, was before the split, and will be after it."""

    now: str
    old: str
    new: str
    is_package: bool


def place_of(rel: str) -> Place | None:
    me = module_of(rel)
    if me is None:
        return None
    return Place(me, NEW_TO_OLD.get(me, me), OLD_TO_NEW.get(me, me), rel.endswith("__init__.py"))


def plan_import_from(
    node: ast.ImportFrom, tree: ast.AST, here: Place, w: World
) -> list[tuple[str, str, str | None]] | None:
    """(absolute module, name, alias) for each name this import should become, or None
    if it concerns nothing that moves."""
    me, me_old, is_pkg = here.now, here.old, here.is_package
    if node.level:
        base = resolve(me, is_pkg, node.level, node.module)
        if not w.exists(base) and me_old != me:  # merged from before the split
            base = resolve(me_old, is_pkg, node.level, node.module)
    else:
        base = node.module or ""
    touches = base == PKG or base.startswith(PKG + ".")
    if not touches and not (node.level and here.new != me_old):
        return None
    out: list[tuple[str, str, str | None]] = []
    for alias in node.names:
        name, local = alias.name, alias.asname
        if base == PKG and old(name) in OLD_TO_NEW:  # from timer.durable import ops
            if name == "groups":
                used = attrs_of(tree, local or name)
                is_old = bool(used - GROUP_SUBS) if used else w.groups_is_module
                if not is_old:
                    out.append((base, name, local))
                    continue
            target = w.canon(old(name))
            parent, _, last = target.rpartition(".")
            out.append((parent, last, local or (name if last != name else None)))
            continue
        if base == f"{PKG}.groups":
            plain = all(a.name in GROUP_SUBS for a in node.names)
            target = base if plain else w.canon(base, name)
        else:
            target = w.canon(base, name)
        out.append((target, name, local))
    return out


def import_text(
    plan: list[tuple[str, str, str | None]], me: str, is_pkg: bool, was_relative: bool
) -> list[str]:
    """The statements for a plan, grouped by module in the order first met."""
    package = me if is_pkg else me.rpartition(".")[0]
    grouped: dict[str, list[str]] = {}
    for module, name, local in plan:
        shown = (
            relative(package, module) if was_relative and module.split(".")[0] == TOP else module
        )
        entry = name if local in (None, name) else f"{name} as {local}"
        names = grouped.setdefault(shown, [])
        if entry not in names:
            names.append(entry)
    return [f"from {m} import {', '.join(ns)}" for m, ns in grouped.items()]


def original_triples(node: ast.ImportFrom) -> list[str]:
    shown = "." * node.level + (node.module or "")
    return [f"from {shown} import {', '.join(_entry(a) for a in node.names)}"]


def _entry(a: ast.alias) -> str:
    return a.name if a.asname is None else f"{a.name} as {a.asname}"


def new_statements(node: ast.stmt, tree: ast.AST, here: Place, w: World) -> list[str] | None:
    """What an import statement becomes, or None if it stays as it is."""
    if isinstance(node, ast.ImportFrom):
        plan = plan_import_from(node, tree, here, w)
        if plan is None:
            return None
        statements = import_text(plan, here.new, here.is_package, node.level > 0)
        return None if statements == original_triples(node) else statements
    if isinstance(node, ast.Import):
        names = [(w.canon(a.name), a.asname) for a in node.names]
        if all(n == a.name for (n, _), a in zip(names, node.names, strict=True)):
            return None
        return ["import " + ", ".join(n if s is None else f"{n} as {s}" for n, s in names)]
    return None


def rewrite_imports(text: str, rel: str, w: World) -> str:
    """The file's ``from`` and ``import`` statements, pointed at the new modules."""
    here = place_of(rel)
    if here is None:
        return text
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, list[str]]] = []  # (first line, last line, new lines)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        statements = new_statements(node, tree, here, w)
        if statements is None:
            continue
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        head = lines[first][: node.col_offset]
        tail = lines[last][node.end_col_offset or 0 :]
        if head.strip() or (tail.strip() and not tail.strip().startswith("#")):
            raise SystemExit(f"{rel}:{node.lineno}: an import sharing its line; split it first")
        inner = "".join(lines[first : last + 1])
        if "#" in inner[: len(inner) - len(tail)] and last > first:
            raise SystemExit(f"{rel}:{node.lineno}: a comment inside an import; move it first")
        comment = ("  " + tail.strip()) if tail.strip() else ""
        edits.append((first, last, [f"{head}{s}{comment}\n" for s in statements]))
    for first, last, new_lines in sorted(edits, reverse=True):
        lines[first : last + 1] = new_lines
    return "".join(lines)


# -- paths in any text ---------------------------------------------------------------------

DOTTED = re.compile(r"(?<![\w.])timer\.durable\.([A-Za-z_]\w*)((?:\.[A-Za-z_]\w*)*)")
SLASHED = re.compile(r"(?<![\w./-])((?:timer/)?)durable/([A-Za-z_]\w*)(\.py\b|(?=[/`'\"\s),;:]|$))")
ROLE = re.compile(r"(:[a-z]+:`~?)(\.+)([A-Za-z_][\w.]*)`")
SPLIT_LUA = re.compile(r"""(["']durable["']\s*/\s*)(["'])lua\2""")
FILES_LUA = re.compile(r"""resources\.files\((["'])timer\.durable\1\)(\s*/\s*["']lua["'])""")


def rewrite_dotted(m: re.Match[str], w: World) -> str:
    first, rest = m.group(1), m.group(2)
    attrs = rest.split(".")[1:]
    if first not in MOVES:
        return m.group(0)
    target = w.canon(old(first), attrs[0] if attrs else None)
    if target == old(first):  # timer.durable.groups.<submodule>: the package already
        return m.group(0)
    return target + rest


def rewrite_slashed(m: re.Match[str]) -> str:
    prefix, name, suffix = m.group(1), m.group(2), m.group(3)
    if name in DIRS and suffix != ".py":
        return f"{prefix}durable/{DIRS[name]}"
    if name not in MOVES or suffix != ".py":
        return m.group(0)
    target = MOVES[name]
    if target.startswith(TOP + "."):
        return target.replace(".", "/") + ".py"
    return f"{prefix}durable/{target.replace('.', '/')}.py"


def rewrite_roles(text: str, rel: str, w: World) -> str:
    here = place_of(rel)
    if here is None:
        return text
    me, me_old, is_pkg = here.now, here.old, here.is_package
    package = here.new if is_pkg else here.new.rpartition(".")[0]

    def one(m: re.Match[str]) -> str:
        level, dotted = len(m.group(2)), m.group(3)
        for anchor in dict.fromkeys((me, me_old)):
            parts = resolve(anchor, is_pkg, level, dotted).split(".")
            for cut in range(len(parts), 1, -1):
                module = ".".join(parts[:cut])
                if w.exists(module):
                    attrs = parts[cut:]
                    target = w.canon(module, attrs[0] if attrs else None)
                    near = relative(package, target)
                    # a sibling by its relative name, anything further by its full one
                    shown = ".".join([near if near.count(".", 0, 2) == 1 else target, *attrs])
                    return m.group(1) + _tidy(shown) + "`"
        return m.group(0)

    return ROLE.sub(one, text)


def _tidy(shown: str) -> str:
    """``..model`` + ``.steps`` joined as ``..model.steps``, not ``..model..steps``."""
    dots = len(shown) - len(shown.lstrip("."))
    return shown[:dots] + re.sub(r"\.{2,}", ".", shown[dots:])


def rewrite_text(text: str, rel: str, w: World) -> str:
    is_py = rel.endswith(".py")
    if is_py:
        text = rewrite_imports(text, rel, w)
        text = rewrite_roles(text, rel, w)
        skip = import_lines(text)
    else:
        skip = set()
    lines = text.splitlines(keepends=True)
    return "".join(
        line if number in skip else rewrite_line(line, w) for number, line in enumerate(lines, 1)
    )


def rewrite_line(line: str, w: World) -> str:
    line = DOTTED.sub(lambda m: rewrite_dotted(m, w), line)
    line = SLASHED.sub(rewrite_slashed, line)
    line = SPLIT_LUA.sub(r'\1"model" / \2lua\2', line)
    return FILES_LUA.sub(r"resources.files(\1timer.durable.model\1)\2", line)


def import_lines(text: str) -> set[int]:
    """The lines of the import statements (already rewritten: not text to rewrite again)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    return {
        n
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
    }


# -- the run ---------------------------------------------------------------------------------


def text_files() -> Iterator[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for rel in sorted(set(listed.split("\0"))):
        path = ROOT / rel
        if not rel or rel in SKIP or path.is_symlink() or not path.is_file():
            continue
        yield rel


def tracked(rel: str) -> bool:
    done = subprocess.run(
        ["git", "ls-files", "--error-unmatch", rel], cwd=ROOT, capture_output=True, check=False
    )
    return done.returncode == 0


def move(src: Path, dst: Path, check: bool) -> bool:
    """Move src to dst (git mv when tracked); False when there was nothing to move."""
    if not src.exists():
        return False
    if dst.exists() and src.is_file():
        raise SystemExit(f"both {src.relative_to(ROOT)} and {dst.relative_to(ROOT)} exist")
    if check:
        return True
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir() and dst.exists():  # files added under the old directory since
        for item in sorted(src.rglob("*")):
            if item.is_file():
                move(item, dst / item.relative_to(src), check)
        shutil.rmtree(src)
        return True
    rel = src.relative_to(ROOT).as_posix()
    if tracked(rel):
        subprocess.run(["git", "mv", rel, dst.relative_to(ROOT).as_posix()], cwd=ROOT, check=True)
    else:
        src.rename(dst)
    return True


def run(check: bool) -> list[str]:
    world = World(known_modules(), groups_module_on_disk())
    changed: list[str] = []
    for rel in text_files():
        path = ROOT / rel
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        done = rewrite_text(text, rel, world)
        if done != text:
            changed.append(rel)
            if not check:
                path.write_text(done, encoding="utf-8")
    durable = ROOT / "timer" / "durable"
    for package, doc in PACKAGES.items():
        init = durable / package / "__init__.py"
        if not init.exists():
            changed.append(init.relative_to(ROOT).as_posix())
            if not check:
                init.parent.mkdir(parents=True, exist_ok=True)
                init.write_text(doc, encoding="utf-8")
    for short in MOVES:
        src, dst = path_of(old(short)), path_of(new(short))
        if move(src, dst, check):
            changed.append(f"{src.relative_to(ROOT)} -> {dst.relative_to(ROOT)}")
    for name, target in DIRS.items():
        src, dst = durable / name, durable / target
        if move(src, dst, check):
            changed.append(f"{src.relative_to(ROOT)} -> {dst.relative_to(ROOT)}")
    return changed


def ruff(files: list[str]) -> None:
    """Import order, then the format, of the Python files the run changed."""
    python = [f for f in files if f.endswith(".py") and (ROOT / f).exists()]
    if not python:
        return
    exe = shutil.which("ruff", path=os.path.dirname(sys.executable)) or shutil.which("ruff")
    command = [exe] if exe else [sys.executable, "-m", "ruff"]
    sort = [*command, "check", "--fix", "--select", "I", "-q", *python]
    subprocess.run(sort, cwd=ROOT, check=False)  # exit 1 when it finds what it cannot fix
    subprocess.run([*command, "format", "-q", *python], cwd=ROOT, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a run would"
    )
    check = parser.parse_args().check
    changed = run(check)
    for line in changed:
        print(line)
    if check:
        return 1 if changed else 0
    moved = [line.split(" -> ")[1] for line in changed if " -> " in line]
    ruff([line for line in changed if " -> " not in line] + moved)
    return 0


if __name__ == "__main__":
    sys.exit(main())
