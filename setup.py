"""The one thing pyproject.toml cannot say: the engine's optional compiled core.

``timer/engine/_speedups.c`` puts ``SystemTimer.add`` and ``TimerTask.cancel`` in C. It is
optional: without a C compiler the build goes on and the engine runs its pure-Python
versions of the same two (``timer/engine/core.py`` chooses; ``core.COMPILED`` says which).

It also refuses a checkout whose links are text files: timer/worker and timer/cli are
symbolic links to worker/ and cli/, and a checkout made with core.symlinks=false (Windows'
default) has each as a small text file. The build would leave timer.worker and timer.cli
out of the wheel, and ``tickwheel`` would then fail on a missing module.
"""

import os
import sys

from setuptools import Extension, setup

for link in ("worker", "cli"):
    if os.path.isfile(os.path.join("timer", link)):
        sys.exit(
            f"error: timer/{link} is a text file, not a link to ../{link}: this checkout was "
            "made with core.symlinks=false (Windows' default), and the build would leave "
            f"timer.{link} out. Clone again with `git clone -c core.symlinks=true` (on "
            "Windows, with Developer Mode on), or run "
            "`git config core.symlinks true && git checkout -- timer/worker timer/cli`."
        )

setup(
    ext_modules=[Extension("timer.engine._speedups", ["timer/engine/_speedups.c"], optional=True)]
)
