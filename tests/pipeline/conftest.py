"""One real SparkSession (local[2]) for the pipeline tests that need one, a trace a live
broker recorded, and its analysis by ``brokerlab analyze`` on that session: what the
cluster, Connect and S3 tests compare their tables with. The session, the standalone
cluster and the Connect server are this test process's, shared with the sweep's tests
(``tests.pipeline.servers.shared``), started when a test first needs one."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from broker.cli import main as brokerlab
from pipeline.trace_io import read_table
from tests.pipeline.servers import (
    driver_env,
    prestart,
    shared_cluster,
    shared_connect,
    shared_minimal_python,
    shared_session,
)
from tests.pipeline.workload import record

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: what the cluster tests analyze (two designs, two sizes: lean, and still a sweep)
SIZES = ("256KiB", "1MiB")
DESIGNS = ("pip430", "legacy")
#: the tables two analyses of one trace must agree on
TABLES = ("sweep", "bound", "references", "patterns", "reuse", "working_set")


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    prestart(request.config, tmp_path_factory, request.session.items)
    return shared_session(request.config)


@pytest.fixture(scope="session")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, pathlib.Path]:
    """A standalone master's URL and its executors' Python (one without brokerlab)."""
    prestart(request.config, tmp_path_factory, request.session.items)
    return shared_cluster(request.config, tmp_path_factory)


@pytest.fixture(scope="session")
def minimal_python(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> pathlib.Path:
    """A Python with only pyarrow, pandas and numpy (what PySpark's Arrow UDFs need):
    an executor's on a cluster set up for PySpark alone."""
    return shared_minimal_python(request.config, tmp_path_factory)


@pytest.fixture(scope="session")
def connect_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    prestart(request.config, tmp_path_factory, request.session.items)
    return shared_connect(request.config, tmp_path_factory)


def undrawn_charts(patch: pytest.MonkeyPatch) -> None:
    """The report's charts left undrawn (an empty figure each): for analyses whose test
    reads the summary or the page's text, not a chart. Drawing the four is some 1.5 s of
    CPU; test_report.py draws them, and the CLI's analyses (local, cluster, Connect, S3)
    are checked with theirs."""
    import pipeline.report

    def empty(chart: Any) -> str:
        return f'<figure class="chart" id="{chart.name}"></figure>'

    patch.setattr(pipeline.report, "render_chart", empty)


@pytest.fixture
def no_charts(monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`undrawn_charts` for one test."""
    undrawn_charts(monkeypatch)


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
        env={**os.environ, **driver_env(), "SPARK_LOCAL_IP": "127.0.0.1", **(env or {})},
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


@dataclasses.dataclass
class LocalRun:
    """``brokerlab analyze`` run in this process on the session's ``local[2]``."""

    out: pathlib.Path
    stdout: str
    #: the progress lines (pipeline.progress)
    stderr: str
    #: times the command stopped its session (kept running here for the other tests)
    stops: int
    tables: dict[str, list[tuple[Any, ...]]]


@pytest.fixture(scope="session")
def local_run(
    spark: Any,
    recorded: tuple[pathlib.Path, dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
) -> LocalRun:
    """The analysis of the recorded trace by the command, with the cluster tests' sizes
    and designs, on the session's local[2] (``spark_session("local[2]")`` gets it)."""
    trace, _ = recorded
    out = tmp_path_factory.mktemp("local-analysis") / "out"
    stops: list[bool] = []
    with pytest.MonkeyPatch.context() as patch:
        # the command stops its session when done: not this one, which other tests use
        patch.setattr(spark, "stop", lambda: stops.append(True))
        with (
            contextlib.redirect_stdout(io.StringIO()) as stdout,
            contextlib.redirect_stderr(io.StringIO()) as stderr,
        ):
            code = brokerlab(
                ["analyze", str(trace), "--out", str(out), "--master", "local[2]",
                 "--sizes", ",".join(SIZES), "--implementations", ",".join(DESIGNS)]
            )  # fmt: skip
    assert code == 0
    # spark_session's shuffle partitions (8), applied to the session it got: the tests'
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    found = tables(out.as_uri())
    assert found["sweep"] and found["bound"] and found["references"]
    return LocalRun(out, stdout.getvalue(), stderr.getvalue(), len(stops), found)


@pytest.fixture(scope="session")
def local_tables(local_run: LocalRun) -> dict[str, list[tuple[Any, ...]]]:
    """The tables of the analysis on local[2] (the session's) of the recorded trace."""
    return local_run.tables
