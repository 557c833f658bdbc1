"""The shadow-error measurement: every design live once per preset and seed, each of the
others as its shadow compared with that design's own live run."""

from __future__ import annotations

from broker.cache.designs import DESIGNS
from simulation.shadow_error import measure


def test_every_design_is_compared_as_a_shadow_of_every_other_with_its_live_run() -> None:
    rows = measure(["catchup"], [1], duration_s=1.0)
    designs = set(DESIGNS)
    assert {(row["design"], row["liveDesign"]) for row in rows} == {
        (shadow, live) for shadow in designs for live in designs if shadow != live
    }
    # one live run per design: every row of a design quotes the same live count
    for design in designs:
        assert len({row["liveMisses"] for row in rows if row["design"] == design}) == 1
    for row in rows:
        expected = abs(row["shadowMisses"] - row["liveMisses"]) / max(row["liveMisses"], 1)
        assert row["relativeError"] == expected
    # the catch-up reads from storage: there is something to compare
    assert any(row["liveMisses"] > 0 for row in rows)
