"""``brokerlab bench analyze --quick`` on the tests' Spark session: a short catchup trace
recorded on virtual time (0.5 s rather than ``--quick``'s 2: some 20,000 events, a
quarter of the work), analyzed on Spark and in one process, the same tables from both,
every phase timed on both sides. No assertion on the ratio (timing)."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import pytest

from broker.bench.analyze import TABLES, measure, print_result

pytestmark = pytest.mark.slow


@pytest.mark.usefixtures("no_charts")  # the report phase is timed all the same
def test_the_bench_times_both_analyses_of_one_catchup_trace(spark: Any) -> None:
    result = measure(quick=True, spark=spark, seconds=0.5)
    assert result["benchmark"] == "analyze" and result["recorded"] is True
    assert result["events"] > 10_000
    # the two wrote the same rows in every table: the bench compares like with like
    assert result["sameTables"] == dict.fromkeys(TABLES, True)
    assert result["referencesRanOn"] == "driver"
    phases = {
        "trace extent and working set",
        "sweep",
        "next_reads: accesses with their next reads",
        "bound",
        "references (libcachesim, driver)",
        "statistics",
        "report",
    }
    assert set(result["single"]["phases"]) == phases
    assert set(result["spark"]["phases"]) == phases
    assert result["ratio"] == round(result["spark"]["seconds"] / result["single"]["seconds"], 3)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        print_result(result)
    lines = out.getvalue().splitlines()
    assert f"analyze / single-process: {result['ratio']:.2f}" in lines
    assert "same tables: yes" in lines
