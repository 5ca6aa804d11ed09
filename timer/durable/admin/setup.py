"""A namespace's setup, as operations for both clients (sans-I/O): its creation (with
the server's checks first), reading its meta, and converting one an earlier release made
to this release's layout. The timers' own operations are in :mod:`timer.durable.timers.ops`."""

from __future__ import annotations

from collections.abc import Callable

from ...errors import ConfigError, TimerError, quoted
from ..model import steps
from ..model.checks import check_int, check_ms
from ..model.codec import FORMAT_VERSION
from ..model.keys import NAMESPACES, NamespaceKeys
from ..model.models import Durability, Meta
from ..model.namespace import meta_from
from ..model.steps import Op
from ..shards.calls import MigrateStep, migrate_call, parse_migrate, results_init_call
from .server import check_durability, check_server, server_settings


def init(
    keys: NamespaceKeys,
    shards: int,
    bucket_ms: int,
    *,
    where: str,
    check: bool,
    allow_eviction: bool,
    durability: Durability | None = None,
) -> Op[tuple[Meta, list[str]]]:
    """Create the namespace once; again with the same shard count is a no-op.

    Arguments are checked before anything is sent; ``check`` asks the server's version
    first (once per client). A server that may evict timers is refused (unless
    ``allow_eviction``) before anything is written. Returns the Meta and the durability
    warnings to show.
    """
    check_int("shards", shards, 1, 16384)
    check_ms("bucket_ms", bucket_ms, 1, 3_600_000)
    servers = yield from server_settings(where, check_version=check)  # one INFO for both
    notes = check_durability(servers, where, allow_eviction=allow_eviction, durability=durability)
    stored = yield steps.Command("hgetall", (keys.meta,))
    if stored:  # created already: the same shard count is a no-op (tables ensured)
        meta = meta_from(stored, keys.namespace, where)
        _same_shards(keys, meta, shards)
        yield from _start_results_tables(keys, meta.shards)  # never reset: see results_init
        yield steps.Command("sadd", (NAMESPACES, keys.namespace))
        return meta, notes
    # A new namespace, all or nothing: its listing and tables first, the meta hash last
    # (what makes it exist for every client); a refusal half-way (an ACL user without
    # access to tw:namespaces) takes back what this call wrote.
    listed = False
    try:
        listed = int((yield steps.Command("sadd", (NAMESPACES, keys.namespace)))) == 1
        yield from _start_results_tables(keys, shards)
        # HSETNX is atomic per field: two racing inits agree on whoever wrote shards first.
        replies = yield steps.Pipeline(
            [
                steps.Command("hsetnx", (keys.meta, "shards", shards)),
                steps.Command("hsetnx", (keys.meta, "bucket_ms", bucket_ms)),
                steps.Command("hsetnx", (keys.meta, "version", FORMAT_VERSION)),
                steps.Command("hgetall", (keys.meta,)),
            ]
        )
    except TimerError:
        yield from _take_back(keys, shards, listed=listed)
        raise
    meta = meta_from(replies[3], keys.namespace, where)
    _same_shards(keys, meta, shards)
    return meta, notes


def _same_shards(keys: NamespaceKeys, meta: Meta, shards: int) -> None:
    if meta.shards != shards:
        raise ConfigError(
            f"namespace {quoted(keys.namespace)} already has {meta.shards} shards; it cannot be "
            f"re-initialised with {shards} (use another namespace)"
        )


def _take_back(keys: NamespaceKeys, shards: int, *, listed: bool) -> Op[None]:
    """Undo a refused ``init`` of a new namespace: the tables it started, its listing.
    Best effort (what could not be written cannot be undone either); no timer can exist
    yet, as every client refuses a namespace without its meta hash."""
    stored = yield steps.Command("hgetall", (keys.meta,))
    if stored:  # another init made it meanwhile: its tables are its own
        return
    undo: list[steps.Command] = [
        steps.Command("delete", (keys.shard(s).results_table,)) for s in range(shards)
    ]
    if listed:
        undo.append(steps.Command("srem", (NAMESPACES, keys.namespace)))
    yield steps.Pipeline(undo, errors_in_slots=True)


def _start_results_tables(keys: NamespaceKeys, shards: int) -> Op[None]:
    for first in range(0, shards, 1000):
        yield steps.Pipeline(
            [results_init_call(keys.shard(s)) for s in range(first, min(shards, first + 1000))]
        )


def read_meta(keys: NamespaceKeys, *, where: str, check: bool, older: bool = False) -> Op[Meta]:
    if check:
        yield from check_server(where)
    stored = yield steps.Command("hgetall", (keys.meta,))
    return meta_from(stored, keys.namespace, where, older=older)


MIGRATE_BUDGET = 500  # records, ids, keys or entries one migrate.lua call converts


def migrate(
    keys: NamespaceKeys,
    *,
    where: str,
    check: bool,
    result_ttl_ms: int,
    progress: Callable[[int, MigrateStep], None] | None = None,
    budget: int = MIGRATE_BUDGET,
) -> Op[tuple[int, int]]:
    """Convert a namespace an earlier release made to this release's layout: (format
    before, format after).

    Shard by shard, ``migrate.lua`` converts a bounded step a call until the shard is
    done (``progress(shard, step)`` after each call); then the meta takes the new
    format, and each shard's migration state goes. Run it with the namespace's workers
    stopped (every client and worker refuses the namespace until it is converted).
    Interrupted, it leaves every shard consistent: run again, it goes on where it was.
    """
    check_int("budget", budget, 1, 100_000)
    meta = yield from read_meta(keys, where=where, check=check, older=True)
    if meta.version < FORMAT_VERSION:
        yield from _no_live_leader(keys, meta)
        for s in range(meta.shards):
            call = migrate_call(keys.shard(s), budget, result_ttl_ms)
            while True:
                step = parse_migrate((yield call))
                if progress is not None:
                    progress(s, step)
                if step.done:
                    break
        yield steps.Command("hset", (keys.meta, "version", FORMAT_VERSION))
    yield steps.Pipeline(
        [steps.Command("delete", (keys.shard(s).migration,)) for s in range(meta.shards)],
        errors_in_slots=True,
    )
    return meta.version, FORMAT_VERSION


def _no_live_leader(keys: NamespaceKeys, meta: Meta) -> Op[None]:
    """A ConfigError, before anything is converted, while a worker holds a shard's lease:
    a worker of the earlier release goes on writing its layout into what was converted.
    A worker stopped (or killed) lets its lease go or lapse within its lease_ms."""
    shards = range(meta.shards)
    held = yield steps.Pipeline([steps.Command("pttl", (keys.shard(s).lease,)) for s in shards])
    live = [(s, int(ms)) for s, ms in zip(shards, held, strict=True) if int(ms) > 0]
    if live:
        s, ms = live[0]
        also = f" (and {len(live) - 1} more)" if len(live) > 1 else ""
        raise ConfigError(
            f"namespace {quoted(keys.namespace)} has live workers: shard {s}'s lease is held "
            f"for {ms} ms more{also}, and a worker of the earlier release would go on "
            "writing its layout; stop every worker of the namespace, then run migrate "
            "again once their leases lapse (nothing was converted)"
        )
