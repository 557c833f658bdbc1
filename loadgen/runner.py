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
import dataclasses
import os
import pathlib
import random
import re
import resource
import secrets
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import orjson
import pybase64
from pydantic import ValidationError

from loadgen.broker_process import BrokerProcess
from loadgen.client import AuthenticationError, BrokerClient, BrokerError, Unavailable
from loadgen.clock import LiveClock, RunClock
from loadgen.keys import KeyDistributor, key_name
from loadgen.progress import ProgressDisplay
from loadgen.recorder import CounterDeltas, Counters, Latency, flatten
from loadgen.results import build_results
from loadgen.scenario import ConsumerBehaviour, Event, Scenario, ScenarioError

TENANT = "public"
#: characters a topic name part may not hold (API.md), replaced in scenario names
TOPIC_UNSAFE = re.compile(r"[^A-Za-z0-9_.=:-]")
NAMESPACE = "loadgen"
#: long-poll timeout; with many consumers, idle polls would be most of the traffic, so
#: they wait longer (a consumer must still poll within consumerIdleTimeoutMs, 30 s)
POLL_TIMEOUT_MS = 1000
MANY_CONSUMERS = 200
MANY_CONSUMERS_POLL_TIMEOUT_MS = 10_000
#: requests one producer keeps in flight before it waits
MAX_IN_FLIGHT = 8
#: produce requests in flight across all producers (the producers' connection pool): an
#: open-loop producer that falls behind waits here, and its latency shows it
PRODUCE_CONNECTIONS = 256
#: concurrent admin or setup requests
ADMIN_CONCURRENCY = 64
BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)
#: how long a started brokerlab may take to print its binary protocol's address after
#: its HTTP one
SERVICE_URL_WAIT_S = 10.0
#: how often a drain looks whether the consumers have caught up
DRAIN_POLL_S = 0.05


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


class HttpDriver:
    """Producers and consumers over the broker's REST routes (docs/api.md), each side on
    its own connection pool."""

    name = "http"

    def __init__(
        self, client: BrokerClient, consumer_client: BrokerClient, admin: BrokerClient
    ) -> None:
        self.client = client
        self.consumer_client = consumer_client
        self.admin = admin

    def producer(
        self, run: Run, name: str, partitions: list[str], rate: float, seed: int
    ) -> ProducerWorker:
        return ProducerWorker(run, self.client, name, partitions, rate, seed)

    def consumer(
        self, run: Run, topic: str, subscription_index: int, name: str, rate_limit: float
    ) -> ConsumerWorker:
        client = self.consumer_client
        return ConsumerWorker(run, client, topic, subscription_index, name, rate_limit)

    async def prepare(self, run: Run) -> None:
        await create_subscriptions(run)

    async def seek(self, run: Run, subscriptions: list[str], time_ms: int) -> None:
        await reset_subscriptions(run, subscriptions, time_ms)

    async def close(self) -> None:
        """The pools belong to the run that opened them."""


async def create_subscriptions(run: Run) -> None:
    """Every subscription of every topic, from the earliest message, through the admin."""
    admin = run.admin_or_refuse("creating subscriptions")
    errors = await _bounded(
        [
            _partial(admin.create_subscription, topic, subscription, "earliest")
            for topic in run.topics
            for subscription in run.subscriptions
        ]
    )
    if errors:
        raise errors[0]


async def reset_subscriptions(run: Run, subscriptions: list[str], time_ms: int) -> None:
    """Reset ``subscriptions`` of every topic to ``time_ms`` through the admin."""
    admin = run.admin_or_refuse("seek")
    errors = await _bounded(
        [
            _partial(admin.reset_cursor_to_time, topic, subscription, time_ms)
            for topic in run.topics
            for subscription in subscriptions
        ]
    )
    if errors:
        raise errors[0]


class ProducerWorker:
    """One producer of one topic: requests of ``messagesPerRequest`` messages at
    ``rate`` messages/s (0: as fast as ``MAX_IN_FLIGHT`` requests allow), round robin
    over the topic's partitions, or by key (key index modulo partitions) when keyed."""

    __slots__ = (
        "_bodies",
        "_fragments",
        "_in_flight",
        "_keys",
        "_next_partition",
        "_prefix",
        "client",
        "interval_ns",
        "name",
        "partitions",
        "run",
    )

    def __init__(
        self,
        run: Run,
        client: BrokerClient,
        name: str,
        partitions: list[str],
        rate: float,
        seed: int,
    ) -> None:
        scenario = run.scenario
        self.run = run
        self.client = client
        self.name = name
        self.partitions = partitions
        self.interval_ns = int(scenario.messagesPerRequest / rate * 1e9) if rate > 0 else 0
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._keys = KeyDistributor(
            scenario.keyDistributor, scenario.keys, scenario.zipfExponent, seed
        )
        self._next_partition = 0
        payload = random.Random(seed).randbytes(scenario.messageSize)
        encoded = pybase64.b64encode(payload).decode()
        self._prefix = orjson.dumps({"producerName": name})[:-1] + b',"messages":['
        self._fragments: dict[int | None, bytes] = {None: orjson.dumps({"payload": encoded})}
        if self._keys.keyed:
            for key in range(scenario.keys):
                self._fragments[key] = orjson.dumps({"payload": encoded, "key": key_name(key)})
        # unkeyed requests are all the same bytes: build them once
        unkeyed = b",".join([self._fragments[None]] * scenario.messagesPerRequest)
        self._bodies = self._prefix + unkeyed + b"]}"

    async def open(self) -> None:
        """Nothing to open: each request is on its own."""

    def _next_request(self) -> tuple[str, bytes, int]:
        """The next request: its topic (partition), body and number of messages."""
        partitions = self.partitions
        count = self.run.scenario.messagesPerRequest
        if not self._keys.keyed:
            topic = partitions[self._next_partition % len(partitions)]
            self._next_partition += 1
            return topic, self._bodies, count
        fragments = self._fragments
        draw = self._keys.next
        if len(partitions) == 1:
            chosen = [fragments[draw()] for _ in range(count)]
            return partitions[0], self._prefix + b",".join(chosen) + b"]}", count
        # keyed and partitioned: a request goes to one partition, with keys of that
        # partition only (drawn from the distribution, keeping the partition's keys)
        partition = self._next_partition % len(partitions)
        self._next_partition += 1
        chosen = []
        attempts = 0
        while len(chosen) < count and attempts < count * len(partitions) * 8:
            key = draw()
            attempts += 1
            if key is not None and key % len(partitions) == partition:
                chosen.append(fragments[key])
        if not chosen:
            chosen = [fragments[partition % self.run.scenario.keys]]
        body = self._prefix + b",".join(chosen) + b"]}"
        return partitions[partition], body, len(chosen)

    async def run_until(self, deadline_ns: int, first_send_ns: int) -> None:
        """Send on schedule until ``deadline_ns`` (perf_counter_ns)."""
        run = self.run
        scheduled = first_send_ns
        tasks: set[asyncio.Task[None]] = set()
        try:
            while not run.stopping:
                now = run.clock.now_ns()
                if self.interval_ns and scheduled > now:
                    await asyncio.sleep((scheduled - now) / 1e9)
                    now = run.clock.now_ns()
                if now >= deadline_ns or run.stopping:
                    break
                if run.in_flight_cap and run.in_flight() >= run.in_flight_cap:
                    # the consumers are this far behind: wait for them (and then go on
                    # from now, not in a burst making up for the pause)
                    await asyncio.sleep(run.scenario.inFlightPauseMs / 1000)
                    scheduled = run.clock.now_ns()
                    continue
                await self._in_flight.acquire()
                await run.produce_slots.acquire()
                if not self.interval_ns:
                    scheduled = run.clock.now_ns()
                topic, body, count = self._next_request()
                task = asyncio.create_task(self._send(topic, body, count, scheduled))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                scheduled += self.interval_ns
        finally:
            # let requests in flight finish, so what was stored is counted
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _send(self, topic: str, body: bytes, count: int, scheduled_ns: int) -> None:
        """Send one request; while the topic's broker is unavailable (restarting, its
        topic moving) send it again, as a Pulsar producer keeps its pending messages and
        resends them after reconnecting, until the run stops."""
        run = self.run
        counters = run.counters
        failures = 0
        try:
            while True:
                try:
                    stored = await self.client.produce(topic, body)
                    break
                except Unavailable:
                    if run.stopping:
                        counters.publish_errors += count
                        return
                    await asyncio.sleep(BACKOFF_S[min(failures, len(BACKOFF_S) - 1)])
                    failures += 1
                except BrokerError:
                    counters.publish_errors += count
                    return
        finally:
            self._in_flight.release()
            run.produce_slots.release()
        run.publish.record_us((run.clock.now_ns() - scheduled_ns) / 1000, count)
        counters.published_messages += stored
        counters.published_bytes += stored * run.scenario.messageSize
        counters.publish_errors += count - stored
        run.sent_ever += stored
        if run.stop_at_sent is not None and run.sent_ever >= run.stop_at_sent:
            run.stopping = True


class ConsumerWorker:
    """One consumer session of one subscription on one topic (partition)."""

    __slots__ = (
        "_jitter_draw",
        "_nack_draw",
        "_resumed",
        "_wanted",
        "client",
        "consumer_id",
        "name",
        "rate_limit",
        "run",
        "subscription",
        "subscription_index",
        "topic",
    )

    def __init__(
        self,
        run: Run,
        client: BrokerClient,
        topic: str,
        subscription_index: int,
        name: str,
        rate_limit: float,
    ) -> None:
        self.run = run
        #: the consumers' own connection pool: long polls never hold a producer's socket
        self.client = client
        self.topic = topic
        self.subscription_index = subscription_index
        self.subscription = run.subscriptions[subscription_index]
        self.name = name
        self.rate_limit = rate_limit
        self.consumer_id: str | None = None
        self._wanted = asyncio.Event()
        self._wanted.set()
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._nack_draw = random.Random(f"{run.scenario.seed}:{topic}:{name}").random
        self._jitter_draw = random.Random(f"{run.scenario.seed}:{topic}:{name}:jitter").random

    def spec(self) -> dict[str, Any]:
        return {
            "consumerName": self.name,
            "subscriptionType": self.run.scenario.subscriptionType,
            "subscriptionInitialPosition": "Earliest",
            "receiverQueueSize": self.run.scenario.consumers.receiverQueueSize,
            "negativeAckRedeliveryDelayMillis": (
                self.run.scenario.consumers.negativeAckRedeliveryDelayMs
            ),
        }

    async def connect(self) -> None:
        self.consumer_id = await self.client.create_consumer(
            self.topic, self.subscription, self.spec()
        )

    async def disconnect(self) -> None:
        self._wanted.clear()
        consumer_id, self.consumer_id = self.consumer_id, None
        if consumer_id is not None:
            with contextlib.suppress(BrokerError):
                await self.client.close_consumer(consumer_id)

    def reconnect(self) -> None:
        self._wanted.set()

    def pause(self) -> None:
        self._resumed.clear()

    def resume(self) -> None:
        self._resumed.set()

    async def run_forever(self) -> None:
        run = self.run
        client = self.client
        scenario = run.scenario
        behaviour = scenario.consumers
        batch = behaviour.receiveBatchSize
        ack_mode = behaviour.ackMode
        cumulative = ack_mode == "cumulative"
        nack_ratio = behaviour.nackRatio
        counters = run.counters
        failures = 0
        next_poll = 0.0
        lost = False
        while not run.stopping:
            if not self._wanted.is_set():
                await self._wanted.wait()
                continue
            if not self._resumed.is_set():
                await self._resumed.wait()
                continue
            if self.consumer_id is None:
                if lost and (behaviour.reconnectDelayMs or behaviour.reconnectJitterMs):
                    await asyncio.sleep(reconnect_delay_s(behaviour, self._jitter_draw))
                lost = False
                try:
                    async with run.connecting:
                        await self.connect()
                    failures = 0
                    run.connected(self, None)
                    if not self._wanted.is_set():
                        # a disconnect event came while connecting: honour it
                        await self.disconnect()
                        continue
                except BrokerError as error:
                    run.connected(self, error)
                    run.counters.consume_errors += 1
                    await asyncio.sleep(BACKOFF_S[min(failures, len(BACKOFF_S) - 1)])
                    failures += 1
                    continue
            consumer_id = self.consumer_id
            assert consumer_id is not None
            if self.rate_limit:
                delay = next_poll - run.now_s()
                if delay > 0:
                    await asyncio.sleep(delay)
            try:
                messages = await client.receive(consumer_id, batch, run.poll_timeout_ms)
            except BrokerError:
                # closed under us (unload, restart, idle timeout) or unreachable:
                # reconnect, as a Pulsar client does
                if self.consumer_id == consumer_id:
                    self.consumer_id = None
                    client.forget_consumer(consumer_id)
                    lost = True
                continue
            if not messages:
                continue
            self._record(messages)
            if self.rate_limit:
                next_poll = run.now_s() + len(messages) / self.rate_limit
            if ack_mode == "none":
                continue
            nacks: list[str] = []
            if cumulative:
                ids = [messages[-1]["messageId"]]
            elif nack_ratio:
                ids = []
                for message in messages:
                    first = message.get("redeliveryCount", 0) == 0
                    if first and self._nack_draw() < nack_ratio:
                        nacks.append(message["messageId"])
                    else:
                        ids.append(message["messageId"])
            else:
                ids = [message["messageId"] for message in messages]
            with contextlib.suppress(BrokerError):
                if nacks:
                    await client.nack(consumer_id, nacks)
                    counters.nacked_messages += len(nacks)
                    run.nacked_pending.update(nacks)
                if ids:
                    await client.ack(consumer_id, ids, cumulative)
                    acked = len(messages) - len(nacks)
                    counters.acked_messages += acked
                    run.acked_ever += acked
                    if run.nacked_pending:
                        run.nacked_pending.difference_update(ids)

    def _record(self, messages: list[Any]) -> None:
        run = self.run
        counters = run.counters
        now_ms = run.clock.wall_ms()
        record = run.end_to_end.record_us
        size = run.scenario.messageSize
        first = 0
        for message in messages:
            record((now_ms - message["publishTime"]) * 1000)
            if message.get("redeliveryCount", 0) == 0:
                first += 1
        counters.consumed_messages += len(messages)
        counters.consumed_bytes += len(messages) * size
        counters.redelivered_messages += len(messages) - first
        run.first_deliveries_ever += first
        run.received_ever += len(messages)


def reconnect_delay_s(behaviour: ConsumerBehaviour, draw: Callable[[], float]) -> float:
    """How long a consumer closed under it waits before subscribing again: the
    scenario's ``reconnectDelayMs`` plus a draw of up to ``reconnectJitterMs``."""
    return (behaviour.reconnectDelayMs + draw() * behaviour.reconnectJitterMs) / 1000


async def _bounded(
    calls: Sequence[Callable[[], Awaitable[None]]], limit: int = ADMIN_CONCURRENCY
) -> list[BaseException]:
    """Run the calls with at most ``limit`` at once; returns the errors."""
    errors: list[BaseException] = []
    iterator = iter(calls)

    async def worker() -> None:
        for call in iterator:
            try:
                await call()
            except BrokerError as error:
                errors.append(error)

    await asyncio.gather(*(worker() for _ in range(min(limit, len(calls)) or 1)))
    return errors


async def _retry(call: Callable[[], Awaitable[Any]], deadline_s: float = 60.0) -> Any:
    """Retry while the broker is unreachable (restarting) until ``deadline_s`` (real
    time: a live broker starting)."""
    clock = LiveClock()
    stop = clock.now_ns() + deadline_s * 1e9
    failures = 0
    while True:
        try:
            return await call()
        except Unavailable:
            if clock.now_ns() >= stop:
                raise
            await asyncio.sleep(BACKOFF_S[min(failures, len(BACKOFF_S) - 1)])
            failures += 1


class Sampler:
    """Every interval: rates, backlog, latency percentiles and the broker's hit ratio."""

    def __init__(self, run: Run, interval_s: float, progress: ProgressDisplay | None) -> None:
        self.run = run
        self.interval_s = interval_s
        self.progress = progress
        self.series: dict[str, list[Any]] = {}
        self.cache = CounterDeltas()
        self.storage = CounterDeltas()
        self._last_published = 0
        self._last_consumed = 0
        self._last_time = 0.0
        self.last_cache: dict[str, Any] = {}
        self.last_storage: dict[str, Any] = {}
        self.counted: dict[str, Any] = {}

    def _append(self, name: str, value: Any) -> None:
        self.series.setdefault(name, []).append(value)

    async def baseline(self) -> None:
        """Counters at the start of the measured run; growth is counted from here."""
        await self._broker_sample()
        self.cache.reset_totals()
        self.storage.reset_totals()
        self._last_time = self.run.now_s()

    async def _broker_sample(self) -> dict[str, float] | None:
        client = self.run.admin
        if client is None or self.run.stats_error is not None:
            return None
        try:
            cache, storage = await asyncio.gather(client.cache_stats(), client.storage_stats())
        except BrokerError:
            return None
        self.last_cache, self.last_storage = cache, storage
        self.storage.observe(flatten(storage))
        return self.cache.observe(flatten(cache))

    async def sample(self, elapsed_s: float, duration_s: float) -> None:
        run = self.run
        counters = run.counters
        now = run.now_s()
        seconds = max(now - self._last_time, 1e-9)
        self._last_time = now
        published = counters.published_messages - self._last_published
        consumed = counters.consumed_messages - self._last_consumed
        self._last_published = counters.published_messages
        self._last_consumed = counters.consumed_messages
        # the totals of the results are the counts the rates were computed from
        self.counted = counters.as_dict()
        self._append("time", round(elapsed_s, 3))
        self._append("publishRate", round(published / seconds, 1))
        self._append("consumeRate", round(consumed / seconds, 1))
        self._append("backlog", run.backlog())
        delta = await self._broker_sample()
        hit_ratio = None
        if delta is not None:
            reads = delta.get("hits", 0) + delta.get("misses", 0)
            hit_ratio = round(delta.get("hits", 0) / reads, 4) if reads else None
        self._append("hitRatio", hit_ratio)
        for prefix, latency in (
            ("publishLatency", run.publish),
            ("endToEndLatency", run.end_to_end),
        ):
            for suffix, value in latency.close_interval().items():
                self._append(prefix + suffix[0].upper() + suffix[1:], value)
        if self.progress is not None:
            self.progress.update(
                elapsed_s=elapsed_s,
                publish_rate=published / seconds,
                consume_rate=consumed / seconds,
                backlog=run.backlog(),
                hit_ratio=hit_ratio,
                publish_p99=self.series["publishLatency99pct"][-1],
                end_to_end_p99=self.series["endToEndLatency99pct"][-1],
            )


async def run_scenario(scenario: Scenario, options: RunOptions) -> dict[str, Any]:
    """Run ``scenario`` (scaled to ``options.duration_s`` if given); returns the results
    and, with ``options.out_dir``, writes ``results.json`` and the plots there."""
    if options.driver is not None and options.driver != scenario.driver:
        scenario = _with_driver(scenario, options.driver)
    if options.duration_s is not None:
        scenario = scenario.scaled(options.duration_s)
    service_url = options.service_url or scenario.pulsar.serviceUrl or None
    if service_url is not None and scenario.driver != "pulsar":
        raise ScenarioError(
            f"{scenario.name}: a service URL ({service_url}) is for the pulsar driver, and this "
            'run\'s driver is http (--driver pulsar, or driver = "pulsar" in the scenario)'
        )
    own_broker = options.url is None and service_url is None
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
        from loadgen.results import write_results

        write_results(results, options.out_dir)
    return results


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
        await _retry(admin.cache_stats)
    except BrokerError as error:
        if required or isinstance(error, AuthenticationError):
            raise
        return f"no brokerlab stats at {admin.base_url}: {error}"
    return None


async def execute(run: Run, options: RunOptions) -> dict[str, Any]:
    scenario = run.scenario
    driver = run.driver
    progress = (
        ProgressDisplay(scenario.name, scenario.testDurationSeconds) if options.progress else None
    )
    # --- set up: subscriptions exist before anything is produced
    behaviour = scenario.consumers
    for topic in run.topics:
        for index in range(scenario.subscriptionsPerTopic):
            for number in range(scenario.consumerPerSubscription):
                slow = behaviour.rateLimit > 0 and (
                    behaviour.slowConsumers == 0 or number < behaviour.slowConsumers
                )
                worker = driver.consumer(
                    run, topic, index, f"c-{index}-{number}", behaviour.rateLimit if slow else 0.0
                )
                run.consumers.append(worker)
    run.expect_connections()
    if len(run.consumers) > MANY_CONSUMERS:
        run.poll_timeout_ms = MANY_CONSUMERS_POLL_TIMEOUT_MS
    await driver.prepare(run)
    # --- producers
    producers_total = scenario.topics * scenario.producersPerTopic
    rate = scenario.producerRate / producers_total if producers_total else 0.0
    for index in range(scenario.topics):
        for number in range(scenario.producersPerTopic):
            run.producers.append(
                driver.producer(
                    run,
                    f"p-{index}-{number}",
                    run.partitions_of(index),
                    rate,
                    seed=scenario.seed * 1_000_003 + len(run.producers),
                )
            )
    errors = await _bounded([producer.open for producer in run.producers])
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
        produce_until = run.clock.now_ns() + int(
            (scenario.warmupSeconds + scenario.testDurationSeconds) * 1e9
        )
        stagger = random.Random(scenario.seed)
        start_ns = run.clock.now_ns()
        producing = []
        for producer in run.producers:
            offset = int(stagger.random() * producer.interval_ns) if producer.interval_ns else 0
            producing.append(
                asyncio.create_task(producer.run_until(produce_until, start_ns + offset))
            )
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
        await _bounded([worker.disconnect for worker in run.consumers])
    return results


async def _drain(
    run: Run, producing: Sequence[asyncio.Task[None]], timeout_s: float
) -> dict[str, Any]:
    """After the measured run: wait for the producers' last sends, then for the consumers
    to have received every stored message once per subscription (and acknowledged it,
    unless ackMode is none), for up to ``timeout_s``. Counts are over the whole run,
    warm-up and catch-up backlog included."""
    began = run.now_s()
    deadline = began + timeout_s
    if producing:
        await asyncio.wait(producing, timeout=timeout_s)
    acking = run.scenario.consumers.ackMode != "none"

    def caught_up() -> bool:
        if run.backlog() or run.nacked_pending:
            return False
        return not acking or run.acked_ever >= run.first_deliveries_ever

    while run.now_s() < deadline:
        if caught_up():
            break
        await asyncio.sleep(DRAIN_POLL_S)
    return {
        "seconds": round(run.now_s() - began, 3),
        "caughtUp": caught_up(),
        "publishedMessages": run.sent_ever,
        "firstDeliveries": run.first_deliveries_ever,
        "ackedMessages": run.acked_ever,
        "backlog": run.backlog(),
        "awaitingRedelivery": len(run.nacked_pending),
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
    events = asyncio.create_task(_events(run, start, event_log))
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


async def _events(run: Run, start: float, log: list[dict[str, Any]]) -> None:
    """Run the scenario's events in time order, logging each as it starts (an event
    still running when the run ends stays logged as unfinished)."""
    for event in sorted(run.scenario.events, key=lambda e: e.at):
        delay = start + event.at - run.now_s()
        if delay > 0:
            await asyncio.sleep(delay)
        began = run.now_s()
        entry: dict[str, Any] = {
            "at": round(event.at, 3),
            "startedAt": round(began - start, 3),
            "type": event.type,
            "subscription": event.subscription,
            "ok": False,
            "detail": "still running when the run ended",
        }
        log.append(entry)
        try:
            entry["detail"] = await _apply(run, event, start)
            entry["ok"] = True
        except BrokerError as error:
            entry["ok"] = False
            entry["detail"] = str(error)
        entry["tookMs"] = round((run.now_s() - began) * 1000, 1)


def _targets(run: Run, event: Event) -> list[Consumer]:
    return [
        worker
        for worker in run.consumers
        if event.subscription < 0 or worker.subscription_index == event.subscription
    ]


async def _apply(run: Run, event: Event, start: float) -> str:
    kind = event.type
    if kind == "unload":
        admin = run.admin_or_refuse("unload")
        if event.bundle:
            await admin.unload_bundle(TENANT, NAMESPACE, event.bundle)
            return f"unloaded bundle {event.bundle} of {TENANT}/{NAMESPACE}"
        await admin.unload_namespace(TENANT, NAMESPACE)
        return f"unloaded {TENANT}/{NAMESPACE} ({len(run.topics)} topics)"
    if kind == "restart" and event.broker >= 0:
        await run.admin_or_refuse("restart").restart_broker(
            event.broker, event.mode, event.downtimeMs
        )
        return f"broker {event.broker} restarted ({event.mode}, down {event.downtimeMs} ms)"
    if kind == "restart":
        assert run.broker is not None
        await run.broker.restart()
        return f"broker restarted on {run.broker.url}"
    if kind == "offload":
        client = run.admin_or_refuse("offload")
        done = 0

        async def offload(topic: str) -> None:
            nonlocal done
            last = await client.last_message_id(topic)
            await client.offload(topic, last)
            done += 1

        errors = await _bounded([_partial(offload, topic) for topic in run.topics])
        if errors and not done:
            raise errors[0]
        return f"offload asked for {done} of {len(run.topics)} topics"
    targets = _targets(run, event)
    if kind == "disconnect":
        await _bounded([worker.disconnect for worker in targets])
        return f"{len(targets)} consumers disconnected"
    if kind == "reconnect":
        for worker in targets:
            worker.reconnect()
        return f"{len(targets)} consumers reconnecting"
    if kind == "pause":
        for worker in targets:
            worker.pause()
        return f"{len(targets)} consumers paused"
    if kind == "resume":
        for worker in targets:
            worker.resume()
        return f"{len(targets)} consumers resumed"
    if kind == "seek":
        seek_to = event.seekTo
        time_ms = 0 if seek_to == "earliest" else max(0, run.started_at_ms + int(seek_to))
        subscriptions = (
            run.subscriptions if event.subscription < 0 else [run.subscriptions[event.subscription]]
        )
        await run.driver.seek(run, subscriptions, time_ms)
        return (
            f"{len(subscriptions)} subscription(s) of {len(run.topics)} topics reset to {time_ms}"
        )
    raise ValueError(f"unknown event {kind!r}")


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


def _partial(function: Callable[..., Awaitable[None]], *args: Any) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        await function(*args)

    return call


def default_out_dir(scenario: str) -> pathlib.Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return pathlib.Path("results") / f"{scenario}-{stamp}-{os.getpid()}"
