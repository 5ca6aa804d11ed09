"""The layers stay apart: the engine needs no Redis, the data model does no I/O, no cycles."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("timer", "worker", "cli")  # the installed top-level names (#42)
WEB = ("timer.httpapi", "timer.dashboard")  # the web doors, inside the library


def fresh_python(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new interpreter from the repository root."""
    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


BLOCK = "import sys\nfor m in {blocked!r}:\n    sys.modules[m] = None  # import m now fails\n"


def test_engine_imports_without_redis_or_msgpack() -> None:
    """timer.engine (and the engine names of timer) import with redis-py and msgpack absent."""
    code = BLOCK.format(blocked=["redis", "msgpack"]) + (
        "import timer.engine\n"
        "from timer import SystemTimer, SystemTimerReaper, TimerTask, DelayedOperationPurgatory\n"
        "from timer.engine import TaskTimer\n"
        "assert isinstance(SystemTimer('t'), TaskTimer)\n"
        "loaded = sorted(m for m in sys.modules if sys.modules[m] is not None\n"
        "                and m.split('.')[0] in ('redis', 'msgpack', 'hiredis'))\n"
        "print(loaded)\n"
    )
    done = fresh_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_durable_layer_imports_without_redis() -> None:
    """timer.durable (keys, codec, models, scripts, calls, ops) never imports redis-py."""
    code = BLOCK.format(blocked=["redis"]) + (
        "import timer.durable.ops, timer.durable.calls, timer.durable.scripts\n"
        "print(sorted(m for m in sys.modules if m.startswith('timer.')\n"
        "             and not m.startswith(('timer.durable', 'timer.engine', 'timer.errors'))))\n"
    )
    done = fresh_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_worker_imports_without_prometheus_client() -> None:
    """`from worker import Worker` needs no metrics library (metrics are the CLI's option)."""
    done = fresh_python(BLOCK.format(blocked=["prometheus_client"]) + "from worker import Worker")
    assert done.returncode == 0, done.stderr


def modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join(parts), path


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports anywhere in its file (TYPE_CHECKING included)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for imported in targets:
            target = imported
            while target and target not in known:
                target = target.rpartition(".")[0]
            # A package's own __init__ runs before any submodule anyway: not an edge.
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def test_no_import_cycles() -> None:
    """No cycle among the project's modules, counting every import in a file."""
    paths = dict(modules())
    graph = {name: imports_of(name, path, set(paths)) for name, path in paths.items()}
    done: set[str] = set()

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            cycle = [*trail[trail.index(name) :], name]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, [*trail, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_imports_point_one_way() -> None:
    """cli -> worker -> timer, cli -> timer.httpapi/timer.dashboard -> the rest of timer;
    the library below the web doors never imports them, and the engine and the data
    model import no I/O layer."""
    paths = dict(modules())
    graph = {name: imports_of(name, path, set(paths)) for name, path in paths.items()}

    def reaches(name: str, prefix: str) -> list[str]:
        return sorted(t for t in graph[name] if t == prefix or t.startswith(prefix + "."))

    for name, imported in graph.items():
        if name.startswith("timer"):
            assert not reaches(name, "worker") and not reaches(name, "cli"), name
        if name.startswith("timer") and not name.startswith(WEB):  # the library itself
            assert not reaches(name, "timer.httpapi") and not reaches(name, "timer.dashboard")
        if name.startswith("worker"):
            assert not reaches(name, "cli"), name
        if name.startswith("timer.httpapi"):
            assert not reaches(name, "timer.dashboard"), name
        if name.startswith("timer.dashboard"):  # of the HTTP API, only how routes match
            assert reaches(name, "timer.httpapi") in ([], ["timer.httpapi.routing"]), name
        if name.startswith("timer.engine"):
            outside = {t for t in imported if not t.startswith("timer.engine")}
            assert outside <= {"timer.errors"}, name
        if name.startswith("timer.durable"):
            allowed = ("timer.durable", "timer.errors")
            assert all(t.startswith(allowed) for t in imported), (name, imported)
    assert not reaches("timer.aio", "timer.client"), "the asyncio client is a peer, not a wrapper"


def attributes_used(path: Path) -> set[str]:
    return {
        node.attr
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Attribute)
    }


def test_worker_builds_no_keys_and_touches_no_raw_connection() -> None:
    """worker/ reaches Redis only through the client's operations and its ShardStore."""
    for path in sorted((ROOT / "worker").glob("*.py")):
        used = attributes_used(path)
        assert not used & {"redis", "scripts", "keys", "where", "_run"}, (path.name, used)
        source = path.read_text()
        assert "KEYS" not in source and "timer.durable.keys" not in source, path.name
