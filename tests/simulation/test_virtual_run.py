"""A scenario on virtual time: the same counts on every run, whatever the process; a
different seed, a different run; what it cannot honour refused before it starts."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import loadgen.plots
from broker.cli import main as brokerlab
from broker.ledger.managed_cursor import ManagedCursor
from broker.ledger.position import Position
from loadgen.results import validate_results
from loadgen.runner import RunFailed, RunOptions
from loadgen.scenario import Scenario, ScenarioError, load_scenario
from simulation import run as simulation_run
from simulation.run import run_virtual

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: two brokers, four partitions, Shared subscriptions with a slow consumer, nacks and a
#: graceful and a killed restart: the paths where order could differ between processes.
#: 1,000 messages a second of 512 bytes: the bytes of 2,000 of 256 (the 1 MB cache still
#: evicts by size) for half the messages to handle (a virtual run's time goes by message)
SMALL = """
description = "virtual-time test: restarts, nacks, a slow consumer"
brokers = 2
topics = 1
partitionsPerTopic = 4
messageSize = 512
producerRate = 1000
subscriptionsPerTopic = 3
consumerPerSubscription = 2
subscriptionType = "Shared"
keyDistributor = "RANDOM"
keys = 50
testDurationSeconds = 3
seed = 7
[broker]
managedLedgerCacheSizeMB = 1
[consumers]
receiveBatchSize = 50
receiverQueueSize = 100
nackRatio = 0.05
negativeAckRedeliveryDelayMs = 300
slowConsumers = 1
rateLimit = 400
[[events]]
at = 1
type = "restart"
broker = 0
downtimeMs = 300
[[events]]
at = 2.5
type = "restart"
broker = 1
mode = "kill"
downtimeMs = 200
"""

#: what may differ between two runs of the same seed: wall time and CPU measurements
WALL_FIELDS = ("wallSeconds", "virtualToWall")


def _scenario_file(tmp_path: pathlib.Path, text: str = SMALL, name: str = "small") -> pathlib.Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def deterministic_part(results: dict[str, Any]) -> dict[str, Any]:
    """The results without what is measured in wall time (the run's length, and the
    CPU time spent evicting, wherever it appears)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "evictionCpuSeconds"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip({k: v for k, v in results.items() if k not in WALL_FIELDS})


def _run_in_process(scenario: pathlib.Path, seed: int, hash_seed: str, out: pathlib.Path) -> None:
    code = (
        "import json, sys\n"
        "from loadgen.runner import RunOptions\n"
        "from loadgen.scenario import load_scenario\n"
        "from simulation.run import run_virtual\n"
        f"results = run_virtual(load_scenario({str(scenario)!r}), RunOptions(), seed={seed})\n"
        f"open({str(out)!r}, 'w').write(json.dumps(results))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT, timeout=600)


#: the module's tests on one xdist worker, which makes its seed-7 run (a module fixture)
#: once: each worker running some of them made its own
pytestmark = pytest.mark.xdist_group("test_virtual_run")


@pytest.fixture(scope="module")
def seven(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[pathlib.Path, dict]]:
    """SMALL with seed 7, run once in this process for the module's tests, written to
    ``out`` beside the scenario file (charts not drawn: a second each, and no test here
    looks at them; test_runs does): the scenario file and the results."""
    tmp_path = tmp_path_factory.mktemp("seven")
    scenario = _scenario_file(tmp_path)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loadgen.plots, "plot_run", lambda results, out_dir: [])
        results = run_virtual(load_scenario(str(scenario)), RunOptions(out_dir=tmp_path / "out"))
    yield scenario, results


def test_the_same_seed_gives_the_same_counts_in_processes_with_different_hash_seeds(
    tmp_path: pathlib.Path, seven: tuple[pathlib.Path, dict]
) -> None:
    """This process's run against one in a process with another hash seed (this one's
    is random unless PYTHONHASHSEED sets it)."""
    scenario, here = seven
    other_hash_seed = "1" if os.environ.get("PYTHONHASHSEED") == "4242" else "4242"
    there = tmp_path / "there.json"
    _run_in_process(scenario, 7, other_hash_seed, there)
    a = json.loads(json.dumps(here))
    b = json.loads(there.read_text())
    assert a["clock"] == "virtual"
    assert a["totals"]["publishedMessages"] > 2500
    assert a["totals"]["redeliveredMessages"] > 0  # nacks and restarts happened
    assert a["cache"]["misses"] > 0  # the restarts cost storage reads
    assert [event["ok"] for event in a["events"]] == [True, True]
    assert deterministic_part(a) == deterministic_part(b)


def test_another_seed_gives_another_run(seven: tuple[pathlib.Path, dict]) -> None:
    scenario_file, seven_results = seven
    eight = run_virtual(load_scenario(str(scenario_file)), RunOptions(), seed=8)
    assert seven_results["scenario"]["seed"] == 7 and eight["scenario"]["seed"] == 8
    assert deterministic_part(seven_results) != deterministic_part(eight)
    # the rate is the scenario's either way: the seed changes the draws, not the load
    assert seven_results["totals"]["publishedMessages"] == pytest.approx(
        eight["totals"]["publishedMessages"], rel=0.05
    )


def test_results_say_virtual_and_give_virtual_and_wall_time(
    seven: tuple[pathlib.Path, dict],
) -> None:
    scenario, results = seven
    out = scenario.parent / "out"
    saved = json.loads((out / "results.json").read_text())
    assert saved["clock"] == "virtual"
    assert saved["virtualSeconds"] >= 3.0
    assert saved["wallSeconds"] > 0
    assert saved["virtualToWall"] == pytest.approx(
        saved["virtualSeconds"] / saved["wallSeconds"], rel=0.01
    )
    assert results["durationSeconds"] == pytest.approx(3.0)
    # the broker's log is beside the results, stamped with virtual seconds
    log = (out / "broker.log").read_text().splitlines()
    restarts = [line.split() for line in log if "restart (graceful" in line]
    assert len(restarts) == 1
    assert float(restarts[0][0]) == pytest.approx(1.0, abs=0.01)


def _scenario(text: str = SMALL) -> Scenario:
    import tomllib

    return Scenario.model_validate({"name": "t", **tomllib.loads(text)})


@pytest.mark.parametrize(
    ("options", "scenario_text", "named"),
    [
        (RunOptions(driver="pulsar"), SMALL, "pulsar driver"),
        (RunOptions(url="http://127.0.0.1:8080"), SMALL, "--url"),
        (RunOptions(service_url="pulsar://127.0.0.1:6650"), SMALL, "--service-url"),
        (RunOptions(storage_overrides={"storageMode": "disk"}), SMALL, "storageMode=disk"),
        (RunOptions(keep_serving=True), SMALL, "--keep-serving"),
        (RunOptions(), SMALL.replace("producerRate = 1000", "producerRate = 0"), "producerRate"),
    ],
)
def test_what_virtual_time_cannot_honour_is_refused_before_anything_starts(
    options: RunOptions, scenario_text: str, named: str, tmp_path: pathlib.Path
) -> None:
    options.out_dir = tmp_path / "out"
    with pytest.raises(ScenarioError, match=named):
        run_virtual(_scenario(scenario_text), options)
    assert not (tmp_path / "out").exists()


def test_a_run_that_cannot_end_fails_naming_what_was_pending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a limit far below the scenario's length: the clock reaches it with the run going
    monkeypatch.setattr(simulation_run, "TIME_LIMIT_FACTOR", 0.1)
    monkeypatch.setattr(simulation_run, "TIME_LIMIT_MARGIN_S", 0.0)
    with pytest.raises(RunFailed, match=r"limit of 0\.3 s") as raised:
        run_virtual(_scenario(), RunOptions())
    assert "seed 7" in str(raised.value)
    assert "main:" in str(raised.value)  # the pending tasks are named


def test_cli_refuses_virtual_time_with_the_pulsar_driver_in_one_line(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = _scenario_file(tmp_path)
    code = brokerlab(
        ["loadgen", "--scenario", str(scenario), "--virtual-time", "--driver", "pulsar"]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "pulsar driver" in err and "Traceback" not in err


def test_compare_repeat_gives_intervals_and_a_verdict(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # each run's charts not drawn (a second each; test_runs draws them): where asked for
    asked: list[pathlib.Path] = []
    monkeypatch.setattr(loadgen.plots, "plot_run", lambda results, out_dir: asked.append(out_dir))
    # half of SMALL's rate: six runs of one virtual second, each with both restarts;
    # the report's shape, not the load, is what is checked here
    scenario = _scenario_file(
        tmp_path,
        SMALL.replace("testDurationSeconds = 3", "testDurationSeconds = 1")
        .replace("producerRate = 1000", "producerRate = 500")
        .replace("rateLimit = 400", "rateLimit = 100")
        .replace("at = 1\n", "at = 0.5\n")
        .replace("at = 2.5", "at = 0.75"),
    )
    out = tmp_path / "cmp"
    code = brokerlab(
        [
            "compare",
            "--scenario",
            str(scenario),
            "--implementations",
            "pip430,legacy",
            "--virtual-time",
            "--seed",
            "3",
            "--repeat",
            "3",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    report = (out / "compare.md").read_text()
    assert "seeds 3..5" in report
    assert "hit ratio (95% CI)" in report
    assert "Verdict:" in report
    for name in ("pip430", "legacy"):
        for seed in (3, 4, 5):
            results = json.loads((out / name / f"seed-{seed}" / "results.json").read_text())
            assert results["scenario"]["seed"] == seed
            assert results["variant"] == name
            assert out / name / f"seed-{seed}" in asked
    verdict = [line for line in capsys.readouterr().out.splitlines() if "verdict:" in line]
    assert len(verdict) == 1
    assert "pip430" in verdict[0] and "legacy" in verdict[0] and "over 3 seeds" in verdict[0]
    assert (out / "compare.png").stat().st_size > 0


#: a killed broker (its consumers learn it only as a client learns a dead connection),
#: and an unload (between two ack flushes: grouped acks not yet sent when the consumers
#: are closed under them)
KILL = """
brokers = 2
topics = 4
messageSize = 100
producerRate = 1000
subscriptionType = "Shared"
testDurationSeconds = 4
[[events]]
at = 1
type = "restart"
broker = 0
mode = "kill"
downtimeMs = 300
"""
UNLOAD = """
topics = 2
messageSize = 100
producerRate = 1000
subscriptionsPerTopic = 2
subscriptionType = "Shared"
testDurationSeconds = 3
[[events]]
at = 1.55
type = "unload"
"""


@pytest.mark.parametrize("text", [KILL, UNLOAD], ids=["kill", "unload"])
def test_after_a_kill_or_an_unload_every_message_reaches_every_subscription_once(
    text: str,
) -> None:
    scenario = _scenario(text)
    results = run_virtual(scenario, RunOptions(drain_s=10))
    drain = results["drain"]
    assert drain["caughtUp"], drain
    subscriptions = scenario.subscriptionsPerTopic
    # nothing lost, and a message whose ack was still grouped when its consumer was
    # closed is a duplicate when it comes again, not a second first delivery
    assert drain["firstDeliveries"] == drain["publishedMessages"] * subscriptions
    # ... and each message counted once where it arrived: none missing from anywhere
    assert drain["distinctDeliveries"] == drain["firstDeliveries"] and drain["missing"] == 0
    assert drain["ackedMessages"] == drain["firstDeliveries"]
    consumed = results["consumeRate"]
    assert min(consumed[1:]) > 0  # consumption went on after the event


#: one topic, two subscriptions: subscription 1 paused over a restart of the broker
LOSSY_RESTART = """
topics = 1
messageSize = 100
producerRate = 1000
subscriptionsPerTopic = 2
subscriptionType = "Failover"
testDurationSeconds = 3
seed = 1
[[events]]
at = 0.5
type = "pause"
subscription = 1
[[events]]
at = 1
type = "restart"
[[events]]
at = 1.5
type = "resume"
subscription = 1
"""


@pytest.mark.parametrize("lose", [True, False], ids=["one-lost", "none-lost"])
def test_a_message_lost_in_a_restart_is_missing_though_repeats_balance_the_backlog(
    monkeypatch: pytest.MonkeyPatch, lose: bool
) -> None:
    """The restarted broker's store has lost the last 20 acks of subscription 0 (those
    messages come again, with redelivery count 0: first deliveries once more) and, with
    ``lose``, forgotten one message subscription 1 never received (acknowledged it for
    it). The repeats make up for the lost message in the plain counts (backlog 0); the
    drain counts distinct messages and does not catch up. Without the loss it does."""
    recover = ManagedCursor.recover.__func__  # type: ignore[attr-defined]
    tampered: dict[str, Position] = {}

    async def recover_with_losses(
        cls: type[ManagedCursor], ledger: Any, name: str
    ) -> ManagedCursor:
        cursor: ManagedCursor = await recover(cls, ledger, name)
        if name in tampered:
            return cursor
        if name == "sub-0":
            mark_delete = cursor.mark_delete_position
            tampered[name] = Position(mark_delete.ledger_id, mark_delete.entry_id - 19)
            await cursor.reset(tampered[name])
        elif name == "sub-1" and lose:
            # well inside what it has not received since its pause: stored (and its
            # publish acknowledged) half a second before the restart
            position = cursor.nth_unacknowledged(10)
            assert position is not None
            cursor.acknowledge([position])
            await cursor.persist()
            tampered[name] = position
        return cursor

    monkeypatch.setattr(ManagedCursor, "recover", classmethod(recover_with_losses))
    results = run_virtual(_scenario(LOSSY_RESTART), RunOptions(drain_s=2))
    assert all(event["ok"] for event in results["events"]), results["events"]
    assert sorted(tampered) == (["sub-0", "sub-1"] if lose else ["sub-0"])
    drain = results["drain"]
    owed, lost = drain["publishedMessages"] * 2, int(lose)
    # the plain counts balance: every message once per subscription, as they count
    assert drain["backlog"] == 0 and drain["firstDeliveries"] >= owed + 20 - lost, drain
    assert drain["missing"] == lost and drain["distinctDeliveries"] == owed - lost, drain
    assert drain["caughtUp"] is not lose
    assert validate_results(results) == []


def test_nacked_messages_still_to_come_back_are_awaited() -> None:
    text = (
        UNLOAD.replace('[[events]]\nat = 1.55\ntype = "unload"\n', "").replace(
            "subscriptionsPerTopic = 2", "subscriptionsPerTopic = 1"
        )
        + "[consumers]\nnackRatio = 1\nnegativeAckRedeliveryDelayMs = 20000\n"
    )
    results = run_virtual(_scenario(text), RunOptions(drain_s=2))
    assert results["totals"]["nackedMessages"] > 0
    # every message was nacked once, and none has come back within the drain
    assert results["drain"]["awaitingRedelivery"] == results["drain"]["publishedMessages"]
    assert not results["drain"]["caughtUp"]
