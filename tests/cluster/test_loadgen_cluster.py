"""The load generator against a 2-broker cluster it starts itself: 2 partitions, a Shared
subscription, the HTTP driver, and broker 0 restarted midway (gracefully, or killed with
a short session). Consumption goes on after the restart and, by the run's own
accounting (the drain after the run), every published message reached the subscription
(each one: missing 0) and was acknowledged."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import uvloop

from loadgen.results import validate_results
from loadgen.runner import RunOptions, run_scenario
from loadgen.scenario import load_scenario

pytestmark = pytest.mark.slow

#: broker 0 restarts 1 s in; the run goes on 3 s after it, sampled every 0.5 s, so
#: samples after broker 0 is back show whether consumption went on
RESTART_AT_S = 1.0
DURATION_S = 4
SAMPLE_INTERVAL_S = 0.5


def scenario_text(mode: str) -> str:
    # broker 0 is down 500 ms (graceful) or 1 s (kill: longer than the 300 ms session,
    # so broker 1 takes the bundles while broker 0 is away)
    downtime = 500 if mode == "graceful" else 1000
    return f"""
brokers = 2
topics = 1
partitionsPerTopic = 2
messageSize = 100
producerRate = 300
subscriptionsPerTopic = 1
consumerPerSubscription = 2
subscriptionType = "Shared"
driver = "http"
testDurationSeconds = {DURATION_S}
seed = 11

[broker]
metadataStoreSessionTimeoutMillis = 300

[consumers]
reconnectDelayMs = 20

[[events]]
at = {RESTART_AT_S}
type = "restart"
broker = 0
mode = "{mode}"
downtimeMs = {downtime}
"""


def run(tmp_path: pathlib.Path, mode: str) -> dict[str, Any]:
    path = tmp_path / f"cluster-{mode}.toml"
    path.write_text(scenario_text(mode))
    options = RunOptions(out_dir=tmp_path / "out", drain_s=20, sample_interval_s=SAMPLE_INTERVAL_S)
    results: dict[str, Any] = uvloop.run(run_scenario(load_scenario(str(path)), options))
    return results


@pytest.mark.parametrize("mode", ["graceful", "kill"])
def test_a_restart_of_one_broker_loses_no_message(
    tmp_path: pathlib.Path, mode: str, no_run_charts: list[pathlib.Path]
) -> None:
    results = run(tmp_path, mode)
    assert no_run_charts == [tmp_path / "out"]
    assert validate_results(results) == []
    log = (tmp_path / "out" / "broker.log").read_text()
    assert log.count("brokerlab listening on") == 2, log  # one line per broker

    [event] = results["events"]
    assert event["type"] == "restart" and event["ok"], event
    assert f"broker 0 restarted ({mode}" in event["detail"]

    # consumption went on after the restart: samples that began after broker 0 was back
    # consumed something
    downtime_s = results["scenario"]["events"][0]["downtimeMs"] / 1000
    back_at = RESTART_AT_S + event["tookMs"] / 1000
    assert back_at >= RESTART_AT_S + downtime_s
    interval = results["sampleIntervalSeconds"]
    after = [
        rate
        for time, rate in zip(results["time"], results["consumeRate"], strict=True)
        if time - interval >= back_at
    ]
    assert after and sum(after) > 0, (back_at, results["time"], results["consumeRate"])

    totals = results["totals"]
    assert totals["publishedMessages"] > 0 and totals["consumedMessages"] > 0
    # the run's own accounting after the drain: every message a produce request was
    # answered for reached the subscription (each of them, counted by its identity: a
    # message the restart delivered twice does not stand in for one it lost) and was
    # acknowledged
    drain = results["drain"]
    assert drain["caughtUp"], drain
    assert drain["backlog"] == 0 and drain["awaitingRedelivery"] == 0, drain
    assert drain["missing"] == 0, drain
    assert drain["distinctDeliveries"] == drain["publishedMessages"] > 0, drain
    assert drain["firstDeliveries"] >= drain["publishedMessages"] > 0, drain
    assert drain["ackedMessages"] >= drain["firstDeliveries"], drain
