"""The load generator's parts that need no broker: key distributions, counter growth
across broker restarts, latency recording and the results checker."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from loadgen.keys import KeyDistributor
from loadgen.recorder import CounterDeltas, Latency, flatten
from loadgen.results import validate_results


def draws(kind: str, n: int = 20_000, keys: int = 100, seed: int = 1) -> list[int | None]:
    distributor = KeyDistributor(kind, keys, 1.1, seed)
    return [distributor.next() for _ in range(n)]


def test_no_key_round_robin_and_random() -> None:
    assert set(draws("NO_KEY", 10)) == {None}
    assert draws("KEY_ROUND_ROBIN", 7, keys=3) == [0, 1, 2, 0, 1, 2, 0]
    counts = collections.Counter(draws("RANDOM"))
    assert set(counts) == set(range(100))
    assert max(counts.values()) < 2 * min(counts.values())


def test_zipf_is_skewed_toward_the_first_ranks_and_seeded() -> None:
    counts = collections.Counter(draws("ZIPF"))
    assert counts[0] > counts[1] > counts[9] > counts.get(99, 0)
    # rank 1 of 100 at exponent 1.1 carries about 1/H(100, 1.1) ~ 23% of the draws
    assert 0.19 < counts[0] / 20_000 < 0.27
    assert draws("ZIPF", 50, seed=7) == draws("ZIPF", 50, seed=7)
    assert draws("ZIPF", 50, seed=7) != draws("ZIPF", 50, seed=8)


def test_an_unknown_distributor_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown key distributor"):
        KeyDistributor("GAUSSIAN", 10, 1.0, 1)


def test_counter_growth_survives_a_broker_restart() -> None:
    deltas = CounterDeltas()
    deltas.observe(flatten({"hits": 100, "evicted": {"ttl": 5}}))
    assert deltas.observe(flatten({"hits": 150, "evicted": {"ttl": 7}})) == {
        "hits": 50,
        "evicted.ttl": 2,
    }
    # the broker restarted: counters start again from zero, and 30 more hits happened
    deltas.observe(flatten({"hits": 30, "evicted": {"ttl": 0}}))
    assert deltas.total == {"hits": 80, "evicted.ttl": 2}


def test_latency_intervals_fold_into_the_aggregate() -> None:
    latency = Latency()
    latency.record_us(1000, count=99)
    latency.record_us(50_000)
    first = latency.close_interval()
    assert first["50pct"] == pytest.approx(1.0, rel=0.01)
    assert first["max"] == pytest.approx(50.0, rel=0.01)
    assert latency.close_interval()["99pct"] is None  # an empty interval has no latency
    latency.record_us(-5)  # a clock step: clamped, not an error
    assert latency.aggregate.get_total_count() == 100


def document(rates: list[float], published: int) -> dict[str, Any]:
    n = len(rates)
    series = {"time": [float(i + 1) for i in range(n)], "publishRate": rates}
    for name in ("consumeRate", "backlog"):
        series[name] = [0.0] * n
    series["hitRatio"] = [None] * n
    for prefix in ("publishLatency", "endToEndLatency"):
        for suffix in ("Avg", "50pct", "75pct", "95pct", "99pct", "999pct", "Max"):
            series[prefix + suffix] = [None] * n
    aggregated = {
        f"aggregated{prefix}{suffix}": None
        for prefix in ("PublishLatency", "EndToEndLatency")
        for suffix in ("Avg", "50pct", "75pct", "95pct", "99pct", "999pct", "Max")
    }
    return {
        "version": 1,
        "scenario": {"name": "x"},
        "broker": {},
        "startedAtMs": 0,
        "durationSeconds": float(n),
        "sampleIntervalSeconds": 1.0,
        **series,
        **aggregated,
        "totals": {"publishedMessages": published, "consumedMessages": 0},
        "cache": {"hits": 0, "misses": 0, "hitBytes": 0, "missBytes": 0},
        "storage": {"bookie": {}},
        "brokerAtEnd": {},
        "events": [],
    }


def test_the_results_checker_accepts_consistent_and_catches_inconsistent_documents() -> None:
    assert validate_results(document([1000.0, 1000.0], 2000)) == []
    assert any("publishRate" in p for p in validate_results(document([1000.0, 1000.0], 5000)))
    broken = document([1000.0, 1000.0], 2000)
    broken["backlog"] = [0]
    assert any("backlog has 1 values" in p for p in validate_results(broken))
    broken = document([1000.0, 1000.0], 2000)
    broken["hitRatio"] = [1.5, None]
    assert any("hitRatio" in p for p in validate_results(broken))
    del broken["cache"]
    assert validate_results(broken) == ["missing cache"]


def test_the_results_checker_refuses_a_drain_caught_up_with_a_message_missing() -> None:
    drained = document([1000.0, 1000.0], 2000)
    drained["drain"] = {
        "caughtUp": True,
        "publishedMessages": 2000,
        "firstDeliveries": 2000,
        "distinctDeliveries": 2000,
        "missing": 0,
        "ackedMessages": 2000,
        "backlog": 0,
    }
    assert validate_results(drained) == []
    # results written before the distinct counts were recorded
    older = {
        k: v for k, v in drained["drain"].items() if k not in ("distinctDeliveries", "missing")
    }
    assert validate_results({**drained, "drain": older}) == []
    # a repeat made the backlog 0, and one message never came
    drained["drain"].update(distinctDeliveries=1999, missing=1)
    assert any("caught up" in problem for problem in validate_results(drained))
    drained["drain"].update(caughtUp=False)
    assert validate_results(drained) == []
    drained["drain"]["missing"] = -1
    assert validate_results(drained) == ["drain.missing is not a non-negative integer"]
