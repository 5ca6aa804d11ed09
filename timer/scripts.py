"""Loads the Lua scripts of ``timer/lua/`` once, through redis-py's ``register_script``.

Each script is its file with the shared helpers of ``_lib.lua`` put in front. A
registered ``Script`` reloads itself after ``NOSCRIPT`` (a restart or ``SCRIPT FLUSH``
empties the server's cache), and pipelines load missing scripts before they run.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

NAMES = (
    "schedule",
    "cancel",
    "complete",
    "reschedule",
    "notify",
    "fire",
    "sweep",
    "lease_acquire",
    "lease_renew",
    "lease_release",
    "trim",
)


@cache
def source(name: str) -> str:
    """The full text sent to Redis for script ``name`` (helpers + the script)."""
    lua = resources.files("timer") / "lua"
    lib = (lua / "_lib.lua").read_text()
    return lib + "\n" + (lua / f"{name}.lua").read_text()


class Scripts:
    """One registered ``Script`` per name, bound to one redis-py client."""

    def __init__(self, client: Any) -> None:
        for name in NAMES:
            setattr(self, name, client.register_script(source(name)))

    schedule: Any
    cancel: Any
    complete: Any
    reschedule: Any
    notify: Any
    fire: Any
    sweep: Any
    lease_acquire: Any
    lease_renew: Any
    lease_release: Any
    trim: Any
