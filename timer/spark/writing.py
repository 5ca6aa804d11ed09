"""Timers from a DataFrame's rows, on the executors: schedule, cancel, notify, heartbeat,
and schedules (see :mod:`timer.spark` for how a retried partition keeps the report true)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypedDict

from ..client import TimerClient
from ..durable.model.checks import check_bool, check_int
from ..durable.model.models import Timer
from ..errors import DuplicateTimer, HeartbeatCapped, InvalidInput, TimerNotFound

MAX_REJECTED_ROWS = 1_000

_POOL: dict[tuple[str, str], TimerClient] = {}
_POOL_LOCK = threading.Lock()


def pooled_client(url: str, namespace: str) -> TimerClient:
    """The executor process's client for (url, namespace), created once."""
    key = (url, namespace)
    with _POOL_LOCK:
        client = _POOL.get(key)
        if client is None:
            client = _POOL[key] = TimerClient.from_url(url, namespace)
        return client


@dataclass
class Report:
    """What a Spark helper did. ``rejected_rows`` holds (row, reason) pairs (capped)."""

    scheduled: int = 0
    duplicate: int = 0
    rejected: int = 0
    cancelled: int = 0
    completed: int = 0
    already_decided: int = 0
    missing: int = 0
    extended: int = 0
    capped: int = 0
    rejected_rows: list[tuple[dict[str, Any], str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "rejected_rows"}


def _check_ready(url: str, namespace: str) -> None:
    """Fail fast on the driver: Redis reachable and the namespace initialised."""
    _ = pooled_client(url, namespace).meta


# -- driver-side validation ------------------------------------------------------------


def _type_name(dtype: Any) -> str:
    return str(dtype.simpleString())


def _require(df: Any, column: str | None, kinds: tuple[str, ...], what: str) -> None:
    if column is None:
        return
    if column not in df.columns:
        raise InvalidInput(f"column {column!r} is not in the DataFrame (columns: {df.columns})")
    found = _type_name(df.schema[column].dataType)
    if found not in kinds:
        raise InvalidInput(f"column {column!r} must be {what}, found {found}")


INTEGER = ("int", "bigint", "smallint", "tinyint")


def _accumulators(sc: Any, names: Iterable[str]) -> dict[str, Any]:
    return {name: sc.accumulator(0) for name in names}


class _ListParam:
    """An accumulator of (row, reason) pairs, capped so it stays small on the driver."""

    def zero(self, value: list[Any]) -> list[Any]:
        return []

    def addInPlace(self, a: list[Any], b: list[Any]) -> list[Any]:
        room = MAX_REJECTED_ROWS - len(a)
        if room > 0:
            a.extend(b[:room])
        return a


def _rejected_accumulator(sc: Any) -> Any:
    from pyspark.accumulators import AccumulatorParam  # noqa: PLC0415 - optional dependency

    param = type("RejectedParam", (_ListParam, AccumulatorParam), {})()
    return sc.accumulator([], param)


def _row_dict(row: Any) -> dict[str, Any]:
    return {k: _plain(v) for k, v in row.asDict(recursive=True).items()}


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool, bytes)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)  # dates, decimals: their text


# -- schedule ----------------------------------------------------------------------------


class ColumnOptions(TypedDict, total=False):
    """Where a row holds a timer's parts, and the batch size: :func:`schedule_timers`'s
    options, as a streaming sink passes them on."""

    id_col: str
    delay_col: str | None
    deadline_col: str | None
    payload_cols: list[str] | None
    watch_col: str | None
    need_col: str | None
    priority_col: str | None
    batch_size: int


def schedule_timers(
    df: Any,
    url: str,
    namespace: str = "default",
    *,
    id_col: str = "id",
    delay_col: str | None = "delay_ms",
    deadline_col: str | None = None,
    payload_cols: list[str] | None = None,
    watch_col: str | None = None,
    need_col: str | None = None,
    priority_col: str | None = None,
    batch_size: int = 1000,
    token: str | None = None,
) -> Report:
    """Schedule one timer per row, on the executors. Returns the counts and rejected rows.
    ``priority_col``: an integer column of priorities (-100..100; null: 0)."""
    if deadline_col is not None:
        delay_col = None
    if (delay_col is None) == (deadline_col is None):
        raise InvalidInput("give exactly one of delay_col or deadline_col")
    _require(df, id_col, ("string",), "a string column of timer ids")
    _require(df, delay_col, INTEGER, "an integer column of delays in ms")
    _require(df, deadline_col, INTEGER, "an integer column of deadlines (epoch ms)")
    _require(df, watch_col, ("array<string>",), "an array<string> column of watch keys")
    _require(df, need_col, INTEGER, "an integer column")
    _require(df, priority_col, INTEGER, "an integer column of priorities (-100..100)")
    for col in payload_cols or []:
        if col not in df.columns:
            raise InvalidInput(f"payload column {col!r} is not in the DataFrame")
    _check_ready(url, namespace)
    sc = df.sparkSession.sparkContext
    acc = _accumulators(sc, ("scheduled", "duplicate", "rejected"))
    rejected_rows = _rejected_accumulator(sc)
    plan = _SchedulePlan(
        url,
        namespace,
        token or uuid.uuid4().hex,
        id_col,
        delay_col,
        deadline_col,
        tuple(payload_cols or ()),
        watch_col,
        need_col,
        priority_col,
        batch_size,
    )

    def run(index: int, rows: Iterator[Any]) -> Iterator[int]:
        _schedule_partition(plan, index, rows, acc, rejected_rows)
        return iter(())

    df.rdd.mapPartitionsWithIndex(run).foreach(lambda _: None)
    return Report(
        scheduled=acc["scheduled"].value,
        duplicate=acc["duplicate"].value,
        rejected=acc["rejected"].value,
        rejected_rows=list(rejected_rows.value),
    )


@dataclass(frozen=True)
class _SchedulePlan:
    """What every partition of one schedule_timers job needs (shipped to the executors)."""

    url: str
    namespace: str
    job: str
    id_col: str
    delay_col: str | None
    deadline_col: str | None
    payload_cols: tuple[str, ...]
    watch_col: str | None
    need_col: str | None
    priority_col: str | None
    batch_size: int


def _schedule_partition(
    plan: _SchedulePlan, index: int, rows: Iterable[Any], acc: dict[str, Any], rejected_rows: Any
) -> None:
    origin = f"{plan.job}/{index}"
    client = pooled_client(plan.url, plan.namespace)
    counts = {"scheduled": 0, "duplicate": 0, "rejected": 0}
    rejected: list[tuple[dict[str, Any], str]] = []
    batch: list[tuple[Any, dict[str, Any]]] = []

    seen: set[str] = set()  # ids met in this attempt: a repeat within it is a duplicate

    def flush() -> None:
        results = client.schedule_many([item for _, item in batch], origin=origin)
        for (row, item), result in zip(batch, results, strict=True):
            if isinstance(result, Timer):
                mine = (result.created or result.origin == origin) and item["id"] not in seen
                seen.add(item["id"])
                counts["scheduled" if mine else "duplicate"] += 1
            else:
                counts["rejected"] += 1
                if len(rejected) < MAX_REJECTED_ROWS:
                    rejected.append((_row_dict(row), str(result)))
        batch.clear()

    for row in rows:
        item: dict[str, Any] = {"id": row[plan.id_col]}
        if plan.delay_col is not None:
            item["delay_ms"] = row[plan.delay_col]
        else:
            item["deadline_ms"] = row[plan.deadline_col]
        if plan.payload_cols:
            item["payload"] = {c: _plain(row[c]) for c in plan.payload_cols}
        if plan.watch_col is not None:
            item["watch"] = list(row[plan.watch_col] or [])
        if plan.need_col is not None and row[plan.need_col] is not None:
            item["need"] = row[plan.need_col]
        if plan.priority_col is not None and row[plan.priority_col] is not None:
            item["priority"] = row[plan.priority_col]
        batch.append((row, item))
        if len(batch) >= plan.batch_size:
            flush()
    if batch:
        flush()
    for name, n in counts.items():
        acc[name].add(n)
    if rejected:
        rejected_rows.add(rejected)


# -- cancel and notify -------------------------------------------------------------------


def _each_value(
    df: Any,
    url: str,
    namespace: str,
    *,
    col: str,
    action: Callable[[TimerClient, str], tuple[str, int]],
    names: tuple[str, ...],
) -> Report:
    """Apply ``action`` to each row's ``col`` on the executors; it says what to count."""
    _require(df, col, ("string",), "a string column")
    return _each_row(df, url, namespace, lambda c, row: action(c, row[col]), names)


def _each_row(
    df: Any,
    url: str,
    namespace: str,
    action: Callable[[TimerClient, Any], tuple[str, int]],
    names: tuple[str, ...],
) -> Report:
    """Apply ``action`` to each row on the executors; it says what to count."""
    _check_ready(url, namespace)
    sc = df.sparkSession.sparkContext
    acc = _accumulators(sc, (*names, "rejected"))
    rejected_rows = _rejected_accumulator(sc)

    def run(rows: Iterator[Any]) -> None:
        client = pooled_client(url, namespace)
        counts = dict.fromkeys((*names, "rejected"), 0)
        rejected: list[tuple[dict[str, Any], str]] = []
        for row in rows:
            try:
                name, amount = action(client, row)
                counts[name] += amount
            except InvalidInput as exc:
                counts["rejected"] += 1
                if len(rejected) < MAX_REJECTED_ROWS:
                    rejected.append((_row_dict(row), str(exc)))
        for name, n in counts.items():
            acc[name].add(n)
        if rejected:
            rejected_rows.add(rejected)

    df.foreachPartition(run)
    report = Report(rejected_rows=list(rejected_rows.value))
    for name, a in acc.items():
        setattr(report, name, a.value)
    return report


def _cancel(client: TimerClient, timer_id: str) -> tuple[str, int]:
    try:
        return ("cancelled" if client.cancel(timer_id) else "already_decided"), 1
    except TimerNotFound:
        return "missing", 1


def _notify(client: TimerClient, key: str) -> tuple[str, int]:
    completed = client.notify(key)  # one key may complete several timers
    return ("completed", completed) if completed else ("already_decided", 1)


def cancel_timers(df: Any, url: str, namespace: str = "default", *, id_col: str = "id") -> Report:
    """Cancel each row's timer. Report: cancelled, already_decided, missing, rejected."""
    names = ("cancelled", "already_decided", "missing")
    return _each_value(df, url, namespace, col=id_col, action=_cancel, names=names)


def notify_keys(df: Any, url: str, namespace: str = "default", *, key_col: str = "key") -> Report:
    """Notify each row's watch key. Report: completed (timers), already_decided (keys that
    completed nothing), rejected."""
    names = ("completed", "already_decided")
    return _each_value(df, url, namespace, col=key_col, action=_notify, names=names)


def heartbeat_timers(
    df: Any,
    url: str,
    namespace: str = "default",
    *,
    extend_ms: int,
    id_col: str = "id",
    earlier: bool = False,
) -> Report:
    """A heartbeat for each row's timer: its deadline becomes ``extend_ms`` from
    now, later only (``earlier=True``: even if earlier, as a started job's run deadline),
    never past its cap. For a stage whose rows are jobs still running. Report: extended,
    capped (past its ``max_total_ms``: it now falls due at its cap), already_decided,
    missing, rejected."""
    check_int("extend_ms", extend_ms, 0)
    check_bool("earlier", earlier)

    def beat(client: TimerClient, timer_id: str) -> tuple[str, int]:
        try:
            t = client.heartbeat(timer_id, extend_ms, earlier=earlier)
        except HeartbeatCapped:
            return "capped", 1
        except TimerNotFound:
            return "missing", 1
        return ("extended" if t.state == "pending" else "already_decided"), 1

    names = ("extended", "capped", "already_decided", "missing")
    return _each_value(df, url, namespace, col=id_col, action=beat, names=names)


# -- recurring schedules -----------------------------------------------------------------

SCHEDULE_COLUMNS = ("cron", "every", "offset", "tz", "start", "end", "jitter")


def create_schedules(
    df: Any,
    url: str,
    namespace: str = "default",
    *,
    name_col: str = "name",
    payload_col: str | None = "payload",
    missed: str = "latest",
    catch_up: str | int = "1h",
) -> Report:
    """Create a recurring schedule per row: its name in ``name_col``; ``cron`` or
    ``every`` (and ``offset``, ``tz``, ``start``, ``end``, ``jitter``) from the columns
    of those names that the DataFrame has (a null is left out); the payload from
    ``payload_col`` if present. A schedule that exists already is counted ``duplicate``
    and left as it is (so a retried partition creates nothing twice). Report:
    scheduled, duplicate, rejected (with the rows and why)."""
    _require(df, name_col, ("string",), "a string column")
    present = [c for c in SCHEDULE_COLUMNS if c in df.columns]
    if not {"cron", "every"} & set(present):
        raise InvalidInput("create_schedules needs a 'cron' or an 'every' column")
    payload = payload_col if payload_col is not None and payload_col in df.columns else None

    def create(client: TimerClient, row: Any) -> tuple[str, int]:
        spec = {c: _plain(row[c]) for c in present if row[c] is not None}
        body = _plain(row[payload]) if payload is not None else None
        try:
            client.schedules.create(
                row[name_col], payload=body, missed=missed, catch_up=catch_up, **spec
            )
        except DuplicateTimer:
            return "duplicate", 1
        return "scheduled", 1

    return _each_row(df, url, namespace, create, ("scheduled", "duplicate"))
