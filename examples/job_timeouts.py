"""Example pipeline: a worker running -> a job table -> timeouts registered from Spark ->
some jobs finish and notify -> the worker fires the rest -> outcomes read back into Spark
and summarised.

It needs the ``spark`` extra (PySpark) and Java 17, and a server: from the checkout,

    pip install '.[spark,server]'
    tickwheel server start            # or set TICKWHEEL_REDIS_URL, or pass a URL
    python examples/job_timeouts.py   # or: python examples/job_timeouts.py redis://host:6379/0

With no URL it uses ``$TICKWHEEL_REDIS_URL``, else your running embedded server
(``timer.default_url``); with neither, it says to run ``tickwheel server start`` (``tickwheel
server stop`` stops the server afterwards). It prints a short summary: how many
timeouts were registered; how many jobs said they were done, before their timeout fired
(their timers completed) or after (expired already); how long before its deadline a
completed job said so; and how late the worker fired the expired ones, which is the timer
service's own lateness (the worker held each timeout before it was due). See ``report``.
tests/spark/test_spark.py runs ``run``; .ci/wheel runs this file as written above, in a
clean venv.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

try:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
except ImportError:  # the one thing a newcomer is likely to miss
    sys.exit(
        "this example needs PySpark, the spark extra, and Java 17: "
        "pip install '.[spark,server]' (from the checkout), then run it again"
    )

from timer import ConfigError, TimerClient, default_url
from timer import spark as tws
from timer.worker import Worker, WorkerSettings


def server_url(argv: list[str]) -> str:
    """The URL given, else $TICKWHEEL_REDIS_URL, else your running embedded server; with
    none, the error's sentence (how to start one) and exit 1, before Spark starts."""
    if len(argv) > 1:
        return argv[1]
    try:
        return default_url()
    except ConfigError as exc:
        sys.exit(str(exc))


def run(
    spark: SparkSession, url: str, namespace: str = "example", jobs: int = 2_000
) -> dict[str, Any]:
    admin = TimerClient.from_url(url, namespace)
    admin.init(shards=8)
    # this run's jobs: another run's (the namespace keeps their outcomes) are not counted
    run_id = f"r{admin.server_time_ms()}"

    # 1. A worker runs before any job starts, as in production: it holds each timeout in
    # its wheel before the deadline and fires it then. (Started after the jobs, it would
    # fire those already due late, on taking its shards: the lateness would be its start's.)
    worker = Worker(TimerClient.from_url(url, namespace), WorkerSettings(lease_ms=2_000))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not worker.health().ready and time.monotonic() < deadline:
        time.sleep(0.05)

    # 2. The job table: each job gets a timeout of 3-5 s, watching its own "done" key.
    table = (
        spark.range(jobs)
        .withColumn("id", F.format_string(f"job:{{{run_id}-%d}}", "id"))
        .withColumn("delay_ms", F.lit(3_000) + F.abs(F.hash("id") % 2_000).cast("long"))
        .withColumn("keys", F.array(F.concat("id", F.lit(":done"))))
        .withColumn("owner", F.lit("team-a"))
        .repartition(4)
    )
    registered = tws.schedule_timers(table, url, namespace, id_col="id", delay_col="delay_ms",
                                     payload_cols=["owner"], watch_col="keys")  # fmt: skip

    # 3. Half of the jobs finish and say so: a notify before the timeout completes the
    # timer; one after it (the job, or Spark running this step, took too long) finds the
    # timeout fired already and completes nothing.
    finished = table.where(F.hash("id") % 2 == 0).select(F.element_at("keys", 1).alias("key"))
    notified = tws.notify_keys(finished, url, namespace, key_col="key")

    # 4. The worker fires the timeouts of the jobs that hung, each at its deadline.
    deadline = time.monotonic() + 60
    while admin.stats()["pending"] > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    worker.stop()
    thread.join(10)
    worker.client.close()

    # 5. Outcomes back in Spark.
    outcomes = tws.read_outcomes(spark, url, namespace).where(
        F.col("id").startswith(f"job:{{{run_id}-")
    )
    summary = {
        row["outcome"]: {
            "count": row["n"],
            "avg_lateness_ms": row["avg_late"],
            "max_lateness_ms": row["max_late"],
        }
        for row in outcomes.groupBy("outcome")
        .agg(
            F.count("*").alias("n"),
            F.avg("lateness_ms").alias("avg_late"),
            F.max("lateness_ms").alias("max_late"),
        )
        .collect()
    }
    admin.close()
    return {"registered": registered.as_dict(), "notified": notified.as_dict(), "outcomes": summary}


def report(result: dict[str, Any]) -> str:
    """The run's result as a few lines a person reads.

    An outcome's lateness is its decision's time minus its deadline. A completed timer's
    is negative: its job said done that long before its deadline. An expired timer's is
    how late the worker fired it: the timer service's own lateness, a few ms on an idle
    machine (more on a loaded one: the worker shares the CPU with Spark here). A job that
    said done after its timeout fired changed nothing: its timer stays expired."""
    reg, notified = result["registered"], result["notified"]
    lines = [
        f"registered from Spark  {reg['scheduled']:>6} timeouts ({reg['rejected']} rejected)",
        f"jobs that said done    {notified['completed'] + notified['already_decided']:>6} "
        f"({notified['completed']} before their timeout fired; "
        f"{notified['already_decided']} after it)",
    ]
    for outcome, row in sorted(result["outcomes"].items()):
        late, worst = row["avg_lateness_ms"], row["max_lateness_ms"]
        if outcome == "expired":  # how late the worker fired: the timer service's lateness
            when = f"fired on average {late:.0f} ms after the deadline, at most {worst:.0f} ms"
        elif late < 0:
            when = f"said done on average {-late / 1000:.1f} s before the deadline"
        else:  # said done after the deadline, yet before the worker fired: still completed
            when = f"said done on average {late:.0f} ms after the deadline, before it fired"
        lines.append(f"{outcome:<22} {row['count']:>6} ({when})")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    url = server_url(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors need tickwheel
    print("starting Spark (local[2]) and registering 2,000 job timeouts...", flush=True)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("tickwheel-example")
        .config("spark.pyspark.python", sys.executable)  # executors need tickwheel installed
        .config("spark.ui.showConsoleProgress", "false")  # no progress bars in the summary
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        print(report(run(session, url)))
    finally:
        session.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
