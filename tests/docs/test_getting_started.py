"""Getting started leads with what works wherever tickwheel is installed: `tickwheel
demo` (a wheel has no Makefile); `make demo` and `make test` are the checkout's."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from timer.cli import embedded
from timer.cli.main import main
from timer.durable.model.keys import NAMESPACES

from .examples import ROOT, blocks

PAGE = ROOT / "docs" / "getting-started.md"


def demo_line() -> list[str]:
    """The page's first shell block: one command, its arguments as a shell splits them."""
    first = blocks(PAGE, ("sh",))[0]
    lines = [line for line in first.code.splitlines() if line.strip()]
    assert len(lines) == 1, first.code
    return shlex.split(lines[0], comments=True)


def test_the_page_leads_with_the_demo_and_gives_make_to_a_checkout() -> None:
    """A wheel user read `make demo` / `make test` under "Two commands" (the README's part
    the page took), with `tickwheel demo` in a later bullet only."""
    text = PAGE.read_text()
    assert demo_line() == ["tickwheel", "demo"]
    assert '"README.md:commands"' not in text  # its heading and its block are make's
    assert text.index("tickwheel demo") < text.index("make demo")
    for paragraph in text.split("\n\n"):
        if "`make " in paragraph:
            assert "checkout" in paragraph, paragraph


@pytest.mark.redis
def test_the_demo_line_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server_binary: Path
) -> None:
    """The page's line, smaller (a run of its default size takes minutes), with no URL,
    as a reader's: it starts the embedded server, checks every timer, leaves the server
    running and drops its namespace, as the page says."""
    home = tmp_path / ".tickwheel"  # $TICKWHEEL_HOME (tests/conftest.py)
    monkeypatch.delenv("TICKWHEEL_REDIS_URL", raising=False)
    monkeypatch.setenv("TICKWHEEL_SERVER_BINARY", str(server_binary))
    assert embedded.status(home) is None
    smaller = ["--timers", "300", "--min-delay", "1s", "--max-delay", "3s",
               "--lease", "1000ms", "--seed", "5"]  # fmt: skip
    args = ["--json", *demo_line()[1:], *smaller]
    try:
        result = CliRunner().invoke(main, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert summary["ok"] is True and summary["scheduled"] == 300, summary
        state = embedded.status(home)
        assert state is not None, "the demo did not leave the embedded server running"
        with redis.Redis.from_url(state.url) as r:
            left = [k for k in [*r.smembers(NAMESPACES), *r.scan_iter()] if b"demo-" in k]
            assert left == [], "its namespace was kept"
    finally:
        embedded.stop(home)
