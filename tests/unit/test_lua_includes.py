"""The Lua includes: each script declares what it uses, and gets it, each helper once."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from timer.durable.model.scripts import INCLUDE, ScriptName, include, source

LUA = resources.files("timer.durable.model") / "lua"
DEFINES = re.compile(r"^local function (\w+)|^local ((?:\w+, )*\w+) =", re.MULTILINE)


def defined(text: str) -> list[str]:
    """The top-level names a Lua text defines (``local function f``, ``local A, b =``)."""
    out: list[str] = []
    for function, names in DEFINES.findall(text):
        out += [function] if function else names.split(", ")
    return out


def code(text: str) -> str:
    """Lua without its comments (a header names helpers it does not call)."""
    return re.sub(r"--\[\[.*?\]\]|--[^\n]*", "", text, flags=re.DOTALL)


HELPERS = {
    name: path.name[: -len(".lua")]
    for path in (LUA / "include").iterdir()
    for name in defined(path.read_text())
}


@pytest.mark.parametrize("name", list(ScriptName))
def test_each_script_gets_every_helper_it_calls_once(name: ScriptName) -> None:
    """A script's text, once its includes are put in front, defines every shared helper
    it calls, and none twice (a helper the script does not declare is a nil global in
    Redis, found only when that line runs)."""
    own = code((LUA / f"{name.value}.lua").read_text())
    called = {h for h in HELPERS if re.search(rf"\b{h}\b", own)}
    full = source(name)
    names = defined(code(full))
    assert called <= set(names), f"{name}: not included: {called - set(names)}"
    assert len(names) == len(set(names)), f"{name}: defined twice"


def test_every_include_is_used_and_declares_its_own() -> None:
    """Each include defines only what it says it is for, calls only what it includes,
    and is used by some script (no dead file)."""
    used: set[str] = set()
    for name in ScriptName:
        used.update(INCLUDE.findall(source(name)))
    files = {p.name[: -len(".lua")] for p in (LUA / "include").iterdir()}
    assert used == files
    for inc in files:
        text = include(inc)
        mine = code((LUA / "include" / f"{inc}.lua").read_text())
        called = {
            h for h, where in HELPERS.items() if where != inc and re.search(rf"\b{h}\b", mine)
        }
        assert called <= set(defined(code(text))), f"{inc} calls {called} without including it"


@pytest.mark.parametrize("name", list(ScriptName))
def test_each_script_reads_the_guard_before_anything_else(name: ScriptName) -> None:
    """The guard (prelude/guard.lua) is the first code of every script, so on a migrating
    cluster slot no script writes before Redis stops it (#39)."""
    first_call = re.search(r"redis\.call\('(\w+)', ([^)]*)\)", code(source(name)))
    assert first_call is not None
    assert first_call.groups() == ("EXISTS", "tag .. ':guard'"), first_call.groups()


NUMBERED = re.compile(r"\b(?:ARGV|KEYS)\[\d+\]|unpack\((?:ARGV|KEYS)\b")


def _bindings_end(lines: list[str]) -> int:
    """Where a script's opening bindings end: its first line that is neither a ``local``
    nor the continuation of one (an indented line)."""
    for i, line in enumerate(lines):
        if line.strip() and not line.startswith(("local ", " ")):
            return i
    return len(lines)


@pytest.mark.parametrize("name", list(ScriptName))
def test_each_script_names_its_keys_and_arguments_at_the_top(name: ScriptName) -> None:
    """A script binds each ``KEYS[n]`` and ``ARGV[n]`` to a named local before anything
    else, and below reads names, not numbers (BullMQ's habit; #41). A variadic tail is
    read in a loop from a named first index (``ARGV[i]``). The includes take what they
    need as arguments: no helper reads KEYS or ARGV behind its caller's back."""
    own = code((LUA / f"{name.value}.lua").read_text())
    lines = [line for line in own.splitlines() if line.strip()]
    end = _bindings_end(lines)
    below = [line for line in lines[end:] if NUMBERED.search(line)]
    assert not below, f"{name.value}.lua reads KEYS/ARGV by number below its bindings: {below}"
    for path in (LUA / "include").iterdir():
        assert not re.search(r"\b(?:ARGV|KEYS)\b", code(path.read_text())), path.name


@pytest.mark.parametrize("name", list(ScriptName))
def test_each_script_carries_no_helper_it_never_calls(name: ScriptName) -> None:
    """Every helper a script's text defines is called in it (by the script, an include's
    top level or another helper): Lua makes each one again at every call, so an unused one
    is a cost at every call (scripts.prune); and what it calls is still there (above)."""
    text = code(source(name))
    helpers = re.findall(r"^local function (\w+)", text, re.MULTILINE)
    unused = [h for h in helpers if len(re.findall(rf"\b{h}\b", text)) < 2]
    assert not unused, f"{name}: {unused}"
