"""The Lua scripts of ``lua/``: their names, their text, and the one enum of their errors.

Each script is its file with the includes it declares (``lua/include/``: keys, records,
the results table, buckets, deciding, fencing) put in front by :func:`inline`. The I/O
layers (``timer.client``, ``timer.aio``) register each text once with redis-py's
``register_script``, whose ``Script`` reloads itself after ``NOSCRIPT``.

A script fails with ``redis.error_reply('<CODE> message')``. Every code is a member of
:class:`ErrorCode` (a test ties them to the ``Errors`` lines of the scripts' headers),
and :func:`script_error` is the one place a reply's text becomes a
:class:`~timer.errors.TimerError`.
"""

from __future__ import annotations

import re
from enum import StrEnum
from functools import cache
from importlib import resources

from ...errors import DuplicateTimer, Fenced, InvalidInput, TimerError, instant_text
from .durations import ms_text


class ScriptName(StrEnum):
    """One per file of ``lua/`` (``lua/include/`` holds what they share)."""

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
    ACK = "ack"
    REDELIVER = "redeliver"
    LEAVE_GROUP = "leave_group"
    GET = "get"
    RESULTS_INIT = "results_init"
    MIGRATE = "migrate"
    PUT_SCHEDULE = "put_schedule"
    STOP_SCHEDULE = "stop_schedule"
    ARM = "arm"
    SLOT_ACQUIRE = "slot_acquire"
    RATE_TAKE = "rate_take"
    PENDING_PAGE = "pending_page"
    PENDING_HEAD = "pending_head"
    READ = "read"


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
    conflict = CONFLICT.fullmatch(detail) if code == ErrorCode.CONFLICT else None
    if conflict:
        differ = conflict.group("differ") or ""
        return DuplicateTimer.of(conflict.group("id"), [f for f in differ.split(",") if f])
    if code == ErrorCode.TOOFAR and (far := TOOFAR.fullmatch(detail.strip())):
        detail = too_far(int(far.group("deadline")), int(far.group("most")))
    return ErrorCode(code).error(detail.strip() or message)


# decide.lua's TOOFAR: a deadline and the most a deadline may be ahead, in ms
TOOFAR = re.compile(r"deadline (?P<deadline>\d+) is more than (?P<most>\d+) ms from now")


def too_far(deadline_ms: int, most_ms: int) -> str:
    """TOOFAR's words with the deadline as a time and the limit in days too (the bare
    ms read "deadline 4102444800000 is more than 316224000000 ms from now": trial 10)."""
    years = most_ms / 86_400_000 / 366
    about = f" (about {round(years)} years)" if years >= 1 else ""
    # the limit as a duration first (trial 34: it led with "316224000000 ms")
    return (
        f"deadline {instant_text(deadline_ms)} is more than {ms_text(most_ms)}{about} from "
        "now: give a nearer one"
    )


# schedule.lua's CONFLICT: the id as given (any text), then the fields that differ, in
# parentheses at the end (a reply without them is an older script's)
CONFLICT = re.compile(
    r"timer (?P<id>.+) is pending with other parameters(?: \((?P<differ>[a-z,]*)\))?",
    re.DOTALL,
)


INCLUDE = re.compile(r'^--- @include "([a-z_]+)"$', re.MULTILINE)


@cache
def source(name: ScriptName) -> str:
    """The full text sent to Redis for script ``name``: the includes it declares
    (``--- @include "name"`` lines, each include's own first), less the helpers it never
    calls, then the script."""
    return inline(_read(f"{name.value}.lua"), prune_unused=True)


# A helper of an include: `local function name(` at the start of a line, to the first
# `end` at the start of a line (the includes indent everything inside a function).
HELPER = re.compile(r"^local function ([A-Za-z_]\w*)\(.*?^end\n", re.MULTILINE | re.DOTALL)
COMMENT = re.compile(r"--\[\[.*?\]\]|--[^\n]*", re.DOTALL)
NAME = re.compile(r"\b[A-Za-z_]\w*\b")


@cache
def _helpers(inc: str) -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """An include's names used at its top level (outside its helpers), and each helper's
    name -> the names its body uses (comments left out: a header names helpers it does
    not call)."""
    text = _read(f"include/{inc}.lua")
    uses = {m.group(1): _names(m.group(0)) - {m.group(1)} for m in HELPER.finditer(text)}
    return _names(HELPER.sub("", text)), uses


def _names(lua: str) -> frozenset[str]:
    return frozenset(NAME.findall(COMMENT.sub("", lua)))


def prune(done: list[str], script: str) -> str:
    """The includes ``done``, in order, without the helpers that neither ``script``, nor
    an include's top level, nor a helper kept calls.

    Lua runs an include's top level at every call of the script: each helper is a
    closure made again each time, so one a script never calls costs it at every call
    (server_cost counted ~80k instructions of setup for a single-timer script)."""
    uses: dict[str, frozenset[str]] = {}
    todo = set(_names(script))
    for inc in done:
        top, helpers = _helpers(inc)
        uses.update(helpers)
        todo |= top
    keep: set[str] = set()
    todo &= uses.keys()
    while todo:
        name = todo.pop()
        keep.add(name)
        todo |= (uses[name] & uses.keys()) - keep
    return "\n".join(
        HELPER.sub(lambda m: m.group(0) if m.group(1) in keep else "", _read(f"include/{d}.lua"))
        for d in done
    )


def inline(script: str, *, prune_unused: bool = False) -> str:
    """``script`` with the text of every include it declares put in front, each once,
    an include's own includes before it (the order its local functions need), and
    before all of them the guard (``prelude/guard.lua``) that keeps a script on a
    migrating cluster slot from writing anything; with ``prune_unused``, without the
    helpers it never calls (:func:`prune`)."""
    done: list[str] = []

    def visit(text: str) -> None:
        for dep in INCLUDE.findall(text):
            if dep not in done:
                visit(_read(f"include/{dep}.lua"))
                done.append(dep)

    visit(script)
    if prune_unused:
        includes = prune(done, script)
    else:
        includes = "\n".join(_read(f"include/{d}.lua") for d in done)
    return "\n".join([_read("prelude/guard.lua"), includes, script])


def include(*names: str) -> str:
    """The text of these includes and theirs, for tests that run the helpers alone."""
    return inline("".join(f'--- @include "{n}"\n' for n in names))


def header(name: ScriptName) -> str:
    """The contract header of one script (its opening ``--[[ … ]]`` block)."""
    text = _read(f"{name.value}.lua")
    return text[: text.index("]]")] if text.startswith("--[[") else ""


@cache
def _read(path: str) -> str:
    return (resources.files(__name__.rpartition(".")[0]) / "lua" / path).read_text()
