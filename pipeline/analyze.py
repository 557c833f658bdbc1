"""``brokerlab analyze TRACE_DIR --out DIR``: statistics of a trace, every design
replayed at every size, the optimal bound, Parquet tables and ``report.html``.

Both locations are resolved to absolute URIs on the driver (``trace_io.resolve_uri``:
a relative path is the driver's, whatever the executors' working directory) and may
be on any file system ``pipeline.trace_io`` reaches (local, ``file://``, ``hdfs://``,
``s3://``/``s3a://``...). Outputs, all under ``--out``:

- ``sweep/``: one row per (design, size): hits, misses, bytes, ratios, evictions
  (``live`` marks the replay of the design and size the broker ran; ``sample_rate`` < 1
  marks estimates from a miniature simulation);
- ``bound/``: the bound per size;
- ``references/``: libcachesim's LRU, S3-FIFO, ARC and W-TinyLFU per size, when the
  ``reference`` extra is installed;
- ``patterns/``, ``reuse/``, ``working_set/``: the trace statistics (see
  ``pipeline.jobs``): patterns written by the executors, reuse and the working set
  (aggregated to a few hundred rows at most) by the driver;
- ``next_reads/``: the accesses with their next reads (the bound's input);
- ``report.html``: miss-ratio curves, the ranking, the tables.

A trace of several brokers (``trace-b0-...``, ``trace-b1-...``) is replayed as several
caches, each broker's of the size at hand: every row of ``sweep/``, ``bound/`` and
``references/`` is the brokers' counts summed.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from broker.cache.config import CacheConfig
from broker.trace.recorder import FORMAT, META_FILE
from pipeline import jobs, reference
from pipeline.progress import Progress
from pipeline.replay import DESIGNS, ReplaySpec, sample_rate_for
from pipeline.spark import ship_code
from pipeline.trace_io import join_uri, read_json, resolve_uri, trace_brokers, write_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: the report lists this many (topic, subscription, pattern) rows, the most read first
REPORT_PATTERN_ROWS = 200


@dataclasses.dataclass
class AnalyzeOptions:
    trace_uri: str
    out_uri: str
    #: kept for callers that pass it; the session is made by the caller
    master: str | None = None
    sizes: list[int] | None = None
    designs: tuple[str, ...] = tuple(DESIGNS)
    #: 1: replay every entry; < 1: miniature simulation of this share of the entries
    sample_rate: float = 1.0
    #: (design, size) cells replayed by one task, in one pass over the trace (None: as
    #: many tasks as the session runs at once)
    cells_per_task: int | None = None
    #: no progress lines on stderr
    quiet: bool = False


class TraceFormatError(ValueError):
    """The trace was recorded in a format this brokerlab cannot replay."""


def trace_settings(meta: dict[str, Any], uri: str) -> dict[str, Any]:
    """The live cache settings a trace recorded; TraceFormatError for another format."""
    found = meta.get("format")
    if found != FORMAT:
        raise TraceFormatError(
            f"{uri}: trace format {found or 1}, this brokerlab replays format {FORMAT} "
            "(the cache event stream); record the trace again with this brokerlab"
        )
    return dict(meta["settings"])


def analyze(spark: SparkSession, options: AnalyzeOptions) -> dict[str, Any]:
    """Run every job; returns a summary (also the report's content)."""
    if not 0 < options.sample_rate <= 1:
        raise ValueError(f"the sample rate is in (0, 1], not {options.sample_rate}")
    started = time.monotonic()
    trace_uri = resolve_uri(options.trace_uri)
    out = resolve_uri(options.out_uri)
    progress = Progress(spark, quiet=options.quiet)
    ship_code(spark)
    meta = read_json(trace_uri, META_FILE)
    settings = trace_settings(meta, trace_uri)
    # the rows and the latest time from the files' footers; the DataFrames need only the
    # reads, adds, fills and restarts (under half a trace) and some of their columns
    rows, last_ns = jobs.files_extent(trace_uri)
    known = (rows, last_ns) if last_ns is not None else None
    if known is not None:
        trace = jobs.load_trace(spark, trace_uri, jobs.ANALYZED_KINDS, jobs.ANALYZED_COLUMNS)
    else:  # a file without statistics: the whole trace, counted by Spark
        trace = jobs.load_trace(spark, trace_uri)
    trace = trace.cache()
    # the reads with their entries' sizes: the working set's, next_reads' and every
    # statistic's input, joined once
    reads = jobs.reads_with_sizes(trace).cache()
    try:
        summary = _analyze(
            spark, options, trace, reads, trace_uri, out, meta, settings, progress, known
        )
    finally:
        reads.unpersist()
        trace.unpersist()
    with progress.phase("report"):
        from pipeline.report import write_report

        summary["seconds"] = round(time.monotonic() - started, 3)
        write_report(summary, join_uri(out, "report.html"))
    summary["phaseSeconds"] = {name: round(value, 3) for name, value in progress.seconds.items()}
    summary["seconds"] = round(time.monotonic() - started, 3)
    return summary


def sweep_cells(
    options: AnalyzeOptions, working_set: int, meta: dict[str, Any], settings: dict[str, Any]
) -> tuple[list[int], list[ReplaySpec]]:
    """The sweep's sizes (those asked, else the defaults for ``working_set``) and its
    (design, size) cells, with the live design at the live size last when the trace
    names them: the cells of the Spark analysis and of ``pipeline.single`` alike."""
    sizes = sorted(set(options.sizes or jobs.default_sizes(working_set)))
    config = CacheConfig(**settings)
    specs = [ReplaySpec(design, size, config) for design in options.designs for size in sizes]
    live_design = meta.get("implementation")
    live_size = settings.get("max_size_bytes")
    if live_design in DESIGNS and live_size:
        specs.append(ReplaySpec(live_design, live_size, config, live=True))
    return sizes, specs


def _analyze(
    spark: SparkSession,
    options: AnalyzeOptions,
    trace: DataFrame,
    reads: DataFrame,
    trace_uri: str,
    out: str,
    meta: dict[str, Any],
    settings: dict[str, Any],
    progress: Progress,
    known: tuple[int, int] | None = None,
) -> dict[str, Any]:
    with progress.phase("trace extent and working set"):
        extent = jobs.trace_extent(trace, reads, known)
    events, last_ns, working_set = extent.events, extent.last_ns, extent.working_set_bytes
    sizes, specs = sweep_cells(options, working_set, meta, settings)
    live_design = meta.get("implementation")
    live_size = settings.get("max_size_bytes")
    # one rate for every cell: the one asked, raised where the smallest miniature cache
    # or the sample would be too small (pipeline/columns.py)
    sample_rate = sample_rate_for(trace_uri, specs, options.sample_rate)
    sweep_started = time.monotonic()
    with progress.phase("sweep", len(specs), "replays (design, size)"):
        rows = jobs.sweep(spark, trace_uri, specs, sample_rate, options.cells_per_task)
    sweep_seconds = time.monotonic() - sweep_started
    with progress.phase("next_reads: accesses with their next reads"):
        next_reads = jobs.next_reads(trace, join_uri(out, "next_reads"), reads)
    policies = list(reference.POLICIES) if reference.available() else []
    # the references on the driver (libcachesim's C loop, see jobs.references) while
    # the executors run the bound
    reference_rows: list[dict[str, Any]] = []
    reference_seconds = 0.0
    with concurrent.futures.ThreadPoolExecutor(1, "references") as pool:
        pending = pool.submit(_timed, jobs.references, next_reads, sizes, policies) if policies \
            else None  # fmt: skip
        with progress.phase("bound", len(sizes), "sizes"):
            bound_rows = jobs.bound(spark, next_reads, sizes)
        if policies:
            cells = len(policies) * len(sizes)
            with progress.phase("references (libcachesim, driver)", cells, "cells"):
                assert pending is not None
                reference_rows, reference_seconds = pending.result()
    if policies:
        write_table(join_uri(out, "references"), result_table(reference_rows))
    write_table(join_uri(out, "sweep"), result_table(rows))
    write_table(join_uri(out, "bound"), result_table(bound_rows))
    window = jobs.window_seconds(last_ns)
    statistics = jobs.trace_statistics(trace, window, reads)
    # the small statistics, computed once: written from the driver, and the report's
    with progress.phase("statistics: reuse and working set"):
        reuse, series = jobs.write_small_frames(
            [statistics["reuse"], statistics["working_set"]],
            [join_uri(out, "reuse"), join_uri(out, "working_set")],
        )
    # patterns (a row per topic, subscription and pattern: any number) written by the
    # executors, computed once for the file and the report's summaries
    patterns = statistics["patterns"].cache()
    try:
        with progress.phase("statistics: read patterns"):
            jobs.write_frame(patterns, join_uri(out, "patterns"))
            collected = {
                # the most read (topic, subscription, pattern) rows; all are in patterns/
                "patterns": _rows(most_read(patterns).limit(REPORT_PATTERN_ROWS)),
                "patterns_by_kind": sorted(
                    _rows(by_pattern(patterns)), key=lambda row: row["pattern"]
                ),
                # log2 buckets and at most jobs.WORKING_SET_POINTS windows: small
                "reuse": _ordered(reuse, "events_bucket"),
                "working_set": _ordered(series, "second"),
            }
    finally:
        patterns.unpersist()
    return {
        "trace": trace_uri,
        "out": out,
        "events": events,
        "brokers": len(trace_brokers(trace_uri)),
        # the largest broker's: the sizes are each broker's cache
        "workingSetBytes": working_set,
        "workingSetWindowSeconds": window,
        "sizes": sizes,
        "sampleRate": sample_rate,
        "sampleRateAsked": options.sample_rate,
        "live": {"design": live_design, "sizeBytes": live_size},
        "sweep": sorted(rows, key=lambda r: (r["design"], r["size_bytes"], r["live"])),
        "bound": sorted(bound_rows, key=lambda r: r["size_bytes"]),
        "references": sorted(reference_rows, key=lambda r: (r["design"], r["size_bytes"])),
        "statistics": collected,
        "patternRows": sum(row["rows"] for row in collected["patterns_by_kind"]),
        "ranking": ranking(rows),
        "sweepSeconds": round(sweep_seconds, 3),
        # where libcachesim ran: always the driver (jobs.references)
        "referencesRanOn": "driver" if policies else None,
        "referencesSeconds": round(reference_seconds, 3),
    }


def _timed(run: Any, *args: Any) -> tuple[Any, float]:
    started = time.monotonic()
    return run(*args), time.monotonic() - started


def _rows(frame: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict() for row in frame.collect()]


def _ordered(table: pa.Table, column: str) -> list[dict[str, Any]]:
    """``table``'s rows by ``column``, nulls first (as Spark's ascending ``orderBy``)."""
    return sorted(table.to_pylist(), key=lambda row: (row[column] is not None, row[column]))


def by_pattern(patterns: DataFrame) -> DataFrame:
    """Reads, hits and rows per pattern (three rows at most, in no order)."""
    from pyspark.sql import functions as F

    return patterns.groupBy("pattern").agg(
        F.sum("reads").alias("reads"), F.sum("hits").alias("hits"), F.count("*").alias("rows")
    )


def most_read(patterns: DataFrame) -> DataFrame:
    """The (topic, subscription, pattern) rows, the most read first."""
    from pyspark.sql import functions as F

    return patterns.orderBy(F.col("reads").desc(), "topic", "subscription", "pattern")


def result_table(rows: Sequence[dict[str, Any]]) -> pa.Table:
    """Result rows as a table: every column any row has (designs count evictions by
    different reasons; a reason a design never counted is 0 for it)."""
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    default = {name: 0 if name.startswith("evicted_") else None for name in columns}
    return pa.Table.from_pylist([{**default, **row} for row in rows])


def ranking(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Designs by mean hit ratio over the sizes of the sweep (the area under the
    miss-ratio curve, read the other way), best first."""
    by_design: dict[str, list[float]] = {}
    for row in rows:
        if not row["live"]:
            by_design.setdefault(row["design"], []).append(row["hit_ratio"])
    ranked = [
        {"design": design, "meanHitRatio": sum(values) / len(values)}
        for design, values in by_design.items()
    ]
    return sorted(ranked, key=lambda item: item["meanHitRatio"], reverse=True)
