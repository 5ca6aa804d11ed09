"""What tickwheel asks of a server before it writes (sans-I/O, as the operations): its
version (HELLO, INFO), the settings durability depends on (eviction, replicas, AOF and
its fsync policy), and what ``durability`` can promise there."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...errors import ConfigError, StoreError
from ..model import steps
from ..model.codec import text
from ..model.models import Durability, ServerSettings
from ..model.steps import Op

MIN_SERVER = {"redis": (6, 2), "valkey": (7, 2)}


def check_server_version(info: Mapping[str, Any], where: str) -> None:
    """ConfigError unless INFO server describes Redis >= 6.2 or Valkey >= 7.2."""
    if "valkey_version" in info:
        kind, version = "valkey", info["valkey_version"]
    else:
        kind, version = "redis", info.get("redis_version", "0")
    have = tuple(int(x) for x in str(version).split(".")[:2])
    if have < MIN_SERVER[kind]:
        need = ".".join(map(str, MIN_SERVER[kind]))
        raise ConfigError(
            f"{kind} {version} at {where} is too old: tickwheel needs {kind} >= {need} "
            "(Redis >= 6.2 or Valkey >= 7.2)"
        )


def server_settings(where: str = "", *, check_version: bool = False) -> Op[list[ServerSettings]]:
    """What every server (every primary of a cluster) says about keeping our data; with
    ``check_version``, a ConfigError for a server too old (from the same INFO)."""
    infos = yield steps.Command("info", (), every_primary=True)
    if check_version:
        for info in infos.values():
            check_server_version(info, where)
    return [
        ServerSettings(
            node=str(node),
            version=str(info.get("valkey_version") or info.get("redis_version", "?")),
            maxmemory_policy=str(info.get("maxmemory_policy", "noeviction")),
            aof_enabled=int(info.get("aof_enabled", 0)) == 1,
            replicas=int(info.get("connected_slaves", 0)),
        )
        for node, info in sorted(infos.items())
    ]


def check_durability(
    servers: Iterable[ServerSettings],
    where: str,
    *,
    allow_eviction: bool,
    durability: Durability | None = None,
) -> list[str]:
    """ConfigError for a server that may evict timers (unless allowed); a warning each
    for a server without AOF, and (given the client's ``durability``) for a master with
    replicas whose writes do not wait for one: a failover or a split loses what the
    replicas had not received (the counts per durability: the fault matrix of
    https://tickwheel.readthedocs.io/concepts/promises/)."""
    notes: list[str] = []
    for s in servers:
        if s.evicts and not allow_eviction:
            node = "" if s.node in where else f" ({s.node})"  # one server: its URL once
            raise ConfigError(
                f"the server at {where}{node} has maxmemory-policy {s.maxmemory_policy}: "
                "it may evict timers and outcomes without a trace. Set "
                "`maxmemory-policy noeviction` (CONFIG SET or redis.conf), or pass "
                "allow_eviction (`--allow-eviction`) if you accept losing timers"
            )
        if s.evicts:
            notes.append(f"{s.node}: maxmemory-policy {s.maxmemory_policy} may evict timers")
        if durability is not None and s.replicas and not durability.replicas:
            notes.append(
                f"{s.node}: the master has {s.replicas} replica(s) but writes do not wait "
                "for one (durability 'none'): a failover or a network split loses what they "
                "had not received; use durability 'replicas:1'"
            )
        if durability is not None and durability.replicas > s.replicas:
            notes.append(
                f"{s.node}: writes wait for {durability.replicas} replica(s) (durability "
                f"'replicas:{durability.replicas}') but the master has {s.replicas} "
                f"connected: each write waits {durability.timeout_ms} ms and is not "
                "confirmed (NotDurable: a worker tries it again) until enough replicas "
                "connect; start one, or ask for fewer"
            )
        if not s.aof_enabled:
            notes.append(
                f"{s.node}: AOF is off (appendonly no): a crash of the server loses the "
                "timers written since its last snapshot; set `appendonly yes`"
            )
    return notes


def check_aof(where: str) -> Op[list[str]]:
    """For durability ``aof``, before the first write that waits for it: ConfigError
    unless every server (every cluster primary) answers WAITAOF only once a write is on
    its disk. That needs WAITAOF (Redis, Valkey >= 7.2), ``appendonly yes`` and
    ``appendfsync always``: under ``everysec`` a server answers ``WAITAOF 1 0`` before
    its next fsync, so a power cut loses acknowledged timers. A user who may not run
    ``CONFIG GET`` gets a warning to show instead (the server could not be asked)."""
    try:
        yield steps.Command("execute_command", ("WAITAOF", 0, 0, 1), every_primary=True)
    except StoreError as exc:
        raise ConfigError(
            f"durability 'aof' cannot be had from the server at {where} ({exc.code or exc}): "
            "it needs WAITAOF (Redis >= 7.2, Valkey >= 7.2); use 'replicas:N', or 'none' "
            "with `appendfsync always`"
        ) from None
    try:
        configs = yield steps.Command("config_get", ("append*",), every_primary=True)
    except StoreError as exc:
        if exc.code != "NOPERM":
            raise
        return [
            f"{where}: durability 'aof' holds only under `appendfsync always`, and this user "
            "may not run CONFIG GET to check it (grant +config|get, or check it yourself)"
        ]
    for node, config in sorted(configs.items()):
        conf = {text(k): text(v) for k, v in dict(config).items()}
        at = "" if node in where else f" ({node})"
        if conf.get("appendonly") != "yes":
            raise ConfigError(
                f"durability 'aof' needs `appendonly yes` on the server at {where}{at}, which "
                "has AOF off: set it (CONFIG SET appendonly yes, and in redis.conf)"
            )
        if conf.get("appendfsync") != "always":
            raise ConfigError(
                f"durability 'aof' needs `appendfsync always` on the server at {where}{at}, "
                f"which has `appendfsync {conf.get('appendfsync')}`: under it the server "
                "acknowledges WAITAOF before its next fsync, so a power cut loses timers "
                "already acknowledged. Set `appendfsync always` (CONFIG SET and redis.conf; "
                "the embedded server: tickwheel server start --appendfsync always), or use "
                "durability 'replicas:N'"
            )
    return []


# -- namespace -----------------------------------------------------------------------------


def hello_fields(reply: Any) -> dict[str, Any]:
    """HELLO's reply (a flat list under RESP2, a map under RESP3) as text -> value."""
    pairs = (
        reply.items() if isinstance(reply, Mapping) else zip(reply[::2], reply[1::2], strict=True)
    )
    return {text(k): text(v) if isinstance(v, bytes) else v for k, v in pairs}


def version_of_hello(hello: Mapping[str, Any]) -> dict[str, Any]:
    """HELLO's fields in INFO's terms, for ``check_server_version``."""
    key = "valkey_version" if hello.get("server") == "valkey" else "redis_version"
    return {key: hello.get("version", "0")}


def check_server(where: str) -> Op[None]:
    """ConfigError unless the server is new enough. Asked with HELLO (a connection
    command any ACL user may run), not INFO (which Redis classes as dangerous), so a
    client or handler runner needs no INFO permission (https://tickwheel.readthedocs.io/guides/security/)."""
    try:  # every primary of a cluster (HELLO names no key to route it by)
        replies = yield steps.Command("execute_command", ("HELLO",), every_primary=True)
    except StoreError as exc:  # HELLO with no version is Redis >= 6.2 (6.0 wants one)
        # asked for the master: a plain server's reply (its code is None under redis-py 5,
        # which keeps no first word of it) is no transient failure, so it comes first
        if "unknown command 'sentinel'" in str(exc).lower():
            raise ConfigError(
                f"{where} names Sentinels, but the server there answers as a Redis server, "
                "not a Sentinel (it knows no SENTINEL command): use redis://host:port for "
                "it, or give the Sentinels' addresses (redis+sentinel://host:port"
                "[,host:port…]/<service>)"
            ) from None
        if exc.code is None:  # not reached (a failover, no master named yet): transient,
            raise  # the caller waits and asks again; only an error reply is the version's
        raise ConfigError(
            f"the server at {where} does not answer HELLO ({exc}): tickwheel needs "
            "Redis >= 6.2 or Valkey >= 7.2"
        ) from None
    for reply in replies.values():
        check_server_version(version_of_hello(hello_fields(reply)), where)
