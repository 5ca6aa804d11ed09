"""Payload and record encoding: msgpack only. Nothing is ever unpickled."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import msgpack

from ..errors import InvalidInput

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
        return data
    try:
        decode_payload(data)
    except Exception as exc:
        raise InvalidInput(
            f"payload cannot be read back once stored ({type(exc).__name__}: {exc}); use "
            "text, numbers or bytes as map keys and nest at most 500 levels deep"
        ) from None
    return data


def decode_payload(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


# The data format (``meta`` field ``version``) of the one layout this release reads and
# writes (docs/data-model.md, lua/include/records.lua). A namespace an earlier release
# made (formats 1 to 4) is refused until ``tickwheel migrate`` converts it (migrate.lua).
FORMAT_VERSION = 5

# Records are arrays with their trailing defaults left out (lua/include/records.lua).
_PENDING_FIELDS = ("d", "p", "c", "s", "n", "w", "g", "x", "u")
_PENDING_DEFAULTS: dict[str, Any] = {"s": b"", "n": 1, "w": (), "g": (), "x": b"", "u": b""}
_RESULT_FIELDS = ("o", "d", "t", "p", "c", "s", "g", "x", "u")
_RESULT_DEFAULTS: dict[str, Any] = {"s": b"", "g": (), "x": b"", "u": b""}
OUTCOME_CODES = {1: "expired", 2: "cancelled", 3: "completed"}


def decode_pending(data: bytes) -> dict[str, Any]:
    """A pending timer's record (``P:t``) as a dict of its fields (c is kept as d - c)."""
    raw = _named(_array(data), _PENDING_FIELDS, _PENDING_DEFAULTS)
    raw["c"] = raw["d"] - raw["c"]
    return _text_fields(raw)


def decode_result(data: bytes) -> dict[str, Any]:
    """A retained outcome (a results-table value without its first 4 bytes, or ``r`` of
    an outcome entry); ``o`` is the outcome's name (kept as a code), t and c are kept as
    t - d and d - c."""
    raw = _named(_array(data), _RESULT_FIELDS, _RESULT_DEFAULTS)
    raw["o"] = OUTCOME_CODES[raw["o"]]
    raw["t"] = raw["d"] + raw["t"]
    raw["c"] = raw["d"] - raw["c"]
    return _text_fields(raw)


def _array(data: bytes) -> list[Any]:
    raw = msgpack.unpackb(data, raw=True, strict_map_key=False)
    if not isinstance(raw, list):
        raise ValueError(f"a record is a msgpack array, not {type(raw).__name__}")
    return raw


def _named(values: list[Any], fields: tuple[str, ...], defaults: dict[str, Any]) -> dict[str, Any]:
    named = dict(zip(fields, values, strict=False))
    for name, value in defaults.items():
        named.setdefault(name, value)
    return named


def _text_fields(raw: dict[Any, Any]) -> dict[str, Any]:
    """A record's fields as a script's cmsgpack wrote them: strings come back as bytes.

    Lua has one string type, so cmsgpack writes the binary payload as msgpack ``str``;
    decoding with ``raw=True`` keeps it as bytes, and text fields are decoded here.
    """
    out: dict[str, Any] = {}
    for k, value in raw.items():
        name = k.decode() if isinstance(k, bytes) else k
        if name in ("w", "g"):
            out[name] = [x.decode("utf-8", "surrogatepass") for x in value] if value else []
        elif name in ("x", "u"):  # a traceparent, a callback URL: text
            out[name] = value.decode("utf-8", "replace") if isinstance(value, bytes) else ""
        else:
            out[name] = value
    return out


def jsonable(value: Any, other: Callable[[Any], Any] = str) -> Any:
    """A decoded payload in JSON's terms, for the CLI and the dashboard to show.

    msgpack carries more than JSON: bytes become ``{"$bytes": "<base64>"}``, an
    extension type ``{"$ext": code, "$bytes": "<base64>"}``, a map key that is not text
    (bytes, a number, a bool or nil) its text, and tuples lists. Nothing is dropped.
    Any other value (a msgpack Timestamp) becomes ``other(value)``.
    """
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, bytes | bytearray):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {_json_key(k): jsonable(v, other) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v, other) for v in value]
    if isinstance(value, msgpack.ExtType):
        return {"$ext": value.code, "$bytes": base64.b64encode(value.data).decode("ascii")}
    return other(value)


def _json_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bytes):
        return key.decode("utf-8", "backslashreplace")
    return json.dumps(jsonable(key))
