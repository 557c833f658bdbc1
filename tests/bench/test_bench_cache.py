"""``brokerlab bench cache --quick --json`` runs end to end (so the benchmark never rots)
and reports every figure it promises. No assertion on the figures themselves."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_cache_quick_reports_every_design_and_ratio() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "broker.cli", "bench", "cache", "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report["designs"]) == {"pip430", "legacy", "segmented"}
    for design, row in report["designs"].items():
        assert row["insert"] > 0 and row["get"] > 0 and row["evict"] > 0, design
    for design in ("pip430", "legacy"):
        assert report["designs"][design]["size_eviction_ratio"] > 0
        assert report["designs"][design]["idle_tick_ratio"] > 0
    assert report["ledgers"] == [100, 10_000]  # --quick: a tenth of the full run's
