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

import re

from .durable.model.keys import NAMESPACES, check_namespace
from .errors import InvalidInput, quoted

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


# A name the printed line can carry as one word (redis-cli splits on whitespace, and a
# name like "x on >pw +@all" would grant rules of its own: trial 32) and a redis:// URL
# can carry as it is (no @ or :).
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def check_user(name: str) -> str:
    """``name`` as an ACL user's name in a ``SETUSER`` line, or :class:`InvalidInput`:
    letters, digits, ``_ . -``, up to 128, not starting with a sign: one word the line
    cannot read part of as a rule, and that a ``redis://`` URL carries as it is."""
    if not _USER.fullmatch(name):
        raise InvalidInput(
            f"user must be 1 to 128 letters, digits, _ . or - (not starting with . or -), "
            f"got {quoted(name, 60)}: the ACL SETUSER line and the role's redis:// URL "
            "carry it as one word"
        )
    return name


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
