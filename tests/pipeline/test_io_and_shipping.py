"""The pieces that let ``brokerlab analyze`` run anywhere: locations resolved to URIs on
the driver, the pyarrow file-system layer, the zip of brokerlab's code for executors,
the choice of session, and statistics aggregated to a bounded size."""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import zipfile
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from broker.trace.recorder import SCHEMA, file_name
from pipeline import jobs, spark
from pipeline.cli import add_command
from pipeline.spark import code_archive, session_target
from pipeline.trace_io import (
    join_uri,
    parquet_files,
    read_table,
    read_text,
    resolve_uri,
    write_table,
    write_text,
)
from tests.pipeline.servers import plain_env


def test_a_relative_path_is_the_drivers(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_uri("run1/trace") == (tmp_path / "run1" / "trace").as_uri()
    assert resolve_uri("a b/#1") == (tmp_path / "a b" / "#1").as_uri()  # quoted, and back
    assert resolve_uri("s3a://bucket/run1?endpoint_override=h:1") == (
        "s3://bucket/run1?endpoint_override=h:1"
    )
    assert resolve_uri("hdfs://nn:8020/traces/t1") == "hdfs://nn:8020/traces/t1"
    with pytest.raises(ValueError, match="absolute"):
        resolve_uri("file://run1/trace")


def test_names_join_the_path_and_the_query_stays() -> None:
    uri = "s3://bucket/run1/?endpoint_override=127.0.0.1:8333&scheme=http"
    assert join_uri(uri, "sweep", "part-00000.parquet") == (
        "s3://bucket/run1/sweep/part-00000.parquet?endpoint_override=127.0.0.1:8333&scheme=http"
    )
    assert join_uri("file:///tmp/out", "report.html") == "file:///tmp/out/report.html"


def test_tables_and_text_are_written_whole_and_replace_what_was_there(
    tmp_path: pathlib.Path,
) -> None:
    out = (tmp_path / "out").as_uri()
    write_table(join_uri(out, "sweep"), pa.table({"a": [1, 2]}))
    write_table(join_uri(out, "sweep"), pa.table({"a": [3]}))
    assert read_table(join_uri(out, "sweep")).to_pylist() == [{"a": 3}]
    write_text(join_uri(out, "report.html"), "<html>")
    assert read_text(join_uri(out, "report.html")) == "<html>"
    assert read_text(join_uri(out, "absent.html")) is None
    left = sorted(path.name for path in (tmp_path / "out").rglob("*"))
    assert left == ["part-00000.parquet", "report.html", "sweep"]


#: what an executor does with the zip on its sys.path: import the tasks' modules, make
#: every design, run the bound; then which third-party modules it imported, and whence
TASK_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
before = set(sys.modules)
import pipeline.jobs, pipeline.replay, pipeline.belady, pipeline.spark
from broker.clock import EventClock
from pipeline.belady import BoundRun
from pipeline.replay import DESIGNS, ReplaySpec
for name in DESIGNS:
    ReplaySpec(name, 1 << 20).create(EventClock())
run = BoundRun([100])
run.feed([{"broker": 0, "seq": 0, "kind": "add", "key": 1, "size": 10, "next_read": 1},
          {"broker": 0, "seq": 1, "kind": "read", "key": 1, "size": 10, "next_read": None}])
assert run.results()[0].hits == 1
tops = {name.partition(".")[0] for name in set(sys.modules) - before}
# modules of files (not cython_runtime, which Cython's extensions register)
where = {top: getattr(sys.modules.get(top), "__file__", None) for top in tops}
where = {top: file for top, file in where.items()
         if file and top not in sys.stdlib_module_names and not top.startswith("_")}
print(json.dumps(where))
"""


def test_the_code_zip_runs_the_tasks_on_a_python_with_only_what_pyspark_needs(
    minimal_python: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """The zip's code on a Python with only pyarrow, pandas and numpy: every third-party
    module the tasks' code imports is one of those or came in the zip (the zip holds
    sortedcontainers; without it the import fails)."""
    archive = code_archive(tmp_path / "a")
    assert archive.name == code_archive(tmp_path / "b").name  # named by its content
    names = zipfile.ZipFile(archive).namelist()
    assert "pipeline/jobs.py" in names and "broker/cache/pip430.py" in names
    assert "sortedcontainers/__init__.py" in names
    assert not [name for name in names if "__pycache__" in name or name.endswith(".so")]
    probe = subprocess.run(
        [minimal_python, "-c", TASK_PROBE, str(archive)],
        capture_output=True, text=True, cwd=tmp_path, env=plain_env(),
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    where = json.loads(probe.stdout)
    assert where["pipeline"].startswith(str(archive))
    assert where["sortedcontainers"].startswith(str(archive))
    assert set(where) <= {"broker", "pipeline", "sortedcontainers", "pyarrow", "numpy"}
    bare = code_archive(tmp_path / "c", dependencies=())
    probe = subprocess.run(
        [minimal_python, "-c", TASK_PROBE, str(bare)],
        capture_output=True, text=True, cwd=tmp_path, env=plain_env(),
    )  # fmt: skip
    assert "No module named 'sortedcontainers'" in probe.stderr


def test_the_code_zip_leaves_out_optional_compiled_modules_and_refuses_others(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "src" / "shipme"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "fast.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    monkeypatch.setattr(spark, "SHIPPED_PACKAGES", ("shipme",))
    with pytest.raises(RuntimeError, match="cannot be shipped"):
        code_archive(tmp_path / "a")
    monkeypatch.setattr(spark, "OPTIONAL_COMPILED", frozenset({"shipme.fast"}))
    names = zipfile.ZipFile(code_archive(tmp_path / "b", dependencies=())).namelist()
    assert names == ["shipme/__init__.py"]
    # a third-party dependency is checked alike: a compiled one cannot travel
    (tmp_path / "src" / "fastdep.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    monkeypatch.setattr(spark, "SHIPPED_DEPENDENCIES", ("sortedcontainers", "fastdep"))
    with pytest.raises(RuntimeError, match="cannot be shipped"):
        code_archive(tmp_path / "c")


@pytest.mark.parametrize(
    ("master", "remote", "environ", "expected"),
    [
        (None, None, {}, ("master", "local[*]")),
        (None, None, {"SPARK_REMOTE": "sc://h:15002"}, ("remote", "sc://h:15002")),
        ("local[2]", None, {"SPARK_REMOTE": "sc://h:15002"}, ("master", "local[2]")),
        (None, "sc://r:1", {"SPARK_REMOTE": "sc://h:15002"}, ("remote", "sc://r:1")),
        ("sc://m:2", None, {}, ("remote", "sc://m:2")),
        ("spark://m:7077", None, {}, ("master", "spark://m:7077")),
    ],
)
def test_which_session(
    master: str | None, remote: str | None, environ: dict[str, str], expected: tuple[str, str]
) -> None:
    assert session_target(master, remote, environ) == expected


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_command(parser.add_subparsers())
    return parser


def test_the_cli_takes_a_sample_rate_in_0_1_and_one_of_master_or_remote() -> None:
    parser = _parser()
    args = parser.parse_args(["analyze", "t", "--out", "o", "--sample-rate", "0.01"])
    assert (args.sample_rate, args.master, args.remote) == (0.01, None, None)
    assert parser.parse_args(["analyze", "t", "--out", "o"]).sample_rate == 1.0
    for bad in (["--sample-rate", "0"], ["--sample-rate", "1.5"], ["--sample-rate", "x"],
                ["--master", "local[2]", "--remote", "sc://h:1"]):  # fmt: skip
        with pytest.raises(SystemExit):
            parser.parse_args(["analyze", "t", "--out", "o", *bad])


def test_the_working_set_of_a_long_trace_has_at_most_the_points_a_report_shows() -> None:
    assert jobs.window_seconds(0) == 1
    assert jobs.window_seconds(999_999_999_999) == 1  # 1,000 s: 1,000 windows of 1 s
    for last_s in (1_000, 4_321, 86_400 * 30):
        width = jobs.window_seconds(last_s * 1_000_000_000)
        assert last_s // width + 1 <= jobs.WORKING_SET_POINTS
        assert last_s // (width - 1) + 1 > jobs.WORKING_SET_POINTS  # the least width


@pytest.mark.slow
def test_a_long_trace_is_aggregated_on_the_executors_not_cut(
    spark: Any, tmp_path: pathlib.Path
) -> None:
    """3 hours, a read every 2 s: 10,798 s from the first read to the last, in 982
    windows of 11 s (10 s would make 1,080), every read counted (the first analysis
    kept the first 10,000 rows of any table)."""
    reads = 5_400
    rows: list[dict[str, Any]] = [
        {"broker": 0, "seq": 0, "ts_ns": 0, "kind": "add", "topic": "t", "ledger": 1,
         "entry": 0, "last_entry": 0, "size": 100},
    ]  # fmt: skip
    read = {"broker": 0, "kind": "read", "topic": "t", "subscription": "s", "ledger": 1,
            "entry": 0, "last_entry": 0, "size": 100, "hit": True, "replay": False}  # fmt: skip
    rows += [{**read, "seq": i + 1, "ts_ns": i * 2_000_000_000} for i in range(reads)]
    trace = tmp_path / "trace"
    trace.mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), trace / file_name(0, 1))
    uri = trace.as_uri()
    assert len(parquet_files(uri, "trace-")) == 1
    frame = jobs.load_trace(spark, uri)
    extent = jobs.trace_extent(frame)
    assert (extent.events, extent.last_ns) == (reads + 1, (reads - 1) * 2_000_000_000)
    assert extent.working_set_bytes == 100  # one entry of 100 bytes
    width = jobs.window_seconds((reads - 1) * 2_000_000_000)
    assert width == 11
    statistics = jobs.trace_statistics(frame, width)
    series = statistics["working_set"].collect()
    # one entry, read in every window: one distinct entry per window
    assert {(row["entries"], row["window_seconds"]) for row in series} == {(1, 11)}
    assert sorted(row["second"] for row in series) == [11 * i for i in range(982)]
    reuse = statistics["reuse"].collect()
    assert sum(row["reads"] for row in reuse) == reads - 1


def test_the_rows_and_latest_time_come_from_the_footers_or_not_at_all(
    tmp_path: pathlib.Path,
) -> None:
    """``jobs.files_extent``: every file's rows, the latest ``ts_ns`` of any row group;
    no time when a file was written without statistics (the analysis then counts the
    whole trace on Spark)."""
    row = {"broker": 0, "kind": "add", "topic": "t", "ledger": 1, "entry": 0, "size": 10}
    first = [{**row, "seq": i, "ts_ns": 5 + i} for i in range(7)]
    second = [{**row, "broker": 1, "seq": i, "ts_ns": 900 - i} for i in range(3)]
    trace = tmp_path / "trace"
    trace.mkdir()
    pq.write_table(pa.Table.from_pylist(first, schema=SCHEMA), trace / file_name(0, 1),
                   row_group_size=2)  # fmt: skip
    pq.write_table(pa.Table.from_pylist(second, schema=SCHEMA), trace / file_name(1, 1))
    assert jobs.files_extent(trace.as_uri()) == (10, 900)
    pq.write_table(pa.Table.from_pylist(second, schema=SCHEMA), trace / file_name(1, 2),
                   write_statistics=False)  # fmt: skip
    assert jobs.files_extent(trace.as_uri()) == (13, None)
