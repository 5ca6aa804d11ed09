"""Example pipeline: a job table -> timeouts registered from Spark -> some jobs finish and
notify -> a worker fires the rest -> outcomes read back into Spark and summarised.

It needs the ``spark`` extra (PySpark) and Java 17, and a server: from the checkout,

    pip install '.[spark,server]'
    tickwheel server start            # or set TICKWHEEL_REDIS_URL, or pass a URL
    python examples/job_timeouts.py   # or: python examples/job_timeouts.py redis://host:6379/0

With no URL it uses ``$TICKWHEEL_REDIS_URL``, else the embedded server, starting it if it
is not running (``tickwheel server stop`` stops it). It prints a short summary: how many
timeouts were registered, how many jobs said they were done, and how each timer ended
with its lateness. tests/spark/test_spark.py runs ``run``; .ci/wheel runs this file as
written above, in a clean venv.
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

from timer import TimerClient
from timer import spark as tws
from timer.worker import Worker, WorkerSettings


def default_url() -> str:
    """$TICKWHEEL_REDIS_URL, else the user's embedded server (see timer.cli.embedded), started
    if it is not running."""
    if os.environ.get("TICKWHEEL_REDIS_URL"):
        return os.environ["TICKWHEEL_REDIS_URL"]
    from timer.cli import embedded  # noqa: PLC0415 - only when no URL is given

    state, _ = embedded.start()
    return state.url


def run(
    spark: SparkSession, url: str, namespace: str = "example", jobs: int = 2_000
) -> dict[str, Any]:
    admin = TimerClient.from_url(url, namespace)
    admin.init(shards=8)
    # this run's jobs: another run's (the namespace keeps their outcomes) are not counted
    run_id = f"r{admin.server_time_ms()}"

    # 1. The job table: each job gets a timeout of 1-3 s, watching its own "done" key.
    table = (
        spark.range(jobs)
        .withColumn("id", F.format_string(f"job:{{{run_id}-%d}}", "id"))
        .withColumn("delay_ms", F.lit(1_000) + F.abs(F.hash("id") % 2_000).cast("long"))
        .withColumn("keys", F.array(F.concat("id", F.lit(":done"))))
        .withColumn("owner", F.lit("team-a"))
        .repartition(4)
    )
    registered = tws.schedule_timers(table, url, namespace, id_col="id", delay_col="delay_ms",
                                     payload_cols=["owner"], watch_col="keys")  # fmt: skip

    # 2. Half of the jobs finish in time and say so.
    finished = table.where(F.hash("id") % 2 == 0).select(F.element_at("keys", 1).alias("key"))
    notified = tws.notify_keys(finished, url, namespace, key_col="key")

    # 3. A worker fires the timeouts of the jobs that hung.
    worker = Worker(TimerClient.from_url(url, namespace), WorkerSettings(lease_ms=2_000))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while admin.stats()["pending"] > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    worker.stop()
    thread.join(10)
    worker.client.close()

    # 4. Outcomes back in Spark.
    outcomes = tws.read_outcomes(spark, url, namespace).where(
        F.col("id").startswith(f"job:{{{run_id}-")
    )
    summary = {
        row["outcome"]: {"count": row["n"], "avg_lateness_ms": row["avg_late"]}
        for row in outcomes.groupBy("outcome")
        .agg(F.count("*").alias("n"), F.avg("lateness_ms").alias("avg_late"))
        .collect()
    }
    admin.close()
    return {"registered": registered.as_dict(), "notified": notified.as_dict(), "outcomes": summary}


def report(result: dict[str, Any]) -> str:
    """The run's result as a few lines a person reads."""
    reg, notified = result["registered"], result["notified"]
    lines = [
        f"registered from Spark  {reg['scheduled']:>6} timeouts ({reg['rejected']} rejected)",
        f"jobs that said done    {notified['completed']:>6} (each notify completed its "
        "timer: no timeout fired for it)",
    ]
    for outcome, row in sorted(result["outcomes"].items()):
        late = row["avg_lateness_ms"]
        # a job that said done before its deadline has a negative "lateness" (how early);
        # on a busy machine some say it after (no worker ran yet to fire them)
        when = (
            f"{-late / 1000:.1f} s before its deadline"
            if late < 0
            else f"{late:.0f} ms after its deadline"
        )
        lines.append(f"{outcome:<22} {row['count']:>6} (on average {when})")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    url = argv[1] if len(argv) > 1 else default_url()
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
