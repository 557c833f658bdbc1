"""``brokerlab trace``: commands on a recorded trace (``brokerlab trace export``)."""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

_CSV_OPTIONS = (
    '-t "time-col=1, obj-id-col=2, obj-size-col=3, delimiter=,, has-header=true, '
    'obj-id-is-num=true"'
)


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def _broker(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"a broker index (0, 1, ...): {text!r}")
    return int(text)


def add_command(commands: Any) -> None:
    trace = commands.add_parser(
        "trace",
        help="work with a recorded trace (export it for libCacheSim)",
        description="Commands on a trace directory recorded by a broker (docs/trace-format.md).",
    )
    actions = trace.add_subparsers(dest="trace_command", required=True, metavar="COMMAND")
    export = actions.add_parser(
        "export",
        help="write a trace's reads as a libCacheSim trace (oracleGeneral or csv)",
        description="Write one broker's reads (one request per entry read, in order; the "
        "entry's size; ids numbered by first read) as a trace libCacheSim's tools read. "
        "Adds and restarts are not requests of the export (docs/pipeline.md). "
        "oracleGeneral: 24-byte records with next access times (Belady needs them), "
        f"cachesim FILE oracleGeneral lru 1mb. csv: cachesim FILE csv lru 1mb {_CSV_OPTIONS}",
    )
    export.add_argument("trace", metavar="TRACE_DIR", help="a trace directory or URI")
    export.add_argument(
        "--format",
        dest="format",
        default="oracleGeneral",
        metavar="oracleGeneral|csv",
        help="oracleGeneral (binary, default) or csv (header; time,obj_id,obj_size,"
        "next_access_vtime,topic,ledger,entry)",
    )
    export.add_argument(
        "--out", required=True, type=pathlib.Path, metavar="FILE", help="the file to write"
    )
    export.add_argument(
        "--broker",
        type=_broker,
        metavar="N",
        help="the broker whose reads to export (needed when the trace has several: each "
        "broker is a cache of its own)",
    )
    export.set_defaults(trace_export=True)


def run(args: argparse.Namespace) -> int:
    from pipeline.export import ExportError, export_trace

    try:
        reads = export_trace(args.trace, args.out, args.format, args.broker)
    except ExportError as error:
        print(f"brokerlab trace export: {error}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as error:
        print(f"brokerlab trace export: {error}", file=sys.stderr)
        return 2
    left_out = []
    if reads.unsized:
        left_out.append(f"{_count(reads.unsized, 'read')} of entries of no known size left out")
    if reads.restarts:
        left_out.append(f"{_count(reads.restarts, 'restart')} not marked (the cache carries on)")
    note = f" ({'; '.join(left_out)})" if left_out else ""
    print(
        f"{len(reads.requests):,} requests, {len(reads.entries):,} objects of broker "
        f"{reads.broker} written to {args.out} ({args.format}){note}"
    )
    if args.format == "csv":
        print(f"libCacheSim: cachesim {args.out} csv lru 1mb {_CSV_OPTIONS}")
    else:
        print(f"libCacheSim: cachesim {args.out} oracleGeneral lru,belady 1mb")
        if "oraclegeneral" not in args.out.name.lower():
            print(
                "note: cachesim runs Belady only on a file whose name contains "
                "'oracleGeneral' (e.g. reads.oracleGeneral.bin)"
            )
    return 0
