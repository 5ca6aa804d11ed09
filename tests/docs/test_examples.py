"""Every Python and shell example of the README and the site runs (#42): a page cannot
drift from the code. How: tests/docs/examples.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from timer import TimerClient
from timer.testing import RedisServer

from .examples import ROOT, blocks, check_claim, pages, run_python

# a page whose Python needs more than a server runs where that is at hand
RUN_ELSEWHERE = {"docs/guides/spark.md": "tests/spark/test_spark.py::test_the_spark_guide_runs"}
WITH_PYTHON = [
    p
    for p in pages()
    if str(p.relative_to(ROOT)) not in RUN_ELSEWHERE
    and any(b.claim is None for b in blocks(p, ("python",)))
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, server_binary: Path) -> Iterator[str]:
    srv = RedisServer(tmp_path_factory.mktemp("docs-redis"), binary=server_binary).start()
    try:
        yield srv.url
    finally:
        srv.stop()


def fresh(url: str) -> None:
    """An empty server with the namespace the guides assume (`tickwheel init`)."""
    redis.Redis.from_url(url).flushall()
    c = TimerClient.from_url(url, "default")
    c.init(shards=16)
    c.close()


@pytest.mark.redis
@pytest.mark.parametrize("page", WITH_PYTHON, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_pages_python_runs(page: Path, server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's Python blocks, in order, against a real server."""
    fresh(server)
    monkeypatch.setenv("TICKWHEEL_REDIS_URL", server)
    assert run_python(page) > 0


def test_every_block_is_run_or_names_who_runs_it() -> None:
    """A shell block names the test that runs it as written (its commands need a shell,
    a background job, Docker or curl); a Python block not run here names its test or the
    file it is an excerpt of; each claim is true."""
    seen = 0
    for page in pages():
        rel = str(page.relative_to(ROOT))
        for block in blocks(page):
            seen += 1
            if block.lang == "sh":
                assert block.claim is not None, f"{block.where}: a shell block no test runs"
            if block.claim is not None:
                check_claim(block)
            elif rel in RUN_ELSEWHERE:
                test, name = RUN_ELSEWHERE[rel].split("::")
                assert f"def {name}(" in (ROOT / test).read_text(), RUN_ELSEWHERE[rel]
    assert seen >= 15


# Material's code block shows about 84 characters before it scrolls (#56: the
# job-timeouts guide's comments ran past its edge). The pages a newcomer reads first.
FIRST_READ = ("README.md", "docs/getting-started.md", "docs/guides/job-timeouts.md")


@pytest.mark.parametrize("name", FIRST_READ)
def test_the_first_pages_python_fits_its_block(name: str) -> None:
    for block in blocks(ROOT / name, ("python",)):
        for n, line in enumerate(block.code.splitlines()):
            assert len(line) <= 84, f"{block.where} (+{n}): {len(line)} characters: {line}"
