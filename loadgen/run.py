"""One load-generator run: its options, its shared state (:class:`Run`: counters,
latencies, topics, workers) and the seams it runs through: the admin, a broker it
started, and the driver with its producers and consumers (``loadgen.http_driver`` over
the REST routes, ``loadgen.pulsar_driver`` over the binary protocol, or the
simulation's in-process clients).
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import re
import secrets
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from loadgen.bounded import ADMIN_CONCURRENCY, bounded, partial_call
from loadgen.client import BrokerError, Unavailable
from loadgen.clock import LiveClock, RunClock
from loadgen.deliveries import Deliveries
from loadgen.recorder import Counters, Latency
from loadgen.scenario import ConsumerBehaviour, Scenario

TENANT = "public"
#: characters a topic name part may not hold (API.md), replaced in scenario names
TOPIC_UNSAFE = re.compile(r"[^A-Za-z0-9_.=:-]")
NAMESPACE = "loadgen"
#: long-poll timeout; with many consumers, idle polls would be most of the traffic, so
#: they wait longer (a consumer must still poll within consumerIdleTimeoutMs, 30 s)
POLL_TIMEOUT_MS = 1000
MANY_CONSUMERS = 200
MANY_CONSUMERS_POLL_TIMEOUT_MS = 10_000
#: produce requests in flight across all producers (the producers' connection pool): an
#: open-loop producer that falls behind waits here, and its latency shows it
PRODUCE_CONNECTIONS = 256


@dataclasses.dataclass
class RunOptions:
    """Where and how to run. ``url`` names an existing broker; without it the run starts
    its own (``brokerlab serve`` on an ephemeral port, data in a temporary directory)."""

    url: str | None = None
    config: pathlib.Path | None = None
    storage_config: pathlib.Path | None = None
    broker_overrides: dict[str, object] = dataclasses.field(default_factory=dict)
    storage_overrides: dict[str, object] = dataclasses.field(default_factory=dict)
    duration_s: float | None = None
    out_dir: pathlib.Path | None = None
    progress: bool = False
    sample_interval_s: float = 1.0
    #: called with the broker's URL once it is up (the demo prints the dashboard's)
    on_broker_ready: Callable[[str], None] | None = None
    #: after the run, keep a started broker up until SIGINT/SIGTERM (the demo's dashboard)
    keep_serving: bool = False
    #: record the broker's access trace into ``out_dir/trace`` (a broker it starts)
    trace: bool = False
    #: the scenario's driver, overridden ("http" or "pulsar")
    driver: str | None = None
    #: the pulsar driver's ``pulsar://host:port`` (overrides the scenario's serviceUrl);
    #: with a service URL and no ``url``, no broker is started and there is no HTTP admin
    service_url: str | None = None
    #: after the measured run, let the consumers catch up for up to this long (results'
    #: ``drain`` says whether every stored message reached every subscription)
    drain_s: float = 0.0
    #: sent with every request, HTTP (``Authorization: Bearer``) and binary protocol
    #: (``pulsar.AuthenticationToken``), to a started broker too (None: no credentials)
    token: str | None = None
    #: the name ``compare`` gives the run (results' ``variant``; the plots' label)
    variant: str | None = None
    #: draw the run's charts beside ``results.json`` (matplotlib: seconds of CPU); a
    #: caller that wants only the results or the trace (``bench replay``) turns it off
    plots: bool = True


class RunFailed(Exception):
    """The run could not go on (a virtual-time run in which nothing can progress any
    more, say); the message says what was stuck."""


class VirtualRunner(Protocol):
    """Runs a scenario on virtual time (``simulation.run.run_virtual``, which the broker
    CLI hands over: the load generator never imports the broker): the results, written
    to ``options.out_dir`` when set; ``seed`` replaces the scenario's. ScenarioError for
    what it cannot honour, RunFailed for a run that cannot end."""

    def __call__(
        self, scenario: Scenario, options: RunOptions, seed: int | None = None
    ) -> dict[str, Any]: ...


class VirtualSweep(Protocol):
    """Runs planned virtual-time runs (variant name, options, seed) as Spark tasks on
    ``master`` or ``remote`` (``simulation.spark``, handed over by the broker CLI); the
    results in the planned order, nothing written. RunFailed if a run or Spark failed."""

    def __call__(
        self,
        scenario: Scenario,
        planned: Sequence[tuple[str, RunOptions, int]],
        master: str | None,
        remote: str | None,
    ) -> list[dict[str, Any]]: ...


class Admin(Protocol):
    """The admin calls a run makes: set-up, events and the broker's stats
    (:class:`~loadgen.client.BrokerClient` over HTTP, or a simulated cluster's own)."""

    base_url: str

    async def create_subscription(self, topic: str, subscription: str, position: str) -> None: ...

    async def reset_cursor_to_time(self, topic: str, subscription: str, time_ms: int) -> None: ...

    async def unload_namespace(self, tenant: str, namespace: str) -> None: ...

    async def unload_bundle(self, tenant: str, namespace: str, bundle: str) -> None: ...

    async def restart_broker(self, index: int, mode: str, downtime_ms: int) -> None: ...

    async def last_message_id(self, topic: str) -> str: ...

    async def offload(self, topic: str, message_id: str) -> None: ...

    async def cache_stats(self) -> dict[str, Any]: ...

    async def storage_stats(self) -> dict[str, Any]: ...

    async def stats(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The cache stats (every broker's, summed) and the storage stats, read at one
        instant: the caches' misses equal the storage's entries read."""

    async def trace_stats(self) -> dict[str, Any]: ...


class StartedBroker(Protocol):
    """A broker the run started and owns (``brokerlab serve`` in a subprocess, or a
    simulated cluster): the whole-broker ``restart`` event restarts it."""

    #: its HTTP base, or what names it
    url: str
    #: how many times it started (restarts + 1)
    starts: int

    async def restart(self) -> object: ...


class Producer(Protocol):
    """One producer of one topic (its partitions), whichever driver sends."""

    name: str
    partitions: list[str]
    #: nanoseconds between two scheduled sends; 0: as fast as the driver lets it
    interval_ns: int

    async def open(self) -> None: ...

    async def run_until(self, deadline_ns: int, first_send_ns: int) -> None: ...


class Consumer(Protocol):
    """One consumer session of one subscription on one topic (partition)."""

    subscription_index: int

    async def run_forever(self) -> None: ...

    async def disconnect(self) -> None: ...

    def reconnect(self) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...


class Driver(Protocol):
    """How producers and consumers reach the broker."""

    name: str

    def producer(
        self, run: Run, name: str, partitions: list[str], rate: float, seed: int
    ) -> Producer: ...

    def consumer(
        self, run: Run, topic: str, subscription_index: int, name: str, rate_limit: float
    ) -> Consumer: ...

    async def prepare(self, run: Run) -> None:
        """Make the subscriptions exist before anything is produced."""

    async def seek(self, run: Run, subscriptions: list[str], time_ms: int) -> None:
        """Reset the subscriptions of every topic to ``time_ms`` (0: the earliest)."""

    async def close(self) -> None: ...


class Run:
    """One run's shared state: the driver, counters, latencies, topics and workers."""

    def __init__(
        self,
        scenario: Scenario,
        driver: Driver,
        admin: Admin | None,
        broker: StartedBroker | None,
        *,
        service_url: str = "",
        stats_error: str | None = None,
        clock: RunClock | None = None,
        run_id: str | None = None,
    ) -> None:
        self.scenario = scenario
        self.driver = driver
        self.broker = broker
        self.service_url = service_url
        #: why there are no brokerlab cache and storage stats (None: there are)
        self.stats_error = stats_error
        #: every time the run reads: real, or the simulation's virtual time
        self.clock: RunClock = clock or LiveClock()
        #: part of every topic name: random against a live broker (a new run never meets
        #: an old run's topics), given by a virtual run (the same on every run of a seed)
        self.run_id = run_id or secrets.token_hex(3)
        self.counters = Counters()
        self.publish = Latency()
        self.end_to_end = Latency()
        self.stopping = False
        # lifetime totals (not reset after warm-up) for the client-side backlog
        self.sent_ever = 0
        #: while building a catch-up backlog: stop producing once this many are stored
        self.stop_at_sent: int | None = None
        self.first_deliveries_ever = 0
        #: each message by its identity: which were published, which reached which
        #: subscription (distinct messages, where the counts above count deliveries)
        self.deliveries = Deliveries(
            scenario.subscriptionsPerTopic, scenario.topics * scenario.producersPerTopic
        )
        #: every message a consumer received, redeliveries too
        self.received_ever = 0
        self.acked_ever = 0
        #: ids of negatively acknowledged messages not acknowledged since (redelivery due)
        self.nacked_pending: set[str] = set()
        self.topics = [
            self._topic_name(index, partition)
            for index in range(scenario.topics)
            for partition in range(scenario.partitionsPerTopic)
        ]
        self.subscriptions = [f"sub-{index}" for index in range(scenario.subscriptionsPerTopic)]
        self.consumers: list[Consumer] = []
        self.producers: list[Producer] = []
        self.started_at_ms = 0
        self.poll_timeout_ms = POLL_TIMEOUT_MS
        #: consumer connects in flight at once
        self.connecting = asyncio.Semaphore(ADMIN_CONCURRENCY)
        self.produce_slots = asyncio.Semaphore(PRODUCE_CONNECTIONS)
        #: stats and admin events on their own pool, never queued behind produce; None: a
        #: broker reached over the binary protocol only (no stats, no admin events)
        self.admin = admin
        self.all_connected = asyncio.Event()
        self.setup_error: BrokerError | None = None
        self._not_yet_connected: set[int] = set()

    def now_s(self) -> float:
        """The run's monotonic clock in seconds."""
        return self.clock.now_ns() / 1e9

    def expect_connections(self) -> None:
        self._not_yet_connected = {id(worker) for worker in self.consumers}
        if not self._not_yet_connected:
            self.all_connected.set()

    def connected(self, worker: Consumer, error: BrokerError | None) -> None:
        """A consumer's first connection attempt ended; a refusal (not a broker that is
        briefly unreachable) fails the set-up."""
        if self.all_connected.is_set():
            return
        if error is not None:
            if not isinstance(error, Unavailable):
                self.setup_error = error
                self.all_connected.set()
            return
        self._not_yet_connected.discard(id(worker))
        if not self._not_yet_connected:
            self.all_connected.set()

    def _topic_name(self, index: int, partition: int) -> str:
        name = TOPIC_UNSAFE.sub("-", self.scenario.name)[:64]
        base = f"persistent://{TENANT}/{NAMESPACE}/{name}-{self.run_id}-{index}"
        if self.scenario.partitionsPerTopic == 1:
            return base
        return f"{base}-partition-{partition}"

    def partitions_of(self, index: int) -> list[str]:
        count = self.scenario.partitionsPerTopic
        return self.topics[index * count : (index + 1) * count]

    @property
    def in_flight_cap(self) -> int:
        return self.scenario.maxMessagesInFlight

    def backlog(self) -> int:
        expected = self.sent_ever * self.scenario.subscriptionsPerTopic
        return max(0, expected - self.first_deliveries_ever)

    def caught_up(self) -> bool:
        """Whether every message acknowledged on publish reached every subscription
        (each distinct message, not a count a repeat can make up: see
        loadgen.deliveries), none awaits redelivery after a nack, and (unless ackMode is
        none) as many were acknowledged as first delivered. O(1)."""
        if self.backlog() or self.deliveries.missing() or self.nacked_pending:
            return False
        acking = self.scenario.consumers.ackMode != "none"
        return not acking or self.acked_ever >= self.first_deliveries_ever

    def in_flight(self) -> int:
        """Messages in flight as maxMessagesInFlight counts them (the public PIP-430
        test's counter): one per subscription per message sent, less every message
        received, redeliveries included. O(1)."""
        return self.sent_ever * self.scenario.subscriptionsPerTopic - self.received_ever

    def admin_or_refuse(self, what: str) -> Admin:
        """The HTTP admin, or a BrokerError saying ``what`` needs it."""
        if self.admin is None:
            raise BrokerError(
                0, "no-admin", f"{what} needs the broker's HTTP admin (--url), and there is none"
            )
        return self.admin


def reconnect_delay_s(behaviour: ConsumerBehaviour, draw: Callable[[], float]) -> float:
    """How long a consumer closed under it waits before subscribing again: the
    scenario's ``reconnectDelayMs`` plus a draw of up to ``reconnectJitterMs``."""
    return (behaviour.reconnectDelayMs + draw() * behaviour.reconnectJitterMs) / 1000


async def create_subscriptions(run: Run) -> None:
    """Every subscription of every topic, from the earliest message, through the admin."""
    admin = run.admin_or_refuse("creating subscriptions")
    errors = await bounded(
        [
            partial_call(admin.create_subscription, topic, subscription, "earliest")
            for topic in run.topics
            for subscription in run.subscriptions
        ]
    )
    if errors:
        raise errors[0]


async def reset_subscriptions(run: Run, subscriptions: list[str], time_ms: int) -> None:
    """Reset ``subscriptions`` of every topic to ``time_ms`` through the admin."""
    admin = run.admin_or_refuse("seek")
    errors = await bounded(
        [
            partial_call(admin.reset_cursor_to_time, topic, subscription, time_ms)
            for topic in run.topics
            for subscription in subscriptions
        ]
    )
    if errors:
        raise errors[0]
