"""What fakeredis does unlike Redis, where tickwheel notices, and how a store's sockets
answer instead: every fix in this module, each a named method or function whose
docstring says what fakeredis does and what the upstream patch would be; the scripts'
``cmsgpack``, which fakeredis has none of, is its own module beside it (:mod:`.cmsgpack`).

For fakeredis >= 2.41, < 2.42 (the ``testing`` extra). For each fix, the test suite
holds a test that a plain ``fakeredis.FakeRedis`` still misbehaves; it fails once
fakeredis behaves, saying which fix to drop from here.

The fixes live on the store's own socket classes (:class:`StoreSocket`, and
:class:`AsyncStoreSocket` for asyncio clients), so a plain fakeredis server in the same
process is left as it is; the commands fakeredis lacks are looked up in this module's
own table first. The one patch outside those classes is the clock (:mod:`.clock`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, cast

from fakeredis import _msgs as msgs
from fakeredis._commands import Key, Signature
from fakeredis._helpers import OK, SimpleError
from fakeredis._socket import AsyncFakeSocket, FakeSocket
from fakeredis.commands_mixins import scripting_mixin as scripting
from fakeredis.model import XStream
from fakeredis.model._stream import StreamEntryKey

from ...clock import Time
from . import clock
from .cmsgpack import cmsgpack_pack, cmsgpack_unpack

# What the store says it is (HELLO, INFO): a version tickwheel accepts, and the one whose
# behaviour fakeredis is told to follow where it differs by version.
REDIS_VERSION = "7.2.4"
VERSION = (7, 2)
BUSYGROUP = "BUSYGROUP Consumer Group name already exists"
NO_DURABILITY = (
    "ERR a FakeStore keeps its data in memory and has no replicas: {what} cannot be had "
    "here (test durability 'aof' and 'replicas:N' on a real server: timer.testing.RedisServer)"
)
SMALLER = "The ID specified in XSETID is smaller than"
NEVER_RETURNS = (
    "ERR a command that blocks with no timeout on virtual time would never return: nothing "
    "else runs while a stepped process waits (give it a timeout)"
)


# -- the commands fakeredis lacks ----------------------------------------------------------

# name (as fakeredis keys its table) -> the store socket's method that runs it
_STREAM_WRITE = msgs.FLAG_LEAVE_EMPTY_VAL + msgs.FLAG_DO_NOT_CREATE
STORE_COMMANDS: dict[str, Signature] = {
    name: Signature(name, method, fixed, repeat, flags=flags)  # type: ignore[arg-type]
    for name, method, fixed, repeat, flags in [
        ("info", "store_info", (), (bytes,), ""),
        ("xsetid", "store_xsetid", (Key(XStream), bytes), (bytes,), _STREAM_WRITE),
        ("memory", "store_memory", (bytes,), (bytes,), ""),
        ("wait", "store_wait", (bytes, bytes), (), ""),
        ("waitaof", "store_waitaof", (bytes, bytes, bytes), (), ""),
    ]
}


def approximate_size(value: Any) -> int:
    """What ``MEMORY USAGE`` answers for a value: its bytes plus 16 a element (strings,
    fields, members, stream entries) and 64 a key. An estimate to compare keys with
    each other and to watch grow, never Redis's own figures (its encodings differ)."""
    if isinstance(value, bytes):
        return 64 + len(value)
    total = 64
    if isinstance(value, XStream):
        for fields in value._values_dict.values():
            total += 16 + sum(len(f) + 16 for f in fields)
        return total
    items = value.items() if hasattr(value, "items") else ((x, b"") for x in value)
    for k, v in items:
        total += (
            16
            + len(k if isinstance(k, bytes) else str(k))
            + len(v if isinstance(v, bytes) else str(v))
        )
    return total


class StoreCommands:
    """What a store's socket answers unlike fakeredis's (mixed in before fakeredis's
    socket class). Each method below is one fix; the clock's is :meth:`_process_command`."""

    _server: Any
    _db: Any
    _client_info: Any
    _in_transaction: bool
    _script_resp: int | None
    _fieldsets: dict[Any, Any]
    _owed_s = 0.0  # time a blocking command on virtual time let pass, moved after it

    @property
    def store_time(self) -> Time:
        return self._server.store_time  # type: ignore[no-any-return]

    _store_dead = False  # cut by the store's restart: every send and read fails

    def sendall(self, data: Any) -> None:
        if self._store_dead:
            raise self._connection_error_class(msgs.CONNECTION_ERROR_MSG)  # type: ignore[attr-defined]
        sent = self._server.store_sent
        if sent is not None:  # FakeStore.sent: a simulation stalls the sender here
            sent()
        super().sendall(data)  # type: ignore[misc]

    def _process_command(self, fields: list[bytes]) -> None:
        """Every command runs on the store's clock (:mod:`.clock`); the time a blocking
        command waited on virtual time passes once it has answered, outside the server's
        lock. A cut the store was told to make (``FakeStore.cut``) happens here: the
        connection fails before the command runs, or after it ran with its reply lost.
        Not a fakeredis bug: no upstream patch."""
        server = self._server
        cut = server.store_cut(fields) if server.store_cut is not None else None
        if cut == "before":
            raise self._connection_error_class(msgs.CONNECTION_ERROR_MSG)  # type: ignore[attr-defined]
        with clock.running_on(server.store_time):
            super()._process_command(fields)  # type: ignore[misc]
        if cut == "after":
            cast(Any, self).responses = None  # the reply is lost with the connection
            raise self._connection_error_class(msgs.CONNECTION_ERROR_MSG)  # type: ignore[attr-defined]
        owed, self._owed_s = self._owed_s, 0.0
        if owed:
            server.store_time.sleep(owed)

    def _name_to_func(self, cmd_name: str) -> tuple[Callable[..., Any] | None, Signature]:
        sig = STORE_COMMANDS.get(cmd_name)
        if sig is not None:
            return getattr(self, sig.func_name), sig
        return super()._name_to_func(cmd_name)  # type: ignore[misc, no-any-return]

    def _blocking(
        self,
        timeout: float | None,
        func: Callable[[bool], Any],
        shape: Callable[[Any], Any] | None = None,
    ) -> Any:
        """On virtual time a blocking command that finds nothing returns its empty reply
        at once, and its timeout passes on the clock (as ``VirtualTime.wait``): nothing
        else can write meanwhile. fakeredis waits on a real condition, for real seconds.
        Not a fakeredis bug (it has no virtual time): no upstream patch."""
        if not self.store_time.virtual:
            return super()._blocking(timeout, func, shape)  # type: ignore[misc]
        ret = func(True)
        if ret is not None or self._in_transaction:
            return ret if shape is None else shape(ret)
        if not timeout:
            raise SimpleError(NEVER_RETURNS)
        self._owed_s = timeout
        return None if shape is None else shape(None)

    def store_info(self, *sections: bytes) -> bytes:
        """``INFO [section ...]``: fakeredis has no INFO (unknown command). This answers
        the fields tickwheel and redis-py read: the version, the eviction policy (CONFIG
        SET maxmemory-policy), AOF (off: nothing is written to disk), replicas (none),
        keys per db. Upstream: an ``info`` command in ``ServerCommandsMixin`` building
        these sections from the server's state."""
        policy = self._server.config.get(b"maxmemory-policy", b"noeviction").decode()
        dbs = sorted(self._server.dbs.items())
        items = {n: list(db._dict.values()) for n, db in dbs if len(db)}  # len() expires
        used = sum(approximate_size(i.value) for held in items.values() for i in held)
        keyspace: dict[str, object] = {
            f"db{n}": f"keys={len(held)},expires={sum(i.expireat is not None for i in held)}"
            for n, held in items.items()
        }
        all_sections: dict[str, dict[str, object]] = {
            "server": {
                "redis_version": REDIS_VERSION,
                "redis_mode": "standalone",
                "os": "tickwheel FakeStore (fakeredis)",
                "arch_bits": 64,
                "process_id": 1,
                "tcp_port": 0,
            },
            "clients": {"connected_clients": len(self._server.sockets), "blocked_clients": 0},
            "memory": {
                "used_memory": used,
                "maxmemory": int(self._server.config.get(b"maxmemory", b"0")),
                "maxmemory_policy": policy,
            },
            "persistence": {"loading": 0, "aof_enabled": 0, "rdb_bgsave_in_progress": 0},
            "replication": {"role": "master", "connected_slaves": 0},
            "cluster": {"cluster_enabled": 0},
            "keyspace": keyspace,
        }
        wanted = {s.decode().lower() for s in sections} - {"default", "all", "everything"}
        lines: list[str] = []
        for name, fields in all_sections.items():
            if wanted and name not in wanted:
                continue
            lines.append(f"# {name.capitalize()}")
            lines += [f"{k}:{v}" for k, v in fields.items()]
            lines.append("")
        return "\r\n".join(lines).encode()

    def hello(self, *args: bytes) -> dict[str, Any]:
        """``HELLO``: fakeredis names itself and its own version (so tickwheel says the
        server is too old), and a HELLO with no protocol version drops the connection to
        RESP2 (Redis keeps the one in use). Here it is Redis at :data:`REDIS_VERSION`, in
        the protocol the connection speaks. Upstream: report the emulated server type and
        ``FakeServer.version``, and change ``resp`` only when a version is given."""
        before = self._client_info["resp"]
        data = super().hello(*args)  # type: ignore[misc]
        if not args:
            self._client_info["resp"] = data["proto"] = before
        data["server"], data["version"] = "redis", REDIS_VERSION
        return data  # type: ignore[no-any-return]

    def xgroup_create(self, *args: Any) -> Any:
        """``XGROUP CREATE`` of a group that exists: fakeredis answers ``ERR BUSYGROUP …``,
        so the error's code is ERR; Redis answers ``-BUSYGROUP …``. Upstream: drop
        "ERR " from ``msgs.XGROUP_BUSYGROUP``."""
        try:
            return super().xgroup_create(*args)  # type: ignore[misc]
        except SimpleError as exc:
            if exc.value == msgs.XGROUP_BUSYGROUP:
                raise SimpleError(BUSYGROUP) from None
            raise

    def _xreadgroup_reply(self, res: dict[bytes, Any] | None) -> Any:
        """XREADGROUP's reply in the protocol of whoever asked: fakeredis shapes it for
        the client's protocol even inside a script, which speaks RESP2 unless it called
        ``redis.setresp(3)``; a RESP3 client's script gets a map where fire.lua reads an
        array. Upstream: ``_xreadgroup_reply`` reads ``self._resp_version`` (which is the
        script's inside one) instead of ``self._client_info.protocol_version``."""
        if self._resp_version == 2:
            return [[k, v] for k, v in res.items()] if res else None
        return res

    @property
    def _resp_version(self) -> int:
        script = self._script_resp
        return script if script is not None else int(self._client_info.protocol_version)

    def store_xsetid(self, key: Any, last_id: bytes, *args: bytes) -> Any:
        """``XSETID key last-id [ENTRIESADDED n] [MAXDELETEDID id]``: fakeredis has no
        XSETID (migrate.lua sets a copied stream's last id with it). Upstream: the same in
        ``StreamsCommandsMixin``, with setters on ``XStream``."""
        stream = key.value
        if stream is None:
            raise SimpleError("ERR no such key")
        new = StreamEntryKey.parse_str(last_id)
        options = {args[i].lower(): args[i + 1] for i in range(0, len(args) - 1, 2)}
        if len(args) % 2 or set(options) - {b"entriesadded", b"maxdeletedid"}:
            raise SimpleError(msgs.SYNTAX_ERROR_MSG)
        if len(stream) and new < stream._ids[-1]:
            raise SimpleError(f"ERR {SMALLER} the target stream top item")
        if b"entriesadded" in options:
            added = int(options[b"entriesadded"])
            if added < len(stream):
                raise SimpleError(
                    "ERR The entries_added specified in XSETID is smaller than the target "
                    "stream length"
                )
            stream._entries_added = added
        if b"maxdeletedid" in options:
            deleted = StreamEntryKey.parse_str(options[b"maxdeletedid"])
            if new < deleted:
                raise SimpleError(f"ERR {SMALLER} the provided max_deleted_entry_id")
            stream._max_deleted_id = deleted
        stream._last_id = new
        key.updated()
        return OK

    def store_memory(self, sub: bytes, *args: bytes) -> Any:
        """``MEMORY USAGE key``: fakeredis has no MEMORY. Answered with
        :func:`approximate_size` (nil for a missing key). Upstream: ``MEMORY USAGE``
        with an estimate of the same kind, documented as one."""
        if sub.lower() != b"usage" or not args:
            raise SimpleError(f"ERR unknown subcommand '{sub.decode(errors='replace')}'")
        item = self._db.get(args[0])
        return None if item is None else approximate_size(item.value)

    def store_wait(self, numreplicas: bytes, timeout: bytes) -> Any:
        """``WAIT``: refused, naming the limitation (durability 'replicas:N')."""
        raise SimpleError(NO_DURABILITY.format(what="WAIT for replicas (durability 'replicas:N')"))

    def store_waitaof(self, numlocal: bytes, numreplicas: bytes, timeout: bytes) -> Any:
        """``WAITAOF``: refused, naming the limitation (durability 'aof')."""
        raise SimpleError(NO_DURABILITY.format(what="WAITAOF (durability 'aof')"))

    # -- scripts: cmsgpack, compiled once, no full collection after each -----------------

    def _get_server_runtime(self, server: Any) -> Any:
        """The server's Lua, with ``cmsgpack`` (see :func:`cmsgpack_pack`)."""
        lua = super()._get_server_runtime(server)  # type: ignore[misc]
        if not hasattr(server, "_store_scripts"):
            install = lua.eval(
                "function(pack, unpack) cmsgpack = {pack = pack, unpack = unpack} end"
            )
            install(lambda *v: cmsgpack_pack(lua, *v), lambda d: cmsgpack_unpack(lua, d))
            server._lua_expected_globals.add(b"cmsgpack")
            server._store_scripts = {}
        return lua

    def eval(self, script: bytes, numkeys: int, *keys_and_args: bytes) -> Any:
        """``EVAL`` as fakeredis's, but each script is compiled once (fakeredis compiles
        it again on every call: 0.41 ms for schedule.lua) and Lua's own incremental
        collector is left to run (fakeredis runs a full ``collectgarbage()`` after every
        call). Upstream: a ``{sha1: compiled function}`` cache on the server, emptied by
        SCRIPT FLUSH, and no full collection."""
        if numkeys > len(keys_and_args):
            raise SimpleError(msgs.TOO_MANY_KEYS_MSG)
        if numkeys < 0:
            raise SimpleError(msgs.NEGATIVE_KEYS_MSG)
        sha1 = hashlib.sha1(script).hexdigest().encode()
        self._server.script_cache[sha1] = script
        lua = self._get_server_runtime(self._server)
        s = self._server
        s._lua_current_socket[0] = self
        self._script_resp = 2
        caller_fieldsets, self._fieldsets = self._fieldsets, {}
        s._lua_set_keys_argv(
            lua.table_from(keys_and_args[:numkeys]), lua.table_from(keys_and_args[numkeys:])
        )
        try:
            compiled = s._store_scripts.get(sha1)
            if compiled is None:
                compiled = s._store_scripts[sha1] = lua.compile(script)
            result = compiled()
        except SimpleError as ex:
            message = ex.value
            if message == msgs.LUA_COMMAND_ARG_MSG:
                message = scripting._get_lua_bad_command_arg_msg(s.server_type, self.version)  # type: ignore[attr-defined]  # fmt: skip
            raise SimpleError(message) from None
        except scripting.LUA_MODULE.LuaError as ex:
            raise SimpleError(msgs.SCRIPT_ERROR_MSG.format(sha1.decode(), ex)) from None
        finally:
            self._script_resp = None
            self._fieldsets = caller_fieldsets
        scripting._check_for_lua_globals(lua, s._lua_expected_globals)
        return self._convert_lua_result(result, nested=False)  # type: ignore[attr-defined]

    def script_flush(self, *args: bytes) -> Any:
        """SCRIPT FLUSH empties the compiled scripts too."""
        getattr(self._server, "_store_scripts", {}).clear()
        return super().script_flush(*args)  # type: ignore[misc]


class StoreSocket(StoreCommands, FakeSocket):
    """A blocking client's socket on a store."""


class AsyncStoreSocket(StoreCommands, AsyncFakeSocket):
    """An asyncio client's socket on a store."""


__all__ = [
    "REDIS_VERSION",
    "STORE_COMMANDS",
    "AsyncStoreSocket",
    "StoreCommands",
    "StoreSocket",
    "approximate_size",
    "cmsgpack_pack",
    "cmsgpack_unpack",
]
