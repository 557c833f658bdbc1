"""A sweep of virtual-time runs on Spark: every (variant, seed) task gives the results
the same run gives in this process, in the order of the tasks, on local[2], on a
standalone cluster and through Spark Connect (both slow: servers started here, their
Python without brokerlab, which gets the shipped zip); the conf files travel as text; a
task that raises fails the sweep, naming it and its seed, its output shown only then."""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import subprocess
import sys
from typing import Any

import pytest

import loadgen.plots
import simulation.spark
from broker.cli import main as brokerlab
from loadgen.runner import RunOptions
from loadgen.scenario import Scenario, load_scenario
from pipeline.spark import code_archive
from simulation.run import run_virtual
from simulation.spark import (
    SWEEP_PACKAGES,
    SweepFailed,
    SweepTask,
    _Runner,
    _shared_texts,
    run_sweep_on_spark,
    run_task,
    sweep_task,
)
from tests.pipeline.servers import (
    SERVERS_GROUP,
    driver_env,
    plain_env,
    prestart,
    shared_cluster,
    shared_connect,
    shared_plain_python,
    shared_session,
)
from tests.simulation.test_virtual_run import deterministic_part

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: two brokers, two partitions, a restart: short, and still the paths a run takes
TINY = """
description = "spark sweep test: a restart"
brokers = 2
topics = 1
partitionsPerTopic = 2
messageSize = 256
producerRate = 1000
subscriptionsPerTopic = 1
consumerPerSubscription = 1
testDurationSeconds = 1.5
seed = 7
[broker]
managedLedgerCacheSizeMB = 1
[[events]]
at = 0.5
type = "restart"
broker = 0
downtimeMs = 200
"""
SEEDS = (3, 4)
#: a conf file of the second variant's own, deleted before the sweep: the executors
#: must run with the text the driver read
LEGACY_CONF = "managedLedgerCacheImplementation=legacy\n"


def _scenario(tmp: pathlib.Path, text: str = TINY) -> Scenario:
    path = tmp / "tiny.toml"
    path.write_text(text)
    return load_scenario(str(path))


def _comparable(results: dict[str, Any]) -> dict[str, Any]:
    """What two runs of one task agree on: the results as JSON carries them, without
    the wall-clock measurements and the sweep's ``variant``."""
    plain = json.loads(json.dumps(results))
    plain.pop("variant", None)
    return deterministic_part(plain)


Sweep = tuple[list[SweepTask], list[dict[str, Any]]]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    """2 variants x 2 seeds, and each run's results in this process. The first variant
    takes ./conf's files (this checkout's), the second a broker.conf of its own (legacy)
    with broker and storage overrides."""
    tmp = tmp_path_factory.mktemp("sweep")
    scenario = _scenario(tmp)
    legacy = tmp / "legacy.conf"
    legacy.write_text(LEGACY_CONF)
    variants: list[tuple[str, dict[str, Any]]] = [
        ("pip430", {}),
        (
            "legacy-2mb",
            {
                "config": legacy,
                "broker_overrides": {"managedLedgerCacheSizeMB": "2"},
                "storage_overrides": {"readEntryLatency": "lognormal:1:0.6"},
            },
        ),
    ]
    tasks: list[SweepTask] = []
    expected: list[dict[str, Any]] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        for name, settings in variants:
            for seed in SEEDS:
                tasks.append(sweep_task(name, scenario, seed, **settings))
                options = RunOptions(
                    config=settings.get("config"),
                    broker_overrides=dict(settings.get("broker_overrides", {})),
                    storage_overrides=dict(settings.get("storage_overrides", {})),
                )
                expected.append(run_virtual(scenario, options, seed=seed))
    legacy.unlink()
    assert tasks[0].broker_conf == (ROOT / "conf" / "broker.conf").read_text()
    assert tasks[2].broker_conf == LEGACY_CONF
    assert [r["broker"]["implementation"] for r in expected] == ["pip430"] * 2 + ["legacy"] * 2
    return tasks, expected


def _check(
    tasks: list[SweepTask], expected: list[dict[str, Any]], got: list[dict[str, Any]]
) -> None:
    assert [(r["variant"], r["scenario"]["seed"]) for r in got] == [
        (task.name, task.seed) for task in tasks
    ]
    for task, want, found in zip(tasks, expected, got, strict=True):
        assert _comparable(found) == _comparable(want), (task.name, task.seed)
    # the tasks differ, so the order is checked, not only the set
    assert len({json.dumps(_comparable(r), sort_keys=True) for r in got}) == len(tasks)


@pytest.fixture(scope="module")
def local_master(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The test process's local[2] session (tests.pipeline.servers.shared_session, the
    pipeline tests' too), which ``run_sweep_on_spark`` gets again."""
    prestart(request.config, tmp_path_factory, request.session.items)
    shared_session(request.config)
    return "local[2]"


def test_a_task_carries_the_conf_texts_the_driver_resolved(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = _scenario(tmp_path)
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "broker.conf").write_text(LEGACY_CONF)
    other = tmp_path / "other.conf"
    other.write_text("managedLedgerCacheSizeMB=3\n")
    monkeypatch.chdir(tmp_path)
    found = sweep_task("v", scenario, 5, storage_config=other, duration_s=1.0)
    assert (found.broker_conf, found.storage_conf) == (LEGACY_CONF, other.read_text())
    assert found.scenario == scenario.model_dump(mode="json")
    assert Scenario.model_validate(found.scenario) == scenario
    assert SweepTask.from_json(found.to_json()) == found
    assert sweep_task("v", scenario, 5, config=other).broker_conf == other.read_text()
    (tmp_path / "conf" / "broker.conf").unlink()
    plain = sweep_task("v", scenario, 5, broker_overrides={"managedLedgerCacheSizeMB": "2"})
    assert (plain.broker_conf, plain.storage_conf) == (None, None)
    # None is the defaults where the task runs, whatever that directory's conf/ says
    (tmp_path / "conf" / "broker.conf").write_text(LEGACY_CONF)
    results = run_task(plain)
    assert results["broker"]["implementation"] == "pip430"
    assert results["broker"]["overrides"]["managedLedgerCacheSizeMB"] == "2"
    assert (results["variant"], results["scenario"]["seed"]) == ("v", 5)


def test_the_function_spark_ships_holds_each_conf_text_once(tmp_path: pathlib.Path) -> None:
    scenario = _scenario(tmp_path)
    text = (ROOT / "conf" / "broker.conf").read_text()
    tasks = [
        sweep_task(f"v{i}", scenario, i, config=ROOT / "conf" / "broker.conf") for i in range(40)
    ]
    assert len({id(task.broker_conf) for task in tasks}) == 40  # read once per task
    shipped = len(pickle.dumps(_Runner(_shared_texts(tasks))))
    assert len(text) < shipped < len(text) + 40 * 3000


def test_a_tasks_output_stays_out_of_the_console_and_comes_with_its_failure(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    task = SweepTask("v", {}, 1, {}, {}, None, None, None)

    def noisy(task: SweepTask) -> dict[str, Any]:
        print("chatter")
        print("a warning", file=sys.stderr)
        return {"variant": task.name}

    def failing(task: SweepTask) -> dict[str, Any]:
        print("what led to it", file=sys.stderr)
        raise RuntimeError("stuck")

    monkeypatch.setattr(simulation.spark, "run_task", noisy)
    assert _Runner._run(task) == ('{"variant": "v"}', None)
    monkeypatch.setattr(simulation.spark, "run_task", failing)
    result, error = _Runner._run(task)
    assert result is None and error is not None
    assert "what led to it" in error and error.rstrip().endswith("RuntimeError: stuck")
    assert capfd.readouterr() == ("", "")


def test_on_local_2_each_task_gives_the_run_it_gives_here(local_master: str, sweep: Sweep) -> None:
    tasks, expected = sweep
    _check(tasks, expected, run_sweep_on_spark(tasks, master=local_master))


def test_a_task_that_raises_fails_the_sweep_naming_it(
    local_master: str, sweep: Sweep, tmp_path: pathlib.Path
) -> None:
    tasks, _ = sweep
    idle = sweep_task(
        "flat-out", _scenario(tmp_path, TINY.replace("producerRate = 1000", "producerRate = 0")), 11
    )
    with pytest.raises(SweepFailed, match=r"1 of 3 sweep tasks failed") as failed:
        run_sweep_on_spark([tasks[0], idle, tasks[3]], master=local_master)
    message = str(failed.value)
    assert "- flat-out (seed 11): loadgen.scenario.ScenarioError: tiny: producerRate = 0" in message
    assert "Traceback" in message and "- pip430" not in message and "- legacy" not in message
    assert [(task.name, task.seed) for task, _ in failed.value.failures] == [("flat-out", 11)]


def test_compare_master_runs_the_variants_and_seeds_as_spark_tasks(
    local_master: str,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``brokerlab compare --virtual-time --repeat 2 --master local[2]``: each run's
    results written on the driver, named by its variant, equal to the same run here,
    with its plots (asked for, not drawn: drawing them is a second each, and the same
    code as a local run's, tested in tests/loadgen)."""
    drawn: list[pathlib.Path] = []
    monkeypatch.setattr(loadgen.plots, "plot_run", lambda results, out_dir: drawn.append(out_dir))
    monkeypatch.setattr(
        loadgen.plots, "plot_comparison", lambda runs, out_dir, summaries=None: out_dir
    )
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(TINY)
    out = tmp_path / "cmp"
    code = brokerlab(
        [
            "compare",
            "--scenario",
            str(scenario),
            "--implementations",
            "pip430,legacy",
            "--virtual-time",
            "--repeat",
            "2",
            "--master",
            local_master,
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    assert "4 virtual-time runs as Spark tasks on local[2]" in capsys.readouterr().err
    for name in ("pip430", "legacy"):
        for seed in (7, 8):
            written = json.loads((out / name / f"seed-{seed}" / "results.json").read_text())
            assert written["variant"] == name
            here = run_virtual(
                load_scenario(str(scenario)),
                RunOptions(broker_overrides={"managedLedgerCacheImplementation": name}),
                seed=seed,
            )
            assert _comparable(written) == _comparable(here)
    assert "Verdict:" in (out / "compare.md").read_text()
    assert sorted(drawn) == sorted(out / name / f"seed-{seed}" for name in ("pip430", "legacy")
                                   for seed in (7, 8))  # fmt: skip


def test_compare_refuses_master_without_virtual_time(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = brokerlab(
        ["compare", "--scenario", "catchup", "--master", "local[2]", "--out", str(tmp_path)]
    )
    assert code == 2
    assert "add --virtual-time" in " ".join(capsys.readouterr().err.split())


# --------------------------------------------- a standalone cluster, Spark Connect

#: the driver of a sweep on a cluster or through Connect, in a process of its own (this
#: one has a local session, and a process has one SparkContext): the tasks from
#: argv[1], the results to argv[2], the master (or sc:// URL) argv[3]
DRIVER = """
import json, sys
from simulation.spark import SweepTask, run_sweep_on_spark
tasks = [SweepTask.from_json(line) for line in open(sys.argv[1])]
results = run_sweep_on_spark(tasks, master=sys.argv[3])
open(sys.argv[2], "w").write(json.dumps(results))
"""


def _sweep_in_a_driver(
    tasks: list[SweepTask], where: str, cwd: pathlib.Path, env: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The sweep's results from a driver started in ``cwd`` (no conf/ there; brokerlab
    imported as installed), as ``brokerlab analyze``'s cluster tests start theirs."""
    (cwd / "tasks.jsonl").write_text("".join(task.to_json() + "\n" for task in tasks))
    result = subprocess.run(
        [sys.executable, "-c", DRIVER, "tasks.jsonl", "results.json", where],
        capture_output=True, text=True, timeout=900, cwd=cwd,
        env={**os.environ, **driver_env(), "SPARK_LOCAL_IP": "127.0.0.1", **(env or {})},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-5000:]
    found: list[dict[str, Any]] = json.loads((cwd / "results.json").read_text())
    return found


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, pathlib.Path]:
    """The test process's master and worker (tests.pipeline.servers.shared_cluster, the
    pipeline's cluster test's too); the executors' Python is one with this environment's
    third-party packages but without brokerlab."""
    prestart(request.config, tmp_path_factory, request.session.items, SERVERS_GROUP)
    return shared_cluster(request.config, tmp_path_factory)


@pytest.mark.slow
def test_on_a_cluster_whose_python_lacks_brokerlab_each_task_gives_the_same_run(
    cluster: tuple[str, pathlib.Path], sweep: Sweep, tmp_path: pathlib.Path
) -> None:
    """Two of the four tasks (the first variant's first seed, the second's second: the
    tasks through Connect are the other two), each a run of the Python fallbacks."""
    url, python = cluster
    tasks, expected = sweep
    # the executors run the driver's PYSPARK_PYTHON
    chosen = [tasks[0], tasks[3]]
    found = _sweep_in_a_driver(chosen, url, tmp_path, {"PYSPARK_PYTHON": str(python)})
    _check(chosen, [expected[0], expected[3]], found)


@pytest.fixture(scope="module")
def connect_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The test process's Connect server (tests.pipeline.servers.shared_connect, the
    pipeline's Connect test's too)."""
    prestart(request.config, tmp_path_factory, request.session.items, SERVERS_GROUP)
    return shared_connect(request.config, tmp_path_factory)


@pytest.mark.slow
def test_through_spark_connect_each_task_gives_the_same_run(
    connect_url: str, sweep: Sweep, tmp_path: pathlib.Path
) -> None:
    """A Connect server (local[1]) whose Python worker lacks brokerlab: the code goes
    as an artifact. Its client must end before the server does (a client left behind
    retries for minutes as its process exits), so the driver is a process of its own."""
    tasks, expected = sweep
    _check(tasks[1:3], expected[1:3], _sweep_in_a_driver(tasks[1:3], connect_url, tmp_path))


def test_the_sweeps_zip_runs_a_task_on_a_python_without_brokerlab(
    request: pytest.FixtureRequest,
    sweep: Sweep,
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: pathlib.Path,
) -> None:
    """What an executor off a local master does, without Spark: the packages from the
    zip (namespace packages such as broker.ledger included), the compiled accelerators
    left out and their Python fallbacks giving the same run."""
    tasks, expected = sweep
    archive = code_archive(tmp_path / "zip", SWEEP_PACKAGES)
    (tmp_path / "task.json").write_text(tasks[3].to_json())
    probe = subprocess.run(
        [shared_plain_python(request.config, tmp_path_factory), "-c", ZIP_PROBE, str(archive)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300, env=plain_env(),
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-5000:]
    where, compiled, results = probe.stdout.splitlines()
    assert where.startswith(str(archive))
    assert json.loads(compiled) == [None, None, None]
    _check(tasks[3:], expected[3:], [json.loads(results)])


ZIP_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from broker.ledger import entry
from simulation.spark import SweepTask, run_task
from storage_stub.bookie import direct_writer, frame
print(entry.__file__)
print(json.dumps([entry._compiled, frame._compiled, direct_writer._compiled_writer]))
print(json.dumps(run_task(SweepTask.from_json(open("task.json").read()))))
"""
