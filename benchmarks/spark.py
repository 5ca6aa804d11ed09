"""Spark registration: timers/s from a DataFrame on local[2], next to ``schedule_many`` from
one Python process, on the same private server in the same run.

    python -m benchmarks.spark --rows 200000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from timer import TimerClient
from timer.testing import RedisServer, find_server_binary

from .options import count


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=count("rows"), default=200_000)
    p.add_argument("--partitions", type=count("partitions"), default=4)
    p.add_argument("--server", default=None)
    args = p.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession  # noqa: PLC0415 - optional extra
    from pyspark.sql import functions as F  # noqa: PLC0415

    from timer import spark as tws  # noqa: PLC0415

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("tickwheel-bench")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory() as tmp:
        binary = find_server_binary(args.server)
        with RedisServer(Path(tmp) / "data", binary=binary) as server:
            client = TimerClient.from_url(server.url, "spark-bench")
            client.init(shards=16)
            df = (
                spark.range(args.rows)
                .withColumn("id", F.format_string("s:%d", "id"))
                .withColumn("delay_ms", F.lit(3_600_000).cast("long"))
                .repartition(args.partitions)
                .cache()
            )
            df.count()  # materialise the rows first: only registration is timed
            t0 = time.perf_counter()
            report = tws.schedule_timers(df, server.url, "spark-bench")
            spark_s = time.perf_counter() - t0
            local = TimerClient.from_url(server.url, "local-bench")
            local.init(shards=16)
            items = [{"id": f"l:{i}", "delay_ms": 3_600_000} for i in range(args.rows)]
            t0 = time.perf_counter()
            for start in range(0, args.rows, 1000):
                local.schedule_many(items[start : start + 1000])
            local_s = time.perf_counter() - t0
            version = server.version()
            client.close()
            local.close()
    spark.stop()
    result = {
        "benchmark": "spark-register",
        "rows": args.rows,
        "partitions": args.partitions,
        "server": version,
        "scheduled": report.scheduled,
        "spark_local2_per_s": round(args.rows / spark_s),
        "schedule_many_one_process_per_s": round(args.rows / local_s),
        "ratio_spark_to_one_process": round(local_s / spark_s, 3),
    }
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
