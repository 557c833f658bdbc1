"""The Spark jobs of ``brokerlab analyze``.

Nothing here collects a trace on the driver: statistics are aggregations, the replay
sweep is one Spark task per (design, size) that streams the trace files itself, and
the bound's next-read times come from a window function and are written back as
Parquet that the bound's tasks stream in order. Only result rows reach the driver.

A trace of several brokers is several caches, each of the size at hand: a replay, the
bound and a reference run each broker's events through a cache of its own and sum the
counts; nothing that orders events (``seq`` is per broker) mixes brokers. A broker's
``restart`` row empties its cache.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from broker.trace.recorder import file_prefix
from pipeline.belady import belady
from pipeline.replay import ReplayResult, ReplaySpec, replay
from pipeline.trace_io import iter_rows, trace_brokers

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

from broker.cache.config import CacheConfig

#: a read this soon after its entry was added is tailing (the default cache TTL)
TAILING_LAG_NS = 1_000_000_000


def load_trace(spark: SparkSession, uri: str) -> DataFrame:
    return spark.read.option("pathGlobFilter", "trace-*.parquet").parquet(uri)


def reads_with_sizes(trace: DataFrame) -> DataFrame:
    """The ``read`` rows, each with its entry's size: a read the live design missed has
    none in its row, so it comes from the entry's ``add`` or ``fill`` rows."""
    from pyspark.sql import functions as F

    keys = ["topic", "ledger", "entry"]
    sizes = (
        trace.where(F.col("kind").isin("add", "fill") & F.col("size").isNotNull())
        .groupBy(*keys)
        .agg(F.max("size").alias("known_size"))
    )
    reads = trace.where(F.col("kind") == "read")
    return (
        reads.join(sizes, keys, "left")
        .withColumn("size", F.coalesce(F.col("size"), F.col("known_size")))
        .drop("known_size")
    )


def working_set_bytes(trace: DataFrame) -> int:
    """Bytes of the distinct entries read by one broker: the largest of the brokers'
    (each broker has a cache of its own, of the sizes swept)."""
    from pyspark.sql import functions as F

    keys = ["broker", "topic", "ledger", "entry"]
    reads = reads_with_sizes(trace).select(*keys, "size")
    per_broker = reads.dropDuplicates(keys).groupBy("broker").agg(F.sum("size").alias("bytes"))
    largest = per_broker.agg(F.max("bytes").alias("bytes")).first()
    return int(largest["bytes"] or 0) if largest is not None else 0


def default_sizes(working_set: int, count: int = 8) -> list[int]:
    """``count`` sizes log-spaced from 1% to 100% of the working set."""
    if working_set <= 0:
        return []
    low = max(1, working_set // 100)
    if count == 1:
        return [working_set]
    ratio = (working_set / low) ** (1 / (count - 1))
    return sorted({round(low * ratio**step) for step in range(count)})


def trace_statistics(trace: DataFrame) -> dict[str, DataFrame]:
    """Per topic and subscription: reads by pattern (tailing, catch-up, replay), hits;
    the reuse distribution (events and seconds between reads of an entry, log2 buckets);
    the working set per second (distinct entries and bytes read)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # ts_ns counts from each broker's recorder's start: compare times within a broker
    adds = trace.where(F.col("kind") == "add").select(
        "broker", "topic", "ledger", "entry", F.col("ts_ns").alias("added_ns")
    )
    reads = reads_with_sizes(trace)
    joined = reads.join(adds, ["broker", "topic", "ledger", "entry"], "left")
    pattern = (
        F.when(F.col("replay"), F.lit("replay"))
        .when(
            F.col("added_ns").isNotNull() & (F.col("ts_ns") - F.col("added_ns") < TAILING_LAG_NS),
            F.lit("tailing"),
        )
        .otherwise(F.lit("catch-up"))
    )
    by_subscription = (
        joined.withColumn("pattern", pattern)
        .groupBy("topic", "subscription", "pattern")
        .agg(
            F.count("*").alias("reads"),
            F.sum(F.col("hit").cast("long")).alias("hits"),
            F.sum("size").alias("bytes"),
        )
        .orderBy("topic", "subscription", "pattern")
    )
    same_entry = Window.partitionBy("broker", "topic", "ledger", "entry").orderBy("seq")
    reuse = (
        reads.withColumn("previous_seq", F.lag("seq").over(same_entry))
        .withColumn("previous_ns", F.lag("ts_ns").over(same_entry))
        .where(F.col("previous_seq").isNotNull())
        .withColumn(
            "events_bucket",
            F.pow(F.lit(2), F.floor(F.log2(F.col("seq") - F.col("previous_seq")))).cast("long"),
        )
        .withColumn(
            "seconds",
            (F.col("ts_ns") - F.col("previous_ns")) / F.lit(1e9),
        )
        .groupBy("events_bucket")
        .agg(F.count("*").alias("reads"), F.avg("seconds").alias("mean_seconds"))
        .orderBy("events_bucket")
    )
    working_set = (
        reads.withColumn("second", F.floor(F.col("ts_ns") / F.lit(1e9)).cast("long"))
        .dropDuplicates(["second", "topic", "ledger", "entry"])
        .groupBy("second")
        .agg(F.count("*").alias("entries"), F.sum("size").alias("bytes"))
        .orderBy("second")
    )
    return {"patterns": by_subscription, "reuse": reuse, "working_set": working_set}


@dataclasses.dataclass(frozen=True)
class Cell:
    """One task of the sweep."""

    trace_uri: str
    design: str
    size_bytes: int
    settings: dict[str, Any]
    live: bool


def run_cell(cell: Cell) -> dict[str, Any]:
    """Runs on a Spark worker: stream each broker's files in turn, replay them through
    a cache of the broker's own, return one result row: the brokers' counts summed."""
    settings = CacheConfig(**cell.settings)
    spec = ReplaySpec(cell.design, cell.size_bytes, settings, cell.live)
    results = [
        replay(iter_rows(cell.trace_uri, file_prefix(broker)), spec)
        for broker in trace_brokers(cell.trace_uri)
    ]
    return ReplayResult.total(spec, results).as_row()


def sweep(spark: SparkSession, cells: list[Cell]) -> list[dict[str, Any]]:
    """Every cell as its own Spark task; returns the result rows."""
    if not cells:
        return []
    rdd = spark.sparkContext.parallelize(cells, len(cells))
    return rdd.map(run_cell).collect()


def next_reads(trace: DataFrame, out_uri: str) -> str:
    """Write (broker, seq, kind, key, size, next_read) of adds, reads and restarts,
    ordered by (broker, seq), where next_read is the seq of the entry's next read by the
    same broker: the input of the bound and the references, which give each broker a
    cache of its own, emptied at the broker's restarts."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    columns = ["broker", "seq", "kind", "topic", "ledger", "entry", "size"]
    adds = trace.where(F.col("kind") == "add").select(*columns)
    accesses = adds.unionByName(reads_with_sizes(trace).select(*columns)).select(
        "broker",
        "seq",
        "kind",
        F.xxhash64("topic", "ledger", "entry").alias("key"),
        "size",
    )
    same_broker = Window.partitionBy("broker", "key").orderBy("seq")
    next_read = F.first(F.when(F.col("kind") == "read", F.col("seq")), ignorenulls=True).over(
        same_broker.rowsBetween(1, Window.unboundedFollowing)
    )
    annotated = accesses.withColumn("next_read", next_read)
    marks = trace.where(F.col("kind") == "restart").select(
        "broker",
        "seq",
        "kind",
        F.lit(None).cast("long").alias("key"),
        F.lit(None).cast("int").alias("size"),
        F.lit(None).cast("long").alias("next_read"),
    )
    ordered = annotated.unionByName(marks).orderBy("broker", "seq")
    ordered.write.mode("overwrite").parquet(out_uri)
    return out_uri


def _bound_cell(args: tuple[str, int]) -> dict[str, Any]:
    uri, size = args
    return belady(iter_rows(uri, "part-"), size).as_row()


def bound(spark: SparkSession, next_reads_uri: str, sizes: list[int]) -> list[dict[str, Any]]:
    """The bound at every size, one task per size."""
    if not sizes:
        return []
    rdd = spark.sparkContext.parallelize([(next_reads_uri, s) for s in sizes], len(sizes))
    return rdd.map(_bound_cell).collect()


def _reference_cell(args: tuple[str, str, int]) -> dict[str, Any]:
    from pipeline.reference import simulate

    uri, policy, size = args
    return simulate(iter_rows(uri, "part-"), policy, size).as_row()


def references(
    spark: SparkSession, next_reads_uri: str, policies: list[str], sizes: list[int]
) -> list[dict[str, Any]]:
    """libcachesim's policies at every size, one task per (policy, size), on the same
    ordered accesses the bound reads."""
    cells = [(next_reads_uri, policy, size) for policy in policies for size in sizes]
    if not cells:
        return []
    return spark.sparkContext.parallelize(cells, len(cells)).map(_reference_cell).collect()
