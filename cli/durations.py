"""Durations (``30s``, ``500ms``, ``2m``, ``1h``, ``1h30m``) and ISO-8601 instants for the CLI."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import UTC, datetime

import click

from timer.durable.model.durations import (
    MAX_DURATION_MS,
    NOT_A_DURATION,
    TEN_YEARS_DAYS,
    TEN_YEARS_MS,
    UNIT_WORDS,
    UNITS,
    format_duration_ms,
    parse_duration_ms,
)
from timer.errors import instant_text, quoted


def parse_seconds(text: str) -> float:
    """A number of seconds from 0 to ten years (``nan`` or ``inf`` would never end); a
    duration with a unit (``10s``, ``500ms``, ``2m``) is taken too, as other options take
    durations."""
    try:
        value = float(text)
    except ValueError:
        try:
            return parse_duration_ms(text.strip()) / 1000
        except ValueError:
            raise ValueError(
                f"{quoted(text)} {NOT_A_DURATION} (a bare number is seconds)"
            ) from None
    if not 0 <= value <= MAX_DURATION_MS / 1000:  # False for nan too
        raise ValueError(
            f"{quoted(text, 40)} must be from 0 to {TEN_YEARS_MS // 1000} seconds (ten years)"
        )
    return value


def parse_millis(text: str) -> int:
    """For options named ``--…-ms``: a bare whole number is milliseconds (``5000``); a
    duration with a unit (``5s``) is taken too."""
    s = text.strip()
    if s.isdigit():
        if len(s) > 16 or int(s) > MAX_DURATION_MS:
            raise ValueError(
                f"{quoted(text, 40)} ms is too long; at most {TEN_YEARS_DAYS}d (ten years)"
            )
        return int(s)
    try:
        return parse_duration_ms(s)
    except ValueError:
        raise ValueError(
            f"{quoted(text)} {NOT_A_DURATION} (a bare number is milliseconds)"
        ) from None


def parse_instant_ms(text: str) -> int:
    """Epoch milliseconds of an ISO-8601 instant (a time without a zone is taken as UTC)."""
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{quoted(text)} is not an ISO-8601 time; write e.g. 2030-01-31T18:30:00Z (UTC; "
            "or with an offset, +01:00)"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return round(dt.timestamp() * 1000)


def format_ms(epoch_ms: int | None) -> str:
    """An instant as the CLI shows it (UTC ISO-8601 to the ms); ``-`` for none."""
    return "-" if epoch_ms is None else instant_text(epoch_ms)


class _Parsed(click.ParamType):  # type: ignore[type-arg]  # click stubs vary by version
    """A click type that parses text to milliseconds with ``parse``, failing with its message."""

    parse: Callable[[str], int]

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        if isinstance(value, int):
            return value
        try:
            return type(self).parse(str(value))
        except ValueError as exc:
            self.fail(two_words(str(value), ctx) or str(exc), param, ctx)


def unit_word(word: str) -> str | None:
    """The unit ``word`` names (``minutes``: m, ``s``: s), or None."""
    w = word.strip().lower()
    return w if w in UNITS else UNIT_WORDS.get(w)


def two_words(value: str, ctx: click.Context | None) -> str | None:
    """What to say when a duration was written as two words (``--in 5 minutes``: the
    shell splits it, and "5" alone is refused with "minutes" left over): None if not."""
    argv: list[str] = (ctx.meta.get("tickwheel.argv") or []) if ctx is not None else []
    for i, arg in enumerate(argv[:-1]):
        unit = unit_word(argv[i + 1])
        if arg == value and unit is not None and value.replace(".", "", 1).isdigit():
            return (
                f"{quoted(value + ' ' + argv[i + 1])} is two words; write the duration as "
                f"one, {value}{unit}"
            )
    return None


class Duration(_Parsed):
    name = "duration"
    parse = staticmethod(parse_duration_ms)


class DurationOr(Duration):
    """A duration with a unit, for an option with a sibling that takes a bare number of
    milliseconds (``worker --lease`` and ``--lease-ms``): a bare number is refused saying
    where it goes."""

    def __init__(self, ms_option: str) -> None:
        self.ms_option = ms_option

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        text = str(value).strip()
        if not isinstance(value, int) and text.isdigit():
            if int(text) < BARE_MILLIS_SAID:  # 2: seconds meant, surely, not 2 ms
                hint = f"; did you mean {text}s? ({self.ms_option} takes milliseconds)"
            else:
                hint = f"; or give {self.ms_option} {text} for milliseconds"
            self.fail(f"{quoted(text)} {NOT_A_DURATION}{hint}", param, ctx)
        return super().convert(value, param, ctx)


class Millis(_Parsed):
    name = "ms"
    parse = staticmethod(parse_millis)

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        ms = super().convert(value, param, ctx)
        text = str(value).strip()
        named_ms = typed_name(param, unknown="-").endswith("-ms")  # its name says the unit
        if not isinstance(value, int) and 0 < ms < BARE_MILLIS_SAID and text.isdigit():
            if named_ms:
                return ms
            _say_bare(  # 30: milliseconds, or seconds meant?
                param,
                f"{text} is {text} milliseconds; write {text}ms to say so, or {text}s "
                "if you meant seconds",
            )
        return ms


class CapMillis(Millis):
    """--max-total: a bare number shorter than --in (parsed first: it is eager) is a unit
    left out, surely (the timer would be due at once): refused here, before the warning
    a bare number of milliseconds gets, so one mistake says one thing."""

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        text, delay = str(value).strip(), (ctx.params.get("delay_ms") if ctx else None)
        named_ms = typed_name(param, unknown="-").endswith("-ms")  # milliseconds, as typed
        if text.isdigit() and not named_ms and isinstance(delay, int) and int(text) < delay:
            raise click.BadParameter(
                f"{text} is {text} milliseconds, shorter than --in {format_duration_ms(delay)}, "
                f"so the timer would be due at once; write the cap with its unit (e.g. "
                + (f"{text}s" if int(text) >= 60 else f"{text}m or {text}h")
                + f"), or {text}ms if you mean it",
                ctx,
                param,
                param_hint="--max-total",  # the -ms name says milliseconds: taken
            )
        return super().convert(value, param, ctx)


class Instant(_Parsed):
    name = "iso-time"
    parse = staticmethod(parse_instant_ms)


class Seconds(click.ParamType):  # type: ignore[type-arg]  # click stubs vary by version
    """A duration (``10s``, ``500ms``) as float seconds; a bare number is seconds."""

    name = "duration"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            seconds = parse_seconds(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        text = str(value).strip()
        if seconds >= BARE_SECONDS_SAID and _bare(text):  # 5000: seconds, or ms meant?
            read = format_duration_ms(round(seconds * 1000))
            meant = format_duration_ms(round(seconds))
            _say_bare(param, f"{text} is {text} seconds ({read}); write {text}s to say so, "
                      f"or {meant} if you meant {text} ms")  # fmt: skip
        return seconds


# A bare number this large for seconds, or this small for milliseconds, is said back in
# the unit it is read in (taken as before: a script relying on it keeps working): an
# option of the other unit is one command away (`wait --timeout 5000` is 83 minutes;
# `demo --lease 2000` is 2 s).
BARE_SECONDS_SAID = 1000
BARE_MILLIS_SAID = 100


def _bare(text: str) -> bool:
    return bool(text) and text.replace(".", "", 1).isdigit()


def _say_bare(param: click.Parameter | None, said: str) -> None:
    click.echo(f"Warning: {typed_name(param)} {said}", err=True)


def typed_name(param: click.Parameter | None, unknown: str = "") -> str:
    """The name of ``param`` the command line used, of its aliases (``demo --lease`` is
    ``--lease-ms`` too: a warning naming the one not typed confused); all of them, as
    ``--lease-ms/--lease``, or ``unknown`` if given, when the command line is not
    ``sys.argv`` (a test's)."""
    if param is None or not param.opts:
        return "the option"
    if len(param.opts) == 1:
        return param.opts[0]
    argv = sys.argv[1:]
    typed = [o for o in param.opts if any(a == o or a.startswith(o + "=") for a in argv)]
    return typed[-1] if len(typed) == 1 else unknown or "/".join(param.opts)


SECONDS = Seconds()
DURATION = Duration()
MILLIS = Millis()
INSTANT = Instant()
