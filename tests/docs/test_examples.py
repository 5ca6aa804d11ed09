"""Every Python and shell example of the README and the site runs (#42): a page cannot
drift from the code. How: tests/docs/examples.py."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from timer import TimerClient
from timer.cli import embedded

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
def home(tmp_path_factory: pytest.TempPathFactory, server_binary: Path) -> Iterator[Path]:
    """A user's embedded server (`tickwheel server start`) in a TICKWHEEL_HOME of its own."""
    base = tmp_path_factory.mktemp("docs-home")
    embedded.start(base, binary=str(server_binary))
    try:
        yield base
    finally:
        embedded.stop(base)


def fresh(home: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The reader's shell: the embedded server in ``home``, emptied (no namespace
    initialised: the tour runs in a TICKWHEEL_HOME of its own, so a reader's own server
    starts with nothing), and no $TICKWHEEL_REDIS_URL: a page's Python finds the server
    by itself, as a reader's does. The server's URL (for the test's checks)."""
    monkeypatch.delenv("TICKWHEEL_REDIS_URL", raising=False)
    monkeypatch.setenv("TICKWHEEL_HOME", str(home))
    state = embedded.status(home)
    assert state is not None, "the embedded server stopped"
    redis.Redis.from_url(state.url).flushall()
    return state.url


@pytest.mark.redis
@pytest.mark.parametrize("page", WITH_PYTHON, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_pages_python_runs(page: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's Python blocks, in order, as written, on the reader's embedded server
    with no URL given and nothing initialised (before, four guides tried localhost:6379
    and one raised KeyError 'TICKWHEEL_REDIS_URL' there; the migrating guide needed
    `default` initialised and did not say so), then again, as a reader runs a page a
    second time (the schedules guide raised DuplicateTimer, the handlers guide's
    assertions failed)."""
    fresh(home, monkeypatch)
    assert run_python(page) > 0
    run_again(page)


def run_again(*pages: Path) -> None:
    """The pages' Python run again, one after another, as a reader runs them again: in a
    new process (in this one, Celery's shared task registry would still hold the first
    run's tasks), on the same server (the environment ``fresh`` set)."""
    code = (
        "import sys; from pathlib import Path; from tests.docs.examples import run_python\n"
        "for page in sys.argv[1:]:\n"
        "    assert run_python(Path(page)), page"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, pages)], cwd=ROOT, capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip
    names = ", ".join(str(p.relative_to(ROOT)) for p in pages)
    assert done.returncode == 0, f"{names} run again:\n{done.stderr[-3000:]}"


@pytest.mark.redis
def test_every_pages_python_runs_beside_the_others(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One reader's server, every page's Python one after another, twice over: no page
    trips over what another left (the migrating guide's `job:{7}` was the README
    snippet's, already completed); and none makes the README tour's timers (its shell's,
    in namespace `default`): the job-timeouts guide's `job:{42}`, `job:{43}` and
    `job:{44}` were, and a reader's tour then printed "Already decided" for each."""
    url = fresh(home, monkeypatch)
    for _ in range(2):  # a process a round, as a reader's session
        run_again(*WITH_PYTHON)
    with redis.Redis.from_url(url) as r:
        made = r.sismember("tw:namespaces", "default")
    if made:
        with TimerClient.from_url(url, "default") as c:
            assert [t for t in ("job:{42}", "job:{43}", "job:{44}") if c.get(t)] == []


# a URL a page's Python would read itself, rather than from_url()'s own default
OWN_URL = re.compile(r"TICKWHEEL_REDIS_URL|localhost:6379|127\.0\.0\.1:6379")


def test_no_pages_python_names_its_redis_itself() -> None:
    """Every page's Python finds Redis as the client does given no URL
    (``$TICKWHEEL_REDIS_URL``, else the embedded server): none reads the variable or
    names a server of its own (comments may say where the URL comes from)."""
    for page in pages():
        for block in blocks(page, ("python",)):
            for n, line in enumerate(block.code.splitlines()):
                code = line.split("#", 1)[0]
                assert not OWN_URL.search(code), f"{block.where} (+{n}): {line.strip()}"


@pytest.mark.redis
def test_the_handlers_guide_leaves_other_guides_outcomes_alone(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader who ran the job-timeouts guide first (its cancelled timers' outcomes in
    its namespace) runs the handlers guide: its groups handle only its own
    outcomes, and nothing is dead-lettered (before, its `per-tenant` group started from
    every retained outcome, crashed on the job-timeouts guide's and dead-lettered them)."""
    url = fresh(home, monkeypatch)
    run_python(ROOT / "docs" / "guides" / "job-timeouts.md")
    scope: dict[str, object] = {}
    run_python(ROOT / "docs" / "guides" / "handlers.md", scope)
    namespaces = {"job-timeouts-guide"} | {
        c.namespace for c in scope.values() if isinstance(c, TimerClient)
    }
    for ns in sorted(namespaces):
        with TimerClient.from_url(url, ns) as c:
            assert list(c.dead_letters()) == [], ns
    assert scope["calls"] and scope["order"]


@pytest.mark.redis
def test_the_job_timeouts_guide_runs_again_as_written(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader runs the guide's code a second time on the same server, as everyone does
    (its debounce block left a window pending, and the second run's first call joined
    it: `first.created` failed)."""
    fresh(home, monkeypatch)
    run_python(ROOT / "docs" / "guides" / "job-timeouts.md")
    run_python(ROOT / "docs" / "guides" / "job-timeouts.md")


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


@pytest.mark.redis
def test_the_schedules_guide_runs_on_a_fresh_server_and_beside_the_tours_schedule(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The schedules guide on a server nothing initialised (it needed `default`
    initialised, which it did not say), then beside the README tour's `heartbeat`
    taken on the reader's own server (its create raised DuplicateTimer): it keeps to
    a namespace of its own, and leaves the tour's schedule as it was."""
    url = fresh(home, monkeypatch)
    run_python(ROOT / "docs" / "guides" / "schedules.md")
    fresh(home, monkeypatch)
    with TimerClient.from_url(url, "default") as c:
        c.init(shards=16)  # the tour's `tickwheel init`
        c.schedules.create("heartbeat", every="1s", payload={"ping": True})
        run_python(ROOT / "docs" / "guides" / "schedules.md")
        tour = c.schedules.get("heartbeat")
        assert tour is not None and tour.payload == {"ping": True}
