"""The one thing pyproject.toml cannot say: the engine's optional compiled core (#15).

``timer/engine/_speedups.c`` puts ``SystemTimer.add`` and ``TimerTask.cancel`` in C. It is
optional: without a C compiler the build goes on and the engine runs its pure-Python
versions of the same two (``timer/engine/core.py`` chooses; ``core.COMPILED`` says which).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[Extension("timer.engine._speedups", ["timer/engine/_speedups.c"], optional=True)]
)
