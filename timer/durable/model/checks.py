"""The argument checks every public entry shares: whole numbers, durations and flags.

Each returns the value it checked or raises :class:`~timer.errors.InvalidInput` naming
the argument and its limits; none does I/O. What is special to one kind of argument (a
timer id, a payload, a deadline) lives with it (``keys``, ``codec``, ``calls``).
"""

from __future__ import annotations

import math

from ...errors import InvalidInput, instant_text, quoted
from .durations import TEN_YEARS_MS, ms_text, seconds_text

TEN_YEARS_S = TEN_YEARS_MS // 1000


def check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput.about(
            "{0} must be a whole number (int), got {got}", name, got=quoted(value, 80)
        )
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise InvalidInput.about("{0} must be {bound}, got {got}", name, bound=bound, got=value)
    return value


def check_instant(name: str, value: object, maximum: int) -> int:
    """An instant in epoch ms from 0 to ``maximum``; one before 1970 said as a time, as
    it was most likely given (``--at 1960-01-01T00:00:00Z``), not as -315619200000."""
    if isinstance(value, bool) or not isinstance(value, int) or value > maximum:
        return check_int(name, value, 0, maximum)  # raises: no whole number, or past maximum
    if value < 0:
        raise InvalidInput.about(
            "{0} must be {least} (epoch ms 0) or later, got {got}",
            name,
            least=instant_text(0),
            got=instant_text(value),
        )
    return value


def check_seconds(
    name: str, value: object, *, maximum: float = TEN_YEARS_S, positive: bool = False
) -> float:
    """A duration in seconds: a finite number from 0 (above 0 if ``positive``) to
    ``maximum`` (NaN would never end a wait, and a string would fail half-way)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{name} must be a number of seconds, got {quoted(value, 80)}")
    low = value > 0 if positive else value >= 0
    if not (math.isfinite(value) and low and value <= maximum):
        raise InvalidInput.about(
            "{0} must be {least}, at most {most}, got {got}",
            name,
            least="above 0s" if positive else "at least 0s",
            most=seconds_text(maximum),
            got=seconds_text(value),
        )
    return float(value)


_CENTURY_MS = 100 * 365 * 86_400_000


def check_ms(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    """A whole number of milliseconds from ``minimum`` to ``maximum`` (None: no bound),
    its limits said as durations (``between 1ms and 1h``, ``at least 100ms``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput.about(
            "{0} must be a whole number of milliseconds (int), got {got}",
            name,
            got=quoted(value, 80),
        )
    # a bound past a century is no bound a person reads (2**53 - 1 ms is
    # "104249991d8h59m991ms": trial 34): below the least, only the least is said
    if (maximum is None or maximum > _CENTURY_MS) and value < minimum:
        raise InvalidInput.about(
            "{0} must be at least {least}, got {got}",
            name,
            least=ms_text(minimum),
            got=ms_text(value),
        )
    if maximum is not None and not minimum <= value <= maximum:
        raise InvalidInput.about(
            "{0} must be between {least} and {most}, got {got}",
            name,
            least=ms_text(minimum),
            most=ms_text(maximum),
            got=ms_text(value),
        )
    return value


def too_long(name: str, size: int, most: int, unit: str = "characters") -> InvalidInput:
    """The error of a text argument longer than it may be: how long it is and the most,
    never the text (a note of a thousand characters, an id that may hold a secret)."""
    return InvalidInput(f"{name} is {size} {unit}; at most {most}")


def check_bool(name: str, value: object) -> bool:
    if value is not True and value is not False:
        raise InvalidInput(f"{name} must be True or False, got {quoted(value, 80)}")
    return value
