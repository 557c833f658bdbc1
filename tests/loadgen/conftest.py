"""The load generator's tests start their brokers forked from a warm interpreter
(``tests/loadgen/forked.py``): the same ``brokerlab serve`` command, without a fresh
interpreter's imports at every run and restart."""

from __future__ import annotations

import pathlib

import pytest

import loadgen.plots
from tests.loadgen.forked import forked_loadgen_brokers, lazy_fork_server

__all__ = ["forked_loadgen_brokers", "lazy_fork_server", "no_comparison_chart", "no_run_charts"]


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
