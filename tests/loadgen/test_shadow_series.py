"""Each shadow design's hit ratio per interval in the results (``shadowHitRatio``), beside
the live design's ``hitRatio``: from a small virtual-time run, and from the sampler's
counter deltas when a shadow appears mid-run or the broker's stats are missing."""

from __future__ import annotations

import tomllib
from typing import Any

from loadgen.results import validate_results
from loadgen.runner import RunOptions
from loadgen.sampler import Sampler
from loadgen.scenario import Scenario
from simulation.run import run_virtual

#: a backlog written before the consumers start: pip430 keeps it (every read a hit),
#: legacy caches only for active readers (every read of it a miss)
BACKLOG = """
topics = 1
messageSize = 256
producerRate = 200
subscriptionsPerTopic = 2
consumerPerSubscription = 1
subscriptionType = "Failover"
consumerBacklogSizeMB = 1
testDurationSeconds = 3
seed = 7
[broker]
managedLedgerCacheImplementation = "pip430"
brokerlabShadowCacheImplementations = "legacy"
"""


def test_a_run_records_each_shadows_hit_ratio_per_interval() -> None:
    scenario = Scenario.model_validate({"name": "backlog", **tomllib.loads(BACKLOG)})
    results = run_virtual(scenario, RunOptions())
    assert validate_results(results) == []
    live = results["hitRatio"]
    legacy = results["shadowHitRatio"]["legacy"]
    assert len(legacy) == len(live) == len(results["time"]) == 3
    assert set(results["shadowHitRatio"]) == set(results["cache"]["shadows"])
    # the same reads: a shadow has reads in exactly the intervals the live design has
    assert [value is None for value in legacy] == [value is None for value in live]
    assert [value for value in live if value is not None] == [1.0] * 3
    assert [value for value in legacy if value is not None] == [0.0] * 3
    # the per-interval ratios agree with the shadow's counts over the run
    assert results["cache"]["shadows"]["legacy"]["hits"] == 0
    assert results["cache"]["shadows"]["legacy"]["misses"] > 0


def test_a_shadow_appearing_late_is_padded_and_missing_stats_give_none() -> None:
    sampler = Sampler(run=None, interval_s=1.0, progress=None)  # type: ignore[arg-type]

    def interval(delta: dict[str, float] | None) -> None:
        sampler.series.setdefault("time", []).append(len(sampler.series.get("time", [])) + 1)
        sampler._append_shadows(delta)

    no_shadow: dict[str, Any] = {"hits": 3.0, "misses": 1.0}
    interval(no_shadow)
    interval({**no_shadow, "shadows.legacy.hits": 1.0, "shadows.legacy.misses": 3.0})
    interval(None)  # the broker's stats could not be read
    interval({"shadows.legacy.hits": 0.0, "shadows.legacy.misses": 0.0})  # no reads
    interval({"shadows.legacy.hits": 2.0, "shadows.legacy.evicted.size": 9.0})
    assert sampler.shadow_hit_ratio == {"legacy": [None, 0.25, None, None, 1.0]}
