"""Which engine core runs is chosen where SystemTimer and TimerTask are made (#28)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from timer.engine import SystemTimer, TimerTask, core


@pytest.mark.parametrize("pure", ["", "1"])
def test_the_core_is_chosen_where_the_classes_are_made(pure: str) -> None:
    """In a fresh interpreter, SystemTimer and TimerTask hold the core that
    ``timer.engine.core`` chose in their own class dicts: compiled when built, Python
    with ``TICKWHEEL_PURE_PYTHON=1``; nothing swaps them afterwards."""
    if not pure and not core.AVAILABLE:
        pytest.skip("the engine's C extension was not built")
    code = (
        "from timer.engine import core, SystemTimer, TimerTask\n"
        "print(core.COMPILED, SystemTimer.__dict__['add'] is SystemTimer._python_add,\n"
        "      TimerTask.__dict__['cancel'] is TimerTask._python_cancel)\n"
    )
    env = {**os.environ, "TICKWHEEL_PURE_PYTHON": pure}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    python = bool(pure)
    assert done.stdout.split() == [str(not python), str(python), str(python)]


def test_the_compiled_methods_refuse_an_object_of_another_class() -> None:
    """The C methods read slots at fixed offsets, so they check their receiver first."""
    speedups = pytest.importorskip("timer.engine._speedups")
    with pytest.raises(TypeError, match="bound SystemTimer only"):
        speedups.add(object(), TimerTask(1))
    with pytest.raises(TypeError, match="bound TimerTask only"):
        speedups.cancel(SystemTimer("t"))
