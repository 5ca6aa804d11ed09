"""The engine's compiled core (``_speedups.c``): see ``timer/engine/core.py``."""

from typing import Any

def bind(task: type, task_list: type, wheel: type, timer: type, invalid_input: type) -> None: ...

add: Any  # SystemTimer.add, a method descriptor any class can take
cancel: Any  # TimerTask.cancel, likewise
