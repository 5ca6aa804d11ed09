"""The HTTP API checks a body with jsonschema-rs and explains a refusal with jsonschema
(timer.httpapi.words.Schema, #40): the two must agree on every body, or a body one refuses
would pass the other. Bodies are made from each endpoint's own property names, with
values of every JSON kind, so many are valid and many are not."""

from __future__ import annotations

from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from timer.httpapi.spec import ENDPOINTS
from timer.httpapi.words import Schema

BODIES = [e for e in ENDPOINTS if e.body is not None]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


def _names(schema: Any) -> list[str]:
    """Every property name a schema mentions, however deep."""
    found: list[str] = []
    if isinstance(schema, dict):
        found += list(schema.get("properties", {}))
        for value in schema.values():
            found += _names(value)
    elif isinstance(schema, list):
        for value in schema:
            found += _names(value)
    return found


def near(schema: Any) -> st.SearchStrategy[Any]:
    """Values of a property's own type, at and just past its bounds (a string's length in
    characters, some of them outside the BMP; an integer's range; an array's size)."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "string":
        low, high = schema.get("minLength", 0), schema.get("maxLength", 8)
        sizes = st.sampled_from(sorted({max(0, low - 1), low, min(high, low + 3), high, high + 1}))
        return sizes.flatmap(lambda n: st.text(st.sampled_from("a{}é😀\n"), min_size=n, max_size=n))
    if kind == "integer":
        low, high = schema.get("minimum", -(2**63)), schema.get("maximum", 2**63)
        return st.sampled_from([low - 1, low, high, high + 1]) | st.integers(low, high)
    if kind == "array":
        low, high = schema.get("minItems", 0), min(schema.get("maxItems", 3), 3)
        return st.lists(near(schema.get("items", {})), min_size=max(0, low - 1), max_size=high + 1)
    return json_values


@st.composite
def bodies(draw: st.DrawFn) -> tuple[Any, Any]:
    endpoint = draw(st.sampled_from(BODIES))
    names = sorted(set(_names(endpoint.body))) or ["x"]
    properties = (endpoint.body or {}).get("properties", {})
    typed = {name: near(properties.get(name, {})) for name in names}
    item = st.dictionaries(st.sampled_from(names), json_values | st.integers(0, 10**6), max_size=6)
    item = item | st.fixed_dictionaries({}, optional=typed)
    body = draw(item | st.fixed_dictionaries({"timers": st.lists(item, max_size=2)}) | json_values)
    return endpoint.body, body


@settings(max_examples=400, deadline=None)
@given(bodies())
def test_the_fast_check_and_the_explaining_one_agree(case: tuple[Any, Any]) -> None:
    schema, body = case
    slow = jsonschema.Draft202012Validator(schema).is_valid(body)
    assert (Schema(schema).problem(body) is None) == slow, body
