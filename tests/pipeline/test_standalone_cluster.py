"""``brokerlab analyze`` on a real standalone cluster: a master and one worker started
from the pyspark package, the executors on a Python with only what PySpark's Arrow
UDFs need (pyarrow, pandas, numpy: no brokerlab, no sortedcontainers, no libcachesim,
no pyspark but Spark's own zip), and the trace and output given as paths relative to
the driver's working directory (an executor runs in a working directory of its own).
The cluster is the test process's (``conftest.cluster``), shared with the sweep's test,
whose driver names another Python for its executors."""

from __future__ import annotations

import pathlib
import shutil
from typing import Any

import pytest

from pipeline import reference
from tests.pipeline.conftest import analyze_cli, tables
from tests.pipeline.servers import archive_refusals

pytestmark = pytest.mark.slow


def test_relative_paths_on_a_cluster_whose_python_has_only_what_pyspark_needs(
    cluster: tuple[str, pathlib.Path],
    minimal_python: pathlib.Path,
    recorded: tuple[pathlib.Path, dict[str, Any]],
    reference_tables: dict[str, list[tuple[Any, ...]]],
    tmp_path: pathlib.Path,
) -> None:
    url, _ = cluster
    trace, _ = recorded
    shutil.copytree(trace, tmp_path / "run1" / "trace")
    # the driver's PYSPARK_PYTHON is what its executors run
    result = analyze_cli(
        "run1/trace", "--out", "run1/analysis", "--master", url,
        cwd=tmp_path, env={"PYSPARK_PYTHON": str(minimal_python)},
    )  # fmt: skip
    out = tmp_path / "run1" / "analysis"
    assert f"report: {out.as_uri()}/report.html" in result.stdout
    # the references as in one process, run where libcachesim is: the driver
    assert tables(out.as_uri()) == reference_tables
    if reference.available():
        assert reference_tables["references"]
        assert "references (libcachesim) ran on the driver" in result.stdout
    assert "Belady" in (out / "report.html").read_text()
    # the master, the worker and the executor mapped the class archive where they had it
    assert not archive_refusals()
