"""``brokerlab analyze`` on a real standalone cluster: a master and one worker started
from the pyspark package, the worker's executors on a Python without brokerlab, and
the trace and output given as paths relative to the driver's working directory (an
executor runs in a working directory of its own). The cluster is the test process's
(``conftest.cluster``), shared with the sweep's test."""

from __future__ import annotations

import pathlib
import shutil
from typing import Any

import pytest

from tests.pipeline.conftest import analyze_cli, tables

pytestmark = pytest.mark.slow


def test_relative_paths_on_a_cluster_whose_python_lacks_brokerlab(
    cluster: tuple[str, pathlib.Path],
    recorded: tuple[pathlib.Path, dict[str, Any]],
    local_tables: dict[str, list[tuple[Any, ...]]],
    tmp_path: pathlib.Path,
) -> None:
    url, python = cluster
    trace, _ = recorded
    shutil.copytree(trace, tmp_path / "run1" / "trace")
    result = analyze_cli(
        "run1/trace", "--out", "run1/analysis", "--master", url,
        cwd=tmp_path, env={"PYSPARK_PYTHON": str(python)},
    )  # fmt: skip
    out = tmp_path / "run1" / "analysis"
    assert f"report: {out.as_uri()}/report.html" in result.stdout
    assert tables(out.as_uri()) == local_tables
    assert "Belady" in (out / "report.html").read_text()
