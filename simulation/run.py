"""A scenario run on virtual time: the load generator's runner, unchanged, driving a
cluster in its own process (``broker.cluster``: services, topics, dispatchers, managed
ledgers, cursors, the cache designs with their shadows and trace, storage in memory
mode with its latency model and fault injector) through in-process clients, all on one
:class:`~simulation.loop.VirtualEventLoop`.

Only the transport is replaced: clients call the broker service as its binary front
end does (``simulation.clients``), and the admin calls the cluster as its HTTP routes
do (``simulation.admin``). The same scenario, settings and seed give the same counts on
every run and every machine; ``results.json`` says ``"clock": "virtual"`` and how long
the run took in wall time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import pathlib
import time
import traceback
from collections.abc import Iterator, Mapping
from typing import Any

from broker.cluster import Cluster, Settings
from broker.config import BrokerConfig, load_broker_config, load_storage_config
from broker.tasks import TaskOwner
from loadgen.run import (
    Driver,
    Run,
    RunFailed,
    RunOptions,
    create_subscriptions,
    reset_subscriptions,
)
from loadgen.runner import execute
from loadgen.scenario import Scenario, ScenarioError
from simulation.admin import InProcessAdmin, VirtualBroker
from simulation.clients import BrokerCpu, ConsumerClient, ProducerClient
from simulation.loop import (
    CallbackFailed,
    Stalled,
    TimeLimitExceeded,
    VirtualClock,
    VirtualEventLoop,
)
from simulation.loop import run as run_on_virtual_time
from storage_stub.config import StorageConfig
from storage_stub.confparse import ConfigError

#: the virtual clock may run this many times the scenario's own length, plus the margin,
#: before the run is stopped as one that cannot end
TIME_LIMIT_FACTOR = 100
TIME_LIMIT_MARGIN_S = 3600.0


class VirtualRunClock:
    """The run's clock on the virtual loop: the same instants the broker reads."""

    __slots__ = ("_broker_clock", "_loop")

    kind = "virtual"

    def __init__(self, loop: VirtualEventLoop, broker_clock: VirtualClock) -> None:
        self._loop = loop
        self._broker_clock = broker_clock

    def now_ns(self) -> int:
        return self._loop.now_ns

    def wall_ms(self) -> float:
        return float(self._broker_clock.wall_ms())


class VirtualDriver:
    """Producers and consumers in the broker's process (``simulation.clients``);
    subscriptions and seeks through the in-process admin."""

    name = "virtual"

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.cpus = [BrokerCpu() for _ in cluster.nodes]

    def producer(
        self, run: Run, name: str, partitions: list[str], rate: float, seed: int
    ) -> ProducerClient:
        return ProducerClient(run, self.cluster, self.cpus, name, partitions, rate, seed)

    def consumer(
        self, run: Run, topic: str, subscription_index: int, name: str, rate_limit: float
    ) -> ConsumerClient:
        return ConsumerClient(
            run, self.cluster, topic, subscription_index, name, rate_limit, self.cpus
        )

    async def prepare(self, run: Run) -> None:
        await create_subscriptions(run)

    async def seek(self, run: Run, subscriptions: list[str], time_ms: int) -> None:
        await reset_subscriptions(run, subscriptions, time_ms)

    async def close(self) -> None:
        """Nothing to close: the clients end with the run."""


def check_virtual(scenario: Scenario, options: RunOptions) -> None:
    """ScenarioError, naming the option, for what a virtual-time run cannot honour."""
    driver = options.driver or scenario.driver
    if driver == "pulsar":
        raise ScenarioError(
            "--virtual-time runs its own clients in the broker's process; the pulsar driver "
            '(--driver pulsar, or driver = "pulsar" in the scenario) needs a live broker'
        )
    if options.url is not None:
        raise ScenarioError(
            f"--virtual-time runs a broker of its own on virtual time; --url {options.url} "
            "names a live broker"
        )
    if options.service_url is not None:
        raise ScenarioError("--virtual-time runs a broker of its own; drop --service-url")
    if options.keep_serving:
        raise ScenarioError("--keep-serving needs a live broker; drop --virtual-time")
    mode = options.storage_overrides.get("storageMode")
    if mode is not None and str(mode) != "memory":
        raise ScenarioError(
            f"--virtual-time keeps storage in memory; storageMode={mode} cannot be honoured"
        )
    if round(scenario.virtual.reconnectMaxBackoffMs, 6) < round(
        scenario.virtual.reconnectBackoffMs, 6
    ):
        raise ScenarioError(
            f"{scenario.name}: [virtual] reconnectMaxBackoffMs "
            f"({scenario.virtual.reconnectMaxBackoffMs:g}) is below reconnectBackoffMs "
            f"({scenario.virtual.reconnectBackoffMs:g})"
        )
    if scenario.producerRate == 0 and round(scenario.virtual.publishCostUs * 1000) == 0:
        raise ScenarioError(
            f"{scenario.name}: producerRate = 0 (as fast as it goes) on virtual time sends "
            "without end in no time; give producerRate, or a cost per message in "
            "[virtual] publishCostUs"
        )


def virtual_settings(scenario: Scenario, options: RunOptions) -> Settings:
    """The cluster's settings: broker.conf (the given one, else ./conf/broker.conf when
    there is one), the scenario's and the run's overrides, no listeners; storage.conf
    likewise, in memory mode."""
    overrides: dict[str, object] = {
        **scenario.broker,
        **options.broker_overrides,
        **_trace(options),
        # no sockets: clients and admin are in the process
        "brokerServicePort": 0,
    }
    try:
        broker: BrokerConfig = load_broker_config(
            conf_path(options.config, "broker.conf"), overrides
        )
        storage: StorageConfig = load_storage_config(
            conf_path(options.storage_config, "storage.conf"),
            {**options.storage_overrides, "storageMode": "memory"},
        )
    except (ConfigError, OSError) as error:
        raise ScenarioError(f"configuration error: {error}") from None
    return Settings(broker=broker, storage=storage, data_dir=None)


def conf_path(given: pathlib.Path | None, name: str) -> pathlib.Path | None:
    if given is not None:
        return given
    candidate = pathlib.Path("conf") / name
    return candidate if candidate.exists() else None


def _trace(options: RunOptions) -> Mapping[str, object]:
    if not options.trace or options.out_dir is None:
        return {}
    return {"brokerlabTraceDir": str((options.out_dir / "trace").resolve())}


def run_virtual(scenario: Scenario, options: RunOptions, seed: int | None = None) -> dict[str, Any]:
    """Run ``scenario`` (scaled to ``options.duration_s`` if given; its seed replaced by
    ``seed`` if given) on virtual time; the results, written to ``options.out_dir`` when
    set. ScenarioError before anything starts for what it cannot honour."""
    if seed is not None:
        scenario = scenario.model_copy(update={"seed": seed})
    if options.duration_s is not None:
        scenario = scenario.scaled(options.duration_s)
    check_virtual(scenario, options)
    settings = virtual_settings(scenario, options)
    span_s = scenario.warmupSeconds + scenario.testDurationSeconds + options.drain_s
    loop = VirtualEventLoop(limit_s=span_s * TIME_LIMIT_FACTOR + TIME_LIMIT_MARGIN_S)
    options = dataclasses.replace(options, driver=None)
    began = time.perf_counter()
    with _broker_log(options.out_dir, loop):
        try:
            results = run_on_virtual_time(_run(scenario, options, settings, loop), loop=loop)
        except (Stalled, TimeLimitExceeded) as error:
            raise RunFailed(f"{scenario.name} (seed {scenario.seed}): {error}") from None
        except CallbackFailed as error:
            cause = "".join(traceback.format_exception(error.__cause__)).rstrip()
            raise RunFailed(f"{scenario.name} (seed {scenario.seed}): {error}\n{cause}") from error
    wall_s = time.perf_counter() - began
    virtual_s = loop.now_ns / 1e9
    results["clock"] = "virtual"
    results["wallSeconds"] = round(wall_s, 3)
    results["virtualSeconds"] = round(virtual_s, 3)
    results["virtualToWall"] = round(virtual_s / wall_s, 3) if wall_s > 0 else None
    if options.variant is not None:
        results["variant"] = options.variant
    if options.out_dir is not None:
        from loadgen.results import write_results

        write_results(results, options.out_dir, options.plots)
    return results


#: loggers whose records a virtual run writes to its broker.log
BROKER_LOGGERS = ("broker", "storage_stub", "simulation")


class _VirtualTime(logging.Filter):
    """Stamps each record with the virtual clock's seconds."""

    def __init__(self, loop: VirtualEventLoop) -> None:
        super().__init__()
        self._loop = loop

    def filter(self, record: logging.LogRecord) -> bool:
        record.virtual_s = self._loop.now_ns / 1e9
        return True


@contextlib.contextmanager
def _broker_log(out_dir: pathlib.Path | None, loop: VirtualEventLoop) -> Iterator[None]:
    """The broker's log goes where a live run's goes (``broker.log`` beside the
    results), stamped with virtual time, not to the terminal; without an output
    directory only warnings reach the terminal."""
    loggers = [logging.getLogger(name) for name in BROKER_LOGGERS]
    saved = [(logger.level, logger.propagate) for logger in loggers]
    handler: logging.Handler
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(out_dir / "broker.log")
        level = logging.INFO
    else:
        handler = logging.StreamHandler()
        level = logging.WARNING
    handler.addFilter(_VirtualTime(loop))
    handler.setFormatter(logging.Formatter("%(virtual_s)12.6f %(levelname)s %(name)s: %(message)s"))
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, (old_level, propagate) in zip(loggers, saved, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(old_level)
            logger.propagate = propagate
        handler.close()


async def _run(
    scenario: Scenario, options: RunOptions, settings: Settings, loop: VirtualEventLoop
) -> dict[str, Any]:
    clock = VirtualClock(loop)
    cluster = Cluster(settings, clock, brokers=scenario.brokers, seed=scenario.seed, threads=False)
    await cluster.open()
    restarts = TaskOwner("restarts")
    try:
        await cluster.start()
        driver: Driver = VirtualDriver(cluster)
        run = Run(
            scenario,
            driver,
            InProcessAdmin(cluster, restarts),
            VirtualBroker(cluster, restarts),
            clock=VirtualRunClock(loop, clock),
            run_id=f"v{scenario.seed}",
        )
        results = await execute(run, options)
        # a restart the measured part's end cut short goes on to its end, as a live
        # broker's would (only then is the cluster closed)
        await restarts.settled()
        return results
    finally:
        await restarts.close()
        await cluster.close()
