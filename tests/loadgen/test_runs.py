"""The load generator against real brokers: every preset runs for a few seconds against
a ``brokerlab serve`` subprocess (or on virtual time, when its events take longer live
than a short run leaves them) and leaves a well-formed, consistent results JSON."""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import pytest
import uvloop

import loadgen.plots
from loadgen.results import validate_results
from loadgen.runner import RunOptions, run_scenario
from loadgen.scenario import Scenario, load_scenario, preset_names
from simulation.run import run_virtual

pytestmark = pytest.mark.slow

SECONDS = 3.0
#: presets whose events take longer live than a short run leaves them, run on virtual time
#: instead (events take the virtual time they model, not this machine's), at these
#: lengths (every event scaled into them, with its downtime): 1,000 topics unloaded twice
#: (one unload took up to 11 s of wall time here), three broker restarts each down for a
#: second, 10,000 topics set up (on a loaded machine a live run ended before the first
#: was published), the public comparison's 50,000 msg/s into ten subscriptions (1 s of
#: it: 500,000 deliveries, about 25 s of wall time), and the demo's seek of 8 topics at
#: 4,000 msg/s (still running live 2 s later on a loaded machine; ``brokerlab demo`` runs
#: it live in test_cli), and the tiered cold read's offload of 20 topics (on a loaded
#: machine still running when a 6 s live run ended; test_auth's live run offloads over
#: HTTP)
ON_VIRTUAL_TIME = {
    "tiered-cold-read": 3.0,
    "demo": 1.0,
    "failover-lac-storm": 0.5,
    "rolling-restart": 1.0,
    "many-topics": 0.5,
    "pr24623-rolling-restart": 0.25,
}
#: the runs whose charts are drawn and checked (a second or more each): one live, one on
#: virtual time with events to mark; the others check that the charts were asked for
PLOTTED = {"tailing-fanout", "rolling-restart"}
#: setting 10,000 topics up takes many-topics half a minute of a loaded machine's time on
#: virtual time, whatever the run's length: the default run sets up a tenth of them;
#: failover-lac-storm's 1,000 topics, each loaded three times (its two unloads), took
#: 15 s of a loaded machine: the default run unloads 200 of them; the PR's 50,000 msg/s
#: into ten subscriptions, 125,000 deliveries in the quarter second, took 16 s: the
#: default run sends a tenth of it through the same restarts. BROKERLAB_FULL_PRESETS=1
#: runs them at the preset's sizes
FULL_PRESETS = os.environ.get("BROKERLAB_FULL_PRESETS") == "1"
CI_SIZES: dict[str, dict[str, Any]] = {
    "many-topics": {"topics": 1000},
    "failover-lac-storm": {"topics": 200},
    "pr24623-rolling-restart": {"producerRate": 5_000.0},
}
#: the live runs' sizes: catchup's 64 MB backlog per subscription, produced over HTTP
#: before the run, is an eighth of it (the backlog's reads from storage are checked on
#: virtual time, in test_the_catchup_on_virtual_time_reads_the_backlog_from_storage)
LIVE_CI_SIZES: dict[str, dict[str, Any]] = {"catchup": {"consumerBacklogSizeMB": 8.0}}


def shortened(scenario: Scenario, seconds: float) -> Scenario:
    """``scenario`` scaled to ``seconds``, each restart's downtime with it (three
    restarts of a second each do not fit in one second)."""
    factor = seconds / scenario.testDurationSeconds
    scaled = scenario.scaled(seconds)
    events = [
        event.model_copy(update={"downtimeMs": round(event.downtimeMs * factor)})
        for event in scaled.events
    ]
    return scaled.model_copy(update={"events": events})


@pytest.fixture
def charts(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> list[pathlib.Path]:
    """Where the run asked for its charts; drawn only for the runs in :data:`PLOTTED`."""
    asked: list[pathlib.Path] = []
    draw = loadgen.plots.plot_run

    def plot_run(results: dict[str, Any], out_dir: pathlib.Path) -> list[pathlib.Path]:
        asked.append(out_dir)
        callspec = getattr(request.node, "callspec", None)
        return draw(results, out_dir) if callspec and callspec.id in PLOTTED else []

    monkeypatch.setattr(loadgen.plots, "plot_run", plot_run)
    return asked


@pytest.mark.parametrize("name", [name for name in preset_names() if name not in ON_VIRTUAL_TIME])
def test_every_preset_runs_and_writes_valid_results(
    name: str, tmp_path: pathlib.Path, charts: list[pathlib.Path]
) -> None:
    scenario = load_scenario(name)
    if name in LIVE_CI_SIZES and not FULL_PRESETS:
        scenario = scenario.model_copy(update=LIVE_CI_SIZES[name])
    options = RunOptions(duration_s=SECONDS, out_dir=tmp_path)
    results = uvloop.run(run_scenario(scenario, options))
    assert "listening on" in (tmp_path / "broker.log").read_text()
    _check_preset_results(name, results, tmp_path, charts)
    PRESET_CHECKS.get(name, lambda _: None)(results)


@pytest.mark.parametrize("name", ON_VIRTUAL_TIME)
def test_presets_with_long_events_run_on_virtual_time_and_write_valid_results(
    name: str, tmp_path: pathlib.Path, charts: list[pathlib.Path]
) -> None:
    scenario = shortened(load_scenario(name), ON_VIRTUAL_TIME[name])
    if name in CI_SIZES and not FULL_PRESETS:
        scenario = scenario.model_copy(update=CI_SIZES[name])
    results = run_virtual(scenario, RunOptions(out_dir=tmp_path))
    assert results["clock"] == "virtual"
    _check_preset_results(name, results, tmp_path, charts)
    PRESET_CHECKS.get(name, lambda _: None)(results)


def _check_preset_results(
    name: str, results: dict, tmp_path: pathlib.Path, charts: list[pathlib.Path]
) -> None:
    assert validate_results(results) == []
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["scenario"]["name"] == name
    assert validate_results(written) == []
    assert charts == [tmp_path]
    if name in PLOTTED:
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


def _catchup_reads_the_backlog_from_storage(results: dict[str, Any]) -> None:
    """The seek back to the earliest message reads what the cache no longer holds."""
    assert results["cache"]["misses"] > 0
    assert results["storage"]["bookie"]["entriesRead"] > 0
    # the seeking subscription re-reads: more consumed than one pass over what was sent
    assert results["totals"]["consumedMessages"] > results["totals"]["publishedMessages"] * 2


#: the catch-up on virtual time: 3 s, with the seek back at 2 s (the preset's third of
#: the run, 1 s, is too early: what the subscriptions have read is still cached then)
CATCHUP_S = 3.0
CATCHUP_SEEK_AT_S = 2.0


def test_the_catchup_on_virtual_time_reads_the_backlog_from_storage(
    tmp_path: pathlib.Path, charts: list[pathlib.Path]
) -> None:
    """The catch-up's seek and re-reads on virtual time, 3 s with the seek at 2 s: live,
    whether its consumers get through the backlog in a few seconds is this machine's
    speed (on both cores of a loaded one they did not); its live run above checks the
    rest."""
    catchup = load_scenario("catchup").scaled(CATCHUP_S)
    [seek] = catchup.events
    catchup = catchup.model_copy(
        update={"events": [seek.model_copy(update={"at": CATCHUP_SEEK_AT_S})]}
    )
    results = run_virtual(catchup, RunOptions(out_dir=tmp_path))
    assert results["clock"] == "virtual"
    _catchup_reads_the_backlog_from_storage(results)


def _tiered_cold_read_gets_objects_from_the_tiered_store(results: dict[str, Any]) -> None:
    """The lagging subscription catches up from objects, not from the bookie."""
    tiered = results["storage"]["tiered"]
    assert tiered["objectPuts"] > 0
    assert tiered["objectGets"] > 0 and tiered["entriesRead"] > 0
    assert results["cache"]["misses"] > 0


#: what a preset's run must show beyond a valid run
PRESET_CHECKS = {
    "tiered-cold-read": _tiered_cold_read_gets_objects_from_the_tiered_store,
}


EVENTS = """
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


def test_events_restart_pause_resume_and_seek_to_a_time(tmp_path: pathlib.Path) -> None:
    """Every event type on one run; acknowledged messages stay acknowledged across the
    broker restart, so the backlog drains to zero once the consumers are resumed. On
    virtual time: the events' logic, not this machine's speed (live, a restart took
    seconds of a loaded machine's time); a live restart of the broker process is
    test_pulsar_driver's started-brokerlab run, and the HTTP driver through restarting
    brokers test_cli's rolling-restart comparison."""
    scenario_file = tmp_path / "events.toml"
    scenario_file.write_text(EVENTS)
    options = RunOptions(duration_s=4, drain_s=10)
    results = run_virtual(load_scenario(str(scenario_file)), options)
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
    # consumption went on after the restart and the unload: the last second consumed
    assert results["consumeRate"][-1] > 0
    # the paused subscription caught up, and the seek's re-reads were acknowledged
    drain = results["drain"]
    assert drain["caughtUp"] and drain["backlog"] == 0, drain
    # the restart's and the seek's repeats counted once: no message missing anywhere
    assert drain["missing"] == 0, drain
    assert drain["distinctDeliveries"] == drain["publishedMessages"] * 2 > 0, drain


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
testDurationSeconds = 2
seed = 4
[consumers]
nackRatio = 0.1
negativeAckRedeliveryDelayMs = 100
"""
    )
    options = RunOptions(drain_s=20)
    results = uvloop.run(run_scenario(load_scenario(str(scenario_file)), options))
    assert validate_results(results) == []
    totals = results["totals"]
    assert totals["nackedMessages"] > 0 and totals["redeliveredMessages"] > 0
    drain = results["drain"]
    assert drain["caughtUp"] and drain["awaitingRedelivery"] == 0, drain
    assert drain["firstDeliveries"] == drain["publishedMessages"]
    assert drain["distinctDeliveries"] == drain["publishedMessages"] and drain["missing"] == 0
    assert drain["ackedMessages"] >= drain["firstDeliveries"]
    assert results["broker"]["statsUnavailable"] is None
