"""Fixtures that keep a load-generator run from drawing its charts (seconds of a loaded
machine's time per run): test_plots draws them from results documents, test_runs and
test_pulsar_driver from a run or two, test_cli's compare draws ``compare.png``. Used by
the tests of ``tests/loadgen`` and ``tests/cluster`` (imported by their conftests)."""

from __future__ import annotations

import pathlib

import pytest

import loadgen.plots


@pytest.fixture
def no_run_charts(monkeypatch: pytest.MonkeyPatch) -> list[pathlib.Path]:
    """Each run's charts (seconds of a loaded machine's time per run) not drawn: where
    they were asked for. test_plots draws them from results documents, and test_runs
    and test_pulsar_driver from a run or two."""
    asked: list[pathlib.Path] = []

    def plot_run(results: dict, out_dir: pathlib.Path) -> list[pathlib.Path]:
        asked.append(out_dir)
        return []

    monkeypatch.setattr(loadgen.plots, "plot_run", plot_run)
    return asked


@pytest.fixture
def no_comparison_chart(monkeypatch: pytest.MonkeyPatch) -> list[pathlib.Path]:
    """compare's ``compare.png`` not drawn (seconds of a loaded machine's time; test_cli's
    compare and test_plots draw it): where it was asked for."""
    asked: list[pathlib.Path] = []

    def plot_comparison(runs: list[dict], out_dir: pathlib.Path, *more: object) -> pathlib.Path:
        asked.append(out_dir)
        return out_dir / "compare.png"

    monkeypatch.setattr(loadgen.plots, "plot_comparison", plot_comparison)
    return asked
