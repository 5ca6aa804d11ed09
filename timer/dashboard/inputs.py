"""What the dashboard's JSON API checks of a request before it acts: a body's fields
(one a route does not take is refused, naming it) and a query's whole numbers."""

from __future__ import annotations

from typing import Any

from timer.errors import InvalidInput, quoted, unknown_field


def takes(body: dict[str, Any], fields: tuple[str, ...], what: str) -> None:
    """InvalidInput, before anything is written, for a field of ``body`` that ``what``
    does not take (:func:`timer.errors.unknown_field`'s words). A field dropped unsaid
    was an option lost (a schedule's ``jitter``) while the answer said done."""
    said = unknown_field(body, fields, what)
    if said:
        raise InvalidInput(said)


def either(names: tuple[str, ...]) -> str:
    """``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def whole(name: str, text: str | None) -> int | None:
    """A query's whole number (empty: None); InvalidInput for anything else."""
    if not text:
        return None
    if not text.isdigit() or not text.isascii() or len(text) > 18:
        raise InvalidInput(f"{name} must be a whole number, got {quoted(text, 40)}")
    return int(text)


def signed(name: str, text: str) -> int:
    """A query's whole number that may be negative; InvalidInput for anything else."""
    digits = text[1:] if text.startswith("-") else text
    if not digits.isdigit() or not digits.isascii() or len(digits) > 18:
        raise InvalidInput(f"{name} must be a whole number, got {quoted(text, 40)}")
    return int(text)
