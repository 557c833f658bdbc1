"""``brokerlab bench lac --quick --json`` runs end to end: the cache saves every floor
seek of the storm (a count, not a timing). No assertion on the times."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_lac_quick_reports_seeks_and_times_with_and_without_the_cache() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "broker.cli", "bench", "lac", "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    topics, rounds = report["topics"], report["rounds"]
    assert report["cacheOn"]["floorSeeks"] == 0
    assert report["cacheOff"]["floorSeeks"] == topics * rounds
    assert report["cacheOffRealistic"]["floorSeeks"] == topics * rounds
    for key in ("cacheOn", "cacheOff", "cacheOnRealistic", "cacheOffRealistic"):
        assert report[key]["cpuSeconds"] > 0 and report[key]["wallSeconds"] > 0
