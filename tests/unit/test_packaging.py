"""What the sdist and the wheel carry: the license's text (the metadata says Apache-2.0),
and no test file (setuptools adds ``tests/test*.py`` to an sdist unless told not to)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # a build: the sdist, then the wheel from it (seconds)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[str]]:
    """The names in the sdist and in the wheel, built as .ci/wheel and pip build them."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sdist,) = out.glob("tickwheel-*.tar.gz")
    (wheel,) = out.glob("tickwheel-*.whl")
    with tarfile.open(sdist) as tar:
        in_sdist = [name.split("/", 1)[1] for name in tar.getnames() if "/" in name]
    with zipfile.ZipFile(wheel) as whl:
        in_wheel = whl.namelist()
    return in_sdist, in_wheel


def is_test_file(name: str) -> bool:
    parts = name.split("/")
    return parts[0] in {"tests", "test"} or parts[-1].startswith("test_")


def test_the_sdist_has_the_license_and_no_test_file(built: tuple[list[str], list[str]]) -> None:
    in_sdist, _ = built
    assert "LICENSE" in in_sdist
    assert [name for name in in_sdist if is_test_file(name)] == []


def test_the_wheel_has_the_license_and_no_test_file(built: tuple[list[str], list[str]]) -> None:
    _, in_wheel = built
    assert [n for n in in_wheel if n.endswith(".dist-info/licenses/LICENSE")], in_wheel
    assert [name for name in in_wheel if is_test_file(name)] == []


def test_the_license_is_apache_2() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License")
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
