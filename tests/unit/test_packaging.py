"""What the sdist and the wheel carry: the license's text (the metadata says Apache-2.0),
and no test file (setuptools adds ``tests/test*.py`` to an sdist unless told not to).
Checked on the build the README's wheel lines make (tests/cli/test_readme.py)."""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def is_test_file(name: str) -> bool:
    parts = name.split("/")
    return parts[0] in {"tests", "test"} or parts[-1].startswith("test_")


def assert_packaged(sdist: Path, wheel: Path) -> None:
    """The sdist and the wheel (built as .ci/wheel and pip build them: the README's `make
    wheel`, whose test calls this on what it built, so the suite builds them once) carry
    the license and no test file."""
    with tarfile.open(sdist) as tar:
        in_sdist = [name.split("/", 1)[1] for name in tar.getnames() if "/" in name]
    with zipfile.ZipFile(wheel) as whl:
        in_wheel = whl.namelist()
    assert "LICENSE" in in_sdist
    assert [name for name in in_sdist if is_test_file(name)] == []
    assert [n for n in in_wheel if n.endswith(".dist-info/licenses/LICENSE")], in_wheel
    assert [name for name in in_wheel if is_test_file(name)] == []


def test_a_test_file_is_told_from_a_package_file() -> None:
    assert is_test_file("tests/cli/conftest.py") and is_test_file("timer/test_x.py")
    assert not is_test_file("timer/testing/__init__.py") and not is_test_file("LICENSE")


def test_the_license_is_apache_2() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License")
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
