"""One real SparkSession (local[2]) for the pipeline tests that need one, a trace a live
broker recorded, and its analysis on local[2]: what the cluster, Connect and S3 tests
compare their tables with."""

from __future__ import annotations

import asyncio
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from pipeline.analyze import AnalyzeOptions, analyze
from pipeline.cli import parse_size
from pipeline.spark import spark_session
from pipeline.trace_io import read_table
from tests.pipeline.workload import record

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: what the cluster tests analyze (two designs, two sizes: lean, and still a sweep)
SIZES = ("256KiB", "1MiB")
DESIGNS = ("pip430", "legacy")
#: the tables two analyses of one trace must agree on
TABLES = ("sweep", "bound", "references", "patterns", "reuse", "working_set")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = spark_session("local[2]")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict[str, Any]]:
    trace = tmp_path_factory.mktemp("recorded") / "trace"
    live = asyncio.run(record(trace, "pip430"))
    return trace, live


def analyze_cli(
    *arguments: str, cwd: pathlib.Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``brokerlab analyze`` as a user runs it, with the cluster tests' sizes and designs."""
    # a Python started in cwd imports brokerlab as installed, not from the checkout
    result = subprocess.run(
        [sys.executable, "-m", "broker.cli", "analyze", *arguments,
         "--sizes", ",".join(SIZES), "--implementations", ",".join(DESIGNS)],
        capture_output=True, text=True, timeout=900, cwd=cwd,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", **(env or {})},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-5000:]
    return result


def tables(out_uri: str) -> dict[str, list[tuple[Any, ...]]]:
    """The result tables under ``out_uri`` as sorted rows (floats to 9 digits: the
    statistics' means may be summed in another order on another cluster)."""

    def normal(value: Any) -> Any:
        return round(value, 9) if isinstance(value, float) else value

    found = {}
    for name in TABLES:
        rows = read_table(f"{out_uri.rstrip('/')}/{name}").to_pylist()
        found[name] = sorted(
            (tuple(sorted((key, normal(value)) for key, value in row.items())) for row in rows),
            key=repr,
        )
    return found


@pytest.fixture(scope="session")
def local_tables(
    spark: Any,
    recorded: tuple[pathlib.Path, dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, list[tuple[Any, ...]]]:
    """The tables of the analysis on local[2] (the session's) of the recorded trace."""
    trace, _ = recorded
    out = tmp_path_factory.mktemp("local-analysis")
    sizes = [parse_size(size) for size in SIZES]
    analyze(spark, AnalyzeOptions(str(trace), str(out), sizes=sizes, designs=DESIGNS))
    found = tables(str(out))
    assert found["sweep"] and found["bound"] and found["references"]
    return found
