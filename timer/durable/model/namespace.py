"""A namespace as every builder sees it: its keys, its shape (read from its ``meta``
hash) and the client's limits; and the shard numbers an admin call may name."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError, InvalidInput, TimerNotFound, quoted
from . import keys as keyspace
from .checks import check_int
from .codec import FORMAT_VERSION
from .models import ClientSettings, Meta

# what `tickwheel init` (and TimerClient.init()) gives a namespace when no count is said
INIT_SHARDS = 16
# the environment variable the CLI takes its --namespace from
NAMESPACE_ENV = "TICKWHEEL_NAMESPACE"


@dataclass(frozen=True)
class Namespace:
    """What every builder needs: the namespace's keys, its shape, and the client's limits."""

    keys: keyspace.NamespaceKeys
    meta: Meta
    settings: ClientSettings

    @property
    def name(self) -> str:
        return self.keys.namespace

    def shard_of(self, name: str) -> int:
        return keyspace.shard_of(name, self.meta.shards)

    def shard(self, shard: int) -> keyspace.ShardKeys:
        return self.keys.shard(shard)

    def outcome_streams(self) -> dict[str, int]:
        """Each shard's outcome stream key -> its shard number."""
        return {self.shard(s).outcomes: s for s in range(self.meta.shards)}

    def not_found(self, timer_id: str) -> TimerNotFound:
        return TimerNotFound.of(timer_id, self.name)


def meta_from(
    stored: Mapping[Any, Any], namespace: str, where: str, *, older: bool = False
) -> Meta:
    """The namespace's Meta from its ``meta`` hash; ConfigError if it was never created,
    was made by a newer tickwheel, or (unless ``older``: migrate's own read) is in a
    format an earlier release wrote."""
    if not stored:
        raise ConfigError(
            f"namespace {quoted(namespace)} is not initialised at {where}; run "
            f"`tickwheel{_naming(namespace)} init` once ({INIT_SHARDS} shards; --shards N for "
            "another count) or TimerClient.init()"
        )
    version = int(stored.get(b"version", 1))
    if version > FORMAT_VERSION:
        raise ConfigError(
            f"namespace {quoted(namespace)} at {where} holds data format {version}, written by a "
            f"newer tickwheel; this one reads format {FORMAT_VERSION}: upgrade tickwheel: "
            "give pip the wheel of a newer release, or pip install . in a newer checkout "
            "of its source"
        )
    if version < FORMAT_VERSION and not older:
        raise ConfigError(
            f"namespace {quoted(namespace)} at {where} holds data format {version}, written by an "
            f"earlier tickwheel; this one reads format {FORMAT_VERSION}: stop its workers and "
            f"run `tickwheel --namespace {shlex.quote(namespace)} migrate` "
            "(TimerClient.migrate()) to convert it"
        )
    return Meta(int(stored[b"shards"]), int(stored[b"bucket_ms"]), version)


def _naming(namespace: str) -> str:
    """The global option a pasted ``tickwheel`` command needs to act on ``namespace``
    (none for ``default``, the CLI's own, unless this process's environment names another
    in TICKWHEEL_NAMESPACE: a shell that exported it, as a guide does, would run the
    pasted command on that one), quoted for a shell."""
    exported = os.environ.get(NAMESPACE_ENV) or "default"
    if namespace == "default" == exported:
        return ""
    return f" --namespace {shlex.quote(namespace)}"


def check_shards(ns: Namespace, shards: object) -> list[int]:
    """Shard numbers to work on: None for every shard, or an iterable of shard numbers."""
    if shards is None:
        return list(range(ns.meta.shards))
    if isinstance(shards, str | bytes | Mapping) or not isinstance(shards, Iterable):
        raise InvalidInput(f"shards must be a list of shard numbers, got {quoted(shards, 80)}")
    return [check_int("shard", s, 0, ns.meta.shards - 1) for s in shards]
