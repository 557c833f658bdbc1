"""``brokerlab bench tiered --quick --json`` runs end to end (so the benchmark never
rots) and reports every figure it promises. No assertion on the figures themselves."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_tiered_quick_reports_index_loads_batches_and_the_verdict() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "broker.cli", "bench", "tiered", "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["benchmark"] == "tiered" and report["quick"] is True
    cold = [row for row in report["rows"] if not row["warm"]]
    warm = [row for row in report["rows"] if row["warm"]]
    assert {(row["read"], row["streams"]) for row in cold} == {
        (read, streams) for read in ("start", "middle", "tail") for streams in ("busy", "quiet")
    }
    assert len(warm) == len(cold)
    figures = {"indexLoads", "loadBatches", "maxLoadBatches", "objectGets", "bloomSkips"}
    for row in cold:
        assert set(row["index"]) == figures and set(row["full"]) == figures
        assert isinstance(row["loadRatio"], float)
    for row in warm:
        assert set(row["index"]) == figures and "full" not in row
    assert isinstance(report["loadRatio"], float)
    assert isinstance(report["tailBatchesMax"], int | float)
    assert report["targets"] == {"loadRatio": 0.2, "tailBatches": 2}
    assert isinstance(report["pass"], bool)
