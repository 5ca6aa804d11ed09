"""The engine's tests run twice: on its compiled core and on its pure-Python one (#15).

``SystemTimer.add`` and ``TimerTask.cancel`` exist in C (``timer/engine/_speedups.c``,
built when a C compiler is there) and in Python (the fallback); every test of a module
below runs once with each. Without the extension the compiled run is skipped, unless
``TICKWHEEL_REQUIRE_COMPILED`` is set (CI sets it: there it must have been built).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from timer.engine import core

ENGINE_MODULES = {
    "test_purgatory",
    "test_reaper",
    "test_system_timer",
    "test_task_list",
    "test_wheel",
    "test_wheel_oracle",
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.module.__name__.rsplit(".", 1)[-1] in ENGINE_MODULES:
        metafunc.fixturenames.append("engine_core")
        metafunc.parametrize("engine_core", ["compiled", "python"], indirect=True)


@pytest.fixture
def engine_core(request: pytest.FixtureRequest) -> Iterator[str]:
    """The core this test runs on; the one the process started with is put back after."""
    name: str = request.param
    if name == "compiled" and not core.AVAILABLE:
        if os.environ.get("TICKWHEEL_REQUIRE_COMPILED"):
            pytest.fail("TICKWHEEL_REQUIRE_COMPILED is set but the C extension was not built")
        pytest.skip("the engine's C extension was not built (no C compiler at install)")
    with core.using(name):
        yield name
