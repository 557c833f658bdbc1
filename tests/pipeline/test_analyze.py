"""``brokerlab analyze`` on a real SparkSession (local[2], one per test session, see
``conftest.py``) over a trace a live broker recorded: the command's one analysis of it
(``conftest.local_run``), whose summary and output the tests read, and analyses with
other options."""

from __future__ import annotations

import itertools
import pathlib
from typing import Any

import pyarrow.parquet as pq
import pytest

from pipeline import jobs, reference
from pipeline.analyze import AnalyzeOptions, analyze, sweep_cells
from pipeline.cli import parse_size
from tests.harness import eventually
from tests.pipeline.conftest import (
    LOCAL_DESIGNS,
    LOCAL_SIZES,
    LocalRun,
    single_tables,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def summary(local_run: LocalRun) -> dict[str, Any]:
    """The summary of the command's analysis on local[2]: every design, at four sizes."""
    return local_run.summary


def test_the_bound_is_at_least_every_design_at_every_size(summary: dict[str, Any]) -> None:
    bound = {row["size_bytes"]: row for row in summary["bound"]}
    assert set(bound) == set(summary["sizes"]) and len(bound) == len(LOCAL_SIZES)
    for row in summary["sweep"]:
        if row["live"]:
            continue
        best = bound[row["size_bytes"]]
        assert best["hits"] >= row["hits"], (row["design"], row["size_bytes"])
        # the bound counts every read; a design counts neither hit nor miss for a read
        # that waits for another reader's storage read
        assert best["hits"] + best["misses"] >= row["hits"] + row["misses"]


def test_the_removal_queue_design_does_not_lose_hits_as_the_cache_grows(
    summary: dict[str, Any],
) -> None:
    curve = sorted(
        (row["size_bytes"], row["hit_ratio"])
        for row in summary["sweep"]
        if row["design"] == "pip430" and not row["live"]
    )
    ratios = [ratio for _, ratio in curve]
    assert all(later >= earlier - 0.01 for earlier, later in itertools.pairwise(ratios))
    assert ratios[-1] > ratios[0]  # the sizes span a range where size matters


def test_replaying_the_live_design_at_the_live_size_reproduces_the_live_hits(
    summary: dict[str, Any], recorded: tuple[pathlib.Path, dict[str, Any]]
) -> None:
    _, live = recorded
    (replayed,) = [row for row in summary["sweep"] if row["live"]]
    assert replayed["design"] == "pip430" and replayed["size_bytes"] == 1 << 20
    assert (replayed["hits"], replayed["misses"]) == (live["hits"], live["misses"])


def test_the_references_run_on_the_same_reads_under_the_bound(summary: dict[str, Any]) -> None:
    references = summary["references"]
    assert {row["design"] for row in references} == {"LRU", "S3FIFO", "ARC", "WTinyLFU"}
    assert summary["referencesRanOn"] == "driver"
    bound = {row["size_bytes"]: row for row in summary["bound"]}
    reads = bound[summary["sizes"][0]]["hits"] + bound[summary["sizes"][0]]["misses"]
    for row in references:
        assert row["hits"] + row["misses"] == reads
        assert row["hits"] <= bound[row["size_bytes"]]["hits"], row


def test_the_statistics_account_for_every_read(summary: dict[str, Any]) -> None:
    patterns = summary["statistics"]["patterns"]
    assert {row["subscription"] for row in patterns} == {"fast", "slow"}
    bound = summary["bound"][0]
    reads = bound["hits"] + bound["misses"]
    assert sum(row["reads"] for row in patterns) == reads
    assert all(row["bytes"] > 0 for row in patterns), "every read has its entry's size"
    reuse = summary["statistics"]["reuse"]
    # every entry is read by two subscriptions: one reuse per entry
    assert sum(row["reads"] for row in reuse) == reads // 2
    ranked = [item["meanHitRatio"] for item in summary["ranking"]]
    assert ranked == sorted(ranked, reverse=True) and len(ranked) == 3


def test_without_sizes_the_sweep_takes_eight_from_the_working_set() -> None:
    """What ``analyze`` (and ``pipeline.single``) sweeps when no sizes are asked: 8
    sizes log-spaced from 1% of the working set to all of it, every design at each, and
    the live design at the live size last (the recorded trace's working set and
    settings)."""
    working_set = 6_105_000
    meta = {"implementation": "pip430"}
    options = AnalyzeOptions("trace", "out")
    sizes, specs = sweep_cells(options, working_set, meta, {"max_size_bytes": 1 << 20})
    assert sizes == jobs.default_sizes(working_set) and len(sizes) == 8
    assert sizes[0] == working_set // 100 and sizes[-1] == working_set
    assert len(options.designs) == 3
    assert [(spec.design, spec.size_bytes, spec.live) for spec in specs] == [
        (design, size, False) for design in options.designs for size in sizes
    ] + [("pip430", 1 << 20, True)]


def test_the_session_s_tables_are_the_single_process_analysis_s(
    local_run: LocalRun, recorded: tuple[pathlib.Path, dict[str, Any]], tmp_path: pathlib.Path
) -> None:
    """The command's tables on local[2] are ``pipeline.single``'s: the cluster, Connect
    and S3 tests compare theirs with that module's (computed without a JVM, on their
    own xdist worker)."""
    trace, _ = recorded
    found = single_tables(trace, tmp_path / "single", LOCAL_SIZES, LOCAL_DESIGNS)
    assert found == local_run.tables
    assert found["references"] or not reference.available()


def test_the_cli_writes_tables_and_report(local_run: LocalRun) -> None:
    """``brokerlab analyze TRACE --out DIR --master local[2] --sizes ... --implementations
    ...``, run in this process (``conftest.local_run``: the session is the tests' one;
    the cluster and S3 tests run the command in a process of its own)."""
    out = local_run.out
    assert f"report: {out.as_uri()}/report.html" in local_run.stdout
    if reference.available():
        assert "references (libcachesim) ran on the driver" in local_run.stdout
    assert local_run.stops == 1, "the command stops its session when done"
    sweep = pq.read_table(out / "sweep").to_pylist()
    sizes = [parse_size(size) for size in LOCAL_SIZES]
    assert {(row["design"], row["size_bytes"]) for row in sweep if not row["live"]} == {
        (design, size) for design in LOCAL_DESIGNS for size in sizes
    }
    assert sorted(pq.read_table(out / "bound").column("size_bytes").to_pylist()) == sizes
    report = (out / "report.html").read_text()
    assert ">miss ratio against cache size</text>" in report and "Belady" in report
    assert all(f"<b>{design}</b>" in report for design in LOCAL_DESIGNS)


def test_the_cli_prints_each_phase_with_its_share_done(local_run: LocalRun) -> None:
    # three designs at four sizes and the live cell; the references' four policies
    lines = local_run.stderr.splitlines()
    for expected in (
        "analyze: trace extent and working set ...",
        "analyze: sweep: 13 replays (design, size) ...",
        "analyze: bound: 4 sizes ...",
        "analyze: references (libcachesim, driver): 16 cells ...",
        "analyze: statistics: read patterns ...",
        "analyze: report ...",
    ):
        assert expected in lines, (expected, lines)
    ends = [line.rsplit(" done in ", 1)[0] for line in lines if " done in " in line]
    assert ends[:3] == [
        "analyze: trace extent and working set:",
        "analyze: sweep: 13/13 replays (design, size)",
        "analyze: next_reads: accesses with their next reads:",
    ]
    assert "analyze: references (libcachesim, driver): 16/16 cells" in ends
    assert ends[-1] == "analyze: report:"
    # no Spark console bars
    assert "[Stage " not in local_run.stderr


def test_the_status_tracker_counts_the_tasks_of_the_phase_in_progress(spark: Any) -> None:
    import io

    from pipeline.progress import Progress

    stream = io.StringIO()
    progress = Progress(spark, stream=stream)
    spark.range(3, numPartitions=3).count()  # not in the phase: not counted
    with progress.phase("probe", 2, "things"):
        assert progress.tasks() == (0, 0)
        spark.range(4, numPartitions=4).count()

        # Spark's status tracker learns of a job's tasks from its listener bus, after the
        # job has returned: on a loaded machine it may still count some as running
        def all_done() -> tuple[int, int] | None:
            seen = progress.tasks()
            return seen if seen[0] == seen[1] >= 4 else None

        done, total = eventually(
            all_done, lambda: f"the tracker to count 4 tasks done (it says {progress.tasks()})"
        )
        assert done == total >= 4
    assert progress.tasks() == (0, 0)
    assert stream.getvalue().splitlines()[0] == "analyze: probe: 2 things ..."
    assert stream.getvalue().splitlines()[-1].startswith("analyze: probe: 2/2 things done in ")
    assert set(progress.seconds) == {"probe"}


@pytest.mark.usefixtures("no_charts")
def test_a_sample_rate_reaches_every_replay_and_the_report(
    spark: Any,
    recorded: tuple[pathlib.Path, dict[str, Any]],
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Also: two cells (4 MiB and the live 1 MiB) replayed by one task. (A miniature
    cache of too few entries would be replayed at a higher rate: 1 MiB of 2,000-byte
    entries at 0.5 is not. The workload's few thousand entries are under the sample's
    floor, lowered here: the driver chooses the rate, and the tasks use it as given.)"""
    monkeypatch.setattr("pipeline.columns.MIN_SAMPLE_POPULATION", 1000)
    trace, _ = recorded
    options = AnalyzeOptions(
        str(trace),
        str(tmp_path),
        sizes=[4 << 20],
        designs=("pip430",),
        sample_rate=0.5,
        cells_per_task=2,
    )
    summary = analyze(spark, options)
    assert summary["sampleRate"] == 0.5
    cells = {(row["size_bytes"], row["live"]) for row in summary["sweep"]}
    assert cells == {(4 << 20, False), (1 << 20, True)}
    assert {row["sample_rate"] for row in summary["sweep"]} == {0.5}
    assert "miniature simulations: 50.00%" in (tmp_path / "report.html").read_text()


@pytest.mark.usefixtures("no_charts")
def test_a_rate_too_small_for_the_trace_is_raised_once_for_every_cell(
    spark: Any, recorded: tuple[pathlib.Path, dict[str, Any]], tmp_path: pathlib.Path
) -> None:
    trace, _ = recorded
    options = AnalyzeOptions(
        str(trace), str(tmp_path), sizes=[4 << 20], designs=("pip430", "legacy"),
        sample_rate=0.01, cells_per_task=1,
    )  # fmt: skip
    summary = analyze(spark, options)
    assert len(summary["sweep"]) == 3  # the two designs, and the live design and size
    # a few thousand entries: a sample of 1% would hold a few dozen; replayed whole
    assert summary["sampleRateAsked"] == 0.01 and summary["sampleRate"] == 1.0
    assert {row["sample_rate"] for row in summary["sweep"]} == {1.0}
    assert "1.00% was asked" in (tmp_path / "report.html").read_text()


def test_the_sweep_gives_a_task_several_cells_when_cells_outnumber_the_cores(
    spark: Any, recorded: tuple[pathlib.Path, dict[str, Any]]
) -> None:
    """By default, as many tasks as the session runs at once: 6 cells on local[2] are 2
    tasks of 3 consecutive cells (one pass over the trace each), whose rows are those of
    one cell per task."""
    from pipeline.replay import ReplaySpec

    trace, _ = recorded
    specs = [
        ReplaySpec(design, size) for design in ("pip430", "legacy") for size in (1 << 19, 1 << 21)
    ] + [ReplaySpec("segmented", 1 << 20)]
    assert jobs.parallelism(spark) == 2
    assert [len(g) for g in jobs.task_groups(specs, None, 2)] == [3, 2]
    assert [len(g) for g in jobs.task_groups(specs, 1, 2)] == [1] * 5
    assert [len(g) for g in jobs.task_groups(specs, None, 0)] == [1] * 5  # unknown
    assert jobs.task_groups(specs, None, 2)[0] == tuple(specs[:3])

    def key(row: dict[str, Any]) -> tuple[str, int]:
        return row["design"], row["size_bytes"]

    grouped = jobs.sweep(spark, str(trace), specs)
    alone = jobs.sweep(spark, str(trace), specs, cells_per_task=1)
    assert sorted(grouped, key=key) == sorted(alone, key=key)
    assert len(grouped) == len(specs)
