"""A refused request in the words of JSON, the language its sender wrote it in: values
quoted as JSON quotes them ("x", true, null), not as Python does ('x', True, None); and
the check of a body against its schema (:class:`Schema`) whose refusals those words say."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from timer.errors import quoted, unknown_field

if TYPE_CHECKING:  # the http extra's: imported where a Schema is made, so the dashboard
    import jsonschema  # (its routing says values in these words) needs only its own

_TYPES = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "object": "an object",
    "array": "an array",
    "null": "null",
}


def shown(value: Any, most: int = 100) -> str:
    """``value`` as JSON writes it (:func:`timer.errors.quoted`), cut to ``most``
    characters; a whole number parsed as a float (a query's) without its ``.0``."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)  # a query's number is parsed as a float: 100 was "100.0"
    return quoted(value, most)


def _kinds(expected: Any) -> str:
    names = expected if isinstance(expected, list) else [expected]
    return " or ".join(_TYPES.get(str(n), str(n)) for n in names)


def _plural(n: Any, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _size(value: Any) -> int:
    return len(value) if isinstance(value, str | list | dict) else 0


# a bound's keyword: what the value must be, and what is said of the one given
_BOUNDS: dict[str, Callable[[Any, Any], str]] = {
    "minimum": lambda lim, v: f"must be at least {shown(lim)}, got {shown(v)}",
    "exclusiveMinimum": lambda lim, v: f"must be more than {shown(lim)}, got {shown(v)}",
    "maximum": lambda lim, v: f"must be at most {shown(lim)}, got {shown(v)}",
    "exclusiveMaximum": lambda lim, v: f"must be less than {shown(lim)}, got {shown(v)}",
    "minLength": lambda lim, v: f"must be at least {_plural(lim, 'character')}, got {shown(v)}",
    "maxLength": lambda lim, v: f"must be at most {_plural(lim, 'character')}, got {_size(v)}",
    "minItems": lambda lim, v: f"must hold at least {_plural(lim, 'item')}, got {_size(v)}",
    "maxItems": lambda lim, v: f"must hold at most {_plural(lim, 'item')}, got {_size(v)}",
    "minProperties": lambda lim, v: f"must hold at least {_plural(lim, 'field')}, got {_size(v)}",
    "maxProperties": lambda lim, v: f"must hold at most {_plural(lim, 'field')}, got {_size(v)}",
    "type": lambda lim, v: f"expected {_kinds(lim)}, got {shown(v)}",
    "enum": lambda lim, v: f"must be one of {', '.join(shown(x) for x in lim)}, got {shown(v)}",
    "const": lambda lim, v: f"must be {shown(lim)}, got {shown(v)}",
    "pattern": lambda lim, v: f"{shown(v)} does not match the pattern {shown(lim)}",
    "uniqueItems": lambda lim, v: "holds an item twice: give each once",
}


# Query parameters that mean the same to whoever reaches for one (a route takes one of
# each family, and another route of the API may take another): one a route does not take
# is refused with the one it does, in its unit, the value given converted to it.
_FAMILIES: tuple[tuple[str, frozenset[str]], ...] = (
    ("waits with", frozenset({"timeout_s", "wait_ms", "timeout", "timeout_ms", "wait", "wait_s"})),
    ("says how many with", frozenset({"count", "limit", "max", "max_count"})),
)
_UNITS = {"_ms": (0.001, "milliseconds"), "_s": (1.0, "seconds")}


def _unit(name: str) -> tuple[float, str] | None:
    return next((u for end, u in _UNITS.items() if name.endswith(end)), None)


def unknown_query(name: str, raw: str, takes: Mapping[str, Mapping[str, Any]]) -> str:
    """The refusal of a query parameter a route does not take: with the one of the same
    meaning it takes (``timeout_s`` where it waits with ``wait_ms``), if any, and an
    example in its unit (``?timeout_s=3``: ``wait_ms=3000``)."""
    listed = ", ".join(f"{n}=" for n in takes) or "no query parameter"
    said = f"unknown query parameter {shown(name)}"
    family = next(((verb, f) for verb, f in _FAMILIES if name in f), None)
    instead = next((n for n in takes if family and n in family[1]), None)
    if family is None or instead is None:
        return f"{said}: this takes {listed}"
    schema = takes[instead]
    example = schema.get("default")
    given, want = _unit(name), _unit(instead)
    try:  # converted between units; a value without one is no example of one with
        value = float(raw) * (given[0] / want[0] if given and want else 1.0)
    except ValueError:
        value = math.nan
    if (given is None) != (want is None):
        value = math.nan
    if math.isfinite(value) and value > 0 and (want or value.is_integer()):
        example = min(max(value, schema.get("minimum", value)), schema.get("maximum", value))
        if schema.get("type") == "integer":
            example = round(example)
    unit = f" ({want[1]})" if want else ""
    others = "" if list(takes) == [instead] else f"; it takes {listed}"  # not said twice
    return (
        f"{said}; this route {family[0]} {instead}{unit}, e.g. {instead}={shown(example)}{others}"
    )


def say(problem: jsonschema.ValidationError) -> str:
    """A schema error in words that say what to fix (at most 300 characters)."""
    kind, limit, value = problem.validator, problem.validator_value, problem.instance
    schema = problem.schema if isinstance(problem.schema, dict) else {}
    if kind == "oneOf":  # the alternatives here are which field to give
        alternatives = limit if isinstance(limit, list) else []
        names = [n for alt in alternatives for n in alt.get("required", ())]
        said = f"give exactly one of {' or '.join(names)}"
    elif kind == "additionalProperties" and isinstance(value, dict):
        said = unknown_field(value, list(schema.get("properties", {})), "this") or ""
    elif kind == "required" and isinstance(value, dict) and isinstance(limit, list):
        missing = [n for n in limit if n not in value]
        said = f"missing field {', '.join(shown(n) for n in missing)}"
    elif isinstance(kind, str) and kind in _BOUNDS:
        said = _BOUNDS[kind](limit, value)
    else:
        said = problem.message
    return said[:300]


class Schema:
    """A request body's JSON Schema: checked by jsonschema-rs (compiled, in Rust: the
    pure-Python check is a large share of a request's time), and a body it refuses
    explained by jsonschema, whose errors say which field and why."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        import jsonschema  # noqa: PLC0415 - the http extra's, see above
        import jsonschema_rs  # noqa: PLC0415

        self.schema = schema
        self.fast = jsonschema_rs.Draft202012Validator(dict(schema))
        self.explain = jsonschema.Draft202012Validator(schema)
        self._failed = (jsonschema.ValidationError, jsonschema_rs.ValidationError)

    def problem(self, data: Any) -> jsonschema.ValidationError | None:
        """The first problem with ``data`` (by its place in the body), or None."""
        if self.fast.is_valid(data):
            return None
        found: list[jsonschema.ValidationError] = sorted(
            self.explain.iter_errors(data), key=lambda e: list(e.path)
        )
        if found:
            return found[0]
        # the two disagree (neither should): refuse, saying the fast check's reason
        explained, fast_failed = self._failed
        try:
            self.fast.validate(data)
        except fast_failed as exc:
            return explained(str(exc.message))
        return None


_TIMERS: tuple[Schema, Schema] | None = None


def item_problems(items: list[Any]) -> dict[int, str]:
    """What the schema of ``POST …/timers`` says of each item of a batch it refuses, by
    its place, in the words it says them to a single timer (``where: what``, "the item"
    for the item itself): an item is refused alike at either door. One check of the
    whole list when every item passes (a batch's thousands cost one call)."""
    global _TIMERS
    if _TIMERS is None:
        from .schemas import SCHEDULE  # noqa: PLC0415

        _TIMERS = Schema({"type": "array", "items": SCHEDULE}), Schema(SCHEDULE)
    every, one = _TIMERS
    if every.fast.is_valid(items):
        return {}
    out: dict[int, str] = {}
    for i, item in enumerate(items):
        problem = one.problem(item)
        if problem is not None:
            where = "/".join(str(p) for p in problem.absolute_path) or "the item"
            out[i] = f"{where}: {say(problem)}"
    return out


def nearest_route(path: str, templates: Iterable[str]) -> str | None:
    """The route ``path`` was most likely meant for, written with the path's own values
    (``/v1/namespace/default/timers`` -> ``/v1/namespaces/default/timers``): a template
    of as many segments whose literal segments all equal the path's but one, and that
    one close to it. None when no template or more than one is that close."""
    parts = path.strip("/").split("/")
    found: set[str] = set()
    for template in templates:
        want = template.strip("/").split("/")
        if len(want) != len(parts):
            continue
        differ = [
            i
            for i, (w, p) in enumerate(zip(want, parts, strict=True))
            if not w.startswith("{") and w != p
        ]
        if len(differ) == 1 and difflib.get_close_matches(parts[differ[0]], [want[differ[0]]]):
            fixed = list(parts)
            fixed[differ[0]] = want[differ[0]]
            found.add("/" + "/".join(fixed))
    return found.pop() if len(found) == 1 else None


def action_route(path: str, templates: Iterable[str]) -> bool:
    """Whether ``path`` is a route's that ends in a word of its own (``…/cancel``), not
    a value standing in a template's ``{id}``."""
    parts = path.strip("/").split("/")
    for template in templates:
        want = template.strip("/").split("/")
        if (
            len(want) == len(parts)
            and not want[-1].startswith("{")
            and all(w.startswith("{") or w == p for w, p in zip(want, parts, strict=True))
        ):
            return True
    return False
