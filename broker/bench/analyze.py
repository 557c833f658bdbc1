"""``brokerlab bench analyze``: ``brokerlab analyze`` on Spark ``local[2]`` against the
same work done in one process without Spark, on one trace of the ``catchup`` preset,
both measured in this run.

- the trace: ``--trace DIR``, or one recorded here on virtual time (``brokerlab loadgen
  --scenario catchup --virtual-time --trace``: the preset's own length, or
  :data:`QUICK_SECONDS` with ``--quick``);
- *single process* (``pipeline.single.analyze_single``): the designs replayed by
  ``pipeline.replay`` (every cell in one pass), ``next_reads`` and the statistics with
  pyarrow and numpy, the bound by ``pipeline.belady``, the libcachesim references one
  after another, the tables and the report written;
- *Spark* (``pipeline.analyze.analyze``, what ``brokerlab analyze --master local[2]``
  runs): the same tables and report, the session started here (its start is timed
  apart: the command pays it too).

It prints each phase's wall time on both sides, whether the two wrote the same tables,
and ``analyze / single-process: X``: the Spark analysis's wall time over the single
process's (the issue's target: at most :data:`TARGET_RATIO`), and the same with the
session's start counted in. Wall times, on a machine others may be using: the load
average at the start and the end is printed with them. ``--quick`` analyzes one design
(the CI test's), the full bench all of them.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any

TARGET_RATIO = 2.0
#: virtual seconds of the trace ``--quick`` records
QUICK_SECONDS = 2
#: the tables both analyses write, compared row for row
TABLES = ("sweep", "bound", "references", "patterns", "reuse", "working_set", "next_reads")


def record_trace(out: pathlib.Path, seconds: float | None) -> pathlib.Path:
    """A ``catchup`` trace recorded on virtual time (``seconds``: None for the preset's
    own length); its directory. RuntimeError with the loadgen's output if it fails."""
    # no charts: the run's directory is the bench's scratch, gone when it ends (drawing
    # them was a third of the recording's CPU)
    command = [
        sys.executable, "-m", "broker.cli", "loadgen", "--scenario", "catchup",
        "--virtual-time", "--trace", "--out", str(out), "--no-progress", "--no-plots",
    ]  # fmt: skip
    if seconds is not None:
        command += ["--duration", str(seconds)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"recording a catchup trace failed ({done.returncode}):\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return out / "trace"


def _rows(uri: str) -> list[tuple[Any, ...]]:
    """A table's rows, sorted, floats to 9 digits (means summed in another order)."""
    from pipeline.trace_io import read_table

    def normal(value: Any) -> Any:
        return round(value, 9) if isinstance(value, float) else value

    rows = read_table(uri).to_pylist()
    return sorted((tuple(sorted((k, normal(v)) for k, v in row.items())) for row in rows), key=repr)


def same_tables(first: str, second: str) -> dict[str, bool]:
    """Per table, whether the two analyses under ``first`` and ``second`` wrote the same
    rows."""
    from pipeline.trace_io import join_uri

    return {name: _rows(join_uri(first, name)) == _rows(join_uri(second, name)) for name in TABLES}


def _statistics(phases: dict[str, float]) -> dict[str, float]:
    """Phases by the bench's names: the statistics' phases summed."""
    merged: dict[str, float] = {}
    for name, seconds in phases.items():
        key = "statistics" if name.startswith("statistics") else name
        merged[key] = round(merged.get(key, 0.0) + seconds, 3)
    return merged


def measure(
    quick: bool = False, trace: str | None = None, spark: Any = None, seconds: float | None = None
) -> dict[str, Any]:
    """Both analyses of one trace (recorded here unless ``trace``); ``spark``: a session
    to use (the tests'; None: ``local[2]`` started, timed and stopped here); ``seconds``:
    the virtual seconds of the trace recorded here (None: :data:`QUICK_SECONDS` with
    ``quick``, else the preset's own length; the tests' is shorter still)."""
    from broker.cache import DESIGNS
    from pipeline.analyze import AnalyzeOptions, analyze
    from pipeline.single import analyze_single
    from pipeline.trace_io import resolve_uri

    load_before = os.getloadavg()
    designs = tuple(DESIGNS)[:1] if quick else tuple(DESIGNS)
    with tempfile.TemporaryDirectory(prefix="brokerlab-bench-analyze-") as scratch:
        work = pathlib.Path(scratch)
        recorded = trace is None
        if trace is None:
            if seconds is None and quick:
                seconds = QUICK_SECONDS
            trace = str(record_trace(work / "catchup", seconds))
        single_out, spark_out = resolve_uri(work / "single"), resolve_uri(work / "spark")
        cpu = time.process_time()
        single = analyze_single(AnalyzeOptions(trace, single_out, designs=designs))
        single_cpu = time.process_time() - cpu
        session_seconds = 0.0
        own = spark is None
        if own:
            from pipeline.spark import spark_session

            started = time.monotonic()
            spark = spark_session("local[2]")
            session_seconds = time.monotonic() - started
        try:
            options = AnalyzeOptions(trace, spark_out, designs=designs, quiet=True)
            on_spark = analyze(spark, options)
        finally:
            if own:
                spark.stop()
        same = same_tables(single_out, spark_out)
    spark_phases = _statistics(on_spark["phaseSeconds"])
    # the references ran beside the bound: their own time, not the wait for them
    references = next(name for name in spark_phases if name.startswith("references"))
    spark_phases[references] = on_spark["referencesSeconds"]
    ratio = on_spark["seconds"] / single["seconds"]
    return {
        "benchmark": "analyze",
        "quick": quick,
        "trace": trace,
        "recorded": recorded,
        "events": single["events"],
        "designs": list(designs),
        "sizes": len(single["sizes"]),
        "cells": len(single["sweep"]),
        "referencesRanOn": on_spark["referencesRanOn"],
        "single": {
            "seconds": single["seconds"],
            "cpuSeconds": round(single_cpu, 3),
            "phases": _statistics(single["phaseSeconds"]),
        },
        "spark": {
            "master": "local[2]",
            "seconds": on_spark["seconds"],
            "sessionSeconds": round(session_seconds, 3),
            "phases": spark_phases,
        },
        "ratio": round(ratio, 3),
        "ratioWithSession": round((on_spark["seconds"] + session_seconds) / single["seconds"], 3),
        "target": TARGET_RATIO,
        "sameTables": same,
        "loadAverage": {"start": round(load_before[0], 2), "end": round(os.getloadavg()[0], 2)},
        "pass": ratio <= TARGET_RATIO and all(same.values()),
    }


def print_result(result: dict[str, Any]) -> None:
    source = "recorded here (catchup, virtual time)" if result["recorded"] else result["trace"]
    print(
        f"brokerlab bench analyze: trace {source}, {result['events']:,} events; "
        f"{len(result['designs'])} design(s) x {result['sizes']} sizes ({result['cells']} "
        f"replays with the live one), the bound, libcachesim's references, statistics, report"
    )
    print(
        "  spark: pipeline.analyze on local[2] (DataFrame statistics and next_reads, the "
        "sweep and the bound in Spark tasks, the references on the "
        f"{result['referencesRanOn'] or '(none)'})"
    )
    print(
        "  single process: pipeline.single (replay_uri in one pass, the bound, the references "
        "one after another, pyarrow statistics)"
    )
    print()
    single, spark = result["single"]["phases"], result["spark"]["phases"]
    names = list(dict.fromkeys([*spark, *single]))
    width = max(len(name) for name in names)
    print(f"{'phase':<{width}} {'spark s':>9} {'single s':>9}")
    print("-" * (width + 20))
    for name in names:
        left = f"{spark[name]:.1f}" if name in spark else "-"
        right = f"{single[name]:.1f}" if name in single else "-"
        print(f"{name:<{width}} {left:>9} {right:>9}")
    totals = result["spark"]["seconds"], result["single"]["seconds"]
    print(f"{'total':<{width}} {totals[0]:>9.1f} {totals[1]:>9.1f}")
    print(f"{'session start':<{width}} {result['spark']['sessionSeconds']:>9.1f} {'-':>9}")
    print()
    different = [name for name, same in result["sameTables"].items() if not same]
    print(f"same tables: {'yes' if not different else 'NO: ' + ', '.join(different)}")
    print(
        f"load average {result['loadAverage']['start']:g} at the start, "
        f"{result['loadAverage']['end']:g} at the end (wall times)"
    )
    print(f"analyze / single-process: {result['ratio']:.2f}")
    print(
        f"  with the session's start: {result['ratioWithSession']:.2f}; "
        f"target <= {result['target']:g}: {'pass' if result['pass'] else 'FAIL'}"
    )


def main(quick: bool = False, as_json: bool = False, trace: str | None = None) -> int:
    result = measure(quick, trace)
    if as_json:
        print(json.dumps(result))
    else:
        print_result(result)
    return 0
