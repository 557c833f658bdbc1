"""The load generator against real brokers: every preset runs for a few seconds against
a ``brokerlab serve`` subprocess and leaves a well-formed, consistent results JSON."""

from __future__ import annotations

import json
import pathlib

import pytest
import uvloop

from loadgen.results import validate_results
from loadgen.runner import RunOptions, run_scenario
from loadgen.scenario import load_scenario, preset_names
from simulation.run import run_virtual

pytestmark = pytest.mark.slow

SECONDS = 4.0
#: presets whose events take longer live than a 4 s run leaves them, run on virtual time
#: instead (events take the virtual time they model, not this machine's): 1,000 topics
#: unloaded twice (one unload took up to 11 s of wall time here, and the live run needed
#: 48 s), three broker restarts each down for a second (12 s live), 10,000 topics set up
#: (on a loaded machine the live run's 4 s ended before the first was published), and
#: the public comparison's 50,000 msg/s into ten subscriptions (1 s of it: 500,000
#: deliveries, about 25 s of wall time)
ON_VIRTUAL_TIME = {
    "failover-lac-storm": SECONDS,
    "rolling-restart": SECONDS,
    "many-topics": SECONDS,
    "pr24623-rolling-restart": 1.0,
}


def run(name: str, out: pathlib.Path, seconds: float = SECONDS) -> dict:
    scenario = load_scenario(name)
    return uvloop.run(run_scenario(scenario, RunOptions(duration_s=seconds, out_dir=out)))


@pytest.mark.parametrize("name", [name for name in preset_names() if name not in ON_VIRTUAL_TIME])
def test_every_preset_runs_and_writes_valid_results(name: str, tmp_path: pathlib.Path) -> None:
    results = run(name, tmp_path)
    assert "listening on" in (tmp_path / "broker.log").read_text()
    _check_preset_results(name, results, tmp_path)


@pytest.mark.parametrize("name", ON_VIRTUAL_TIME)
def test_presets_with_long_events_run_on_virtual_time_and_write_valid_results(
    name: str, tmp_path: pathlib.Path
) -> None:
    options = RunOptions(duration_s=ON_VIRTUAL_TIME[name], out_dir=tmp_path)
    results = run_virtual(load_scenario(name), options)
    assert results["clock"] == "virtual"
    _check_preset_results(name, results, tmp_path)


def _check_preset_results(name: str, results: dict, tmp_path: pathlib.Path) -> None:
    assert validate_results(results) == []
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["scenario"]["name"] == name
    assert validate_results(written) == []
    for plot in ("rates.png", "latency.png", "hit-ratio.png"):
        assert (tmp_path / plot).read_bytes().startswith(b"\x89PNG")
    totals = results["totals"]
    assert totals["publishedMessages"] > 0 and totals["publishErrors"] == 0
    assert totals["consumedMessages"] > 0
    # every scheduled event ran, and worked
    scenario = load_scenario(name)
    assert [event["type"] for event in results["events"]] == [
        event.type for event in sorted(scenario.events, key=lambda e: e.at)
    ]
    assert all(event["ok"] for event in results["events"]), results["events"]
    # the broker counted the reads the consumers made
    cache = results["cache"]
    assert cache["hits"] + cache["misses"] > 0
    assert results["broker"]["implementation"] == "pip430"


def test_catchup_reads_the_backlog_from_storage(tmp_path: pathlib.Path) -> None:
    """The seek back to the earliest message reads what the cache no longer holds."""
    results = run("catchup", tmp_path, seconds=6)
    assert results["cache"]["misses"] > 0
    assert results["storage"]["bookie"]["entriesRead"] > 0
    # the seeking subscription re-reads: more consumed than one pass over what was sent
    assert results["totals"]["consumedMessages"] > results["totals"]["publishedMessages"] * 2


def test_tiered_cold_read_gets_objects_from_the_tiered_store(tmp_path: pathlib.Path) -> None:
    """The lagging subscription catches up from objects, not from the bookie."""
    results = run("tiered-cold-read", tmp_path, seconds=6)
    tiered = results["storage"]["tiered"]
    assert tiered["objectPuts"] > 0
    assert tiered["objectGets"] > 0 and tiered["entriesRead"] > 0
    assert results["cache"]["misses"] > 0


def test_events_restart_pause_resume_and_seek_to_a_time(tmp_path: pathlib.Path) -> None:
    """Every event type on one run; acknowledged messages stay acknowledged across the
    broker restart, so the backlog drains to zero once the consumers are resumed."""
    scenario_file = tmp_path / "events.toml"
    scenario_file.write_text(
        """
topics = 2
messageSize = 100
producerRate = 500
subscriptionsPerTopic = 2
subscriptionType = "Failover"
consumerPerSubscription = 2
testDurationSeconds = 8
seed = 9
[consumers]
ackMode = "cumulative"
[[events]]
at = 1
type = "pause"
subscription = 0
[[events]]
at = 2
type = "resume"
subscription = 0
[[events]]
at = 3
type = "restart"
[[events]]
at = 5
type = "seek"
subscription = 1
seekTo = -2000
[[events]]
at = 6
type = "unload"
"""
    )
    results = uvloop.run(
        run_scenario(load_scenario(str(scenario_file)), RunOptions(out_dir=tmp_path / "out"))
    )
    assert validate_results(results) == []
    assert [e["type"] for e in results["events"]] == [
        "pause",
        "resume",
        "restart",
        "seek",
        "unload",
    ]
    assert all(e["ok"] for e in results["events"]), results["events"]
    assert results["broker"]["restarts"] == 1
    assert results["totals"]["consumedMessages"] > 0
    # consumption went on after the restart: the last seconds consumed something
    assert sum(results["consumeRate"][-2:]) > 0


def test_nacked_messages_come_back_over_http_and_a_drain_sees_them_acknowledged(
    tmp_path: pathlib.Path,
) -> None:
    """The HTTP driver's nacks: each nacked message is redelivered and then acknowledged,
    so the drain after the run ends with nothing undelivered and nothing still to come."""
    scenario_file = tmp_path / "nacks.toml"
    scenario_file.write_text(
        """
topics = 1
messageSize = 100
producerRate = 500
subscriptionType = "Shared"
consumerPerSubscription = 2
testDurationSeconds = 3
seed = 4
[consumers]
nackRatio = 0.1
negativeAckRedeliveryDelayMs = 100
"""
    )
    options = RunOptions(out_dir=tmp_path / "out", drain_s=20)
    results = uvloop.run(run_scenario(load_scenario(str(scenario_file)), options))
    assert validate_results(results) == []
    totals = results["totals"]
    assert totals["nackedMessages"] > 0 and totals["redeliveredMessages"] > 0
    drain = results["drain"]
    assert drain["caughtUp"] and drain["awaitingRedelivery"] == 0, drain
    assert drain["firstDeliveries"] == drain["publishedMessages"]
    assert drain["ackedMessages"] >= drain["firstDeliveries"]
    assert results["broker"]["statsUnavailable"] is None
