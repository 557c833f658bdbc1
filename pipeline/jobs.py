"""The Spark jobs of ``brokerlab analyze``: DataFrame operations only, so the same code
runs on a classic session (``local[*]``, a standalone or YARN cluster) and on Spark
Connect, which has no ``sparkContext`` and no RDDs.

Spark distributes the work; the tasks do their own I/O through ``pipeline.trace_io``
(pyarrow's file systems: local, ``hdfs://``, ``s3://``...), so nothing depends on which
file systems the cluster's Hadoop has:

- the trace is a DataFrame made by ``mapInArrow`` over the list of its files (listed on
  the driver): each task reads its file with pyarrow;
- a job whose cells are few (the sweep's (design, size) cells, the bound's and the
  references' (policy, size) cells) is ``spark.range(n, numPartitions=n)``: one row,
  one task per group of cells (as many groups as the session runs tasks at once, by
  default), whose ``mapInArrow`` function streams the trace (or the ``next_reads``
  parts) itself, once for all its cells, and returns JSON result rows. Only result
  rows reach the driver;
- DataFrames to keep (``next_reads``, the read patterns) are written by their tasks,
  each task its partition as one Parquet part (:func:`write_frame`); a statistic
  aggregated to a few hundred rows (reuse, working set) is brought to the driver once,
  which writes it and reports it (:func:`write_small_frame`).

Nothing collects a trace on the driver. The statistics are aggregated on the
executors to sizes a report can show whole: reuse distances in log2 buckets, the
working set in at most :data:`WORKING_SET_POINTS` windows (one second wide, widened on
longer traces), read patterns per subscription (every row is in ``patterns/``; the
report shows the subscriptions with the most reads and says how many it leaves out).

A trace of several brokers is several caches, each of the size at hand: a replay, the
bound and a reference run each broker's events through a cache of its own and sum the
counts; nothing that orders events (``seq`` is per broker) mixes brokers. A broker's
``restart`` row empties its cache.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import itertools
import json
import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from broker.trace.recorder import SCHEMA
from pipeline import trace_io
from pipeline.belady import BoundRun
from pipeline.reference import ReferenceRun
from pipeline.replay import ReplaySpec, replay_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: a read this soon after its entry was added is tailing (the default cache TTL)
TAILING_LAG_NS = 1_000_000_000
#: the working-set series has at most this many windows (each at least one second)
WORKING_SET_POINTS = 1_000

_DDL_TYPES = {
    pa.int16(): "smallint",
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.bool_(): "boolean",
    pa.string(): "string",
}


def _plain(field: pa.Field) -> pa.Field:
    """The trace's column as Spark takes it: dictionaries decoded, nullable."""
    kind = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
    return pa.field(field.name, kind, nullable=True)


#: the trace's columns as the trace DataFrame has them
TRACE_SCHEMA = pa.schema([_plain(field) for field in SCHEMA])
TRACE_DDL = ", ".join(f"{field.name} {_DDL_TYPES[field.type]}" for field in TRACE_SCHEMA)
_RESULT_DDL = "result string"


def _conform(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A trace file's batch with exactly :data:`TRACE_SCHEMA`'s columns and types (a
    column a file lacks is null)."""
    names = batch.schema.names
    columns = [
        batch.column(field.name).cast(field.type)
        if field.name in names
        else pa.nulls(batch.num_rows, field.type)
        for field in TRACE_SCHEMA
    ]
    return pa.RecordBatch.from_arrays(columns, schema=TRACE_SCHEMA)


@dataclasses.dataclass(frozen=True)
class _TraceFiles:
    """``mapInArrow`` function: the rows of the files whose indexes come in."""

    uri: str
    files: tuple[str, ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                for piece in trace_io.iter_file_batches(self.uri, self.files[index]):
                    yield _conform(piece)


def load_trace(spark: SparkSession, uri: str) -> DataFrame:
    """The trace's rows (every broker's files), one task per file; columns as
    :data:`TRACE_SCHEMA`. ``uri`` must be absolute (``trace_io.resolve_uri``)."""
    files = tuple(trace_io.parquet_files(uri, "trace-"))
    if not files:
        raise FileNotFoundError(f"no trace-*.parquet files in {uri}")
    indexes = spark.range(len(files), numPartitions=len(files))
    return indexes.mapInArrow(_TraceFiles(uri, files), TRACE_DDL)


@dataclasses.dataclass(frozen=True)
class TraceExtent:
    #: the trace's rows
    events: int
    #: the latest ``ts_ns`` of any broker
    last_ns: int
    #: bytes of the distinct entries read by one broker: the largest of the brokers'
    #: (each broker has a cache of its own, of the sizes swept)
    working_set_bytes: int


def trace_extent(trace: DataFrame, reads: DataFrame | None = None) -> TraceExtent:
    """The trace's rows, latest time and working set, in one Spark job: the two
    aggregations as the two rows of one result. ``reads``: the trace's
    :func:`reads_with_sizes`, if the caller has it (cached)."""
    from pyspark.sql import functions as F

    extent = trace.agg(
        F.lit("extent").alias("what"),
        F.count("*").alias("first"),
        F.max("ts_ns").cast("long").alias("second"),
    )
    keys = ["broker", "topic", "ledger", "entry"]
    if reads is None:
        reads = reads_with_sizes(trace)
    per_broker = (
        reads.select(*keys, "size")
        .dropDuplicates(keys)
        .groupBy("broker")
        .agg(F.sum("size").alias("bytes"))
    )
    working_set = per_broker.agg(
        F.lit("working_set").alias("what"),
        F.max("bytes").cast("long").alias("first"),
        F.lit(None).cast("long").alias("second"),
    )
    found = {row["what"]: row for row in extent.unionByName(working_set).collect()}
    return TraceExtent(
        events=int(found["extent"]["first"] or 0),
        last_ns=int(found["extent"]["second"] or 0),
        working_set_bytes=int(found["working_set"]["first"] or 0),
    )


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


def default_sizes(working_set: int, count: int = 8) -> list[int]:
    """``count`` sizes log-spaced from 1% to 100% of the working set."""
    if working_set <= 0:
        return []
    low = max(1, working_set // 100)
    if count == 1:
        return [working_set]
    ratio = (working_set / low) ** (1 / (count - 1))
    return sorted({round(low * ratio**step) for step in range(count)})


def window_seconds(last_ns: int, points: int = WORKING_SET_POINTS) -> int:
    """The width of the working set's windows: one second, or the least whole number of
    seconds that puts a trace ending at ``last_ns`` into at most ``points`` windows."""
    seconds = last_ns // 1_000_000_000 + 1
    return max(1, math.ceil(seconds / points))


def trace_statistics(
    trace: DataFrame, window: int = 1, reads: DataFrame | None = None
) -> dict[str, DataFrame]:
    """Per topic and subscription: reads by pattern (tailing, catch-up, replay), hits;
    the reuse distribution (events and seconds between reads of an entry, log2 buckets);
    the working set per window of ``window`` seconds (distinct entries and bytes read;
    ``second`` is where the window starts)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # ts_ns counts from each broker's recorder's start: compare times within a broker
    adds = trace.where(F.col("kind") == "add").select(
        "broker", "topic", "ledger", "entry", F.col("ts_ns").alias("added_ns")
    )
    if reads is None:
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
    )
    width_ns = window * 1_000_000_000
    working_set = (
        reads.withColumn(
            "second", (F.floor(F.col("ts_ns") / F.lit(width_ns)) * F.lit(window)).cast("long")
        )
        .dropDuplicates(["second", "topic", "ledger", "entry"])
        .groupBy("second")
        .agg(F.count("*").alias("entries"), F.sum("size").alias("bytes"))
        .withColumn("window_seconds", F.lit(window).cast("long"))
    )
    return {"patterns": by_subscription, "reuse": reuse, "working_set": working_set}


# ------------------------------------------------------------------ writing DataFrames


@dataclasses.dataclass(frozen=True)
class _PartWriter:
    """``mapInArrow`` function: the partition as one Parquet part under ``uri``; yields
    its row count. The part is named by the first row's ``ordered_by`` values (so the
    parts of a sorted DataFrame are in name order), or by the partition's index; either
    way a retried task writes the same name again."""

    uri: str
    ordered_by: tuple[str, ...] = ()

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        nonempty = (batch for batch in batches if batch.num_rows)
        first = next(nonempty, None)
        rows = 0
        if first is not None:
            if self.ordered_by:
                values = [first.column(name)[0].as_py() for name in self.ordered_by]
                if any(not isinstance(v, int) or v < 0 for v in values):
                    raise ValueError(f"parts are named by non-negative integers, not {values}")
                name = "part-" + "-".join(f"{value:020d}" for value in values) + ".parquet"
            else:
                from pyspark import TaskContext

                context = TaskContext.get()
                name = f"part-{context.partitionId() if context else 0:05d}.parquet"
            rows = trace_io.write_part(self.uri, name, itertools.chain([first], nonempty))
        yield pa.RecordBatch.from_pydict({"rows": pa.array([rows], pa.int64())})


def write_frame(frame: DataFrame, uri: str, ordered_by: Sequence[str] = ()) -> int:
    """Write ``frame`` as Parquet parts under ``uri`` (emptied first), each task its
    partition; returns the rows written. With ``ordered_by``, ``frame`` must be sorted
    by those (non-negative integer) columns: the parts in name order are then its rows
    in order."""
    trace_io.clear_dir(uri)
    counts = frame.mapInArrow(_PartWriter(uri, tuple(ordered_by)), "rows long").collect()
    return sum(int(row["rows"]) for row in counts)


def write_small_frame(frame: DataFrame, uri: str) -> pa.Table:
    """``frame``, small (a statistic aggregated to a size a report shows whole), brought
    to the driver as Arrow in one Spark job and written there under ``uri`` (emptied
    first) as :func:`write_frame` would have: its partitions' rows in order, nothing
    for none. Returns it, for the report: computed once for both."""
    table = frame.toArrow()
    if table.num_rows:
        trace_io.write_table(uri, table)
    else:
        trace_io.clear_dir(uri)
    return table


@contextlib.contextmanager
def described(spark: SparkSession, text: str) -> Iterator[None]:
    """The Spark jobs the block starts described as ``text`` (in the UI, the event log
    and the history server), on a classic session; Connect has no SparkContext to tell,
    and its jobs are left as they are."""
    try:
        context = spark.sparkContext
    except Exception:  # a Connect session has no SparkContext: it raises
        yield
        return
    before = context.getLocalProperty("spark.job.description")
    context.setJobDescription(f"brokerlab analyze: {text}")
    try:
        yield
    finally:
        # None removes the property (the JVM takes null)
        context.setJobDescription(before)  # type: ignore[arg-type]


# ------------------------------------------------------------------ one task per cell


def _results(spark: SparkSession, cells: int, task: Any) -> list[dict[str, Any]]:
    """``task`` run once per index in ``range(cells)``, each index its own Spark task
    (a cell, or a group of cells); the JSON rows of them all."""
    if cells == 0:
        return []
    frame = spark.range(cells, numPartitions=cells).mapInArrow(task, _RESULT_DDL)
    return [json.loads(row["result"]) for row in frame.collect()]


def _result_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"result": [json.dumps(row) for row in rows]})


@dataclasses.dataclass(frozen=True)
class _SweepTask:
    trace_uri: str
    groups: tuple[tuple[ReplaySpec, ...], ...]
    sample_rate: float

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                results = replay_uri(
                    self.trace_uri, self.groups[index], self.sample_rate, raise_rate=False
                )
                yield _result_batch([result.as_row() for result in results])


def sweep(
    spark: SparkSession,
    trace_uri: str,
    specs: Sequence[ReplaySpec],
    sample_rate: float = 1.0,
    cells_per_task: int | None = None,
) -> list[dict[str, Any]]:
    """Every spec replayed over the trace, ``cells_per_task`` specs per Spark task (one
    pass over the trace each; None: as many tasks as the session runs at once, so that a
    task decodes the trace once for several cells rather than cores idling); returns one
    result row per spec. Consecutive specs (one design's sizes) share a task.
    ``sample_rate`` is used as given: the caller raises it (``replay.sample_rate_for``)
    once for all cells, so that every cell is sampled alike."""
    groups = task_groups(specs, cells_per_task, parallelism(spark))
    return _results(spark, len(groups), _SweepTask(trace_uri, groups, sample_rate))


def task_groups(
    specs: Sequence[ReplaySpec], cells_per_task: int | None, parallelism: int
) -> tuple[tuple[ReplaySpec, ...], ...]:
    """The specs cut into the sweep's tasks, consecutive specs together:
    ``cells_per_task`` each, or (None) as evenly as ``parallelism`` tasks allow (one
    each when the session's parallelism is unknown, 0)."""
    if cells_per_task is None:
        cells_per_task = -(-len(specs) // parallelism) if parallelism > 0 else 1
    size = max(1, cells_per_task)
    return tuple(tuple(specs[i : i + size]) for i in range(0, len(specs), size))


def parallelism(spark: SparkSession) -> int:
    """Tasks the session runs at once: the classic session's default parallelism, or
    Connect's ``spark.default.parallelism`` setting; 0 when the session does not say."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # a Connect session has no SparkContext: it raises
        pass
    try:
        return int(spark.conf.get("spark.default.parallelism", "0") or 0)
    except Exception:  # not set on the server, or not a number
        return 0


def next_reads(trace: DataFrame, out_uri: str, reads: DataFrame | None = None) -> str:
    """Write (broker, seq, kind, key, size, next_read) of adds, reads and restarts,
    ordered by (broker, seq), where next_read is the seq of the entry's next read by the
    same broker: the input of the bound and the references, which give each broker a
    cache of its own, emptied at the broker's restarts. The parts (``part-*``) in name
    order are the rows in order."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    columns = ["broker", "seq", "kind", "topic", "ledger", "entry", "size"]
    adds = trace.where(F.col("kind") == "add").select(*columns)
    if reads is None:
        reads = reads_with_sizes(trace)
    accesses = adds.unionByName(reads.select(*columns)).select(
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
    write_frame(ordered, out_uri, ordered_by=("broker", "seq"))
    return out_uri


#: the bound's cells' name among the references' policies (``_CacheTask``)
BOUND = "belady"


@dataclasses.dataclass(frozen=True)
class _CacheTask:
    """``mapInArrow`` function: the cells (policy, size) of the task whose index comes
    in, in one pass over the ``next_reads`` parts: each batch of rows goes to one run of
    each policy (:data:`BOUND` or a libcachesim policy), which has a cache per size."""

    next_reads_uri: str
    groups: tuple[tuple[tuple[str, int], ...], ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                sizes: dict[str, list[int]] = {}
                for policy, size in self.groups[index]:
                    sizes.setdefault(policy, []).append(size)
                runs = [
                    BoundRun(mine) if policy == BOUND else ReferenceRun(policy, mine)
                    for policy, mine in sizes.items()
                ]
                for part in trace_io.iter_batches(self.next_reads_uri, "part-"):
                    rows = part.to_pylist()
                    for run in runs:
                        run.feed(rows)
                yield _result_batch([result.as_row() for run in runs for result in run.results()])


def bound_and_references(
    spark: SparkSession,
    next_reads_uri: str,
    sizes: Sequence[int],
    policies: Sequence[str] = (),
    references_on_driver: bool = False,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The bound at every size, and libcachesim's ``policies`` at every size, on the
    ordered accesses of ``next_reads``: one Spark job whose cells (policy, size) are
    dealt round-robin to as many tasks as the session runs at once (one cell a task when
    it runs more), so that each task has a share of every policy's work and reads the
    accesses once for all its cells. Returns the bound's rows and the references', each
    in the cells' order (policy, then size).

    A task holds the caches of all its cells at once. The cells stay on the executors
    whatever the trace's size: they are CPU work (libcachesim's calls, the bound's
    heap), which the tasks share among the cores; on the driver, one core would do it
    all, and a small trace would save only the job's own cost (a second at most).

    ``references_on_driver``: the executors' Python lacks libcachesim (compiled, it
    cannot be shipped), so the references' cells run on the driver, in a thread, one
    pass over the accesses for them all, while the executors run the bound's."""
    bound_cells = [(BOUND, size) for size in sizes]
    reference_cells = [(policy, size) for policy in policies for size in sizes]
    cells = bound_cells + reference_cells
    remote = bound_cells if references_on_driver else cells
    local = reference_cells if references_on_driver else []
    count = min(len(remote), parallelism(spark) or len(remote))
    groups = tuple(tuple(remote[start::count]) for start in range(count))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        here = pool.submit(_run_here, _CacheTask(next_reads_uri, (tuple(local),)), bool(local))
        rows = _results(spark, len(groups), _CacheTask(next_reads_uri, groups))
        rows += here.result()
    # in the cells' order: the policies', each one's sizes in the order given
    position = {cell: index for index, cell in enumerate(cells)}
    rows.sort(key=lambda row: position[row["design"], row["size_bytes"]])
    bound_rows = [row for row in rows if row["design"] == BOUND]
    return bound_rows, [row for row in rows if row["design"] != BOUND]


def _run_here(task: _CacheTask, run: bool) -> list[dict[str, Any]]:
    """``task``'s first group run in this process (the driver), as a Spark task runs it."""
    if not run:
        return []
    index = pa.RecordBatch.from_pydict({"id": pa.array([0], pa.int64())})
    return [
        json.loads(value) for batch in task(iter([index])) for value in batch.column(0).to_pylist()
    ]
