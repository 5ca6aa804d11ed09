"""Example pipeline: a job table -> timeouts registered from Spark -> some jobs finish and
notify -> a worker fires the rest -> outcomes read back into Spark and summarised.

    python examples/job_timeouts.py redis://localhost:6379/0

(With no URL it uses tickwheel's embedded server, as the CLI does, starting it if it is
not running; `tickwheel server stop` stops it.)
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from timer import TimerClient
from timer import spark as tws
from worker import Worker, WorkerSettings


def default_url() -> str:
    """The embedded server's URL (the user's, see cli.embedded), started if it is not running."""
    from cli import embedded  # noqa: PLC0415 - only when no URL is given

    state, _ = embedded.start()
    return state.url


def run(
    spark: SparkSession, url: str, namespace: str = "example", jobs: int = 2_000
) -> dict[str, Any]:
    admin = TimerClient.from_url(url, namespace)
    admin.init(shards=8)

    # 1. The job table: each job gets a timeout of 1-3 s, watching its own "done" key.
    table = (
        spark.range(jobs)
        .withColumn("id", F.format_string("job:{%d}", "id"))
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
    outcomes = tws.read_outcomes(spark, url, namespace)
    summary = {
        row["outcome"]: {"count": row["n"], "avg_lateness_ms": row["avg_late"]}
        for row in outcomes.groupBy("outcome")
        .agg(F.count("*").alias("n"), F.avg("lateness_ms").alias("avg_late"))
        .collect()
    }
    admin.close()
    return {"registered": registered.as_dict(), "notified": notified.as_dict(), "outcomes": summary}


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors need tickwheel
    session = (
        SparkSession.builder.master("local[2]")
        .appName("tickwheel-example")
        .config("spark.pyspark.python", sys.executable)  # executors need tickwheel installed
        .getOrCreate()
    )
    print(run(session, sys.argv[1] if len(sys.argv) > 1 else default_url()))
    session.stop()
