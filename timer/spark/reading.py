"""Outcomes read back as a DataFrame: one partition per shard."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..durable.model.codec import jsonable
from .writing import pooled_client

OUTCOME_FIELDS = ("id", "outcome", "deadline_ms", "decided_ms", "lateness_ms", "shard", "payload")


def outcome_schema() -> Any:
    from pyspark.sql import types as T  # noqa: PLC0415 - optional dependency

    return T.StructType(
        [
            T.StructField("id", T.StringType(), False),
            T.StructField("outcome", T.StringType(), False),
            T.StructField("deadline_ms", T.LongType(), False),
            T.StructField("decided_ms", T.LongType(), False),
            T.StructField("lateness_ms", T.LongType(), False),
            T.StructField("shard", T.IntegerType(), False),
            T.StructField("payload", T.StringType(), True),
        ]
    )


def read_shard_outcomes(url: str, namespace: str, shard: int) -> Iterator[tuple[Any, ...]]:
    """Every outcome of one shard's stream as rows (payload as a JSON string, as
    ``jsonable`` shows msgpack's bytes; an entry no reader can decode has outcome
    ``undecodable`` and ``{"$error": why}`` as its payload)."""
    for o in pooled_client(url, namespace).all_outcomes([shard]):
        shown = {"$error": o.error} if o.error is not None else o.payload
        payload = None if shown is None else json.dumps(jsonable(shown))
        yield (o.id, o.outcome, o.deadline_ms, o.decided_ms, o.lateness_ms, shard, payload)


def read_outcomes(spark: Any, url: str, namespace: str = "default") -> Any:
    """Outcomes of every shard as a DataFrame, read in parallel (one partition per shard)."""
    shards = pooled_client(url, namespace).meta.shards
    rdd = spark.sparkContext.parallelize(range(shards), shards).flatMap(
        lambda s: read_shard_outcomes(url, namespace, s)
    )
    return spark.createDataFrame(rdd, outcome_schema())
