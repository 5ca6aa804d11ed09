"""Output: aligned tables for people, one JSON document (or one per line) for machines."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import click

from timer.durable.model.codec import jsonable
from timer.durable.model.durations import format_duration_ms
from timer.errors import quoted


def to_json(value: Any, *, for_people: bool = False) -> str:
    """One JSON document; a payload's bytes and non-text keys as ``jsonable`` shows them.
    ``for_people``: a value inside a human table, its text unescaped (``"ü"``, not
    ``"\\u00fc"``); --json output stays ASCII, whatever the terminal's encoding."""
    return json.dumps(jsonable(value, _fields), sort_keys=False, ensure_ascii=not for_people)


def _fields(value: Any) -> Any:
    """An object's public fields (a dataclass the library returned), else its text."""
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return jsonable({k: v for k, v in vars(value).items() if not k.startswith("_")}, _fields)
    return str(value)


def _cell(value: Any) -> str:
    """A table's cell: ``-`` for None; text with a newline, a tab or another character
    a terminal does not print as itself (an id is any text) in JSON's quotes and
    escapes, so a row stays one line and reads as what was stored (trial 32: `timers
    list` broke its rows at an id's newline)."""
    text = "-" if value is None else str(value)
    return text if text.isprintable() else quoted(text)


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def pairs(mapping: Mapping[str, Any]) -> str:
    """A two-column table of name and value."""
    return table([(k, v) for k, v in mapping.items()], ("field", "value"))


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``1 timer``, ``2 timers`` (``many``: the plural when it is not noun + s)."""
    return f"{n} {noun if n == 1 else (many or noun + 's')}"


def age_text(ms: int) -> str:
    """An age as the other tables write one: ``350ms``, ``3s250ms``, and in whole seconds
    from 10 s on (``17m57s``, not ``1077.7s``)."""
    return format_duration_ms(ms // 1000 * 1000 if ms >= 10_000 else ms) if ms > 0 else "0s"


def against_deadline(lateness_ms: int) -> str:
    """When an outcome was decided, said from its deadline, its duration written as a
    handler's log writes one (``format_duration_ms``): ``12ms after its deadline``,
    ``3s250ms before its deadline``, ``59m59s before its deadline`` (a timer completed or
    cancelled early: in whole seconds from 10 s on, not 3599284 ms). Whole seconds are
    counted down, not rounded: the first-hour tour's timer, completed about half a second
    after its 30 s one was set, said 30s in one run and 29s in the next (trial 9)."""
    if lateness_ms == 0:
        return "at its deadline"
    side = "after" if lateness_ms > 0 else "before"
    return f"{age_text(abs(lateness_ms))} {side} its deadline"


def emit(ctx_json: bool, data: Any, human: str) -> None:
    click.echo(to_json(data) if ctx_json else human)
