"""The Lua scripts of ``lua/``: their names, their text, and the one enum of their errors.

Each script is its file with the shared helpers of ``_lib.lua`` put in front. The I/O
layers (``timer.client``, ``timer.aio``) register each text once with redis-py's
``register_script``, whose ``Script`` reloads itself after ``NOSCRIPT``.

A script fails with ``redis.error_reply('<CODE> message')``. Every code is a member of
:class:`ErrorCode` (a test ties them to the ``Errors`` lines of the scripts' headers),
and :func:`script_error` is the one place a reply's text becomes a
:class:`~timer.errors.TimerError`.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cache
from importlib import resources

from ..errors import DuplicateTimer, Fenced, InvalidInput, TimerError


class ScriptName(StrEnum):
    """One per file of ``lua/`` (but ``_lib``)."""

    SCHEDULE = "schedule"
    CANCEL = "cancel"
    COMPLETE = "complete"
    RESCHEDULE = "reschedule"
    NOTIFY = "notify"
    FIRE = "fire"
    SWEEP = "sweep"
    LEASE_ACQUIRE = "lease_acquire"
    LEASE_RENEW = "lease_renew"
    LEASE_RELEASE = "lease_release"
    TRIM = "trim"
    CLAIM = "claim"
    RETRY = "retry"
    DEAD = "dead"
    TOUCH = "touch"
    REDELIVER = "redeliver"
    LEAVE_GROUP = "leave_group"
    GET = "get"
    RESULTS_INIT = "results_init"


class ErrorCode(StrEnum):
    """The first word of every error a script can return, and what it means."""

    CONFLICT = "CONFLICT"  # a pending timer with this id has other parameters
    TOOFAR = "TOOFAR"  # the deadline is further than max_delay_ms from now
    FENCED = "FENCED"  # the caller does not hold the shard's lease at that epoch

    @property
    def error(self) -> type[TimerError]:
        return _ERRORS[self]


_ERRORS: dict[ErrorCode, type[TimerError]] = {
    ErrorCode.CONFLICT: DuplicateTimer,
    ErrorCode.TOOFAR: InvalidInput,
    ErrorCode.FENCED: Fenced,
}


def script_error(message: str) -> TimerError | None:
    """The TimerError for a script's error reply (``<CODE> detail``), or None if the
    reply is not one of ours (then it is Redis's own, and the caller says so)."""
    code, _, detail = message.partition(" ")
    if code not in ErrorCode.__members__:
        return None
    return ErrorCode(code).error(detail.strip() or message)


@cache
def source(name: ScriptName) -> str:
    """The full text sent to Redis for script ``name`` (helpers + the script)."""
    lua = resources.files("timer.durable") / "lua"
    lib = (lua / "_lib.lua").read_text()
    return lib + "\n" + (lua / f"{name.value}.lua").read_text()


def header(name: ScriptName) -> str:
    """The contract header of one script (its opening ``--[[ … ]]`` block)."""
    text = (resources.files("timer.durable") / "lua" / f"{name.value}.lua").read_text()
    return text[: text.index("]]")] if text.startswith("--[[") else ""
