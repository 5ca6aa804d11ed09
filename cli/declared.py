"""``tickwheel schedule``'s options made from the declared fields
(``timer.durable.model.fields``): one per field that names one, and what its callback
gets from them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypedDict, TypeVar

import click

from timer.durable.model.fields import FIELDS
from timer.errors import quoted

from .durations import MILLIS, CapMillis

_BY_HAND = ("payload", "watch")  # options of their own: JSON text, a repeatable key
_ENDS = {"priority": (" (last)", " (first)")}  # what a range's ends mean, where it helps


class _Integer(click.ParamType):  # type: ignore[type-arg]  # click stubs vary by version
    """A declared integer's option: a word in its place (--priority high) is told the
    range too, as a number out of it is (click said only: not a valid integer)."""

    name = "integer"

    def __init__(self, field: str, schema: Mapping[str, Any]) -> None:
        low, high = _ENDS.get(field, ("", ""))
        least, most = schema.get("minimum"), schema.get("maximum")
        self.range = "" if least is None or most is None else f" from {least}{low} to {most}{high}"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return int(value)
        except (TypeError, ValueError):
            said = f"{quoted(value)} is not a whole number: give an integer{self.range}"
            self.fail(said, param, ctx)


_F = TypeVar("_F", bound=Callable[..., Any])


class DeclaredArgs(TypedDict):
    """What ``declared_options`` gives ``schedule``'s callback, None where not given (a
    test holds these names to the declared fields that have an option)."""

    need: int | None
    rearm: bool | None
    note: str | None
    max_total_ms: int | None
    debounce: bool | None
    priority: int | None


def declared_options(command: _F) -> _F:
    """An option of ``tickwheel schedule`` for each declared field that names one (but
    the time, the payload and the watch keys, written out on the command): a flag for a
    boolean, else an option of the field's type, its help the declaration's."""
    for name, f in reversed(FIELDS.items()):
        if f.cli is None or f.slot is None or name in _BY_HAND:
            continue
        kind = f.schema.get("type")
        words = f.cli_help or f.help
        if kind == "integer" and name.endswith("_ms"):
            # A time, taken as a duration as every other time option is (1h, 30s); a
            # bare number is milliseconds, as the -ms name said before it had an alias.
            option = click.option(
                f.cli.removesuffix("-ms"),
                f.cli,
                name,
                type=CapMillis() if name == "max_total_ms" else MILLIS,
                metavar="DURATION",
                default=f.default,
                help=f"{words} A duration, e.g. 1h or 30s; a bare number is milliseconds.",
            )
        elif kind == "boolean":
            option = click.option(f.cli, name, is_flag=True, default=None, help=words)
        elif kind in ("integer", "string"):
            shown = f.default is not None
            option = click.option(
                f.cli,
                name,
                type=_Integer(name, f.schema) if kind == "integer" else str,
                default=f.default,
                show_default=shown,
                help=words,
            )
        else:
            raise TypeError(f"field {name}: say how tickwheel schedule takes a {kind}")
        command = option(command)
    return command
