"""One real SparkSession (local[2]) for the pipeline tests that need one, a trace a live
broker recorded, its analysis by ``brokerlab analyze`` on that session (what
test_analyze.py checks), and its analysis in one process (``pipeline.single``, no JVM),
which test_analyze.py finds equal to the session's: what the cluster, Connect and S3
tests compare their tables with, so that they need no session of their own and may run
on another xdist worker than the session's tests. The session, the standalone cluster
and the Connect server are this test process's, shared with the sweep's tests
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
    SERVERS_GROUP,
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
#: what the local session's analysis (``local_run``, test_analyze.py) sweeps: every
#: design, at sizes where the designs part ways on the recorded trace (at 128 KiB
#: pip430 hits where the others do not, at 256 KiB legacy does and segmented not, at
#: 2 MiB pip430 nearly always) and pip430's curve climbs (0.29, 0.5, 0.5, 0.98)
LOCAL_SIZES = ("128KiB", "256KiB", "1MiB", "2MiB")
LOCAL_DESIGNS = ("pip430", "legacy", "segmented")
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
    prestart(request.config, tmp_path_factory, request.session.items, SERVERS_GROUP)
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
    prestart(request.config, tmp_path_factory, request.session.items, SERVERS_GROUP)
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


def single_tables(
    trace: pathlib.Path, out: pathlib.Path, sizes: tuple[str, ...], designs: tuple[str, ...]
) -> dict[str, list[tuple[Any, ...]]]:
    """:func:`tables` of ``pipeline.single``'s analysis of ``trace`` (the Spark
    analysis's tables, computed in this process without Spark: some 1 s of CPU)."""
    from pipeline.analyze import AnalyzeOptions
    from pipeline.cli import parse_size
    from pipeline.single import analyze_single

    with pytest.MonkeyPatch.context() as patch:
        undrawn_charts(patch)
        options = AnalyzeOptions(
            str(trace), str(out), sizes=[parse_size(size) for size in sizes],
            designs=designs, quiet=True,
        )  # fmt: skip
        analyze_single(options)
    return tables(out.as_uri())


@pytest.fixture(scope="session")
def reference_tables(
    recorded: tuple[pathlib.Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, list[tuple[Any, ...]]]:
    """The tables of the recorded trace's analysis with the cluster tests' sizes and
    designs, by ``pipeline.single`` (test_analyze.py checks that the local session's
    analysis gives that module's tables): what the cluster, Connect and S3 analyses
    must give."""
    trace, _ = recorded
    out = tmp_path_factory.mktemp("single-analysis") / "out"
    found = single_tables(trace, out, SIZES, DESIGNS)
    assert found["sweep"] and found["bound"] and found["references"]
    return found


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
    #: what ``pipeline.analyze.analyze`` returned to the command (the report's content)
    summary: dict[str, Any]


@pytest.fixture(scope="session")
def local_run(
    spark: Any,
    recorded: tuple[pathlib.Path, dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
) -> LocalRun:
    """The analysis of the recorded trace by the command, with :data:`LOCAL_SIZES` and
    :data:`LOCAL_DESIGNS`, on the session's local[2] (``spark_session("local[2]")`` gets
    it): the one analysis of that trace on the session, whose summary test_analyze.py's
    tests read as well as the command's output."""
    import pipeline.analyze

    trace, _ = recorded
    out = tmp_path_factory.mktemp("local-analysis") / "out"
    stops: list[bool] = []
    summaries: list[dict[str, Any]] = []
    analyze = pipeline.analyze.analyze

    def kept(*args: Any, **kwargs: Any) -> dict[str, Any]:
        summaries.append(analyze(*args, **kwargs))
        return summaries[-1]

    with pytest.MonkeyPatch.context() as patch:
        # the command stops its session when done: not this one, which other tests use
        patch.setattr(spark, "stop", lambda: stops.append(True))
        # the command imports it as it runs
        patch.setattr(pipeline.analyze, "analyze", kept)
        with (
            contextlib.redirect_stdout(io.StringIO()) as stdout,
            contextlib.redirect_stderr(io.StringIO()) as stderr,
        ):
            code = brokerlab(
                ["analyze", str(trace), "--out", str(out), "--master", "local[2]",
                 "--sizes", ",".join(LOCAL_SIZES),
                 "--implementations", ",".join(LOCAL_DESIGNS)]
            )  # fmt: skip
    assert code == 0
    # spark_session's shuffle partitions (8), applied to the session it got: the tests'
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    found = tables(out.as_uri())
    assert found["sweep"] and found["bound"] and found["references"]
    (summary,) = summaries
    return LocalRun(out, stdout.getvalue(), stderr.getvalue(), len(stops), found, summary)
