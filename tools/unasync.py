"""Write the blocking driver from the asyncio one: ``timer/aio/driver.py`` is the source,
``timer/client/driver.py`` its generated twin (checked in, so it is read and imported as
any module is).

    python tools/unasync.py          # write the twin
    python tools/unasync.py --check  # exit 1, with a diff, when the twin is not what it writes

The rewrite is line by line, a list of (pattern, replacement) as httpcore's
``scripts/unasync.py`` does for its sync twin: ``async``/``await`` dropped, asyncio's
redis-py names for the blocking ones. A rule that no longer matches anything is an error
too, so the list says exactly what differs. The twin must come out formatted (ruff format --check
covers it): where dropping ``await`` would let ruff join a wrapped line, the source keeps
its layout with a trailing comma. ``tests/unit/test_unasync.py`` runs the check.
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "timer" / "aio" / "driver.py"
TWIN = ROOT / "timer" / "client" / "driver.py"

HEADER = (
    "# Generated from timer/aio/driver.py by tools/unasync.py: edit that file, then run\n"
    "# `python tools/unasync.py` (a unit test fails while this file is not what it writes).\n"
)

# (pattern, replacement), applied in order to each line; None drops the line.
RULES: list[tuple[str, str | None]] = [
    (r"^import asyncio\n$", None),
    (
        r"^from collections\.abc import AsyncIterator, Awaitable, Callable, Iterable, "
        r"Mapping, Sequence$",
        "from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence",
    ),
    (r"^import redis\.asyncio as aioredis$", "import redis"),
    (
        r"^from redis\.asyncio\.cluster import RedisCluster as AsyncRedisCluster$",
        "from redis.cluster import RedisCluster",
    ),
    # the masters' pipelines of a round: together on an event loop, one after another here
    (r"await asyncio\.gather\(\*\((.*)\)\)$", r"[\1]"),
    (r"Awaitable\[(list\[Any\])\]", r"\1"),
    (r"AsyncIterator", "Iterator"),
    (r"AsyncDriver", "SyncDriver"),
    (r"Async([A-Z]\w*)", r"\1"),
    (r"aioredis", "redis"),
    (r"async def ", "def "),
    (r"async for ", "for "),
    (r"await ", ""),
    (r"aclose", "close"),
    (r"asleep", "sleep"),
    (r"apoll", "poll"),
]
# a rule matches at the start of a word, not inside one (aclose, never foo_aclose)
COMPILED = [(re.compile(r"(?<!\w)" + pattern), repl) for pattern, repl in RULES]


def unasync(text: str) -> tuple[str, set[int]]:
    """The blocking twin of ``text``, and the indexes of the rules that changed a line."""
    used: set[int] = set()
    out = [HEADER]
    for line in text.splitlines(keepends=True):
        kept: str | None = line
        for i, (pattern, repl) in enumerate(COMPILED):
            if kept is None:
                break
            if pattern.search(kept):
                used.add(i)
                kept = None if repl is None else pattern.sub(repl, kept)
        if kept is not None:
            out.append(kept)
    return "".join(out), used


def unused(used: set[int]) -> list[str]:
    """The patterns of the rules that changed nothing (stale: the source moved on)."""
    return [RULES[i][0] for i in range(len(RULES)) if i not in used]


def differences(source: str, twin: str) -> list[str]:
    """Why ``twin`` is not ``source``'s generated twin: a unified diff (expected, found)
    and the stale rules; none when it is."""
    expected, used = unasync(source)
    diff = list(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            twin.splitlines(keepends=True),
            "generated from " + str(SOURCE.relative_to(ROOT)),
            str(TWIN.relative_to(ROOT)),
        )
    )
    return diff + [f"rule {p!r} matches no line\n" for p in unused(used)]


def main(argv: list[str]) -> int:
    source = SOURCE.read_text()
    if "--check" in argv:
        found = differences(source, TWIN.read_text())
        sys.stdout.writelines(found)
        if found:
            print(f"{TWIN.relative_to(ROOT)} is stale: run python tools/unasync.py")
        return 1 if found else 0
    text, used = unasync(source)
    stale = unused(used)
    if stale:
        print(f"rules that match no line: {stale}")
        return 1
    TWIN.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
