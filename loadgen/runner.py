"""Run one scenario against one broker and return its results (see loadgen.results).

Phases: set up (subscriptions, consumers), build the catch-up backlog if the scenario
asks for one, warm up, then the measured run with its timed events. Producers are open
loop: each sends its requests at their scheduled times whatever the broker's latency
(up to a bound of requests in flight), and publish latency is measured from the
scheduled time, so a broker that falls behind shows it in the latency rather than by
quietly receiving less load (no coordinated omission). End-to-end latency is the
broker's ``publishTime`` to receipt.

Consumers behave as Pulsar clients do: a session closed under them (namespace unload,
broker restart, idle timeout) is recreated; a slow consumer is rate limited; pause and
disconnect are events.

Producers and consumers reach the broker through a driver: ``http`` (below: the broker's
REST produce and consume routes) or ``pulsar`` (loadgen.pulsar_driver: the official
client over the binary protocol). Set-up, events and the broker's cache and storage
counters go through the HTTP admin in both, when there is one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import random
import resource
import signal
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from loadgen.bounded import ADMIN_CONCURRENCY, bounded, retry_while_unavailable
from loadgen.broker_process import BrokerProcess
from loadgen.client import AuthenticationError, BrokerClient, BrokerError
from loadgen.events import run_events
from loadgen.http_driver import HttpDriver
from loadgen.progress import ProgressDisplay
from loadgen.results import build_results, write_results
from loadgen.run import (
    MANY_CONSUMERS,
    MANY_CONSUMERS_POLL_TIMEOUT_MS,
    PRODUCE_CONNECTIONS,
    Driver,
    Run,
    RunFailed,
    RunOptions,
    VirtualRunner,
    VirtualSweep,
)
from loadgen.sampler import Sampler
from loadgen.scenario import Scenario, ScenarioError

#: how long a started brokerlab may take to print its binary protocol's address after
#: its HTTP one
SERVICE_URL_WAIT_S = 10.0
#: how often a drain looks whether the consumers have caught up
DRAIN_POLL_S = 0.05

__all__ = [
    "RunFailed",
    "RunOptions",
    "VirtualRunner",
    "VirtualSweep",
    "default_out_dir",
    "execute",
    "run_scenario",
]


async def run_scenario(scenario: Scenario, options: RunOptions) -> dict[str, Any]:
    """Run ``scenario`` (scaled to ``options.duration_s`` if given); returns the results
    and, with ``options.out_dir``, writes ``results.json`` and the plots there."""
    if options.driver is not None and options.driver != scenario.driver:
        scenario = _with_driver(scenario, options.driver)
    if options.duration_s is not None:
        scenario = scenario.scaled(options.duration_s)
    service_url = options.service_url or scenario.pulsar.serviceUrl or None
    own_broker = options.url is None and service_url is None
    _refuse_what_cannot_run(scenario, options, service_url, own_broker)
    with contextlib.ExitStack() as stack:
        broker: BrokerProcess | None = None
        url = options.url
        if own_broker:
            workdir = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory()))
            log_dir = options.out_dir if options.out_dir is not None else workdir
            broker = BrokerProcess(
                workdir / "data",
                log_path=log_dir / "broker.log",
                config=options.config,
                storage_config=options.storage_config,
                overrides={**scenario.broker, **options.broker_overrides, **_trace(options)},
                storage_overrides=options.storage_overrides,
                brokers=scenario.brokers,
            )
            url = await broker.start()
        try:
            if broker is not None and scenario.driver == "pulsar":
                service_url = await broker.wait_service_url(SERVICE_URL_WAIT_S)
                if not service_url:
                    raise ScenarioError(
                        "the pulsar driver needs the broker's binary protocol, and brokerlab "
                        "serve printed no 'brokerlab binary protocol on pulsar://...' line "
                        "(see broker.log); --service-url points the run at another "
                        "Pulsar-compatible broker"
                    )
            if options.on_broker_ready is not None:
                options.on_broker_ready(url or service_url or "")
            brokers = broker.urls if broker is not None else []
            results = await _run_against(scenario, options, url, service_url or "", broker, brokers)
            if options.keep_serving and broker is not None and url is not None:
                await _until_interrupted(url)
        finally:
            if broker is not None:
                await broker.stop()
    if options.variant is not None:
        results["variant"] = options.variant
    if options.out_dir is not None:
        write_results(results, options.out_dir, options.plots)
    return results


def _refuse_what_cannot_run(
    scenario: Scenario, options: RunOptions, service_url: str | None, own_broker: bool
) -> None:
    """ScenarioError for options that do not fit together or with the scenario."""
    if service_url is not None and scenario.driver != "pulsar":
        raise ScenarioError(
            f"{scenario.name}: a service URL ({service_url}) is for the pulsar driver, and this "
            'run\'s driver is http (--driver pulsar, or driver = "pulsar" in the scenario)'
        )
    if options.trace and (not own_broker or options.out_dir is None):
        raise ScenarioError(
            "--trace records the trace of a broker the load generator starts, into the "
            "output directory (drop --url and --service-url; set brokerlabTraceDir on your "
            "own broker instead)"
        )
    if not own_broker and any(
        event.type == "restart" and event.broker < 0 for event in scenario.events
    ):
        raise ScenarioError(
            f"{scenario.name}: a restart event needs a broker the load generator started "
            "(drop --url and --service-url)"
        )


def _with_driver(scenario: Scenario, driver: str) -> Scenario:
    try:
        return Scenario.model_validate({**scenario.model_dump(), "driver": driver})
    except ValidationError as error:
        raise ScenarioError(f"--driver {driver}: {error.errors()[0]['msg']}") from None


def _trace(options: RunOptions) -> dict[str, object]:
    if not options.trace or options.out_dir is None:
        return {}
    return {"brokerlabTraceDir": str((options.out_dir / "trace").resolve())}


async def _until_interrupted(url: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    print(f"the broker stays up at {url} (dashboard: {url}/dashboard); Ctrl-C stops it")
    try:
        await stop.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


def _connection_limit(consumers: int) -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    budget = soft - 512 if soft != resource.RLIM_INFINITY else 1 << 20
    return max(64, min(consumers + 64, budget))


async def _run_against(
    scenario: Scenario,
    options: RunOptions,
    url: str | None,
    service_url: str,
    broker: BrokerProcess | None,
    brokers: list[str] | None = None,
) -> dict[str, Any]:
    """``url``: the broker's HTTP base (None: a foreign broker reached over the binary
    protocol only); ``service_url``: its binary protocol, for the pulsar driver;
    ``brokers``: every broker's HTTP base when the broker is a cluster."""
    cluster = brokers or []
    consumer_count = (
        scenario.topics
        * scenario.partitionsPerTopic
        * scenario.subscriptionsPerTopic
        * scenario.consumerPerSubscription
    )
    async with contextlib.AsyncExitStack() as stack:
        admin: BrokerClient | None = None
        stats_error: str | None = f"no HTTP admin (the broker is {service_url} only)"
        if url is not None:
            admin = BrokerClient(
                url, connections=ADMIN_CONCURRENCY + 8, brokers=cluster, token=options.token
            )
            stack.push_async_callback(admin.close)
            stats_error = await _probe_stats(admin, required=scenario.driver == "http")
        driver: Driver
        if scenario.driver == "pulsar":
            # imported when used: the official client's C++ core takes some 40 ms to load
            from loadgen.pulsar_driver import PulsarDriver

            log_path = options.out_dir / "pulsar-client.log" if options.out_dir else None
            driver = PulsarDriver(scenario, service_url, log_path=log_path, token=options.token)
        else:
            assert url is not None and admin is not None
            client = BrokerClient(
                url, connections=PRODUCE_CONNECTIONS, brokers=cluster, token=options.token
            )
            stack.push_async_callback(client.close)
            consumer_client = BrokerClient(
                url,
                connections=_connection_limit(consumer_count),
                brokers=cluster,
                token=options.token,
            )
            stack.push_async_callback(consumer_client.close)
            driver = HttpDriver(client, consumer_client, admin)
        stack.push_async_callback(driver.close)
        run = Run(scenario, driver, admin, broker, service_url=service_url, stats_error=stats_error)
        return await execute(run, options)


async def _probe_stats(admin: BrokerClient, *, required: bool) -> str | None:
    """Wait for the broker's HTTP admin to answer its cache stats; when they are not
    ``required`` (the pulsar driver), why there are none instead of an error. A refused
    token is an error either way: the run would be refused too, later and less clearly."""
    try:
        await retry_while_unavailable(admin.cache_stats)
    except BrokerError as error:
        if required or isinstance(error, AuthenticationError):
            raise
        return f"no brokerlab stats at {admin.base_url}: {error}"
    return None


async def execute(run: Run, options: RunOptions) -> dict[str, Any]:
    """Set the run up (consumers, subscriptions, producers), build the catch-up backlog
    if asked, start consuming and producing, warm up, measure (and drain), then stop
    every worker. The results (``loadgen.results``)."""
    scenario = run.scenario
    progress = (
        ProgressDisplay(scenario.name, scenario.testDurationSeconds) if options.progress else None
    )
    # --- set up: subscriptions exist before anything is produced
    _add_consumers(run)
    await run.driver.prepare(run)
    _add_producers(run)
    errors = await bounded([producer.open for producer in run.producers])
    if errors:
        raise errors[0]
    tasks: list[asyncio.Task[None]] = []
    try:
        if scenario.consumerBacklogSizeMB > 0:
            await _build_backlog(run, progress)
        if progress is not None:
            progress.start()
        # consumers poll as soon as they are connected (one that waited for all the
        # others could idle out on the broker); producers start once all are connected
        tasks += [asyncio.create_task(worker.run_forever()) for worker in run.consumers]
        await run.all_connected.wait()
        if run.setup_error is not None:
            raise run.setup_error
        producing = _start_producers(run)
        tasks += producing
        if scenario.warmupSeconds > 0:
            await asyncio.sleep(scenario.warmupSeconds)
        sampler = Sampler(run, options.sample_interval_s, progress)
        results = await _measure(run, sampler, options)
        if options.drain_s > 0:
            results["drain"] = await _drain(run, producing, options.drain_s)
    finally:
        run.stopping = True
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if progress is not None:
            progress.stop()
    if run.broker is None:
        # someone else's broker: leave no sessions behind
        await bounded([worker.disconnect for worker in run.consumers])
    return results


def _add_consumers(run: Run) -> None:
    """Every consumer of every subscription of every topic (partition), the first
    ``slowConsumers`` of each subscription rate limited (all of them when 0)."""
    scenario = run.scenario
    behaviour = scenario.consumers
    for topic in run.topics:
        for index in range(scenario.subscriptionsPerTopic):
            for number in range(scenario.consumerPerSubscription):
                slow = behaviour.rateLimit > 0 and (
                    behaviour.slowConsumers == 0 or number < behaviour.slowConsumers
                )
                worker = run.driver.consumer(
                    run, topic, index, f"c-{index}-{number}", behaviour.rateLimit if slow else 0.0
                )
                run.consumers.append(worker)
    run.expect_connections()
    if len(run.consumers) > MANY_CONSUMERS:
        run.poll_timeout_ms = MANY_CONSUMERS_POLL_TIMEOUT_MS


def _add_producers(run: Run) -> None:
    """``producersPerTopic`` producers of each topic, sharing ``producerRate``."""
    scenario = run.scenario
    producers_total = scenario.topics * scenario.producersPerTopic
    rate = scenario.producerRate / producers_total if producers_total else 0.0
    for index in range(scenario.topics):
        for number in range(scenario.producersPerTopic):
            run.producers.append(
                run.driver.producer(
                    run,
                    f"p-{index}-{number}",
                    run.partitions_of(index),
                    rate,
                    seed=scenario.seed * 1_000_003 + len(run.producers),
                )
            )


def _start_producers(run: Run) -> list[asyncio.Task[None]]:
    """Each producer sending until the end of warm-up and measurement, their first sends
    staggered over one interval (seeded) so they do not all send at once."""
    scenario = run.scenario
    produce_until = run.clock.now_ns() + int(
        (scenario.warmupSeconds + scenario.testDurationSeconds) * 1e9
    )
    stagger = random.Random(scenario.seed)
    start_ns = run.clock.now_ns()
    producing = []
    for producer in run.producers:
        offset = int(stagger.random() * producer.interval_ns) if producer.interval_ns else 0
        producing.append(asyncio.create_task(producer.run_until(produce_until, start_ns + offset)))
    return producing


async def _drain(
    run: Run, producing: Sequence[asyncio.Task[None]], timeout_s: float
) -> dict[str, Any]:
    """After the measured run: wait for the producers' last sends, then for the consumers
    to have received every message acknowledged on publish, each one in every
    subscription (a repeat of one message does not stand in for another), and
    acknowledged them unless ackMode is none, for up to ``timeout_s``. Counts are over
    the whole run, warm-up and catch-up backlog included."""
    began = run.now_s()
    deadline = began + timeout_s
    if producing:
        await asyncio.wait(producing, timeout=timeout_s)
    while run.now_s() < deadline:
        if run.caught_up():
            break
        await asyncio.sleep(DRAIN_POLL_S)
    return drain_results(run, run.now_s() - began)


def drain_results(run: Run, seconds: float) -> dict[str, Any]:
    """The drain's part of the results (loadgen.results), from the run's lifetime
    counts: ``caughtUp`` is ``Run.caught_up``."""
    deliveries = run.deliveries
    return {
        "seconds": round(seconds, 3),
        "caughtUp": run.caught_up(),
        "publishedMessages": run.sent_ever,
        "firstDeliveries": run.first_deliveries_ever,
        "distinctDeliveries": deliveries.distinct,
        "missing": deliveries.missing(),
        "ackedMessages": run.acked_ever,
        "backlog": run.backlog(),
        "awaitingRedelivery": len(run.nacked_pending),
        # the largest end-to-end latency of the run and the drain together: a message
        # delivered only in the drain (a delayed one due after the run) counts here
        "endToEndLatencyMaxMs": run.end_to_end.max_ms(),
    }


async def _measure(run: Run, sampler: Sampler, options: RunOptions) -> dict[str, Any]:
    scenario = run.scenario
    run.counters.reset()
    run.publish.reset()
    run.end_to_end.reset()
    await sampler.baseline()
    run.started_at_ms = int(run.clock.wall_ms())
    start = run.now_s()
    event_log: list[dict[str, Any]] = []
    events = asyncio.create_task(run_events(run, start, event_log))
    duration = scenario.testDurationSeconds
    interval = options.sample_interval_s
    tick = 1
    try:
        while True:
            target = min(tick * interval, duration)
            delay = start + target - run.now_s()
            if delay > 0:
                await asyncio.sleep(delay)
            await sampler.sample(run.now_s() - start, duration)
            if target >= duration:
                break
            tick += 1
    finally:
        if not events.done():
            events.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await events
        for event in sorted(scenario.events, key=lambda e: e.at)[len(event_log) :]:
            event_log.append(
                {
                    "at": round(event.at, 3),
                    "type": event.type,
                    "subscription": event.subscription,
                    "ok": False,
                    "detail": "not started: an earlier event was still running at the end",
                }
            )
    measured = run.now_s() - start
    end_cache = dict(sampler.last_cache)
    end_storage = dict(sampler.last_storage)
    trace: dict[str, Any] = {"enabled": False}
    if run.admin is not None and run.stats_error is None:
        with contextlib.suppress(BrokerError):
            trace = await run.admin.trace_stats()
    results = build_results(
        scenario=scenario,
        url=run.admin.base_url if run.admin is not None else None,
        service_url=run.service_url or None,
        stats_error=run.stats_error,
        started_broker=run.broker is not None,
        started_at_ms=run.started_at_ms,
        measured_s=measured,
        interval_s=interval,
        series=sampler.series,
        shadow_series=sampler.shadow_hit_ratio,
        publish=run.publish.summary(),
        end_to_end=run.end_to_end.summary(),
        counters=sampler.counted,
        backlog_at_end=run.backlog(),
        events=event_log,
        cache_delta=sampler.cache.total,
        storage_delta=sampler.storage.total,
        cache_at_end=end_cache,
        storage_at_end=end_storage,
        broker_restarts=(run.broker.starts - 1) if run.broker is not None else 0,
        overrides={**scenario.broker, **options.broker_overrides},
    )
    results["trace"] = trace
    return results


async def _build_backlog(run: Run, progress: ProgressDisplay | None) -> None:
    """Produce ``consumerBacklogSizeMB`` per subscription (per topic) as fast as the
    producers go, before any consumer connects (OMB's consumerBacklogSizeGB)."""
    scenario = run.scenario
    per_topic = int(scenario.consumerBacklogSizeMB * 1024 * 1024 / max(1, scenario.messageSize))
    target = per_topic * scenario.topics * scenario.partitionsPerTopic
    deadline = run.clock.now_ns() + int(3600 * 1e9)
    # the run's producers, unthrottled for the while
    intervals = [producer.interval_ns for producer in run.producers]
    for producer in run.producers:
        producer.interval_ns = 0
    run.stop_at_sent = target
    try:
        now = run.clock.now_ns()
        await asyncio.gather(*(producer.run_until(deadline, now) for producer in run.producers))
    finally:
        for producer, interval in zip(run.producers, intervals, strict=True):
            producer.interval_ns = interval
        run.stop_at_sent = None
        run.stopping = False


def default_out_dir(scenario: str) -> pathlib.Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return pathlib.Path("results") / f"{scenario}-{stamp}-{os.getpid()}"
