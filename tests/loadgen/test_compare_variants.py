"""``brokerlab compare`` over variants (a design plus broker.conf settings): what each run
is given, and that its results, table, ranking and report are named by the variant. The
runs are faked: no broker is started."""

from __future__ import annotations

import argparse
import json
import pathlib
from collections.abc import Mapping
from typing import Any

import pytest

import loadgen.cli
import loadgen.plots
from broker.cache.designs import DESIGNS, VARIANTS
from loadgen.cli import add_commands, rank, run_command
from loadgen.plots import comparison_table
from loadgen.results import write_results
from loadgen.runner import RunOptions
from loadgen.scenario import Scenario

#: what broker/cli.py hands over
WIRED = {v.name: (v.design, v.settings, v.summary) for v in VARIANTS.values()}
#: each run's hit ratio, by the design and settings it was given
RATIOS = {
    "pip430": 0.9,
    "legacy": 0.5,
    "legacy-markdelete": 0.6,
    "legacy-backlog": 0.4,
    "segmented": 0.3,
}


def fake_results(scenario: str, overrides: Mapping[str, object], seed: int = 2) -> dict[str, Any]:
    design = str(overrides["managedLedgerCacheImplementation"])
    if overrides.get("cacheEvictionByMarkDeletedPosition") == "true":
        ratio = RATIOS["legacy-markdelete"]
    elif overrides.get("managedLedgerMinimumBacklogCursorsForCaching") == "1":
        ratio = RATIOS["legacy-backlog"]
    else:
        ratio = RATIOS[design]
    return {
        "scenario": {"name": scenario, "seed": seed},
        "broker": {"implementation": design, "overrides": dict(overrides)},
        "time": [1.0, 2.0],
        "hitRatio": [ratio, ratio],
        "cache": {
            "hitRatio": ratio,
            "byteHitRatio": ratio,
            "consumedHitRatio": ratio - 0.05,
            "evictionCpuSeconds": 0.001,
        },
        "storage": {"bookie": {"readRequests": 1, "entriesRead": 2, "bytesRead": 3}},
        "totals": {"publishedMessages": 1_234_567, "consumedMessages": 2_469_134},
        "aggregatedPublishLatency99pct": 4.5,
        "aggregatedEndToEndLatency99pct": 1234.25,
        "events": [],
    }


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[RunOptions]:
    """run_scenario replaced: the options of every run, in order."""
    given: list[RunOptions] = []

    async def run_scenario(scenario: Scenario, options: RunOptions) -> dict[str, Any]:
        # as the runner: the run named by its variant, written where it was asked
        given.append(options)
        results = fake_results(scenario.name, options.broker_overrides, scenario.seed)
        if options.variant is not None:
            results["variant"] = options.variant
        if options.out_dir is not None:
            write_results(results, options.out_dir)
        return results

    monkeypatch.setattr(loadgen.cli, "run_scenario", run_scenario)
    return given


@pytest.fixture
def no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """Charts drawn by nothing (a second each)."""
    monkeypatch.setattr(loadgen.plots, "plot_run", lambda results, out_dir: [])
    monkeypatch.setattr(
        loadgen.plots, "plot_comparison", lambda runs, out_dir, summaries=None: out_dir
    )


def compare(out: pathlib.Path, *args: str, variants: Mapping[str, Any] | None = WIRED) -> int:
    parser = argparse.ArgumentParser(prog="brokerlab")
    add_commands(parser.add_subparsers(dest="command"), list(DESIGNS), variants)
    argv = ["compare", "--scenario", "catchup", "--out", str(out), "--no-progress", *args]
    return run_command(parser.parse_args(argv))


@pytest.mark.usefixtures("no_plots")
def test_each_variant_runs_its_design_with_its_settings_into_its_own_directory(
    tmp_path: pathlib.Path, runs: list[RunOptions]
) -> None:
    names = "legacy,legacy-markdelete,legacy-backlog,pip430-extendttl"
    assert compare(tmp_path, "--implementations", names) == 0
    assert [options.out_dir for options in runs] == [tmp_path / name for name in names.split(",")]
    assert [options.broker_overrides for options in runs] == [
        {"managedLedgerCacheImplementation": "legacy"},
        {
            "managedLedgerCacheImplementation": "legacy",
            "cacheEvictionByMarkDeletedPosition": "true",
        },
        {
            "managedLedgerCacheImplementation": "legacy",
            "managedLedgerMinimumBacklogCursorsForCaching": "1",
            "managedLedgerMinimumBacklogEntriesForCaching": "1",
            "managedLedgerMaxBacklogBetweenCursorsForCaching": "2147483647",
            "managedLedgerCursorBackloggedThreshold": "9223372036854775807",
        },
        {
            "managedLedgerCacheImplementation": "pip430",
            "managedLedgerCacheEvictionExtendTTLOfRecentlyAccessed": "true",
        },
    ]


def test_results_table_ranking_and_report_are_named_by_the_variant(
    tmp_path: pathlib.Path,
    runs: list[RunOptions],
    capsys: pytest.CaptureFixture[str],
    no_run_charts: list[pathlib.Path],
    no_comparison_chart: list[pathlib.Path],
) -> None:
    """Each run's charts are asked for in its variant's directory, and the comparison's
    beside the report (drawn by test_plots, test_runs and test_cli's compare: seconds
    each)."""
    names = ("legacy", "legacy-markdelete", "pip430")
    assert compare(tmp_path, "--implementations", ",".join(names)) == 0
    for name in names:
        results = json.loads((tmp_path / name / "results.json").read_text())
        assert results["variant"] == name
    assert no_run_charts == [tmp_path / name for name in names]
    report = (tmp_path / "compare.md").read_text()
    ranking = "pip430 (90.0%) > legacy-markdelete (60.0%) > legacy (50.0%)"
    assert f"Hit ratio ranking: {ranking}" in report
    assert f"hit ratio ranking: {ranking}" in capsys.readouterr().out
    assert report.index("| legacy |") < report.index("| legacy-markdelete |")
    assert "- `legacy`: design `legacy`, its defaults" in report
    assert (
        "- `legacy-markdelete`: design `legacy`, settings cacheEvictionByMarkDeletedPosition=true"
        in report
    )
    assert no_comparison_chart == [tmp_path]


@pytest.mark.usefixtures("no_plots")
def test_a_set_pair_applies_to_every_run_and_wins_over_a_variants_own_setting(
    tmp_path: pathlib.Path, runs: list[RunOptions], capsys: pytest.CaptureFixture[str]
) -> None:
    status = compare(
        tmp_path,
        "--implementations",
        "pip430,legacy-markdelete",
        "--set",
        "cacheEvictionByMarkDeletedPosition=false",
        "--set",
        "managedLedgerCacheSizeMB=16",
    )
    assert status == 0
    assert [options.broker_overrides for options in runs] == [
        {
            "managedLedgerCacheImplementation": "pip430",
            "cacheEvictionByMarkDeletedPosition": "false",
            "managedLedgerCacheSizeMB": "16",
        },
        {
            "managedLedgerCacheImplementation": "legacy",
            "cacheEvictionByMarkDeletedPosition": "false",
            "managedLedgerCacheSizeMB": "16",
        },
    ]
    report = (tmp_path / "compare.md").read_text()
    assert "cacheEvictionByMarkDeletedPosition=false (--set; the variant's true)" in report, report
    assert "- every run: --set cacheEvictionByMarkDeletedPosition=false" in report
    err = capsys.readouterr().err
    assert "legacy-markdelete: --set replaces the variant's cacheEvictionByMarkDeletedPosition" in (
        " ".join(err.split())
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--implementations", "legacy,lru"], "unknown design(s) or variant(s) lru"),
        (["--implementations", "legacy,legacy"], "legacy named twice"),
        (
            ["--set", "managedLedgerCacheImplementation=legacy"],
            "--set managedLedgerCacheImplementation",
        ),
    ],
)
def test_bad_choices_are_refused_before_any_run(
    tmp_path: pathlib.Path,
    runs: list[RunOptions],
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    assert compare(tmp_path, *args) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert message in err
    if "lru" in args[-1]:
        for name in VARIANTS:  # the choices are named
            assert name in err
    assert runs == []


@pytest.mark.usefixtures("no_plots")
def test_without_variants_the_plain_designs_run_and_a_variant_is_unknown(
    tmp_path: pathlib.Path, runs: list[RunOptions], capsys: pytest.CaptureFixture[str]
) -> None:
    assert compare(tmp_path, "--implementations", "legacy-markdelete", variants=None) == 2
    assert "legacy-markdelete" in capsys.readouterr().err
    assert compare(tmp_path, variants=None) == 0
    assert [options.broker_overrides for options in runs] == [
        {"managedLedgerCacheImplementation": name} for name in list(DESIGNS)
    ]


def test_the_help_lists_the_variants_with_their_settings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser(prog="brokerlab")
    add_commands(parser.add_subparsers(dest="command"), list(DESIGNS), WIRED)
    with pytest.raises(SystemExit):
        parser.parse_args(["compare", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for found in VARIANTS.values():
        assert found.name in text and found.summary in text
    assert "design legacy; cacheEvictionByMarkDeletedPosition=true" in text
    assert "a --set of the same key wins over the variant's" in text


def test_rank_and_table_prefer_the_variant_to_the_implementation() -> None:
    runs = [
        fake_results("s", {"managedLedgerCacheImplementation": "legacy"}),
        fake_results(
            "s",
            {
                "managedLedgerCacheImplementation": "legacy",
                "cacheEvictionByMarkDeletedPosition": "true",
            },
        ),
    ]
    assert rank(runs) == "legacy (60.0%) > legacy (50.0%)"
    runs[1]["variant"] = "legacy-markdelete"
    assert rank(runs) == "legacy-markdelete (60.0%) > legacy (50.0%)"
    rows = comparison_table(runs).splitlines()[2:]
    assert [row.split("|")[1].strip() for row in rows] == ["legacy", "legacy-markdelete"]


@pytest.mark.usefixtures("no_plots")
def test_a_virtual_comparison_whose_variants_published_differently_fails(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On virtual time a seed gives every variant the same client schedule; variants
    that published different messages (a design slowed its consumers and so the
    producer held back by them) did not do the same work: the comparison says so, gives
    no verdict, and fails."""
    published = {"pip430": 1000, "legacy": 1000, "segmented": 900}

    def virtual(scenario: Scenario, options: RunOptions, seed: int | None = None) -> dict[str, Any]:
        design = str(options.broker_overrides["managedLedgerCacheImplementation"])
        results = fake_results(scenario.name, options.broker_overrides, seed or 2)
        results["totals"] = {"publishedMessages": published[design], "consumedMessages": 1}
        return results

    def run(names: str) -> int:
        parser = argparse.ArgumentParser(prog="brokerlab")
        add_commands(parser.add_subparsers(dest="command"), list(DESIGNS), WIRED, virtual)
        argv = ["compare", "--scenario", "catchup", "--out", str(tmp_path), "--no-progress"]
        return run_command(parser.parse_args([*argv, "--virtual-time", "--implementations", names]))

    assert run("pip430,legacy") == 0
    assert "Verdict: pip430 read" in (tmp_path / "compare.md").read_text()
    capsys.readouterr()
    assert run("pip430,segmented") == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "did not publish the same messages (seed 2: pip430 1,000, segmented 900)" in err
    report = (tmp_path / "compare.md").read_text()
    assert "Verdict: none: the variants did not publish the same messages" in report


@pytest.mark.usefixtures("no_plots", "runs")
def test_the_terminal_gets_a_table_that_fits_100_columns_and_compare_md_the_markdown(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = "legacy,legacy-markdelete,legacy-backlog,pip430"
    assert compare(tmp_path, "--implementations", names) == 0
    out = capsys.readouterr().out
    # the table, then the ranking and the verdict, each a line of prose
    table = out.split("hit ratio ranking:")[0]
    lines = table.splitlines()
    assert max(len(line) for line in lines) <= 100, out
    # no markdown table: no row between pipes, no --- separator
    assert not any(line.lstrip().startswith("|") for line in lines), out
    assert "| --- |" not in out and "---|" not in out
    rows = {line.split()[0]: line.split()[1:] for line in lines if line.split()}
    # each variant's hit ratio, consumed hit ratio, published messages, entries read from
    # storage, eviction CPU and p99 latencies, in whole, on its own line
    for name in names.split(","):
        ratio = RATIOS[name]
        assert rows[name] == [
            f"{ratio:.1%}",
            f"{ratio - 0.05:.1%}",
            "1,234,567",
            "2",
            "0.001",
            "4.50",
            "1,234.25",
        ], out
    report = (tmp_path / "compare.md").read_text()
    assert "| implementation | hit ratio | consumed hit ratio |" in report
    assert "| --- | --- |" in report
    for name in names.split(","):
        assert f"| {name} | {RATIOS[name]:.1%} |" in report


def test_the_terminal_table_of_several_seeds_gives_means_and_intervals() -> None:
    from rich.console import Console

    from loadgen.cli import _compare_table
    from loadgen.verdict import summarize_variant

    names = ("pip430-expected-off", "pip430-extendttl", "pip430-markdelete", "pip430-pr12258")
    by_variant = {}
    for index, name in enumerate(names):
        runs = []
        for seed in (1, 2, 3):
            run = fake_results("s", {"managedLedgerCacheImplementation": "pip430"}, seed)
            run["cache"]["hitRatio"] = 0.5 + index / 10 + seed / 100
            run["storage"]["bookie"]["entriesRead"] = 10_000_000 + seed * 100_000
            runs.append(run)
        by_variant[name] = runs
    summaries = [summarize_variant(name, runs) for name, runs in by_variant.items()]
    console = Console(width=100, record=True)
    console.print(_compare_table(summaries, [runs[0] for runs in by_variant.values()], 3))
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100, text
    assert "…" not in text
    first = next(index for index, line in enumerate(lines) if line.startswith(names[0]))
    # the mean on the variant's line, the 95% interval's half width below it
    assert lines[first].split()[1:2] == ["52.0%"]
    assert lines[first].split()[4] == "10,200,000"
    assert lines[first + 1].split() == ["±2.5", "±248,434"]
    assert "95% CI" in text
