"""``brokerlab bench replay`` runs end to end on a recorded trace and reports every
figure it promises, with the before and after replays counting the same. No assertion
on rates or ratios (timing)."""

from __future__ import annotations

import json
import subprocess
import sys

from broker.cache import DESIGNS


def test_bench_replay_reports_rates_exactness_and_the_sampling_error() -> None:
    # --quick records a short catchup trace: reads behind the tail, TTL and size
    # evictions, releases that move expected reads; a replay that skips any of them
    # counts otherwise than the row-by-row one
    result = subprocess.run(
        [sys.executable, "-m", "broker.cli", "bench", "replay", "--json", "--quick",
         "--sample-rate", "0.5"],
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["benchmark"] == "replay" and report["recorded"] is True
    assert report["sampleRate"] == 0.5 and report["exact"] is True
    assert [row["design"] for row in report["designs"]] == list(DESIGNS)
    for row in report["designs"]:
        assert row["exact"] is True, row["design"]
        assert row["rows"] > 10_000
        for rate in (
            "beforeRowsPerS",
            "afterRowsPerS",
            "afterX8RowsPerSPerCell",
            "sampledRowsPerS",
        ):
            assert row[rate] > 0
        assert 0 <= row["hitRatio"] <= 1 and 0 <= row["sampledHitRatio"] <= 1
        assert row["sampleErrorPoints"] == round(
            abs(row["sampledHitRatio"] - row["hitRatio"]) * 100, 2
        )
    assert report["maxSampleErrorPoints"] == max(r["sampleErrorPoints"] for r in report["designs"])


def test_a_sample_rate_outside_zero_to_one_is_refused() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "broker.cli", "bench", "replay", "--sample-rate", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "sample rate is in (0, 1]" in result.stderr
