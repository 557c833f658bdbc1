"""``brokerlab loadgen --no-plots`` writes ``results.json`` and draws no chart.

A run on virtual time (a second of one small topic), so the test costs a fraction of a
second; the live runs go through the same ``write_results`` with ``RunOptions.plots``.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

import loadgen.plots
from broker.cli import main as brokerlab

TINY = """
description = "no-plots test"
topics = 1
partitionsPerTopic = 1
messageSize = 128
producerRate = 200
subscriptionsPerTopic = 1
consumerPerSubscription = 1
subscriptionType = "Exclusive"
testDurationSeconds = 1
seed = 3
"""


@pytest.mark.parametrize("plots", [False, True])
def test_no_plots_writes_the_results_and_draws_nothing(
    plots: bool, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[pathlib.Path] = []

    def plot_run(results: dict[str, Any], out_dir: pathlib.Path) -> list[pathlib.Path]:
        drawn.append(out_dir)  # matplotlib's seconds are not what is tested here
        return []

    monkeypatch.setattr(loadgen.plots, "plot_run", plot_run)
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(TINY)
    out = tmp_path / "out"
    argv = ["loadgen", "--scenario", str(scenario), "--virtual-time", "--out", str(out)]
    argv += ["--no-progress"] + ([] if plots else ["--no-plots"])

    assert brokerlab(argv) == 0

    results = json.loads((out / "results.json").read_text())
    assert results["totals"]["publishedMessages"] == 200  # the run ran: 1 s at 200 msg/s
    assert drawn == ([out] if plots else [])
