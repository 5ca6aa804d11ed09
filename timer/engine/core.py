"""Which core runs the engine's two hottest methods: ``SystemTimer.add`` and
``TimerTask.cancel``.

Each exists twice, doing the same thing step for step under the same lock: in Python
(``_python_add`` in ``system_timer.py``, ``_python_cancel`` in ``task.py``) and in C
(``_speedups.c``, built by ``setup.py`` when a C compiler is there; what it saves is
the bytecode). Each class takes its method in its own body with :func:`pick`::

    add = core.pick("add", _python_add)

which is the C one when the extension was built, unless ``TICKWHEEL_PURE_PYTHON=1`` is
set when the engine is imported, and the Python one otherwise. :data:`COMPILED` says
which. The C methods read the classes' ``__slots__`` at fixed offsets; ``bind`` gives
them the offsets once the classes exist (``system_timer.py``, at its end); before that,
or on an object of another class, they refuse to run.

Tests and benchmarks run both cores in one process with :func:`using`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])


def _extension() -> ModuleType | None:
    try:
        from . import _speedups  # noqa: PLC0415 - optional: built only with a C compiler
    except ImportError:
        return None
    return _speedups


_speedups = _extension()
AVAILABLE = _speedups is not None  # the C extension was built
COMPILED = AVAILABLE and not os.environ.get("TICKWHEEL_PURE_PYTHON")  # and it runs


def pick(name: str, python: F) -> F:
    """The method ``name`` of the core that runs: compiled if :data:`COMPILED`."""
    if COMPILED:
        return cast(F, getattr(_speedups, name))
    return python


_classes: dict[str, Any] = {}  # the classes bound, by name


def bind(task: type, task_list: type, wheel: type, timer: type, invalid: type) -> None:
    """Give the compiled methods the classes' slot offsets (if the extension was built)."""
    _classes.update(SystemTimer=timer, TimerTask=task)
    if _speedups is not None:
        _speedups.bind(task, task_list, wheel, timer, invalid)


@contextmanager
def using(name: str) -> Iterator[None]:
    """Run ``"compiled"`` or ``"python"`` for a while, for every timer (tests and
    benchmarks: both behave the same). KeyError if the extension was not built."""
    timer, task = _classes["SystemTimer"], _classes["TimerTask"]
    if name == "compiled" and _speedups is None:
        raise KeyError("compiled: the engine's C extension was not built")
    if name not in ("compiled", "python"):
        raise KeyError(name)
    before = timer.add, task.cancel
    if name == "compiled":
        add, cancel = _speedups.add, _speedups.cancel  # type: ignore[union-attr]
    else:
        add, cancel = timer._python_add, task._python_cancel
    setattr(timer, "add", add)  # noqa: B010 - a method of the class, for a while
    setattr(task, "cancel", cancel)  # noqa: B010
    try:
        yield
    finally:
        setattr(timer, "add", before[0])  # noqa: B010
        setattr(task, "cancel", before[1])  # noqa: B010
