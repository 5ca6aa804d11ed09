"""Least-privilege Redis ACL rules for each role that uses a namespace.

Five roles, each a set of commands on the namespace's own keys and channels:

``client``    schedules, cancels, completes, reschedules, notifies and reads timers
``worker``    leads shards: leases, fire and sweep, trims (INFO to check the server)
``handlers``  a handler runner: reads outcomes through a consumer group, retries,
              dead letters
``fire-handlers``  a handler runner that leads shards too (``tickwheel handle --fire``,
              ``timer.worker.fire_and_handle``): the worker's commands and the handlers'
``operator``  the CLI's admin side and the dashboard: init, migrate, stats, groups, dead
              letters, trim (INFO and MEMORY USAGE to report on the servers)

A role is granted only the commands it sends and the commands its Lua scripts run
(Redis checks those against the calling user too), on the keys ``{tw:<ns>}:*`` and
``{tw:<ns>:*`` (every shard's hash tag) and the channels ``tw:<ns>:*``; ``operator`` also
``tw:namespaces``, the list of namespaces. The test suite runs each role with exactly
these rules against a real server; ``tickwheel acl ROLE`` prints them as an ``ACL
SETUSER`` line.
"""

from __future__ import annotations

from .durable.model.keys import NAMESPACES, check_namespace
from .errors import InvalidInput

# What every role's connection and scripts need. A script is sent with the includes it
# declares (lua/include/), so each may run any command those run; these are all of them.
_CONNECTION = ("hello", "ping", "evalsha", "script|load", "script|exists")
_LIBRARY = (
    "del",
    "exists",
    "get",
    "hdel",
    "hexists",
    "hget",
    "hgetall",
    "hmget",
    "hset",
    "lpop",
    "mget",
    "publish",
    "rpush",
    "sadd",
    "scard",
    "set",
    "spop",
    "srem",
    "time",
    "type",
    "xadd",
    "zadd",
    "zrangebyscore",
    "zrem",
)
_CLIENT = ("srandmember", "hscan")  # notify.lua; listing schedules, finding timers
_WORKER = (
    *["incr", "pttl", "pexpire"],  # the lease scripts
    *["srandmember", "xinfo|groups", "xpending", "xrange", "xtrim"],  # sweep, trim
    *["subscribe", "unsubscribe"],  # following the led shards' events, leaving a shard's
    *[
        "zremrangebyscore",
        "zcount",
        "zrange",
        "lrange",
        "smembers",
        "sscan",
        "hlen",
        "zcard",
    ],  # membership, due buckets
    "info",  # the servers' eviction policy and AOF, checked at start (optional)
    "hincrby",  # adding to the namespace's history
)
_HANDLERS = (
    *["xreadgroup", "xack", "xclaim", "xpending", "xrange", "xgroup|create", "xgroup|delconsumer"],
    *["zscore", "zcard", "zremrangebyscore", "pexpire"],  # per-key limits' slots
    "hincrby",  # adding to the namespace's history
)
_OPERATOR = (
    *[
        "hsetnx",
        "smembers",
        "info",
        "memory|usage",
        "xlen",
        "xrevrange",
        "xrange",
        "xdel",
        "xinfo|groups",
    ],
    *[
        "xinfo|consumers",
        "xinfo|stream",
        "xgroup|create",
        "xgroup|destroy",
        "xpending",
        "xtrim",
        "xread",
    ],
    *[
        "zcard",
        "zrange",
        "zcount",
        "lrange",
        "sscan",
        "hlen",
        "pttl",
        "srandmember",
        "subscribe",
        "hscan",
    ],
    *["rename", "xsetid", "xgroup|createconsumer"],  # migrate.lua
    *["hkeys", "zmscore"],  # a group's failed attempts apart from those looked at later
)

ROLES: dict[str, tuple[str, ...]] = {
    "client": _CONNECTION + _LIBRARY + _CLIENT,
    "worker": _CONNECTION + _LIBRARY + _WORKER,
    "handlers": _CONNECTION + _LIBRARY + _HANDLERS,
    "fire-handlers": _CONNECTION + _LIBRARY + _WORKER + _HANDLERS,
    "operator": _CONNECTION + _LIBRARY + _CLIENT + _HANDLERS + _WORKER + _OPERATOR,
}


def acl_rules(role: str, namespace: str) -> list[str]:
    """The ``ACL SETUSER`` rules (after the user's name, ``on`` and its password) for
    ``role`` on ``namespace``: its keys, its channels, its commands and nothing else."""
    if role not in ROLES:
        raise InvalidInput(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    ns = check_namespace(namespace)
    rules = ["resetkeys", f"~{{tw:{ns}}}:*", f"~{{tw:{ns}:*"]
    if role == "operator":
        rules.append(f"~{NAMESPACES}")
    rules += ["resetchannels", f"&tw:{ns}:*", "-@all"]
    rules += [f"+{command}" for command in sorted(set(ROLES[role]))]
    return rules
