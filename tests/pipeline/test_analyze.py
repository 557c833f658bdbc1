"""``brokerlab analyze`` on a real SparkSession (local[2], one per test session, see
``conftest.py``) over a trace a live broker recorded."""

from __future__ import annotations

import itertools
import pathlib
from typing import Any

import pyarrow.parquet as pq
import pytest

from pipeline import jobs, reference
from pipeline.analyze import AnalyzeOptions, analyze
from pipeline.cli import parse_size
from tests.pipeline.conftest import DESIGNS, SIZES, LocalRun, undrawn_charts

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def summary(
    spark: Any,
    recorded: tuple[pathlib.Path, dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    trace, _ = recorded
    out = tmp_path_factory.mktemp("analysis")
    with pytest.MonkeyPatch.context() as patch:
        undrawn_charts(patch)
        return analyze(spark, AnalyzeOptions(str(trace), str(out)))


def test_the_bound_is_at_least_every_design_at_every_size(summary: dict[str, Any]) -> None:
    bound = {row["size_bytes"]: row for row in summary["bound"]}
    assert set(bound) == set(summary["sizes"]) and len(bound) == 8
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
    sizes = [parse_size(size) for size in SIZES]
    assert {(row["design"], row["size_bytes"]) for row in sweep if not row["live"]} == {
        (design, size) for design in DESIGNS for size in sizes
    }
    assert sorted(pq.read_table(out / "bound").column("size_bytes").to_pylist()) == sizes
    report = (out / "report.html").read_text()
    assert ">miss ratio against cache size</text>" in report and "Belady" in report
    assert "<b>pip430</b>" in report and "<b>legacy</b>" in report


def test_the_cli_prints_each_phase_with_its_share_done(local_run: LocalRun) -> None:
    # two designs at two sizes and the live cell; the references' four policies
    lines = local_run.stderr.splitlines()
    for expected in (
        "analyze: trace extent and working set ...",
        "analyze: sweep: 5 replays (design, size) ...",
        "analyze: bound: 2 sizes ...",
        "analyze: references (libcachesim, driver): 8 cells ...",
        "analyze: statistics: read patterns ...",
        "analyze: report ...",
    ):
        assert expected in lines, (expected, lines)
    ends = [line.rsplit(" done in ", 1)[0] for line in lines if " done in " in line]
    assert ends[:3] == [
        "analyze: trace extent and working set:",
        "analyze: sweep: 5/5 replays (design, size)",
        "analyze: next_reads: accesses with their next reads:",
    ]
    assert "analyze: references (libcachesim, driver): 8/8 cells" in ends
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
        done, total = progress.tasks()
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
