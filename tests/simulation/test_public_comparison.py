"""The public PIP-430 comparison's mechanics on virtual time: the producer's in-flight
count as the test keeps it, the test's metric in the results, and a comparison refused
when its variants did not do the same work."""

from __future__ import annotations

import pathlib

import pytest

from loadgen.cli import unequal_work
from loadgen.runner import RunOptions
from loadgen.scenario import Scenario, load_scenario
from simulation.run import run_virtual
from tests.simulation.test_virtual_run import SMALL

#: one partition, two subscriptions whose consumers drain 200 msg/s each, a producer
#: asked for 2,000 msg/s and held at 600 messages in flight (+2 a send, -1 a receive)
HELD_BACK = {
    "name": "held-back",
    "topics": 1,
    "messageSize": 8,
    "producerRate": 2000,
    "maxMessagesInFlight": 600,
    "inFlightPauseMs": 100,
    "subscriptionsPerTopic": 2,
    "subscriptionType": "Shared",
    "testDurationSeconds": 3,
    "consumers": {"rateLimit": 200, "receiverQueueSize": 50, "receiveBatchSize": 10},
}


def test_the_producer_pauses_once_the_tests_in_flight_count_reaches_its_target() -> None:
    """The test's counter: each message sent adds one per subscription, each message a
    consumer receives takes one away. Held at 600, the producer can only send as fast
    as the consumers receive (2 x 200 msg/s, over 2 subscriptions: 200 msg/s), not the
    2,000 msg/s asked for; it never runs far past the target."""
    results = run_virtual(Scenario(**HELD_BACK), RunOptions(), seed=1)
    totals = results["totals"]
    published, consumed = totals["publishedMessages"], totals["consumedMessages"]
    in_flight = published * 2 - consumed
    assert consumed == pytest.approx(2 * 200 * 3, rel=0.1)
    # without the cap: 6,000 published; with it: what was consumed, plus the target
    assert published < 1_000
    assert 600 - 2 * 50 <= in_flight <= 600 + 2 * 50


def test_results_carry_the_public_tests_metric(tmp_path: pathlib.Path) -> None:
    """(consumed - entries read from storage) / consumed, the public table's hit ratio:
    without a cache, every consumed message was read from storage, and so were those
    still waiting in the receiver queues at the end (the metric goes below zero)."""
    scenario = Scenario(**{**HELD_BACK, "maxMessagesInFlight": 0, "broker": {}})
    cached = run_virtual(scenario, RunOptions(), seed=1)
    uncached = run_virtual(
        scenario, RunOptions(broker_overrides={"managedLedgerCacheSizeMB": 0}), seed=1
    )
    for results in (cached, uncached):
        consumed = results["totals"]["consumedMessages"]
        read = results["storage"]["bookie"]["entriesRead"]
        assert results["cache"]["consumedHitRatio"] == pytest.approx(
            (consumed - read) / consumed, abs=1e-4
        )
    assert cached["cache"]["consumedHitRatio"] > 0.9
    assert uncached["cache"]["consumedHitRatio"] <= 0.0
    assert uncached["cache"]["hitRatio"] in (0.0, None)


def _runs(*published: int) -> list[dict[str, object]]:
    return [{"totals": {"publishedMessages": count}} for count in published]


def test_variants_that_published_different_messages_are_not_compared() -> None:
    same = {"a": _runs(100, 90), "b": _runs(100, 90)}
    assert unequal_work(same, [1, 2]) == ""
    different = {"a": _runs(100, 90), "b": _runs(100, 95)}
    reason = unequal_work(different, [1, 2])
    assert "seed 2: a 90, b 95" in reason and "not comparable" in reason


@pytest.mark.parametrize("seed", [7, 8])
def test_misses_are_the_entries_read_from_storage_across_restarts(
    tmp_path: pathlib.Path, seed: int
) -> None:
    """The cache's misses and the storage's entries read are one count, restarts
    included: a graceful restart and a kill while 50 ms storage reads are in flight, two
    brokers, nacks and a slow consumer (the public metric subtracts the one from what
    was consumed; the hit ratio uses the other)."""
    scenario_file = tmp_path / "small.toml"
    scenario_file.write_text(SMALL)
    storage = tmp_path / "storage.conf"
    storage.write_text("readEntryLatency=fixed:50\n")
    results = run_virtual(
        load_scenario(str(scenario_file)), RunOptions(storage_config=storage), seed=seed
    )
    assert [(e["type"], e["ok"]) for e in results["events"]] == [("restart", True)] * 2
    read = results["storage"]["bookie"]["entriesRead"]
    assert read > 100, "the run read from storage"
    assert results["cache"]["misses"] == read
