"""TimerClient: durable timers in Redis (DESIGN §3, §5, §6).

Every state change is one Lua script on one shard, so each is atomic; deadlines are
computed inside the scripts from the server's TIME (one clock for everyone). Bad input is
refused here, before anything is sent, with a clear :class:`~timer.errors.InvalidInput`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.cluster import RedisCluster

from . import keys as K
from .codec import DEFAULT_MAX_PAYLOAD, decode_payload, decode_record, encode_payload
from .errors import ConfigError, InvalidInput, TimerError, TimerNotFound, WaitTimeout
from .models import Outcome, Timer, TimerInfo, Trimmed
from .outcomes import OutcomeReader
from .scripts import Scripts
from .store import RedisSettings, map_errors, translate

# Replies of a pipelined call that the main client can fix by itself (redirect, reload).
RETRY_ALONE = (
    redis.exceptions.MovedError,
    redis.exceptions.AskError,
    redis.exceptions.TryAgainError,
    redis.exceptions.NoScriptError,
)
FORMAT_VERSION = 1
DEFAULT_SHARDS = 16
DEFAULT_BUCKET_MS = 1000
MAX_DELAY_MS = 10 * 366 * 24 * 3600 * 1000  # ten years: anything longer is a mistake
MIN_SERVER = {"redis": (6, 2), "valkey": (7, 2)}


@dataclass(frozen=True)
class ClientSettings:
    result_ttl_ms: int = 24 * 3600 * 1000
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD
    max_delay_ms: int = MAX_DELAY_MS
    notify_batch: int = 1000
    pipeline_batch: int = 1000


@dataclass(frozen=True)
class Meta:
    shards: int
    bucket_ms: int


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


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")


def _int(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{name} must be a whole number (int), got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise InvalidInput(f"{name} must be {bound}, got {value}")
    return value


class TimerClient:
    """Schedule, cancel, notify and read durable timers of one namespace."""

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        namespace: str = "default",
        *,
        settings: ClientSettings | None = None,
        safe_url: str = "redis",
    ) -> None:
        self.namespace = K.check_namespace(namespace)
        self.redis: Any = client  # redis.Redis or RedisCluster: the calls we make are common
        self.settings = settings or ClientSettings()
        self.where = safe_url
        self.keys = K.NamespaceKeys(self.namespace)
        self.scripts = Scripts(client)
        self.cluster = isinstance(client, RedisCluster)
        self._meta: Meta | None = None
        self._checked_server = False

    @classmethod
    def from_url(
        cls,
        url: str,
        namespace: str = "default",
        *,
        result_ttl_s: float = 24 * 3600,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD,
        socket_timeout_s: float = 5.0,
    ) -> TimerClient:
        """A client for ``redis://``, ``rediss://`` (TLS) or ``unix://`` URLs, with AUTH/ACL.

        A URL naming any node of a Redis Cluster gives a cluster client (detected with
        ``INFO cluster``); the server is contacted once here for that.
        """
        K.check_namespace(namespace)  # before connecting: nothing to clean up on bad input
        rs = RedisSettings.from_url(url, socket_timeout_s=socket_timeout_s)
        options: dict[str, Any] = {
            "socket_timeout": socket_timeout_s,
            "socket_connect_timeout": rs.connect_timeout_s,
        }
        with map_errors(rs.safe_url):
            client: Any = redis.Redis.from_url(rs.url, health_check_interval=30, **options)
            try:
                if rs.url.startswith(("redis://", "rediss://")):
                    enabled = client.info("cluster").get("cluster_enabled", 0)
                    if int(enabled) == 1:
                        client.close()
                        client = RedisCluster.from_url(rs.url, **options)
            except BaseException:
                client.close()  # no half-open connection left behind
                raise
        settings = ClientSettings(
            result_ttl_ms=int(result_ttl_s * 1000), max_payload_bytes=max_payload_bytes
        )
        return cls(client, namespace, settings=settings, safe_url=rs.safe_url)

    def __repr__(self) -> str:
        return f"TimerClient(url={self.where!r}, namespace={self.namespace!r})"

    # -- namespace ------------------------------------------------------------------

    def _check_server(self) -> None:
        if self._checked_server:
            return
        with map_errors(self.where):
            info = self.redis.info("server")
        check_server_version(info, self.where)
        self._checked_server = True

    def init(self, shards: int = DEFAULT_SHARDS, bucket_ms: int = DEFAULT_BUCKET_MS) -> Meta:
        """Create the namespace once; again with the same shard count is a no-op."""
        _int("shards", shards, 1, 16384)
        _int("bucket_ms", bucket_ms, 1, 3_600_000)
        self._check_server()
        with map_errors(self.where):
            # HSETNX is atomic per field: two racing inits agree on whoever came first.
            pipe = self.redis.pipeline(transaction=False)
            pipe.hsetnx(self.keys.meta, "shards", shards)
            pipe.hsetnx(self.keys.meta, "bucket_ms", bucket_ms)
            pipe.hsetnx(self.keys.meta, "version", FORMAT_VERSION)
            pipe.hgetall(self.keys.meta)
            stored = pipe.execute()[-1]
        meta = Meta(int(stored[b"shards"]), int(stored[b"bucket_ms"]))
        if meta.shards != shards:
            raise ConfigError(
                f"namespace {self.namespace!r} already has {meta.shards} shards; it cannot be "
                f"re-initialised with {shards} (use another namespace)"
            )
        self._meta = meta
        return meta

    @property
    def meta(self) -> Meta:
        if self._meta is None:
            self._check_server()
            with map_errors(self.where):
                stored = self.redis.hgetall(self.keys.meta)
            self._meta = self._meta_from(stored)
        return self._meta

    def _meta_from(self, stored: Mapping[Any, Any]) -> Meta:
        if not stored:
            raise ConfigError(
                f"namespace {self.namespace!r} is not initialised at {self.where}; run "
                f"`tickwheel init --shards N` or TimerClient.init(shards=N) once"
            )
        return Meta(int(stored[b"shards"]), int(stored[b"bucket_ms"]))

    def shard_of(self, name: str) -> int:
        return K.shard_of(name, self.meta.shards)

    def _shard(self, shard: int) -> K.ShardKeys:
        return self.keys.shard(shard)

    def outcome_streams(self) -> dict[str, int]:
        """Each shard's outcome stream key -> its shard number."""
        return {self._shard(s).outcomes: s for s in range(self.meta.shards)}

    # -- schedule -------------------------------------------------------------------

    def _when(self, delay_ms: object, deadline_ms: object) -> tuple[str, int]:
        if (delay_ms is None) == (deadline_ms is None):
            raise InvalidInput("give exactly one of delay_ms (relative) or deadline_ms (absolute)")
        if delay_ms is not None:
            return "in", _int("delay_ms", delay_ms, 0, self.settings.max_delay_ms)
        return "at", _int("deadline_ms", deadline_ms, 0)

    def _prepare(  # noqa: PLR0917 - the fields of one timer, in the order users write them
        self,
        timer_id: object,
        delay_ms: object = None,
        deadline_ms: object = None,
        payload: object = None,
        watch: Iterable[object] = (),
        need: object = 1,
        origin: str = "",
    ) -> tuple[int, list[str], list[Any]]:
        """Validate one timer and build its script call: (shard, keys, args)."""
        tid = K.check_name("timer id", timer_id)
        mode, value = self._when(delay_ms, deadline_ms)
        if isinstance(watch, str | bytes):
            raise InvalidInput("watch must be a list of keys, not a single string")
        keys = sorted({K.check_name("watch key", k) for k in watch})
        if keys:
            _int("need", need, 1, len(keys))
        elif need != 1:
            raise InvalidInput(f"need={need!r} makes no sense without watch keys (leave it at 1)")
        data = encode_payload(payload, self.settings.max_payload_bytes)
        shard = self.shard_of(tid)
        for key in keys:
            if self.shard_of(key) != shard:
                raise InvalidInput(
                    f"watch key {key!r} routes to shard {self.shard_of(key)} but timer "
                    f"{tid!r} routes to shard {shard}; give both the same hash tag, e.g. "
                    f"id 'job:{{42}}' and key 'job:{{42}}:done'"
                )
        sk = self._shard(shard)
        meta = self.meta
        args: list[Any] = [
            sk.prefix, tid, mode, value, data, need, meta.bucket_ms,
            self.settings.max_delay_ms, sk.events, origin, *keys,
        ]  # fmt: skip
        return shard, [sk.timers, sk.buckets, sk.result(tid)], args

    def _prepare_item(self, item: object, origin: str) -> tuple[int, list[str], list[Any]]:
        """``_prepare`` for one item of ``schedule_many``."""
        if not isinstance(item, Mapping):
            raise InvalidInput(f"each item must be a mapping with an 'id', got {item!r}")
        extra = set(item) - {"id", "delay_ms", "deadline_ms", "payload", "watch", "need"}
        if extra:
            raise InvalidInput(f"unknown field(s) {sorted(extra)} in item {item.get('id')!r}")
        return self._prepare(
            item.get("id"),
            item.get("delay_ms"),
            item.get("deadline_ms"),
            item.get("payload"),
            item.get("watch", ()),
            item.get("need", 1),
            origin,
        )

    def _timer_from_reply(
        self, tid: str, shard: int, reply: Sequence[Any], origin: str = ""
    ) -> Timer:
        status = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
        if status == "created":
            return Timer(tid, shard, int(reply[1]), "pending", True, origin)
        if status == "pending":
            return Timer(tid, shard, int(reply[1]), "pending", False, _text(reply[3]))
        rec = decode_record(reply[1])
        return Timer(tid, shard, int(rec["d"]), rec["o"], False, _text(rec.get("s", b"")))

    def schedule(
        self,
        timer_id: str,
        delay_ms: int | None = None,
        *,
        deadline_ms: int | None = None,
        payload: object = None,
        watch: Iterable[str] = (),
        need: int = 1,
    ) -> Timer:
        """Schedule a timer ``delay_ms`` from now (Redis time) or at ``deadline_ms``.

        Idempotent: a pending id is returned as it is (``created=False``); a decided id
        whose outcome is retained returns that outcome as ``state``; the same id with other
        parameters raises DuplicateTimer.
        """
        shard, keys, args = self._prepare(timer_id, delay_ms, deadline_ms, payload, watch, need)
        with map_errors(self.where):
            reply = self.scripts.schedule(keys=keys, args=args)
        return self._timer_from_reply(timer_id, shard, reply)

    def schedule_many(
        self, items: Iterable[Mapping[str, Any]], *, origin: str = ""
    ) -> list[Timer | TimerError]:
        """Schedule many timers in pipelined batches; one result per item, in order.

        Each item is a mapping with ``id`` and ``delay_ms`` or ``deadline_ms``, and optional
        ``payload``, ``watch``, ``need``. A bad item gets its error in its slot (nothing is
        written for it); the others go on. ``origin`` is stored with each timer created
        here and reported back on a retry (``Timer.origin``), so a caller that retries a
        batch (a Spark task) can tell "created by my earlier attempt" from "already there".
        """
        results: list[Timer | TimerError] = []
        for batch in self._batches(items, origin, results):
            calls = [(keys, args) for _, _, keys, args in batch]
            self._fill(results, batch, self.run_pipelined(self.scripts.schedule, calls), origin)
        return results

    def _batches(
        self, items: Iterable[Any], origin: str, results: list[Timer | TimerError]
    ) -> Iterator[list[tuple[int, int, list[str], list[Any]]]]:
        """Validate items into batches of (slot, shard, keys, args) of at most
        ``pipeline_batch`` calls; each item gets a slot in ``results`` (its error, or a
        placeholder that ``_fill`` replaces once its batch has run)."""
        batch: list[tuple[int, int, list[str], list[Any]]] = []
        for item in items:
            try:
                shard, keys, args = self._prepare_item(item, origin)
            except InvalidInput as exc:
                results.append(exc)
                continue
            results.append(InvalidInput("not sent"))
            batch.append((len(results) - 1, shard, keys, args))
            if len(batch) >= self.settings.pipeline_batch:
                yield batch
                batch = []
        if batch:
            yield batch

    def _fill(
        self,
        results: list[Timer | TimerError],
        batch: list[tuple[int, int, list[str], list[Any]]],
        replies: Sequence[Any],
        origin: str,
    ) -> None:
        """Put each reply of a batch (a Timer, or its error) in the item's slot."""
        for (slot, shard, _, args), reply in zip(batch, replies, strict=True):
            if isinstance(reply, redis.RedisError):
                results[slot] = translate(reply, self.where)
            else:
                results[slot] = self._timer_from_reply(args[1], shard, reply, origin)

    def run_pipelined(self, script: Any, calls: Sequence[tuple[list[str], list[Any]]]) -> list[Any]:
        """Run one script for many (keys, args) in pipelines, one per node; replies in order.

        Errors come back in their slots (as redis-py exceptions), never raised. On a
        cluster, calls are grouped by the node owning their slot (a cluster pipeline
        refuses scripts); a call redirected by a resharding is retried on its own.
        """
        groups: dict[str, tuple[Any, list[int]]] = {}
        if self.cluster:
            for i, (keys, _) in enumerate(calls):
                node = self.redis.get_node_from_key(keys[0])
                conn = self.redis.get_redis_connection(node)
                groups.setdefault(node.name, (conn, []))[1].append(i)
        else:
            groups[""] = (self.redis, list(range(len(calls))))
        replies: list[Any] = [None] * len(calls)
        with map_errors(self.where):
            for conn, idxs in groups.values():
                pipe = conn.pipeline(transaction=False)
                for i in idxs:
                    script(keys=calls[i][0], args=calls[i][1], client=pipe)
                for i, reply in zip(idxs, pipe.execute(raise_on_error=False), strict=True):
                    replies[i] = reply
        for i, reply in enumerate(replies):
            if isinstance(reply, RETRY_ALONE):
                try:
                    replies[i] = script(keys=calls[i][0], args=calls[i][1])
                except redis.RedisError as exc:
                    replies[i] = exc
        return replies

    # -- decide -----------------------------------------------------------------------

    # Each call below is split in three: build the script call (validating), run it, read
    # the reply. The asyncio client (timer.aio) shares the first and the last.

    def _decide_call(self, timer_id: object) -> tuple[str, list[str], list[Any]]:
        tid = K.check_name("timer id", timer_id)
        sk = self._shard(self.shard_of(tid))
        keys = [sk.timers, sk.buckets, sk.outcomes, sk.result(tid)]
        return tid, keys, [sk.prefix, tid, self.meta.bucket_ms, self.settings.result_ttl_ms,
                           sk.events]  # fmt: skip

    def _decided(self, reply: Sequence[Any], tid: str, done: str) -> bool:
        status = reply[0].decode()
        if status == "missing":
            raise TimerNotFound(f"no timer {tid!r} in namespace {self.namespace!r}")
        return bool(status == done)

    def _decide(self, script: Any, timer_id: str, done: str) -> bool:
        tid, keys, args = self._decide_call(timer_id)
        with map_errors(self.where):
            reply = script(keys=keys, args=args)
        return self._decided(reply, tid, done)

    def cancel(self, timer_id: str) -> bool:
        """Cancel a pending timer; True if this call decided it (safe to repeat)."""
        return self._decide(self.scripts.cancel, timer_id, "cancelled")

    def complete(self, timer_id: str) -> bool:
        """Decide a pending timer as completed now; True if this call decided it."""
        return self._decide(self.scripts.complete, timer_id, "completed")

    def reschedule(
        self, timer_id: str, delay_ms: int | None = None, *, deadline_ms: int | None = None
    ) -> Timer | None:
        """Move a pending timer's deadline; None if it was already decided."""
        tid, shard, keys, args = self._reschedule_call(timer_id, delay_ms, deadline_ms)
        with map_errors(self.where):
            reply = self.scripts.reschedule(keys=keys, args=args)
        return self._rescheduled(reply, tid, shard)

    def _reschedule_call(
        self, timer_id: object, delay_ms: object, deadline_ms: object
    ) -> tuple[str, int, list[str], list[Any]]:
        tid = K.check_name("timer id", timer_id)
        mode, value = self._when(delay_ms, deadline_ms)
        shard = self.shard_of(tid)
        sk = self._shard(shard)
        keys = [sk.timers, sk.buckets, sk.result(tid)]
        args = [sk.prefix, tid, mode, value, self.meta.bucket_ms, self.settings.max_delay_ms,
                sk.events]  # fmt: skip
        return tid, shard, keys, args

    def _rescheduled(self, reply: Sequence[Any], tid: str, shard: int) -> Timer | None:
        status = reply[0].decode()
        if status == "missing":
            raise TimerNotFound(f"no timer {tid!r} in namespace {self.namespace!r}")
        if status == "decided":
            return None
        return Timer(tid, shard, int(reply[1]), "pending", False)

    def notify(self, key: str) -> int:
        """Notify a watch key; the number of timers this call completed (safe to repeat)."""
        keys, args = self._notify_call(key)
        completed = 0
        while True:  # each call completes at most notify_batch watchers
            with map_errors(self.where):
                done, remaining = self.scripts.notify(keys=keys, args=args)
            completed += int(done)
            if int(remaining) == 0:
                return completed

    def _notify_call(self, key: object) -> tuple[list[str], list[Any]]:
        name = K.check_name("watch key", key)
        sk = self._shard(self.shard_of(name))
        args = [sk.prefix, name, self.meta.bucket_ms, self.settings.result_ttl_ms, sk.events,
                self.keys.key_channel(name), self.settings.notify_batch]  # fmt: skip
        return [sk.timers, sk.buckets, sk.outcomes], args

    # -- read -------------------------------------------------------------------------

    def get(self, timer_id: str) -> TimerInfo | None:
        """The timer's state: pending with its record, or its retained outcome; else None."""
        tid, shard, record, result = self._get_call(timer_id)
        with map_errors(self.where):
            pipe = self.redis.pipeline(transaction=False)
            pipe.hget(record, tid)
            pipe.get(result)
            pending, decided = pipe.execute()
        return self._info(tid, shard, pending, decided)

    def _get_call(self, timer_id: object) -> tuple[str, int, str, str]:
        """(id, shard, its record's hash, its retained outcome's key) for ``get``."""
        tid = K.check_name("timer id", timer_id)
        shard = self.shard_of(tid)
        sk = self._shard(shard)
        return tid, shard, sk.timers, sk.result(tid)

    def _info(self, tid: str, shard: int, pending: Any, decided: Any) -> TimerInfo | None:
        """TimerInfo from the pending record or the retained outcome (either may be None)."""
        if pending is not None:
            rec = decode_record(pending)
            return TimerInfo(
                tid, shard, "pending", int(rec["d"]), decode_payload(rec["p"]),
                created_ms=int(rec["c"]), watch=tuple(rec["w"]), need=int(rec["n"]),
                got=tuple(rec["g"]),
            )  # fmt: skip
        if decided is not None:
            rec = decode_record(decided)
            return TimerInfo(
                tid, shard, rec["o"], int(rec["d"]), decode_payload(rec["p"]),
                created_ms=int(rec["c"]), decided_ms=int(rec["t"]),
            )  # fmt: skip
        return None

    def wait(self, timer_id: str, timeout: float = 30.0) -> Outcome:
        """Block until the timer is decided; its Outcome. WaitTimeout if still pending."""
        deadline = time.monotonic() + timeout
        pause = 0.005
        while True:
            done = self._outcome_or_none(timer_id, self.get(timer_id))
            if done is not None:
                return done
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(f"timer {timer_id!r} still pending after {timeout}s")
            time.sleep(min(pause, left))  # polling the server, not synchronising threads
            pause = min(pause * 2, 0.1)

    def _outcome_or_none(self, timer_id: str, info: TimerInfo | None) -> Outcome | None:
        """The Outcome of a decided timer, None while pending; TimerNotFound if unknown."""
        if info is None:
            raise TimerNotFound(
                f"no timer {timer_id!r} in namespace {self.namespace!r} (or its outcome "
                "is older than result_ttl)"
            )
        if info.state == "pending":
            return None
        assert info.decided_ms is not None
        return Outcome(
            info.id, info.state, info.deadline_ms, info.decided_ms, info.payload, info.shard
        )

    def outcomes(
        self,
        group: str = "tickwheel",
        consumer: str = "consumer-1",
        *,
        block_ms: int = 1000,
        count: int = 100,
        reclaim_idle_ms: int = 60_000,
        stop_when_idle: bool = False,
    ) -> Iterator[Outcome]:
        """Outcomes of every shard through a consumer group (at-least-once; ``ack()`` each)."""
        reader = OutcomeReader(self, group, consumer, count=count, reclaim_idle_ms=reclaim_idle_ms)
        return reader.iterate(block_ms=block_ms, stop_when_idle=stop_when_idle)

    def server_time_ms(self) -> int:
        """The Redis server's clock, epoch ms: the one clock deadlines are computed on."""
        with map_errors(self.where):
            secs, micros = self.redis.time()
        return int(secs) * 1000 + int(micros) // 1000

    def outcomes_total(self) -> int:
        """How many outcomes the namespace's streams hold (one pipelined XLEN per shard)."""
        with map_errors(self.where):
            pipe = self.redis.pipeline(transaction=False)
            for stream in self.outcome_streams():
                pipe.xlen(stream)
            return sum(int(n) for n in pipe.execute())

    def trim_outcomes(
        self, retention_ms: int, *, keep_unread: bool = True, shards: Iterable[int] | None = None
    ) -> list[Trimmed]:
        """Drop outcomes decided more than ``retention_ms`` ago (Redis clock), per shard.

        With ``keep_unread`` (the default) an outcome stays, whatever its age, until every
        consumer group of its stream has been handed it and has acked it. ``shards``
        limits the work to some shards (a worker trims the ones it leads).
        """
        keep = _int("retention_ms", retention_ms, 0)
        count = self.meta.shards
        picked = list(range(count)) if shards is None else list(shards)
        for s in picked:
            _int("shard", s, 0, count - 1)
        calls = [([self._shard(s).outcomes], [keep, int(keep_unread)]) for s in picked]
        done: list[Trimmed] = []
        for s, reply in zip(picked, self.run_pipelined(self.scripts.trim, calls), strict=True):
            if isinstance(reply, redis.RedisError):
                raise translate(reply, self.where)
            done.append(Trimmed(shard=s, removed=int(reply[0]), held_by_group=bool(reply[2])))
        return done

    def stats(self) -> dict[str, Any]:
        """Per shard: pending, leader, epoch, outcomes, lag (ms past the oldest ended bucket)."""
        meta = self.meta
        now = self.server_time_ms()
        with map_errors(self.where):
            pipe = self.redis.pipeline(transaction=False)
            for s in range(meta.shards):
                sk = self._shard(s)
                pipe.hlen(sk.timers)
                pipe.get(sk.lease)
                pipe.get(sk.epoch)
                pipe.zrange(sk.buckets, 0, 0, withscores=True)
                pipe.xlen(sk.outcomes)
            replies = pipe.execute()
        shards: list[dict[str, Any]] = []
        for s in range(meta.shards):
            pending, leader, epoch, oldest, outs = replies[5 * s : 5 * s + 5]
            lag = 0
            if oldest:
                bucket_end = int(oldest[0][1]) + meta.bucket_ms
                lag = max(0, now - bucket_end)
            shards.append(
                {
                    "shard": s,
                    "pending": int(pending),
                    "leader": leader.decode() if leader else None,
                    "epoch": int(epoch) if epoch else 0,
                    "outcomes": int(outs),
                    "lag_ms": lag,
                }
            )
        return {
            "namespace": self.namespace,
            "shards": shards,
            "pending": sum(x["pending"] for x in shards),
            "outcomes": sum(x["outcomes"] for x in shards),
            "max_lag_ms": max((int(x["lag_ms"]) for x in shards), default=0),
            "now_ms": now,
        }

    def close(self) -> None:
        self.redis.close()

    def __enter__(self) -> TimerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
