"""Durations (``30s``, ``500ms``, ``2m``, ``1h``, ``1h30m``) and ISO-8601 instants for the CLI."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime

import click

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration_ms(text: str) -> int:
    """Milliseconds in ``text``: one or more ``<number><unit>`` with unit ms, s, m, h or d."""
    s = text.strip().lower().replace(" ", "")
    if not s:
        raise ValueError("empty duration")
    pos, total = 0, 0.0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s):
        raise ValueError(f"{text!r} is not a duration; write e.g. 500ms, 30s, 2m, 1h or 1h30m")
    return round(total)


def parse_millis(text: str) -> int:
    """For options named ``--…-ms``: a bare whole number is milliseconds (``5000``); a
    duration with a unit (``5s``) is taken too."""
    s = text.strip()
    if s.isdigit():
        return int(s)
    try:
        return parse_duration_ms(s)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a number of milliseconds; write e.g. 5000 (or 5s)"
        ) from None


def parse_instant_ms(text: str) -> int:
    """Epoch milliseconds of an ISO-8601 instant (a time without a zone is taken as UTC)."""
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not an ISO-8601 time; write e.g. 2026-11-22T18:30:00Z"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return round(dt.timestamp() * 1000)


def format_ms(epoch_ms: int | None) -> str:
    if epoch_ms is None:
        return "-"
    dt = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


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
            self.fail(str(exc), param, ctx)


class Duration(_Parsed):
    name = "duration"
    parse = staticmethod(parse_duration_ms)


class Millis(_Parsed):
    name = "ms"
    parse = staticmethod(parse_millis)


class Instant(_Parsed):
    name = "iso-time"
    parse = staticmethod(parse_instant_ms)


DURATION = Duration()
MILLIS = Millis()
INSTANT = Instant()
