"""``brokerlab analyze TRACE_DIR --out DIR``: statistics of a trace, every design
replayed at every size, the optimal bound, Parquet tables and ``report.html``.

Outputs (under ``--out``, any URI Spark and pyarrow can write):

- ``sweep/``: one row per (design, size): hits, misses, bytes, ratios, evictions
  (``live`` marks the replay of the design and size the broker ran);
- ``bound/``: the bound per size;
- ``references/``: libcachesim's LRU, S3-FIFO, ARC and W-TinyLFU per size, when the
  ``reference`` extra is installed;
- ``patterns/``, ``reuse/``, ``working_set/``: the trace statistics;
- ``report.html`` (local output only): miss-ratio curves, the ranking, the tables.

A trace of several brokers (``trace-b0-...``, ``trace-b1-...``) is replayed as several
caches, each broker's of the size at hand: every row of ``sweep/``, ``bound/`` and
``references/`` is the brokers' counts summed.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import TYPE_CHECKING, Any

from broker.trace.recorder import FORMAT
from pipeline import jobs, reference
from pipeline.replay import DESIGNS
from pipeline.trace_io import read_json, trace_brokers

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclasses.dataclass
class AnalyzeOptions:
    trace_uri: str
    out_uri: str
    master: str = "local[*]"
    sizes: list[int] | None = None
    designs: tuple[str, ...] = tuple(DESIGNS)


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
    started = time.monotonic()
    trace = jobs.load_trace(spark, options.trace_uri)
    meta = read_json(options.trace_uri, "trace-meta.json")
    settings = trace_settings(meta, options.trace_uri)
    working_set = jobs.working_set_bytes(trace)
    sizes = sorted(set(options.sizes or jobs.default_sizes(working_set)))
    cells = [
        jobs.Cell(options.trace_uri, design, size, settings, live=False)
        for design in options.designs
        for size in sizes
    ]
    live_design = meta.get("implementation")
    live_size = settings.get("max_size_bytes")
    if live_design in DESIGNS and live_size:
        cells.append(jobs.Cell(options.trace_uri, live_design, live_size, settings, live=True))
    sweep_started = time.monotonic()
    rows = jobs.sweep(spark, cells)
    sweep_seconds = time.monotonic() - sweep_started
    out = options.out_uri.rstrip("/")
    next_reads = jobs.next_reads(trace, f"{out}/next_reads")
    bound_rows = jobs.bound(spark, next_reads, sizes)
    reference_rows: list[dict[str, Any]] = []
    if reference.available():
        reference_rows = jobs.references(spark, next_reads, list(reference.POLICIES), sizes)
        spark.createDataFrame(reference_rows).write.mode("overwrite").parquet(f"{out}/references")
    spark.createDataFrame(rows).write.mode("overwrite").parquet(f"{out}/sweep")
    spark.createDataFrame(bound_rows).write.mode("overwrite").parquet(f"{out}/bound")
    stats = jobs.trace_statistics(trace)
    collected: dict[str, list[dict[str, Any]]] = {}
    for name, frame in stats.items():
        frame.write.mode("overwrite").parquet(f"{out}/{name}")
        # the statistics are small aggregates (per subscription, per bucket, per second)
        collected[name] = [row.asDict() for row in frame.limit(10_000).collect()]
    summary = {
        "trace": options.trace_uri,
        "events": trace.count(),
        "brokers": len(trace_brokers(options.trace_uri)),
        # the largest broker's: the sizes are each broker's cache
        "workingSetBytes": working_set,
        "sizes": sizes,
        "live": {"design": live_design, "sizeBytes": live_size},
        "sweep": sorted(rows, key=lambda r: (r["design"], r["size_bytes"], r["live"])),
        "bound": sorted(bound_rows, key=lambda r: r["size_bytes"]),
        "references": sorted(reference_rows, key=lambda r: (r["design"], r["size_bytes"])),
        "statistics": collected,
        "ranking": ranking(rows),
        "sweepSeconds": round(sweep_seconds, 3),
        "seconds": round(time.monotonic() - started, 3),
    }
    if "://" not in out or out.startswith("file://"):
        from pipeline.report import write_report

        write_report(summary, pathlib.Path(out.removeprefix("file://")) / "report.html")
    return summary


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
