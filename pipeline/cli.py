"""``brokerlab analyze``: the broker's CLI hands the subcommand here."""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from typing import Any

from broker.cache import DESIGNS

_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}  # fmt: skip
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """``64MB``, ``512KiB``, ``1048576``: bytes (binary units)."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 64MB, 512KiB, 1048576)")
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a size must be positive: {text!r}")
    return value


def _sizes(text: str) -> list[int]:
    return [parse_size(part) for part in text.split(",") if part.strip()]


def _designs(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in DESIGNS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown design(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(DESIGNS)}"
        )
    return names


def _sample_rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"a sample rate is in (0, 1]: {text!r}")
    return value


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a positive whole number: {text!r}")
    return int(text)


def add_command(commands: Any) -> None:
    analyze = commands.add_parser(
        "analyze",
        help="replay a recorded trace through every design at every size on Spark",
        description="Trace statistics, every design replayed at every cache size, the "
        "optimal bound, Parquet tables and report.html (docs/trace-format.md).",
    )
    analyze.add_argument("trace", metavar="TRACE_DIR", help="a trace directory or URI")
    analyze.add_argument("--out", required=True, metavar="DIR", help="output directory or URI")
    where = analyze.add_mutually_exclusive_group()
    where.add_argument(
        "--master",
        help="Spark master: local[N], spark://HOST:PORT, yarn, ... (default: SPARK_REMOTE "
        "if set, else local[*]); executors need no brokerlab, its code is shipped",
    )
    where.add_argument(
        "--remote",
        metavar="sc://HOST:PORT",
        help="run through Spark Connect (default: the SPARK_REMOTE variable, if set)",
    )
    analyze.add_argument(
        "--sizes",
        type=_sizes,
        help="comma-separated cache sizes (e.g. 1MB,8MB,64MB); default: 8 sizes "
        "log-spaced from 1%% to 100%% of the working set",
    )
    analyze.add_argument(
        "--implementations",
        type=_designs,
        default=tuple(DESIGNS),
        help=f"comma-separated designs (default {','.join(DESIGNS)})",
    )
    analyze.add_argument(
        "--sample-rate",
        type=_sample_rate,
        default=1.0,
        help="share of the entries to replay, in (0, 1] (default 1: all); below 1 a "
        "miniature simulation: caches scaled by the rate, counts estimated",
    )
    analyze.add_argument(
        "--cells-per-task",
        type=_positive,
        default=None,
        help="(design, size) cells one Spark task replays in one pass over the trace "
        "(default: as many tasks as the session runs at once; 1: the most parallelism)",
    )
    analyze.set_defaults(analyze=True)


def run(args: argparse.Namespace) -> int:
    from pipeline.analyze import AnalyzeOptions, TraceFormatError, analyze, trace_settings
    from pipeline.spark import SparkMissing, spark_session
    from pipeline.trace_io import join_uri, parquet_files, read_json, resolve_uri

    try:
        # resolved here, on the driver: executors have working directories of their own
        trace, out = resolve_uri(args.trace), resolve_uri(args.out)
        files = parquet_files(trace, "trace-")
        meta = read_json(trace, "trace-meta.json")
    except (FileNotFoundError, OSError, ValueError) as error:
        print(f"brokerlab analyze: cannot read {args.trace}: {error}", file=sys.stderr)
        return 2
    if not files:
        print(f"brokerlab analyze: no trace-*.parquet files in {args.trace}", file=sys.stderr)
        return 2
    try:
        trace_settings(meta, args.trace)
    except TraceFormatError as error:
        print(f"brokerlab analyze: {error}", file=sys.stderr)
        return 2
    try:
        spark = spark_session(args.master, args.remote)
    except SparkMissing as error:
        print(f"brokerlab analyze: {error}", file=sys.stderr)
        return 2
    started = time.monotonic()
    options = AnalyzeOptions(
        trace,
        out,
        args.master,
        args.sizes,
        args.implementations,
        sample_rate=args.sample_rate,
        cells_per_task=args.cells_per_task,
    )
    try:
        summary = analyze(spark, options)
    finally:
        spark.stop()
    print(f"{summary['events']:,} events, working set {summary['workingSetBytes']:,} bytes")
    for item in summary["ranking"]:
        print(f"  {item['design']:<10} mean hit ratio {item['meanHitRatio']:.1%}")
    print(f"sweep {summary['sweepSeconds']:.1f} s, total {time.monotonic() - started:.1f} s")
    if summary.get("referencesRanOn"):  # where libcachesim was: driver or executors
        print(f"references (libcachesim) ran on the {summary['referencesRanOn']}")
    print(f"report: {join_uri(out, 'report.html')}")
    return 0
