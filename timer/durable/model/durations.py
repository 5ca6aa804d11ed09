"""Durations written as text (``30s``, ``500ms``, ``2m``, ``1h``, ``1h30m``), for the
library (a schedule's ``every``) and the CLI alike."""

from __future__ import annotations

import math
import re

from ...errors import quoted

DAY_MS = 86_400_000
UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": DAY_MS}
# The longest any delay, duration or retention may be, everywhere: longer is a mistake
# (a unit written wrong). Ten years of 366 days, so ten calendar years always fit.
TEN_YEARS_DAYS = 3660
TEN_YEARS_MS = TEN_YEARS_DAYS * DAY_MS
MAX_DURATION_MS = TEN_YEARS_MS  # the longest a duration written as text may be
# How a text that is no duration is refused, by every option that takes one (one taking
# a bare number as well says what that number is after it).
NOT_A_DURATION = (
    "is not a duration; write numbers with units ms, s, m, h or d, e.g. 500ms, 1.5s, 2m, "
    "1h30m or 10d"
)
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
# a unit written as a word ("5 minutes", "2sec"): said back as the unit it means
UNIT_WORDS = {
    **dict.fromkeys(("msec", "msecs", "millis", "millisecond", "milliseconds"), "ms"),
    **dict.fromkeys(("sec", "secs", "second", "seconds"), "s"),
    **dict.fromkeys(("min", "mins", "minute", "minutes"), "m"),
    **dict.fromkeys(("hr", "hrs", "hour", "hours"), "h"),
    **dict.fromkeys(("day", "days"), "d"),
}
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_WORDED = re.compile(r"(\d+(?:\.\d+)?)([a-z]+)")
_NEGATIVE = re.compile(r"-(?:(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+|\d+(?:\.\d+)?)")


def parse_duration_ms(text: str) -> int:
    """Milliseconds in ``text``: one or more ``<number><unit>`` with unit ms, s, m, h or d."""
    s = text.strip().lower().replace(" ", "")
    if not s:
        raise ValueError("empty duration")
    pos, total = 0, 0.0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s):
        if _NEGATIVE.fullmatch(s):  # a duration is never negative
            raise ValueError(f"{quoted(text)} is negative: a duration is 0 or more, e.g. 0s, 2m")
        said = NOT_A_DURATION.replace(";", meant(s) + ";", 1)  # the hint before the rule
        raise ValueError(f"{quoted(text)} {said}")
    if not total <= MAX_DURATION_MS:  # also inf, from a number of 400 digits
        raise ValueError(
            f"{quoted(text[:40])} is too long a duration; at most {TEN_YEARS_DAYS}d (ten years)"
        )
    return round(total)


def meant(text: str) -> str:
    """What a text that is no duration surely meant, as a hint to add to its refusal:
    a bare number (``5``: seconds, most likely) or a unit written as a word (``5min``)."""
    s = text.strip().lower().replace(" ", "")
    if _NUMBER.fullmatch(s):
        return f" (no unit: did you mean {s}s?)"  # seconds, most often
    worded = _WORDED.fullmatch(s)
    if worded and worded.group(2) in UNIT_WORDS:
        return f" (did you mean {worded.group(1)}{UNIT_WORDS[worded.group(2)]}?)"
    return ""


def format_duration_ms(ms: int) -> str:
    """``ms`` as :func:`parse_duration_ms` reads it back, largest units first:
    ``10s``, ``1h30m``, ``1d2h``, ``1500ms`` becomes ``1s500ms``; ``0ms`` for zero."""
    if ms <= 0:
        return "0ms"
    parts = []
    for unit, size in sorted(UNITS.items(), key=lambda u: -u[1]):
        count, ms = divmod(ms, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def ms_text(value: object) -> str:
    """A number of milliseconds as an error shows it: as a duration is written (``300ms``,
    ``1h``, ``0s``), below 0 in ms; anything not a whole number as it was given."""
    if isinstance(value, bool) or not isinstance(value, int):
        return repr(value)
    if value < 0:
        return f"{value} ms"
    return format_duration_ms(value) if value else "0s"


def seconds_text(value: float) -> str:
    """A number of seconds as an error shows it: a duration when it is whole ms and not
    below 0; else as given, in seconds (``-1 s``: it said ``-1000 ms`` of seconds given,
    trial 34)."""
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    ):
        ms = value * 1000
        if math.isfinite(ms) and ms == int(ms):
            return ms_text(int(ms))
    return f"{value!r} s"
