"""``brokerlab bench simulate``: a preset's row says how fast virtual time ran it, and a
preset virtual time refuses is skipped with the reason."""

from __future__ import annotations

import pytest

from simulation.bench import DURATION_S, measure


def test_a_presets_row_gives_virtual_seconds_per_wall_second_and_deliveries() -> None:
    result = measure(quick=True, presets=["tailing-fanout", "throughput"])
    assert result["durationSeconds"] == DURATION_S[0]
    row = result["presets"]["tailing-fanout"]
    # the measured part is the scaled length; the run's clock covers warm-up too
    assert row["virtualSeconds"] >= DURATION_S[0]
    assert row["virtualPerWall"] == pytest.approx(
        row["virtualSeconds"] / row["wallSeconds"], rel=0.01
    )
    # tailing-fanout: 5 subscriptions of 4 topics, each message delivered 5 times
    assert row["delivered"] == 5 * row["published"] > 0
    assert row["deliveredPerWallSecond"] == pytest.approx(
        row["delivered"] / row["wallSeconds"], rel=0.01
    )
    assert "producerRate = 0" in result["presets"]["throughput"]["skipped"]
