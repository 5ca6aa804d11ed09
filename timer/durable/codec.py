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


def decode_record(data: bytes) -> dict[str, Any]:
    """A record written by a Lua script (cmsgpack): its strings come back as bytes.

    Lua has one string type, so cmsgpack writes the binary payload as msgpack ``str``;
    decoding with ``raw=True`` keeps it as bytes, and text fields are decoded here.
    """
    raw = msgpack.unpackb(data, raw=True, strict_map_key=False)
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
