"""``brokerlab analyze --remote sc://...``: the whole analysis through a real Spark
Connect server started from the pyspark package, whose Python workers lack brokerlab
(its code goes to the server as an artifact). The server is the test process's
(``conftest.connect_url``), shared with the sweep's test."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from tests.pipeline.conftest import analyze_cli, tables

pytestmark = pytest.mark.slow


def test_the_analysis_runs_through_spark_connect(
    connect_url: str,
    recorded: tuple[pathlib.Path, dict[str, Any]],
    reference_tables: dict[str, list[tuple[Any, ...]]],
    tmp_path: pathlib.Path,
) -> None:
    trace, _ = recorded
    out = tmp_path / "analysis"
    done = analyze_cli(str(trace), "--out", str(out), "--remote", connect_url, cwd=tmp_path)
    assert tables(out.as_uri()) == reference_tables
    # Connect has no status tracker on the client: the lines as each phase starts and ends
    lines = done.stderr.splitlines()
    for phase in ("sweep: 5/5 replays (design, size)", "bound: 2/2 sizes", "report:"):
        assert any(line.startswith(f"analyze: {phase} done in ") for line in lines), lines
    assert "Belady" in (out / "report.html").read_text()
