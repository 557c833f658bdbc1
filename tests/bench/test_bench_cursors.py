"""``brokerlab bench cursors --quick --json`` runs end to end and reports every cell.
No assertion on the figures themselves."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_cursors_quick_reports_both_containers_at_every_size() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "broker.cli", "bench", "cursors", "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    for container in ("linked list", "sorted list"):
        rows = report["containers"][container]
        assert set(rows) == {"10", "100", "1000", "10000"}
        for row in rows.values():
            assert row["countsPerSecond"] > 0 and row["seeksPerSecond"] > 0
    assert report["countTimeRatio"] > 0
