"""Payload and record encoding: msgpack only. Nothing is ever unpickled."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from typing import Any

import msgpack

from ...errors import InvalidInput
from .fields import FIELDS

DEFAULT_MAX_PAYLOAD = 1024 * 1024
MAX_PAYLOAD_LIMIT = 64 * 1024 * 1024  # the most max_payload_bytes may be set to
_NIL = b"\xc0"  # msgpack's None: most timers carry no payload
_SCALARS = frozenset({str, bytes, int, float, bool})  # written and read back as they are


def encode_payload(payload: object, max_bytes: int = DEFAULT_MAX_PAYLOAD) -> bytes:
    """The payload as msgpack, or InvalidInput; only what every reader decodes again.

    msgpack writes some values it cannot read back: a map whose keys are lists or maps
    (``{(1, 2): 3}``), or nesting deeper than the reader's limit. Such a payload would be
    stored, then stop every ``get``, ``wait`` and group reader that meets it, so the
    encoded bytes are decoded once here, as a reader will, and refused if that fails.
    """
    if payload is None:
        return _NIL
    try:
        data: bytes = msgpack.packb(payload, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidInput(
            f"payload must be msgpack-serialisable (dicts, lists, str, bytes, numbers, bool, "
            f"None): {exc}"
        ) from None
    if len(data) > max_bytes:
        raise InvalidInput(
            f"payload is {len(data)} bytes encoded; the limit is {max_bytes} bytes "
            "(store large data elsewhere and put its key in the payload)"
        )
    if type(payload) in _SCALARS:  # nothing in it a reader could fail on
        if isinstance(payload, float) and not math.isfinite(payload):
            raise InvalidInput(_NOT_FINITE)
        return data
    if _flat(payload):  # the common payload ({"job": 42}): nothing a reader could fail on
        return data
    _check_tree(payload)
    try:
        decode_payload(data)
    except Exception as exc:
        raise InvalidInput(
            f"payload cannot be read back once stored ({type(exc).__name__}: {exc}); use "
            "text, numbers or bytes as map keys and nest at most 500 levels deep"
        ) from None
    return data


# How deep a payload may nest (a list or map in a list is 2): every reader takes it, and
# so do the JSON doors (the HTTP API, webhooks, --json), whose parsers recurse.
MAX_PAYLOAD_DEPTH = 500
_NOT_FINITE = (
    "payload floats must be finite: NaN and Infinity have no JSON form, so the HTTP API, "
    "webhooks and --json could not show the timer (send null or a string instead)"
)


_FLAT_VALUES = frozenset({str, bytes, int, bool, type(None)})
_TEXT_TYPE = frozenset({str})


def _flat(payload: object) -> bool:
    """A map of text keys to scalars other than floats: one level, keys a reader takes
    (so neither the tree walk nor the read-back can refuse it). Exact types only: a
    subclass may pack as something else."""
    return (
        type(payload) is dict
        and _TEXT_TYPE.issuperset(map(type, payload))
        and _FLAT_VALUES.issuperset(map(type, payload.values()))
    )


def _check_tree(payload: object) -> None:
    """InvalidInput for a payload nested past MAX_PAYLOAD_DEPTH or holding a float that
    is not finite (iteratively: a deep payload must not exhaust Python's stack here)."""
    todo: list[tuple[object, int]] = [(payload, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidInput(_NOT_FINITE)
        elif isinstance(item, dict | list | tuple):
            if depth > MAX_PAYLOAD_DEPTH:
                raise InvalidInput(
                    f"payload nests more than {MAX_PAYLOAD_DEPTH} levels deep; flatten it"
                )
            values = item.values() if isinstance(item, dict) else item
            todo.extend((v, depth + 1) for v in values)
            if isinstance(item, dict):
                todo.extend((k, depth + 1) for k in item)


def decode_payload(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


# The data format (``meta`` field ``version``) of the one layout this release reads and
# writes (docs/data-model.md, lua/include/records.lua). A namespace an earlier release
# made (formats 1 to 4) is refused until ``tickwheel migrate`` converts it (migrate.lua).
FORMAT_VERSION = 5

# Records are arrays with their trailing defaults left out (lua/include/records.lua).
# The places the engine fills (1-based, as Lua counts); each declared field that a record
# keeps names its own place (fields.Field.pending and .outcome).
_PENDING_CORE = {
    "deadline_ms": 1,
    "payload": 2,
    "created_ms": 3,
    "origin": 4,
    "got": 7,
    "absorbed": 12,
}
_OUTCOME_CORE = {
    "outcome": 1,
    "deadline_ms": 2,
    "decided_ms": 3,
    "payload": 4,
    "created_ms": 5,
    "origin": 6,
    "got": 7,
    "absorbed": 11,
}
# absorbed: the later calls a debounce window took in (schedule(..., debounce=True))
_CORE_STORED: dict[str, Any] = {"origin": "", "got": [], "absorbed": 0}
OUTCOME_CODES = {1: "expired", 2: "cancelled", 3: "completed"}


def _layout(
    core: dict[str, int], place: str, always: int
) -> tuple[tuple[str, ...], dict[str, Any]]:
    """A record's names in place order, and what each after the first ``always`` (which
    every record holds) stands for when a record leaves it out."""
    places = {**core, **{n: getattr(f, place) for n, f in FIELDS.items() if getattr(f, place)}}
    names = tuple(sorted(places, key=places.__getitem__))
    if [places[n] for n in names] != list(range(1, len(names) + 1)):
        raise TypeError(f"the {place} record's places must run 1..n without a gap: {places}")
    stored = {n: _CORE_STORED[n] if n in core else FIELDS[n].stored for n in names[always:]}
    return names, stored


_PENDING, _PENDING_DEFAULTS = _layout(_PENDING_CORE, "pending", always=3)
_OUTCOME, _OUTCOME_DEFAULTS = _layout(_OUTCOME_CORE, "outcome", always=5)
_TEXT = frozenset({"origin", *(n for n, f in FIELDS.items() if f.schema.get("type") == "string")})
_TEXTS = frozenset({"got", *(n for n, f in FIELDS.items() if f.schema.get("type") == "array")})


def decode_pending(data: bytes) -> dict[str, Any]:
    """A pending timer's record (``P:t``) by name: ``deadline_ms``, ``payload`` (its
    msgpack bytes), ``created_ms``, ``origin``, ``got`` and each declared field it keeps
    as stored (``fields.Field.stored`` when left out)."""
    rec = _named(_array(data), _PENDING, _PENDING_DEFAULTS)
    rec["created_ms"] = rec["deadline_ms"] - rec["created_ms"]  # kept as d - c
    return rec


def decode_result(data: bytes) -> dict[str, Any]:
    """A retained outcome (a results-table value without its first 4 bytes, or ``r`` of
    an outcome entry) by name, as :func:`decode_pending`, with ``outcome`` (its name)
    and ``decided_ms``."""
    rec = _named(_array(data), _OUTCOME, _OUTCOME_DEFAULTS)
    rec["outcome"] = OUTCOME_CODES[rec["outcome"]]
    rec["decided_ms"] = rec["deadline_ms"] + rec["decided_ms"]  # kept as t - d
    rec["created_ms"] = rec["deadline_ms"] - rec["created_ms"]  # kept as d - c
    return rec


def _array(data: bytes) -> list[Any]:
    raw = msgpack.unpackb(data, raw=True, strict_map_key=False)
    if not isinstance(raw, list):
        raise ValueError(f"a record is a msgpack array, not {type(raw).__name__}")
    return raw


def _named(values: list[Any], names: tuple[str, ...], defaults: dict[str, Any]) -> dict[str, Any]:
    """A record's values by name, its text decoded.

    Lua has one string type, so cmsgpack writes the binary payload as msgpack ``str``;
    decoding with ``raw=True`` keeps it as bytes, and the text fields are decoded here.
    """
    rec = {**defaults, **dict(zip(names, values, strict=False))}
    for name in _TEXT:
        value = rec.get(name)
        if isinstance(value, bytes):
            rec[name] = value.decode("utf-8", "replace")
    for name in _TEXTS:
        value = rec.get(name)
        if value is not None:  # a list of its own, never the shared default
            rec[name] = [x.decode("utf-8", "surrogatepass") for x in value]
    return rec


def jsonable(value: Any, other: Callable[[Any], Any] = str) -> Any:
    """A decoded payload in JSON's terms, for the CLI and the dashboard to show.

    msgpack carries more than JSON: bytes become ``{"$bytes": "<base64>"}``, an
    extension type ``{"$ext": code, "$bytes": "<base64>"}``, a map key that is not text
    (bytes, a number, a bool or nil) its text, and tuples lists. Nothing is dropped.
    Any other value (a msgpack Timestamp) becomes ``other(value)``. Iterative: a payload
    nested MAX_PAYLOAD_DEPTH deep must leave stack for the JSON encoder after it.
    """
    root: list[Any] = [None]
    todo: list[tuple[Any, Any, Any]] = [(value, root, 0)]  # (value, where it goes, slot)
    while todo:
        item, parent, slot = todo.pop()
        if isinstance(item, str | int | float | bool) or item is None:
            parent[slot] = item
        elif isinstance(item, bytes | bytearray):
            parent[slot] = {"$bytes": base64.b64encode(item).decode("ascii")}
        elif isinstance(item, dict):
            out: dict[str, Any] = {}
            parent[slot] = out
            for k, v in item.items():
                key = _json_key(k)
                out[key] = None  # its place, in the map's order
                todo.append((v, out, key))
        elif isinstance(item, list | tuple):
            parent[slot] = seq = [None] * len(item)
            todo.extend((v, seq, i) for i, v in enumerate(item))
        elif isinstance(item, msgpack.ExtType):
            parent[slot] = {
                "$ext": item.code,
                "$bytes": base64.b64encode(item.data).decode("ascii"),
            }
        else:
            parent[slot] = other(item)
    return root[0]


def _json_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bytes):
        return key.decode("utf-8", "backslashreplace")
    return json.dumps(jsonable(key))


def text(value: object) -> str:
    """A reply's bytes as text (lone surrogates kept, as Redis keeps any bytes)."""
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else str(value)
