"""A Redis glob (``*``, ``?``, ``[a-z]``, ``[^abc]``, ``\\`` escapes) matched in Python,
as the server matches ``SCAN MATCH`` and ``KEYS``: byte by byte on the UTF-8 form, so
``?`` is one byte and a filter the client applies (dead letters' timer ids) selects what
the same pattern selects in ``find``. A test holds it to a real server's ``KEYS``."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

from ...errors import InvalidInput, quoted
from .checks import too_long

MAX_PATTERN_BYTES = 1024


def _byte(b: int) -> str:
    return re.escape(chr(b))  # a byte as the one latin-1 character it decodes to


def _signed(b: int) -> int:
    return b - 256 if b > 127 else b


def _range(a: int, b: int) -> str:
    """The bytes of a range ``a-b`` as the server compares them: as C's signed ``char``,
    so a byte of 0x80 or more (UTF-8's multi-byte parts) sorts below 0x00 (``[?-é]``
    holds no ``[``); either end first."""
    lo, hi = sorted((_signed(a), _signed(b)))
    spans = [(lo, hi)] if lo >= 0 or hi < 0 else [(lo, -1), (0, hi)]
    return "".join(f"{_byte(x % 256)}-{_byte(y % 256)}" for x, y in spans)


def _klass(p: bytes, i: int) -> tuple[str, int]:
    """The class that opens at ``p[i]`` (after its ``[``): its regex and where it ends.

    As the server reads it: ``^`` first negates, ``\\`` takes the next byte as it is,
    ``a-z`` is a range (:func:`_range`), ``]`` closes it; a pattern that ends
    first closes it there. An empty class matches no byte (negated, any byte)."""
    negate = i < len(p) and p[i] == ord("^")
    i += negate
    parts: list[str] = []
    while i < len(p) and p[i] != ord("]"):
        if p[i] == ord("\\") and i + 1 < len(p):
            i += 1
            parts.append(_byte(p[i]))
        elif i + 2 < len(p) and p[i + 1] == ord("-"):
            parts.append(_range(p[i], p[i + 2]))
            i += 2
        else:
            parts.append(_byte(p[i]))
        i += 1
    if not parts:
        return ("." if negate else "(?!)"), i + 1
    return f"[{'^' if negate else ''}{''.join(parts)}]", i + 1


@lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    p = pattern.encode("utf-8")
    out: list[str] = []
    i = 0
    while i < len(p):
        b = p[i]
        if b == ord("*"):
            out.append(".*")
        elif b == ord("?"):
            out.append(".")
        elif b == ord("["):
            part, i = _klass(p, i + 1)
            out.append(part)
            continue
        elif b == ord("\\") and i + 1 < len(p):
            i += 1
            out.append(_byte(p[i]))
        else:
            out.append(_byte(b))
        i += 1
    return re.compile("".join(out), re.DOTALL)


@lru_cache(maxsize=64)
def redis_glob(pattern: str) -> Callable[[str], bool]:
    """Whether a text matches ``pattern`` as Redis's glob matching says it does (one
    matcher a pattern, made once: a filter asks it of every entry it reads)."""
    compiled = _compiled(pattern)

    def matches(value: str) -> bool:
        return compiled.fullmatch(value.encode("utf-8").decode("latin-1")) is not None

    return matches


def check_glob(match: object) -> str:
    """A glob on timer ids (Redis's): non-empty text of at most MAX_PATTERN_BYTES."""
    if not isinstance(match, str) or not match:
        raise InvalidInput(f'match must be a non-empty glob such as "job:*", got {quoted(match)}')
    try:
        size = len(match.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInput(f"match {quoted(match)} has a lone surrogate: no UTF-8 form") from None
    if size > MAX_PATTERN_BYTES:
        raise too_long("match", size, MAX_PATTERN_BYTES, "bytes in UTF-8")
    return match
