"""The two links: ``timer/worker -> ../worker`` and ``timer/cli -> ../cli``.

From the repository's root, ``worker`` and ``cli`` are also importable under their bare
folder names, which would load a second copy of each package (its classes not the
installed ones); they refuse instead, saying which name to use. A checkout made with
``core.symlinks=false`` (Windows' default) has each link as a small text file: neither the
package nor the build goes on as if nothing were missing, both say why and what to do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``args`` in ``cwd`` with only that directory on the import path."""
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(
        args, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("bare", "use"), [("worker", "timer.worker"), ("cli", "timer.cli")], ids=["worker", "cli"]
)
def test_a_bare_name_refuses_and_names_the_package(bare: str, use: str) -> None:
    imported = run([sys.executable, "-c", f"import {bare}"], ROOT)
    assert imported.returncode != 0
    assert "ImportError" in imported.stderr
    assert f"import it as {use}" in imported.stderr, imported.stderr
    ran = run([sys.executable, "-m", bare, "--help"], ROOT)
    assert ran.returncode != 0
    assert f"import it as {use}" in ran.stderr, ran.stderr
    assert "tickwheel" in ran.stderr  # the command to run instead
    assert "usage" not in ran.stdout  # nothing of the copy ran


def test_the_package_names_still_import() -> None:
    done = run(
        [
            sys.executable,
            "-c",
            "import timer.worker, timer.cli.main; print(timer.worker.Worker.__module__)",
        ],
        ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "timer.worker.worker"


@pytest.fixture(scope="module")
def textual_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This repository cloned with ``core.symlinks=false``: its committed tree, each link
    a text file holding the link's target, as git writes it where links are off."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    clone = tmp_path_factory.mktemp("links") / "tickwheel"
    clone_args = ["--quiet", "--depth=1", "--config", "core.symlinks=false"]
    done = subprocess.run(
        ["git", "-c", "core.symlinks=false", "clone", *clone_args, f"file://{ROOT}", str(clone)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return clone


def test_a_checkout_without_links_has_them_as_text_files(textual_clone: Path) -> None:
    for name in ("worker", "cli"):
        link = textual_clone / "timer" / name
        assert link.is_file() and not link.is_symlink()
        assert link.read_text() == f"../{name}"


def test_a_checkout_without_links_says_why_on_import(textual_clone: Path) -> None:
    done = run([sys.executable, "-c", "import timer"], textual_clone)
    assert done.returncode != 0
    assert "core.symlinks" in done.stderr, done.stderr
    assert "timer/worker" in done.stderr


def test_a_checkout_without_links_refuses_to_build(textual_clone: Path) -> None:
    """The build would leave timer.worker and timer.cli out of the wheel (``tickwheel``
    then fails on a missing module): setup.py stops it first, saying why."""
    done = run([sys.executable, "setup.py", "--name"], textual_clone)
    assert done.returncode != 0
    assert "core.symlinks" in done.stderr, done.stderr
    assert "tickwheel" not in done.stdout
