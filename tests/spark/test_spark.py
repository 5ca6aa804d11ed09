"""Spark helpers on a real local[2] Spark and the real test server (one session per module)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from timer import InvalidInput, TimerClient
from timer import spark as tws
from timer.spark import reading, writing
from timer.testing import RedisServer

# The hang guard (pytest-timeout, 120 s a test) counts a fixture's setup too: the first
# Spark test starts the JVM (a minute on a busy run) and then registers 20,000 rows, so a
# run with four workers on two cores passed 120 s and lost its worker (os._exit). A guard
# against a hang, not a bound on speed: ten minutes.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]
pyspark = pytest.importorskip("pyspark")
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    # Executors start Python workers from PYSPARK_PYTHON: this venv, where tickwheel is.
    previous = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("tickwheel-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.pyspark.python", sys.executable)  # executors use this venv too
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    if previous is None:
        os.environ.pop("PYSPARK_PYTHON", None)
    else:
        os.environ["PYSPARK_PYTHON"] = previous


@pytest.fixture
def ns(redis_server: RedisServer, namespace: str) -> Iterator[tuple[str, str, TimerClient]]:
    if not redis_server.running:
        redis_server.restart()
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=8)
    yield redis_server.url, namespace, c
    c.close()


def jobs(spark: SparkSession, n: int, partitions: int = 6, delay: int = 3_600_000) -> Any:
    return (
        spark.range(n)
        .withColumn("id", F.format_string("job:{%d}", "id"))
        .withColumn("delay_ms", F.lit(delay).cast("long"))
        .withColumn("keys", F.array(F.concat("id", F.lit(":done"))))
        .withColumn("owner", F.lit("team-a"))
        .repartition(partitions)
    )


def pending(c: TimerClient) -> int:
    return sum(int(c.redis.hlen(c.keys.shard(s).timers)) for s in range(c.meta.shards))


def test_register_20000_rows_then_again(spark: SparkSession, ns: Any) -> None:
    """20,000 rows over six partitions become 20,000 timers; the same rows again are all
    duplicates and create nothing."""
    url, namespace, c = ns
    df = jobs(spark, 20_000)
    report = tws.schedule_timers(df, url, namespace, payload_cols=["owner"], watch_col="keys")
    assert (report.scheduled, report.duplicate, report.rejected) == (20_000, 0, 0)
    assert pending(c) == 20_000
    info = c.get("job:{123}")
    assert info is not None and info.payload == {"owner": "team-a"}
    assert info.watch == ("job:{123}:done",)
    again = tws.schedule_timers(df, url, namespace, payload_cols=["owner"], watch_col="keys")
    assert (again.scheduled, again.duplicate) == (0, 20_000)
    assert pending(c) == 20_000


def test_notify_and_cancel_from_dataframes(spark: SparkSession, ns: Any) -> None:
    """notify_keys completes watching timers; cancel_timers cancels; repeats count as decided."""
    url, namespace, c = ns
    df = jobs(spark, 300)
    tws.schedule_timers(df, url, namespace, watch_col="keys")
    keys = df.where("id < 'job:{2'").select(F.element_at("keys", 1).alias("key"))
    n_keys = keys.count()
    done = tws.notify_keys(keys, url, namespace, key_col="key")
    assert done.completed == n_keys and done.already_decided == 0
    again = tws.notify_keys(keys, url, namespace, key_col="key")
    assert again.completed == 0 and again.already_decided == n_keys
    ids = df.select("id")
    cancelled = tws.cancel_timers(ids, url, namespace, id_col="id")
    assert cancelled.cancelled == 300 - n_keys and cancelled.already_decided == n_keys
    missing = tws.cancel_timers(spark.createDataFrame([("nope",)], ["id"]), url, namespace)
    assert missing.missing == 1
    assert pending(c) == 0


def test_heartbeats_from_a_dataframe(spark: SparkSession, ns: Any) -> None:
    """heartbeat_timers pushes each row's pending timer later; one past its cap is
    counted capped (and now due at its cap), one decided or unknown is counted so, a bad
    id is rejected with its reason."""
    url, namespace, c = ns
    c.schedule_many([{"id": f"job:{{{i}}}", "delay_ms": 60_000, **(
        {"max_total_ms": 120_000} if i < 10 else {})} for i in range(40)])  # fmt: skip
    c.cancel("job:{39}")
    before = c.get("job:{20}")
    assert before is not None
    rows = [(f"job:{{{i}}}",) for i in range(40)] + [("job:{nope}",), ("",)]
    df = spark.createDataFrame(rows, ["id"]).repartition(3)
    report = tws.heartbeat_timers(df, url, namespace, extend_ms=600_000)
    assert (report.extended, report.capped, report.already_decided, report.missing) == (
        29, 10, 1, 1)  # fmt: skip
    assert report.rejected == 1 and "timer id" in report.rejected_rows[0][1]
    after = c.get("job:{20}")
    assert after is not None and after.deadline_ms >= before.deadline_ms + 500_000
    capped = c.get("job:{3}")
    assert capped is not None and capped.created_ms is not None
    assert capped.deadline_ms == capped.created_ms + 120_000
    with pytest.raises(InvalidInput, match="extend_ms"):
        tws.heartbeat_timers(df, url, namespace, extend_ms=-1)


def test_create_schedules_from_a_dataframe(spark: SparkSession, ns: Any) -> None:
    """One schedule per row (cron or every, a time zone, a payload); a bad row is
    reported and creates nothing; the same rows again are duplicates."""
    url, namespace, c = ns
    schema = T.StructType(
        [
            T.StructField("name", T.StringType()),
            T.StructField("cron", T.StringType()),
            T.StructField("every", T.StringType()),
            T.StructField("tz", T.StringType()),
            T.StructField("payload", T.StringType()),
        ]
    )
    rows = [
        ("report-paris", "0 2 * * *", None, "Europe/Paris", "daily"),
        ("heartbeat", None, "30s", None, "ping"),
        ("broken", "99 * * * *", None, None, None),
        ("has{brace", None, "1m", None, None),
    ]
    df = spark.createDataFrame(rows, schema).repartition(2)
    report = tws.create_schedules(df, url, namespace)
    assert (report.scheduled, report.duplicate, report.rejected) == (2, 0, 2)
    reasons = {row["name"]: why for row, why in report.rejected_rows}
    assert "not valid" in reasons["broken"] and "may not contain" in reasons["has{brace"]
    made = {s.name: s for s in c.schedules.list()}
    assert set(made) == {"report-paris", "heartbeat"}
    assert made["report-paris"].spec.recurrence.tz == "Europe/Paris"
    assert made["heartbeat"].spec.recurrence.every_ms == 30_000
    assert made["heartbeat"].payload == "ping" and made["heartbeat"].armed is not None
    again = tws.create_schedules(df, url, namespace)
    assert (again.scheduled, again.duplicate, again.rejected) == (0, 2, 2)
    with pytest.raises(InvalidInput, match="'cron' or an 'every' column"):
        tws.create_schedules(df.select("name"), url, namespace)


def test_bad_rows_are_reported_and_write_nothing(spark: SparkSession, ns: Any) -> None:
    """Empty ids, negative or missing delays come back with reasons; only good rows land."""
    url, namespace, c = ns
    schema = T.StructType([T.StructField("id", T.StringType()),
                           T.StructField("delay_ms", T.LongType()),
                           T.StructField("priority", T.IntegerType())])  # fmt: skip
    rows = [("good-1", 60_000, 7), ("", 60_000, None), ("neg", -5, None), ("null", None, None),
            ("good-2", 60_000, None), ("x" * 300, 1_000, None), ("rank", 1_000, 101)]  # fmt: skip
    report = tws.schedule_timers(spark.createDataFrame(rows, schema), url, namespace,
                                 priority_col="priority")  # fmt: skip
    assert (report.scheduled, report.rejected) == (2, 5)
    reasons = {row["id"]: reason for row, reason in report.rejected_rows}
    assert "must not be empty" in reasons[""]
    assert "delay_ms must be between 0" in reasons["neg"]
    assert "exactly one of delay_ms" in reasons["null"] or "whole number" in reasons["null"]
    assert "bytes" in reasons["x" * 300]
    assert "priority must be between -100 and 100" in reasons["rank"]
    assert pending(c) == 2
    assert c.get("neg") is None and c.get("null") is None and c.get("rank") is None
    assert (c.get("good-1").priority, c.get("good-2").priority) == (7, 0)


def test_wrong_column_types_fail_on_the_driver(spark: SparkSession, ns: Any) -> None:
    """A column of the wrong type is refused up front, naming the column and the type."""
    url, namespace, c = ns
    df = spark.createDataFrame([("a", "10")], ["id", "delay_ms"])
    with pytest.raises(InvalidInput, match=r"'delay_ms' must be an integer column.*found string"):
        tws.schedule_timers(df, url, namespace)
    with pytest.raises(InvalidInput, match="'nope' is not in the DataFrame"):
        tws.schedule_timers(df, url, namespace, id_col="nope")
    assert pending(c) == 0


class FakeAccumulator:
    def __init__(self, value: Any) -> None:
        self.value = value

    def add(self, more: Any) -> None:
        self.value = self.value + more


def test_retried_partition_counts_true(spark: SparkSession, ns: Any) -> None:
    """A partition whose first attempt died half-way is re-run: its timers are counted once,
    as scheduled (not duplicate), and Redis holds each once; earlier timers stay duplicates."""
    url, namespace, c = ns
    c.schedule("pre-existing", delay_ms=60_000)
    rows = [{"id": f"r:{i}", "delay_ms": 60_000} for i in range(50)]
    rows.append({"id": "pre-existing", "delay_ms": 60_000})
    plan = writing._SchedulePlan(
        url, namespace, "job-1", "id", "delay_ms", None, (), None, None, None, 20
    )
    # First attempt: dies after the first 30 rows were written (its counts are lost, as
    # Spark drops a failed task's accumulator updates).
    lost = {k: FakeAccumulator(0) for k in ("scheduled", "duplicate", "rejected")}
    writing._schedule_partition(plan, 3, rows[:30], lost, FakeAccumulator([]))
    # The retry runs the whole partition again.
    acc = {k: FakeAccumulator(0) for k in ("scheduled", "duplicate", "rejected")}
    writing._schedule_partition(plan, 3, rows, acc, FakeAccumulator([]))
    assert (acc["scheduled"].value, acc["duplicate"].value) == (50, 1)
    assert pending(c) == 51


def test_streaming_sink_replayed_batch_creates_nothing_new(
    spark: SparkSession, ns: Any, tmp_path: Path
) -> None:
    """A real Structured Streaming query schedules through foreachBatch; a replayed batch
    (same batch id) creates no second timers and reports the same counts."""
    url, namespace, c = ns
    src = tmp_path / "in"
    src.mkdir()
    (src / "part-0.json").write_text(
        "\n".join(json.dumps({"id": f"s:{i}", "delay_ms": 60_000}) for i in range(120))
    )
    schema = T.StructType(
        [T.StructField("id", T.StringType()), T.StructField("delay_ms", T.LongType())]
    )
    sink = tws.schedule_sink(url, namespace, sink_id="q1", id_col="id", delay_col="delay_ms")
    query = (
        spark.readStream.schema(schema)
        .json(str(src))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    total = sum(r.scheduled for r in sink.reports)
    assert total == 120 and pending(c) == 120
    batch = spark.read.schema(schema).json(str(src))
    replay = sink.run(batch, 0)  # the same micro-batch delivered again
    assert replay.scheduled + replay.duplicate == 120
    assert replay.scheduled == sink.reports[0].scheduled
    assert pending(c) == 120


def test_read_outcomes_fixed_schema(spark: SparkSession, ns: Any) -> None:
    """Outcomes of every shard come back as one DataFrame with the documented columns."""
    url, namespace, c = ns
    for i in range(40):
        c.schedule(f"o:{{{i}}}", delay_ms=60_000, payload={"i": i})
        c.cancel(f"o:{{{i}}}")
    df = tws.read_outcomes(spark, url, namespace)
    assert tuple(df.columns) == reading.OUTCOME_FIELDS
    assert df.rdd.getNumPartitions() == 8
    rows = df.collect()
    assert len(rows) == 40 and {r["outcome"] for r in rows} == {"cancelled"}
    assert {json.loads(r["payload"])["i"] for r in rows} == set(range(40))
    assert all(r["lateness_ms"] == r["decided_ms"] - r["deadline_ms"] for r in rows)


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location(
        "job_timeouts", ROOT / "examples" / "job_timeouts.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_pipeline_runs(
    spark: SparkSession, redis_server: RedisServer, namespace: str
) -> None:
    """examples/job_timeouts.py runs end to end: every job ends completed or expired, and
    its report says what each line's figures are."""
    module = load_example()
    result = module.run(spark, redis_server.url, namespace, jobs=400)
    assert result["registered"]["scheduled"] == 400
    outcomes, notified = result["outcomes"], result["notified"]
    # on a busy machine Spark's notify step can come after every timeout fired: then no
    # job completed, and the report says so (each one said done after it)
    completed = outcomes.get("completed", {"count": 0})["count"]
    assert completed == notified["completed"]
    assert completed + outcomes["expired"]["count"] == 400
    # how late is a benchmark's figure, not a pass condition (a busy machine is late)
    assert outcomes["expired"]["avg_lateness_ms"] >= 0
    assert outcomes["expired"]["max_lateness_ms"] >= outcomes["expired"]["avg_lateness_ms"]
    text = module.report(result)
    said = notified["completed"] + notified["already_decided"]
    assert f"said done    {said:>6} ({notified['completed']} before their timeout fired;" in text
    assert "fired on average" in text and "ms after the deadline, at most" in text


def test_the_example_report_says_what_its_numbers_mean() -> None:
    """Each line says what its lateness is: a completed job said done before its deadline
    (or after it, yet before the worker fired); an expired timer fired that late."""
    result = {
        "registered": {"scheduled": 2_000, "rejected": 0},
        "notified": {"completed": 960, "already_decided": 40},
        "outcomes": {
            "completed": {"count": 960, "avg_lateness_ms": -2_300.0, "max_lateness_ms": 3},
            "expired": {"count": 1_040, "avg_lateness_ms": 2.4, "max_lateness_ms": 19},
        },
    }
    assert load_example().report(result).splitlines() == [
        "registered from Spark    2000 timeouts (0 rejected)",
        "jobs that said done      1000 (960 before their timeout fired; 40 after it)",
        "completed                 960 (said done on average 2.3 s before the deadline)",
        "expired                  1040 (fired on average 2 ms after the deadline, at most 19 ms)",
    ]
    result["outcomes"]["completed"]["avg_lateness_ms"] = 4.0  # type: ignore[index]
    assert "(said done on average 4 ms after the deadline, before it fired)" in (
        load_example().report(result)
    )


def test_example_without_a_url_uses_the_running_embedded_server_or_says_to_start_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server_binary: Path
) -> None:
    """Given no URL, the example takes the running embedded server, through the public
    `timer.default_url` (it started one through the CLI's own module before: an app that
    copied it depended on that); with none running it exits with the sentence saying to
    run `tickwheel server start`, before Spark starts, and starts nothing."""
    from timer.cli import embedded  # noqa: PLC0415

    monkeypatch.delenv("TICKWHEEL_REDIS_URL", raising=False)
    home = tmp_path / ".tickwheel"  # $TICKWHEEL_HOME (tests/conftest.py)
    module = load_example()
    monkeypatch.setattr(module, "SparkSession", None)  # the session is the other tests'
    with pytest.raises(SystemExit) as exited:
        module.main(["job_timeouts.py"])
    assert "`tickwheel server start`" in str(exited.value.code), exited.value.code
    assert embedded.status(home) is None
    embedded.start(home, binary=str(server_binary))  # the user's `tickwheel server start`
    try:
        url = module.server_url(["job_timeouts.py"])
        state = embedded.status(home)
        assert state is not None and url == state.url
        with TimerClient.from_url(url, "ex") as c:
            assert c.server_time_ms() > 0
        given = "redis://127.0.0.1:1/0"
        assert module.server_url(["job_timeouts.py", given]) == given
    finally:
        embedded.stop(home)


def test_demo_registers_through_spark(
    spark: SparkSession, redis_server: RedisServer, namespace: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """tickwheel demo --spark: the timeouts are registered from a DataFrame; all else holds."""
    from click.testing import CliRunner  # noqa: PLC0415

    from timer.cli.main import main  # noqa: PLC0415

    monkeypatch.chdir(tmp_path)
    args = ["--redis-url", redis_server.url, "--namespace", namespace, "--json", "demo",
            "--spark", "--timers", "300", "--min-delay", "1s", "--max-delay", "3s",
            "--lease", "1000ms", "--no-kill", "--seed", "5"]  # fmt: skip
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["ok"] is True and summary["scheduled"] == 300
    assert summary["expired"] + summary["completed"] + summary["cancelled"] == 300


def test_the_spark_guide_runs(
    spark: SparkSession, tmp_path: Path, server_binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/guides/spark.md's example, as written, on this Spark and the reader's
    embedded server (`tickwheel server start`, nothing initialised: the guide's code
    initialises its namespace; trial 13 met "not initialised"), with no URL given:
    tests/docs runs every other page's examples. (Before, the guide tried localhost:6379
    when $TICKWHEEL_REDIS_URL was not set.)"""
    from tests.docs.examples import ROOT, run_python  # noqa: PLC0415
    from timer.cli import embedded  # noqa: PLC0415

    home = tmp_path / "home"
    state, _ = embedded.start(home, binary=str(server_binary))
    try:
        monkeypatch.delenv("TICKWHEEL_REDIS_URL", raising=False)
        monkeypatch.setenv("TICKWHEEL_HOME", str(home))
        scope: dict[str, object] = {}
        assert run_python(ROOT / "docs" / "guides" / "spark.md", scope) == 1
        assert scope["report"].scheduled == 1  # type: ignore[attr-defined]
        assert scope["url"] == state.url
    finally:
        embedded.stop(home)
