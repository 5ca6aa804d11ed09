"""Payload and record encoding: msgpack only. Nothing is ever unpickled."""

from __future__ import annotations

from typing import Any

import msgpack

from ..errors import InvalidInput

DEFAULT_MAX_PAYLOAD = 1024 * 1024


def encode_payload(payload: object, max_bytes: int = DEFAULT_MAX_PAYLOAD) -> bytes:
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
    return data


def decode_payload(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


# Data formats a namespace may be in (``meta`` field ``version``); see ``lua/_lib.lua``.
# New namespaces get the newest; every one listed here is read. Format 3 has format 2's
# records, its retained outcomes in the results table (``P:R:<b>``) instead of a key each.
# Format 4 writes outcome stream entries of two fields, the id (``i``) and the retained
# outcome record (``r``), instead of five (``outcome_entry_fields``).
FORMAT_VERSIONS = (1, 2, 3, 4)
FORMAT_VERSION = FORMAT_VERSIONS[-1]

# Format 2 records are arrays with their trailing defaults left out (lua/_lib.lua).
_PENDING_FIELDS = ("d", "p", "c", "s", "n", "w", "g")
_PENDING_DEFAULTS: dict[str, Any] = {"s": b"", "n": 1, "w": (), "g": ()}
_RESULT_FIELDS = ("o", "d", "t", "p", "c", "s", "g")
_RESULT_DEFAULTS: dict[str, Any] = {"s": b"", "g": ()}
OUTCOME_CODES = {1: "expired", 2: "cancelled", 3: "completed"}


def decode_pending(data: bytes) -> dict[str, Any]:
    """A pending timer's record (``P:t``), in either format, as a dict of its fields."""
    raw = msgpack.unpackb(data, raw=True, strict_map_key=False)
    if isinstance(raw, list):  # format 2: c is kept as d - c
        raw = _named(raw, _PENDING_FIELDS, _PENDING_DEFAULTS)
        raw["c"] = raw["d"] - raw["c"]
    return _text_fields(raw)


def decode_result(data: bytes) -> dict[str, Any]:
    """A retained outcome (``P:r:<id>``, or a results-table value without its first 4
    bytes), in either record format; ``o`` is the outcome's name."""
    raw = msgpack.unpackb(data, raw=True, strict_map_key=False)
    if isinstance(raw, list):  # format 2: o is a code, t kept as t - d and c as d - c
        raw = _named(raw, _RESULT_FIELDS, _RESULT_DEFAULTS)
        raw["o"] = OUTCOME_CODES[raw["o"]]
        raw["t"] = raw["d"] + raw["t"]
        raw["c"] = raw["d"] - raw["c"]
    return _text_fields(raw)


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
        elif name == "o" and isinstance(value, bytes):
            out[name] = value.decode()
        else:
            out[name] = value
    return out
