"""``brokerlab analyze`` on a real standalone cluster: a master and one worker started
from the pyspark package, the worker's executors on a Python without brokerlab, and
the trace and output given as paths relative to the driver's working directory (an
executor runs in a working directory of its own)."""

from __future__ import annotations

import pathlib
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.pipeline.conftest import analyze_cli, tables
from tests.pipeline.servers import plain_python, start_master, start_worker

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, pathlib.Path]]:
    """The master's URL and the executors' Python (one without brokerlab)."""
    directory = tmp_path_factory.mktemp("standalone")
    python = plain_python(directory / "plain")
    master, url = start_master(directory / "master")
    try:
        worker = start_worker(directory / "worker", url, python)
        try:
            yield url, python
        finally:
            worker.stop()
    finally:
        master.stop()


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
