"""``brokerlab analyze``: the broker's CLI hands the subcommand here."""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import Any

from pipeline.replay import DESIGNS

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


def add_command(commands: Any) -> None:
    analyze = commands.add_parser(
        "analyze",
        help="replay a recorded trace through every design at every size on Spark",
        description="Trace statistics, every design replayed at every cache size, the "
        "optimal bound, Parquet tables and report.html (docs/trace-format.md).",
    )
    analyze.add_argument("trace", metavar="TRACE_DIR", help="a trace directory or URI")
    analyze.add_argument("--out", required=True, metavar="DIR", help="output directory or URI")
    analyze.add_argument(
        "--master", default="local[*]", help="Spark master (default local[*]; spark://HOST:PORT)"
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
    analyze.set_defaults(analyze=True)


def run(args: argparse.Namespace) -> int:
    from pipeline.analyze import AnalyzeOptions, TraceFormatError, analyze, trace_settings
    from pipeline.spark import SparkMissing, spark_session
    from pipeline.trace_io import parquet_files, read_json

    try:
        files = parquet_files(args.trace, "trace-")
    except (FileNotFoundError, OSError) as error:
        print(f"brokerlab analyze: cannot read {args.trace}: {error}", file=sys.stderr)
        return 2
    if not files:
        print(f"brokerlab analyze: no trace-*.parquet files in {args.trace}", file=sys.stderr)
        return 2
    try:
        trace_settings(read_json(args.trace, "trace-meta.json"), args.trace)
    except TraceFormatError as error:
        print(f"brokerlab analyze: {error}", file=sys.stderr)
        return 2
    try:
        spark = spark_session(args.master)
    except SparkMissing as error:
        print(f"brokerlab analyze: {error}", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        summary = analyze(
            spark,
            AnalyzeOptions(args.trace, args.out, args.master, args.sizes, args.implementations),
        )
    finally:
        spark.stop()
    print(f"{summary['events']:,} events, working set {summary['workingSetBytes']:,} bytes")
    for item in summary["ranking"]:
        print(f"  {item['design']:<10} mean hit ratio {item['meanHitRatio']:.1%}")
    print(f"sweep {summary['sweepSeconds']:.1f} s, total {time.monotonic() - started:.1f} s")
    print(f"report: {args.out.rstrip('/')}/report.html")
    return 0
