"""``cmsgpack`` for the store's Lua, which fakeredis gives scripts none of: ``pack`` and
``unpack`` byte for byte as Redis's lua_cmsgpack, backed by the msgpack package. Installed
into each server's Lua runtime by :mod:`.fixes` (``_get_server_runtime``)."""

from __future__ import annotations

import struct
from typing import Any

import msgpack
from fakeredis._helpers import SimpleError
from fakeredis.commands_mixins import scripting_mixin as scripting


def cmsgpack_pack(lua: Any, *values: Any) -> bytes:
    """``cmsgpack.pack(...)``, byte for byte as Redis's lua_cmsgpack writes it: each
    argument's encoding, concatenated.

    fakeredis gives scripts no ``cmsgpack`` at all (it backs ``cjson`` with Python's
    json). Upstream: the same two functions registered next to ``cjson`` in
    ``ScriptingCommandsMixin._get_server_runtime``, with msgpack as an optional dependency
    (``fakeredis[lua]``). Lua keeps its own table order: a map's fields come in
    ``next()``'s order here as there (the bundled Lua's hashing, not Redis's)."""
    if not values:
        raise SimpleError("MessagePack pack needs input.")
    out = bytearray()
    for value in values:
        _pack(lua, value, out, 0)
    return bytes(out)


_MAX_NESTING = 16  # lua_cmsgpack packs a table nested deeper as nil
_INT64 = 2**63


def _pack(lua: Any, v: Any, out: bytearray, level: int) -> None:
    if v is None:
        out += b"\xc0"
    elif isinstance(v, bool):
        out += b"\xc3" if v else b"\xc2"
    elif isinstance(v, int) and -_INT64 <= v < _INT64:
        _pack_int(v, out)
    elif isinstance(v, (int, float)):
        f = float(v)  # a double whose value fits a float32 exactly is sent as one
        single = struct.unpack(">f", struct.pack(">f", f))[0] if abs(f) < 3.5e38 else None
        out += b"\xca" + struct.pack(">f", f) if single == f else b"\xcb" + struct.pack(">d", f)
    elif isinstance(v, bytes):
        _pack_header(len(v), out, (0xA0, 31), b8=b"\xd9", b16=b"\xda", b32=b"\xdb")
        out += v
    elif scripting.LUA_MODULE.lua_type(v) == "table":
        if level >= _MAX_NESTING:
            out += b"\xc0"
            return
        keys = list(v.keys())
        if all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in keys) and (
            max(keys, default=0) == len(keys)
        ):
            _pack_header(len(keys), out, (0x90, 15), b8=None, b16=b"\xdc", b32=b"\xdd")
            for i in range(1, len(keys) + 1):
                _pack(lua, v[i], out, level + 1)
        else:
            _pack_header(len(keys), out, (0x80, 15), b8=None, b16=b"\xde", b32=b"\xdf")
            for k, item in v.items():
                _pack(lua, k, out, level + 1)
                _pack(lua, item, out, level + 1)
    else:  # functions, userdata: nil, as lua_cmsgpack does
        out += b"\xc0"


def _pack_int(n: int, out: bytearray) -> None:
    if 0 <= n <= 127 or -32 <= n < 0:
        out += struct.pack(">b" if n < 0 else ">B", n)
    elif n > 0:
        for code, fmt, top in (
            (b"\xcc", ">B", 0xFF),
            (b"\xcd", ">H", 0xFFFF),
            (b"\xce", ">I", 2**32 - 1),
        ):
            if n <= top:
                out += code + struct.pack(fmt, n)
                return
        out += b"\xcf" + struct.pack(">Q", n)
    else:
        for code, fmt, low in (
            (b"\xd0", ">b", -128),
            (b"\xd1", ">h", -32768),
            (b"\xd2", ">i", -(2**31)),
        ):
            if n >= low:
                out += code + struct.pack(fmt, n)
                return
        out += b"\xd3" + struct.pack(">q", n)


def _pack_header(
    n: int, out: bytearray, fix: tuple[int, int], *, b8: bytes | None, b16: bytes, b32: bytes
) -> None:
    if n <= fix[1]:
        out.append(fix[0] | n)
    elif b8 is not None and n <= 0xFF:
        out += b8 + struct.pack(">B", n)
    elif n <= 0xFFFF:
        out += b16 + struct.pack(">H", n)
    else:
        out += b32 + struct.pack(">I", n)


def cmsgpack_unpack(lua: Any, data: bytes) -> tuple[Any, ...]:
    """``cmsgpack.unpack(s)``: every value ``s`` holds, as Lua values (a map or an array
    is a table, a nil inside an array a hole, any string a Lua string).

    The other half of the missing ``cmsgpack`` (see :func:`cmsgpack_pack`)."""
    if not isinstance(data, bytes):
        raise SimpleError("MessagePack unpack needs a string.")
    unpacker = msgpack.Unpacker(raw=True, strict_map_key=False, use_list=True)
    unpacker.feed(data)
    try:
        return tuple(_to_lua(lua, v) for v in unpacker)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise SimpleError(f"Bad data format in input. ({exc})") from None


def _to_lua(lua: Any, v: Any) -> Any:
    if isinstance(v, list):
        return lua.table_from([_to_lua(lua, x) for x in v])
    if isinstance(v, dict):
        return lua.table_from({_to_lua(lua, k): _to_lua(lua, x) for k, x in v.items()})
    return v
