"""fakeredis's clock reads pointed at a store's :class:`~timer.clock.Time`.

fakeredis has no clock of its own to give it: it calls ``time.time()`` where it needs
the time, in six modules (the command's time, which decides expiry, and the deadline of
a blocking command; ``TIME``; the ids ``XADD *`` makes; the idle times of a group's
pending entries and of its consumers, through ``_helpers.current_time``; ``CLIENT PAUSE``;
a client's age). Each of those modules' ``time`` is replaced, once, by :data:`HOOKED`: the
``time`` module itself but for ``time()``, which answers the clock of the store whose
command is running (a context variable its sockets set around each command, so a task or
thread sees only its own command's clock), and ``time.time()`` anywhere else, so a plain
``fakeredis.FakeRedis`` in the same process keeps the system's time.

The patch is global because fakeredis's reads are module-level calls, not a method of its
server that one instance could override; it changes nothing outside a store's command.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from ...clock import Time

# The modules of fakeredis 2.41 that read time.time() (grep 'time.time()' in its source;
# tests/unit/test_fakestore.py fails when one more does).
FAKEREDIS_TIME_READERS = (
    "fakeredis._helpers",  # current_time(): stream idle times, hash field expiry, ACL log
    "fakeredis._socket._base",  # each command's time (expiry), blocking deadlines
    "fakeredis.model._stream",  # the ids of XADD *
    "fakeredis.model._client_info",  # a connection's age
    "fakeredis.commands_mixins.server_mixin",  # TIME, LASTSAVE
    "fakeredis.commands_mixins.connection_mixin",  # CLIENT PAUSE, CLIENT INFO's age
)

# The reads left alone: the server's LASTSAVE at its creation (the store sets it from its
# clock), and the seed of TOPK's random numbers (RedisBloom's; tickwheel has no use).
FAKEREDIS_TIME_READS_LEFT = ("fakeredis._core._server", "fakeredis.model._topk")

_RUNNING: contextvars.ContextVar[Time | None] = contextvars.ContextVar(
    "tickwheel_fakestore_time", default=None
)


class _HookedTime(ModuleType):
    """The ``time`` module whose ``time()`` reads the running store command's clock."""

    def __init__(self) -> None:
        super().__init__("time", "time, whose time() follows the running FakeStore command")

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def time() -> float:
        running = _RUNNING.get()
        return time.time() if running is None else running.wall()


HOOKED = _HookedTime()
_installed = threading.Lock()


def install() -> None:
    """Point fakeredis's time reads at :data:`HOOKED` (idempotent)."""
    with _installed:
        for name in FAKEREDIS_TIME_READERS:
            module = importlib.import_module(name)
            if module.time is not HOOKED:
                module.time = HOOKED  # type: ignore[attr-defined]


@contextlib.contextmanager
def running_on(clock: Time) -> Iterator[None]:
    """Within the block, fakeredis reads ``clock`` (a store's command runs)."""
    token = _RUNNING.set(clock)
    try:
        yield
    finally:
        _RUNNING.reset(token)
