"""One error hierarchy for the whole of tickwheel.

Every error a caller can see derives from :class:`TimerError`, so ``except TimerError``
is enough at any boundary (the CLI maps each subclass to one exit code). Expected
outcomes are return values, not exceptions: ``TimingWheel.add`` returns False for an
expired task, ``cancel`` returns False when the timer was already decided.
Each class declares, once, how the doors report it: ``exit_code`` (the CLI's, and the
``exit_code`` of the HTTP API's error body) and ``http_status`` (the HTTP API's). A
subclass inherits its parent's; ``tickwheel --help`` lists the codes.
"""

from __future__ import annotations

import difflib
import json
import shlex
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from types import MappingProxyType
from typing import ClassVar, Self


def quoted(value: object, most: int | None = None) -> str:
    """``value`` in an error message as JSON writes it (``"job:{1}"``, ``true``, ``null``),
    the one way every door (the library, the CLI, the HTTP API) quotes what it was given,
    cut to ``most`` characters; what JSON cannot write, as Python's repr."""
    if isinstance(value, str) and most is not None and len(value) > most:
        value = value[: max(most - 3, 1)] + "…"  # the quotes kept: the text is cut
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    # a lone surrogate (text no UTF-8 can carry) written as JSON escapes it: \ud800
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if most is not None and len(text) > most:
        text = text[: max(most - 1, 1)] + "…"
    return text


def unknown_field(given: Iterable[object], fields: Sequence[str], what: str) -> str | None:
    """The one wording of every door for a field ``what`` does not take (a dashboard
    body, an HTTP API body, a schedule's Python keywords): each of ``given`` not in
    ``fields``, the fields it takes, and the nearest one when a single field is close
    (``unknown field "jiter": a schedule takes ... ; did you mean "jitter"?``). None when
    every field is taken."""
    return _unknown("field", given, fields, what)


def unknown_parameter(
    given: Iterable[object],
    params: Sequence[str],
    what: str,
    renamed: Mapping[str, str] | None = None,
) -> str | None:
    """:func:`unknown_field`'s words for a query parameter ``what`` does not take (``unknown
    query parameter "bogus": GET /api/dead takes ns``). ``renamed``: a name said elsewhere
    for one of ``params``, said so when it is given (``/api/pending``'s ``cursor`` is
    ``after`` in the dashboard page's address: ``; "after" is "cursor" here``)."""
    return _unknown("query parameter", given, params, what, renamed or {})


def _unknown(
    noun: str,
    given: Iterable[object],
    fields: Sequence[str],
    what: str,
    renamed: Mapping[str, str] = MappingProxyType({}),
) -> str | None:
    extra = [name for name in given if name not in fields]
    if not extra:
        return None
    listed = ", ".join(fields) or f"no {noun}"
    alias = renamed.get(str(extra[0])) if len(extra) == 1 else None
    near = difflib.get_close_matches(str(extra[0]), fields, n=1) if len(extra) == 1 else []
    if alias is not None:
        meant = f"; {quoted(extra[0], 40)} is {quoted(alias)} here"
    else:
        meant = f"; did you mean {quoted(near[0])}?" if near else ""
    names = ", ".join(quoted(name, 40) for name in extra)
    return f"unknown {noun} {names}: {what} takes {listed}{meant}"


def instant_text(epoch_ms: int) -> str:
    """An instant (epoch ms) in a message as a person reads it, UTC ISO-8601 to the
    millisecond: ``2026-12-03T12:44:19.123Z``, not ``1796302114856``; one outside what a
    datetime can name (past year 9999, before year 1) as its number, said so."""
    try:
        when = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return f"{epoch_ms} (epoch ms, {'past year 9999' if epoch_ms > 0 else 'before year 1'})"
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def install_line(extra: str) -> str:
    """How to install ``extra``, for a message that says it is missing: tickwheel is not
    on PyPI, so the line installs what it was installed from, the wheel or the checkout,
    not the package by its name (a wheel's user has no checkout: trial 10). No
    parentheses: it is often put in a message's own."""
    return (
        f"pip install '.[{extra}]' in tickwheel's source checkout, or give the wheel you "
        f"installed to pip with [{extra}] after its file name; it is not on PyPI"
    )


class TimerError(Exception):
    """Root of every tickwheel error.

    Made by :meth:`about`, it keeps the fields it is about apart from its words, so a
    door can name each as its caller wrote it (the CLI: ``--every`` for ``every``) with
    :meth:`naming`; the message itself names the fields as the library calls them.
    """

    exit_code: ClassVar[int] = 1  # any other error
    http_status: ClassVar[int] = 500
    template: str | None = None  # the message, {0}, {1}... where it names a field
    fields: tuple[str, ...] = ()
    values: Mapping[str, object] = MappingProxyType({})

    @classmethod
    def about(cls, template: str, *fields: str, **values: object) -> Self:
        """``template.format(*fields, **values)``, e.g. ``about("{0} {n}, but only 1 {1}
        key was given", "need", "watch", n=2)``: "need 2, but only 1 watch key was given".
        A field set to a value is written ``{0:VALUE}`` (see :class:`Field`)."""
        error = cls(template.format(*map(Field, fields), **values))
        error.template, error.fields, error.values = template, fields, values
        return error

    def body(self) -> dict[str, object]:
        """The one JSON body of this error over HTTP (the HTTP API's, ``timer.fastapi``'s
        ``detail``): its message, its kind (the class's name) and its exit code."""
        return {"error": str(self), "kind": type(self).__name__, "exit_code": self.exit_code}

    def naming(self, names: Mapping[str, str]) -> Self:
        """This error with each field it is about named as ``names`` says (a field not in
        it as it was); itself if it was not made by :meth:`about`."""
        if self.template is None:
            return self
        named = self.about(self.template, *(names.get(f, f) for f in self.fields), **self.values)
        vars(named).update(vars(self))  # what else it carries (a Capped's deadline_ms)
        return named


class Field(str):
    """A field's name in an error's template, as its caller writes it: ``{0}`` the name,
    ``{0:VALUE}`` the field set to VALUE. In Python (a name) that is ``overlap="skip"``;
    on the command line (a flag, named so by :meth:`TimerError.naming`) ``--overlap
    skip``. VALUE ``*`` is any value: ``every="…"``, or the flag alone (``--every``);
    ``*NAME`` one to fill in: ``group="<name>"``, or ``--group NAME``."""

    __slots__ = ()

    def __format__(self, spec: str) -> str:
        if not spec:
            return str(self)
        flag = self.startswith("-")
        if spec.startswith("*"):
            some = spec[1:]
            if flag:
                return f"{self} {some}" if some else str(self)
            return f"{self}={quoted(f'<{some.lower()}>' if some else '…')}"
        return f"{self} {shlex.quote(spec)}" if flag else f"{self}={quoted(spec)}"


class InvalidInput(TimerError, ValueError):
    """An argument is malformed: nothing was written."""

    exit_code = 3
    http_status = 400


class ConfigError(TimerError):
    """The setup is wrong: a namespace not initialised, conflicting settings, an old server."""

    exit_code = 4
    http_status = 400


class TimerFull(TimerError):
    """Adding the task would exceed the timer's ``max_pending`` limit."""

    exit_code = 10
    http_status = 429


class TimerClosed(TimerError):
    """The timer (or client) was closed or stopped and accepts no more work."""

    exit_code = 10
    http_status = 503


class StoreError(TimerError):
    """Redis could not be reached or answered with an error we did not expect.

    ``code`` is the first word of Redis's own error reply (``BUSYGROUP``, ``OOM``…), if
    it answered with one.
    """

    exit_code = 5
    http_status = 503

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class CorruptRecord(TimerError):
    """A stored timer record or outcome entry cannot be decoded (written by something
    other than tickwheel, or damaged). Readers never stop on one: a consumer group
    dead-letters it with this reason, ``tail`` and the dashboard show it as
    ``undecodable``, and ``get`` raises this naming the timer."""

    exit_code = 11
    http_status = 422


class NotFound(TimerError, LookupError):
    """No such object: a timer, a schedule, a consumer group or a dead letter. The CLI
    exits 6 for each."""

    exit_code = 6
    http_status = 404
    # Redis's own word for it, when Redis said it: NOGROUP (a shard's outcome stream has
    # no such consumer group: it never read there, or a server restart lost it)
    code: str | None = None


class TimerNotFound(NotFound):
    """No pending timer and no retained outcome exist for that id."""

    @classmethod
    def of(cls, timer_id: str, namespace: str) -> TimerNotFound:
        """The one wording of a missing timer, wherever it is reported."""
        return cls.about(
            "no timer {id} in namespace {ns}: never scheduled, or decided longer ago than its "
            "retention ({0})",
            "result_ttl",
            id=quoted(timer_id),
            ns=quoted(namespace),
        )


class ScheduleNotFound(NotFound):
    """No recurring schedule has that name."""

    @classmethod
    def of(cls, name: object, namespace: str) -> ScheduleNotFound:
        """The one wording of a missing schedule, wherever it is reported."""
        return cls(
            f"no schedule {quoted(name)} in namespace {quoted(namespace)} "
            "(`tickwheel schedules list` "
            "shows them)"
        )


class DuplicateTimer(TimerError):
    """A timer with this id is pending with different parameters: ``differ`` names which
    (of payload, deadline, watch and need) when the error is about a pending timer's,
    ``timer_id`` which timer."""

    exit_code = 7
    http_status = 409
    timer_id: str | None = None
    differ: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, timer_id: str, differ: Sequence[str], todo: Sequence[str] | None = None
    ) -> DuplicateTimer:
        """The one wording of a schedule call that conflicts with the pending timer
        ``timer_id``: the fields that differ, then what to do instead (``todo``: as a
        door words it; the library's calls by default)."""
        fields = tuple(differ)
        message = f"timer {quoted(timer_id)} is pending with other parameters"
        if fields:  # an older script's reply does not say
            which = ", ".join(fields[:-1]) + " and " if len(fields) > 1 else ""
            verb = "differ" if len(fields) > 1 else "differs"
            message += f": its {which}{fields[-1]} {verb}"
            hints = conflict_todo(fields) if todo is None else list(todo)
            if hints:
                todo_text = "; ".join(hints)
                message += ". " + todo_text[:1].upper() + todo_text[1:]
        error = cls(message)
        error.timer_id, error.differ = timer_id, fields
        return error


def conflict_todo(
    differ: Sequence[str],
    *,
    reschedule: str = "reschedule it",
    cancel: str = "cancel it and schedule it again",
    debounce: str = "schedule it with debounce",
) -> list[str]:
    """What to do instead of a schedule call whose ``differ`` fields differ from the
    pending timer's, with each way worded as the caller says it."""
    todo = []
    if "deadline" in differ:
        todo.append(f"to move it: {reschedule}")
    if set(differ) - {"deadline"}:
        todo.append(f"to replace it: {cancel}")
    if not set(differ) & {"watch", "need"}:
        # a debounce call keeps the pending timer's watch list and need: it cannot change them
        todo.append(
            f"to push it back with each call instead: {debounce} (it then takes the call's payload)"
        )
    return todo


class Fenced(TimerError):
    """A worker acted on a shard whose lease it no longer holds (stale epoch)."""

    exit_code = 9
    http_status = 409


class WaitTimeout(TimerError, TimeoutError):
    """``wait`` gave up: the timer was still pending when the timeout passed."""

    exit_code = 8
    http_status = 408


class Capped(TimerError):
    """A move would take a timer past its cap, created + ``max_total_ms`` (``deadline_ms``:
    the cap). A timer with a cap never falls due after it, whoever moves it: a
    ``reschedule`` past it is refused and changes nothing; a heartbeat past it is
    :class:`HeartbeatCapped`."""

    exit_code = 13
    http_status = 409

    def __init__(self, message: str, deadline_ms: int = 0) -> None:
        super().__init__(message)
        self.deadline_ms = deadline_ms


class HeartbeatCapped(Capped):
    """A heartbeat would push a timer past its ``max_total_ms``: refused; the timer now
    fires at its cap (``deadline_ms``), however often it is heartbeaten."""


class SelectionChanged(TimerError):
    """An action on everything a filter selects was confirmed for a count that no longer
    holds (more or fewer match now): nothing was done; count again and confirm that."""

    exit_code = 14
    http_status = 409

    def __init__(self, message: str, matching: int = 0) -> None:
        super().__init__(message)
        self.matching = matching


class NotDurable(TimerError):
    """A write was applied on the master but not confirmed at the requested durability
    (replicas or AOF fsync) within the timeout: it may be lost if the master fails now."""

    exit_code = 12  # applied, maybe not kept: retrying is safe (idempotent)
    http_status = 503
