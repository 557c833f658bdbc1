"""The ``pulsar`` driver: a scenario's producers and consumers as clients of the official
Pulsar client (``pulsar-client``, a C++ core) over the binary protocol.

The client is callback based and runs threads of its own; nothing here blocks the
event loop:

- producers send with ``send_async``: the client calls back on its I/O thread, which
  only stamps the time and hands the outcome to the loop (:class:`LoopInbox`), where it
  is counted. Publish latency runs from the send to that callback (the OpenMessaging
  Benchmark's publish latency), batching delay included. A producer keeps at most
  ``pendingQueueSize`` messages in flight and waits on the loop for room, so the
  client's own blocking when its queue is full never happens on the loop thread;
- consumers are the client's asyncio consumers (``pulsar.asyncio``): receive, ack and
  nack are awaited, so a consumer that does not receive (slowed, paused) leaves messages
  in its receiver queue and the broker stops pushing, as with a real slow consumer. The
  client reconnects by itself after an unload or a broker restart;
- producers are opened on a small thread pool of the driver's (the client's call
  blocks), consumers by the asyncio client.

End-to-end latency runs from the publish time the producer's client stamped in the
message to its receipt. Client failures are reported as :class:`loadgen.client.BrokerError`
(``Unavailable`` for those worth retrying), as the HTTP driver reports them.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import datetime
import functools
import logging
import pathlib
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pulsar  # type: ignore[import-untyped, unused-ignore]
import pulsar.asyncio  # type: ignore[import-untyped, unused-ignore]

from loadgen.bounded import backoff_s
from loadgen.client import BrokerError, Unavailable
from loadgen.deliveries import (
    ID_BYTES,
    ID_PROPERTY,
    carries_identity_in_payload,
    identity_bytes,
    identity_of,
)
from loadgen.keys import DelayedMessages, KeyDistributor, key_name
from loadgen.run import Run
from loadgen.scenario import Scenario

log = logging.getLogger(__name__)

#: the client's default ``maxPendingMessages``, for ``pendingQueueSize = 0``
CLIENT_PENDING_DEFAULT = 1000
#: a send not acknowledged by then fails (the client's default)
SEND_TIMEOUT_MS = 30_000
#: how long a stopping producer waits for its sends in flight to be acknowledged
DRAIN_TIMEOUT_S = 10.0
#: threads that open producers (the client's call blocks until the broker answers)
OPEN_THREADS = 8
#: producers or subscriptions opened at once
OPEN_CONCURRENCY = 64
CONSUMER_TYPES = {
    "Exclusive": pulsar.ConsumerType.Exclusive,
    "Failover": pulsar.ConsumerType.Failover,
    "Shared": pulsar.ConsumerType.Shared,
    "Key_Shared": pulsar.ConsumerType.KeyShared,
}
#: client results that say "not now" rather than "no": callers retry
RETRYABLE = frozenset(
    {
        "ConnectError",
        "Timeout",
        "LookupError",
        "NotConnected",
        "ServiceUnitNotReady",
        "TooManyLookupRequestException",
        "BrokerMetadataError",
        "BrokerPersistenceError",
    }
)
#: what the client raises: its own exceptions, and the asyncio API's
CLIENT_ERRORS = (pulsar.PulsarException, pulsar.asyncio.PulsarException)


def broker_error(error: BaseException, what: str) -> BrokerError:
    """A client failure as the load generator reports broker failures."""
    if isinstance(error, pulsar.asyncio.PulsarException):
        code = error.error().name
    else:
        code = type(error).__name__
    kind = Unavailable if code in RETRYABLE else BrokerError
    return kind(0, code, f"{what}: {error}")


class LoopInbox:
    """Calls handed over by the client's threads, run on the event loop in the order they
    came: the loop is woken once per burst, not once per message. ``post`` is O(1) and
    safe from any thread."""

    __slots__ = ("_calls", "_loop", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._calls: collections.deque[tuple[Callable[..., None], tuple[Any, ...]]] = (
            collections.deque()
        )
        self._scheduled = False

    def post(self, function: Callable[..., None], *args: Any) -> None:
        self._calls.append((function, args))
        if not self._scheduled:
            # cleared by the drain before it empties the queue: a call appended after
            # that is either seen by this drain or schedules another
            self._scheduled = True
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        self._scheduled = False
        calls = self._calls
        while calls:
            function, args = calls.popleft()
            try:
                function(*args)
            except Exception:
                log.exception("loadgen: a pulsar client callback failed")


class PulsarDriver:
    """One run's clients: a callback client for the producers and an asyncio client for
    the consumers (each with its own connections, as the HTTP driver's pools), logging to
    ``log_path`` (beside ``broker.log``) or, without one, errors only to the console;
    both authenticated with ``token`` if given (``pulsar.AuthenticationToken``)."""

    name = "pulsar"

    def __init__(
        self,
        scenario: Scenario,
        service_url: str,
        *,
        log_path: pathlib.Path | None = None,
        token: str | None = None,
    ) -> None:
        self.scenario = scenario
        self.options = scenario.pulsar
        self.service_url = service_url
        self.pending_limit = self.options.pendingQueueSize or CLIENT_PENDING_DEFAULT
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            logger = pulsar.FileLogger(pulsar.LoggerLevel.Info, str(log_path))
        else:
            logger = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        credentials = {} if token is None else {"authentication": pulsar.AuthenticationToken(token)}
        try:
            self._client = pulsar.Client(service_url, logger=logger, **credentials)
            self._consumer_client = pulsar.asyncio.Client(service_url, logger=logger, **credentials)
        except CLIENT_ERRORS as error:
            raise broker_error(error, f"connect to {service_url}") from None
        self.inbox = LoopInbox(asyncio.get_running_loop())
        self._opener = concurrent.futures.ThreadPoolExecutor(
            OPEN_THREADS, thread_name_prefix="loadgen-pulsar-open"
        )

    # ------------------------------------------------------------------ the Driver seam

    def producer(
        self, run: Run, name: str, partitions: list[str], rate: float, seed: int
    ) -> PulsarProducer:
        return PulsarProducer(self, run, name, partitions, rate, seed)

    def consumer(
        self, run: Run, topic: str, subscription_index: int, name: str, rate_limit: float
    ) -> PulsarConsumer:
        return PulsarConsumer(self, run, topic, subscription_index, name, rate_limit)

    async def prepare(self, run: Run) -> None:
        """Consumers subscribe (from the earliest message) before producers start, which
        makes the subscriptions; only a catch-up backlog, produced before any consumer
        connects, needs them made first: subscribe and leave."""
        if run.scenario.consumerBacklogSizeMB <= 0:
            return

        async def make(topic: str, subscription: str) -> None:
            consumer = await self.subscribe(topic, subscription, None)
            with contextlib.suppress(*CLIENT_ERRORS):
                await consumer.close()

        await _bounded(
            [
                functools.partial(make, topic, subscription)
                for topic in run.topics
                for subscription in run.subscriptions
            ]
        )

    async def seek(self, run: Run, subscriptions: list[str], time_ms: int) -> None:
        """A connected consumer of each subscription seeks (Pulsar resets the
        subscription and reconnects all its consumers); one with none connected is reset
        through the HTTP admin, if there is one."""

        async def reset(topic: str, subscription: str) -> None:
            for worker in run.consumers:
                if (
                    isinstance(worker, PulsarConsumer)
                    and worker.topic == topic
                    and worker.subscription == subscription
                    and worker.consumer is not None
                ):
                    await worker.seek(time_ms)
                    return
            admin = run.admin_or_refuse(f"seek of {subscription} (no consumer connected)")
            await admin.reset_cursor_to_time(topic, subscription, time_ms)

        await _bounded(
            [
                functools.partial(reset, topic, subscription)
                for topic in run.topics
                for subscription in subscriptions
            ]
        )

    async def close(self) -> None:
        with contextlib.suppress(*CLIENT_ERRORS):
            await self._consumer_client.close()
        loop = asyncio.get_running_loop()
        with contextlib.suppress(*CLIENT_ERRORS):
            await loop.run_in_executor(self._opener, self._client.close)
        self._opener.shutdown(wait=False)

    # ----------------------------------------------------------------------- clients

    async def create_producer(self, topic: str, name: str) -> Any:
        options = self.options
        create = functools.partial(
            self._client.create_producer,
            topic,
            producer_name=name,
            send_timeout_millis=SEND_TIMEOUT_MS,
            max_pending_messages=self.pending_limit,
            block_if_queue_full=options.blockIfQueueFull,
            batching_enabled=options.batchingEnabled,
            batching_max_messages=options.batchingMaxMessages,
            batching_max_allowed_size_in_bytes=options.batchingMaxBytes,
            batching_max_publish_delay_ms=options.batchingMaxPublishDelayMs,
        )
        try:
            return await asyncio.get_running_loop().run_in_executor(self._opener, create)
        except CLIENT_ERRORS as error:
            raise broker_error(error, f"producer {name} on {topic}") from None

    async def subscribe(self, topic: str, subscription: str, name: str | None) -> Any:
        behaviour = self.scenario.consumers
        try:
            return await self._consumer_client.subscribe(
                topic,
                subscription,
                consumer_type=CONSUMER_TYPES[self.scenario.subscriptionType],
                consumer_name=name,
                receiver_queue_size=behaviour.receiverQueueSize,
                negative_ack_redelivery_delay_ms=behaviour.negativeAckRedeliveryDelayMs,
                initial_position=pulsar.InitialPosition.Earliest,
            )
        except CLIENT_ERRORS as error:
            raise broker_error(error, f"subscription {subscription} on {topic}") from None


class PulsarProducer:
    """One producer of one topic, a client producer per partition: messages one by one
    at ``rate`` messages/s (0: as fast as ``pendingQueueSize`` lets it), round robin over
    the partitions, or by key (key index modulo partitions) when keyed; the client
    batches them by the ``[pulsar]`` batching options. Each message carries its
    identity (loadgen.deliveries) in its payload's first bytes (or its ``loadgen-id``
    property, for a payload too short)."""

    __slots__ = (
        "_delay",
        "_delayed",
        "_idle",
        "_in_payload",
        "_key_names",
        "_keys",
        "_next_partition",
        "_payload",
        "_pending",
        "_producers",
        "_rest",
        "_room",
        "_slot",
        "driver",
        "interval_ns",
        "name",
        "partitions",
        "run",
    )

    def __init__(
        self,
        driver: PulsarDriver,
        run: Run,
        name: str,
        partitions: list[str],
        rate: float,
        seed: int,
    ) -> None:
        scenario = run.scenario
        self.driver = driver
        self.run = run
        self.name = name
        self.partitions = partitions
        self.interval_ns = int(1e9 / rate) if rate > 0 else 0
        self._keys = KeyDistributor(
            scenario.keyDistributor, scenario.keys, scenario.zipfExponent, seed
        )
        self._key_names = (
            [key_name(key) for key in range(scenario.keys)] if self._keys.keyed else []
        )
        self._payload = random.Random(seed).randbytes(scenario.messageSize)
        self._slot = run.deliveries.producer(name)
        self._in_payload = carries_identity_in_payload(scenario.messageSize)
        #: what follows a message's identity in its payload
        self._rest = self._payload[ID_BYTES:]
        #: which messages go with deliver_after (the scenario's delayedRatio), drawn from
        #: the seed
        self._delayed = DelayedMessages(scenario.delayedRatio, seed)
        self._delay = datetime.timedelta(milliseconds=scenario.deliverAfterMs)
        self._producers: list[Any] = []
        self._next_partition = 0
        self._pending = 0
        self._room = asyncio.Event()
        self._room.set()
        self._idle = asyncio.Event()
        self._idle.set()

    async def open(self) -> None:
        for topic in self.partitions:
            self._producers.append(await self.driver.create_producer(topic, self.name))

    async def run_until(self, deadline_ns: int, first_send_ns: int) -> None:
        """Send on schedule until ``deadline_ns`` (perf_counter_ns); a producer behind
        its schedule sends what is due at once (open loop). With the pending queue full
        it waits for room (``blockIfQueueFull``), or counts each send due meanwhile as
        failed."""
        run = self.run
        limit = self.driver.pending_limit
        block = self.driver.options.blockIfQueueFull
        scheduled = first_send_ns
        try:
            while not run.stopping:
                now = time.perf_counter_ns()
                interval = self.interval_ns
                if interval and scheduled > now:
                    await asyncio.sleep((scheduled - now) / 1e9)
                    now = time.perf_counter_ns()
                if now >= deadline_ns or run.stopping:
                    break
                if self._pending >= limit:
                    if block or not interval:
                        self._room.clear()
                        await self._room.wait()
                        continue
                    run.counters.publish_errors += 1
                    scheduled += interval
                    continue
                self._send()
                scheduled += interval
        finally:
            # let the sends in flight be acknowledged, so what was stored is counted
            if self._pending:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._idle.wait(), DRAIN_TIMEOUT_S)

    def _send(self) -> None:
        key = self._keys.next()
        producers = self._producers
        if key is None:
            producer = producers[self._next_partition % len(producers)]
            self._next_partition += 1
            partition_key = None
        else:
            producer = producers[key % len(producers)]
            partition_key = self._key_names[key]
        self._pending += 1
        self._idle.clear()
        deliveries = self.run.deliveries
        sequence = deliveries.issue(self._slot)
        identity = deliveries.identity(self._slot, sequence)
        payload = self._payload
        properties = None
        if self._in_payload:
            payload = identity_bytes(identity) + self._rest
        else:
            properties = {ID_PROPERTY: str(identity)}
        callback = functools.partial(self._sent_on_client_thread, time.perf_counter_ns(), sequence)
        if self._delayed.next():
            producer.send_async(
                payload,
                callback,
                properties=properties,
                partition_key=partition_key,
                deliver_after=self._delay,
            )
        else:
            producer.send_async(
                payload, callback, properties=properties, partition_key=partition_key
            )

    def _sent_on_client_thread(
        self, send_ns: int, sequence: int, result: Any, _message_id: Any
    ) -> None:
        """On the client's I/O thread: stamp the time, hand the rest to the loop."""
        self.driver.inbox.post(
            self._sent, send_ns, time.perf_counter_ns(), result == pulsar.Result.Ok, sequence
        )

    def _sent(self, send_ns: int, acknowledged_ns: int, stored: bool, sequence: int) -> None:
        run = self.run
        counters = run.counters
        self._pending -= 1
        self._room.set()
        if not self._pending:
            self._idle.set()
        if not stored:
            counters.publish_errors += 1
            return
        run.publish.record_us((acknowledged_ns - send_ns) / 1000)
        run.deliveries.published(self._slot, sequence)
        counters.published_messages += 1
        counters.published_bytes += len(self._payload)
        run.sent_ever += 1
        if run.stop_at_sent is not None and run.sent_ever >= run.stop_at_sent:
            run.stopping = True


class PulsarConsumer:
    """One consumer of one subscription on one topic (partition): receives one message
    at a time, slowed to ``rate_limit`` messages/s if set, and acknowledges it (or, for
    a ``nackRatio`` share of first deliveries, negatively acknowledges it)."""

    __slots__ = (
        "_nack_draw",
        "_resumed",
        "_wanted",
        "consumer",
        "driver",
        "name",
        "rate_limit",
        "run",
        "subscription",
        "subscription_index",
        "topic",
    )

    def __init__(
        self,
        driver: PulsarDriver,
        run: Run,
        topic: str,
        subscription_index: int,
        name: str,
        rate_limit: float,
    ) -> None:
        self.driver = driver
        self.run = run
        self.topic = topic
        self.subscription_index = subscription_index
        self.subscription = run.subscriptions[subscription_index]
        self.name = name
        self.rate_limit = rate_limit
        #: the client's asyncio consumer while connected
        self.consumer: Any = None
        self._wanted = asyncio.Event()
        self._wanted.set()
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._nack_draw = random.Random(f"{run.scenario.seed}:{topic}:{name}").random

    async def disconnect(self) -> None:
        self._wanted.clear()
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            with contextlib.suppress(*CLIENT_ERRORS):
                await consumer.close()

    def reconnect(self) -> None:
        self._wanted.set()

    def pause(self) -> None:
        self._resumed.clear()

    def resume(self) -> None:
        self._resumed.set()

    async def seek(self, time_ms: int) -> None:
        try:
            await self.consumer.seek(time_ms)
        except CLIENT_ERRORS as error:
            raise broker_error(error, f"seek of {self.subscription} on {self.topic}") from None

    async def run_forever(self) -> None:
        run = self.run
        behaviour = run.scenario.consumers
        ack_mode = behaviour.ackMode
        nack_ratio = behaviour.nackRatio
        counters = run.counters
        failures = 0
        next_receive = 0.0
        while not run.stopping:
            if not self._wanted.is_set():
                await self._wanted.wait()
                continue
            if not self._resumed.is_set():
                await self._resumed.wait()
                continue
            if self.consumer is None:
                try:
                    async with run.connecting:
                        self.consumer = await self.driver.subscribe(
                            self.topic, self.subscription, self.name
                        )
                    failures = 0
                    run.connected(self, None)
                    if not self._wanted.is_set():
                        # a disconnect event came while connecting: honour it
                        await self.disconnect()
                        continue
                except BrokerError as error:
                    run.connected(self, error)
                    counters.consume_errors += 1
                    await asyncio.sleep(backoff_s(failures))
                    failures += 1
                    continue
            consumer = self.consumer
            if self.rate_limit:
                delay = next_receive - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            try:
                message = await consumer.receive()
            except CLIENT_ERRORS:
                if self.consumer is consumer:
                    # failed under us (not closed by a disconnect event): open anew
                    self.consumer = None
                    counters.consume_errors += 1
                    with contextlib.suppress(*CLIENT_ERRORS):
                        await consumer.close()
                continue
            self._record(message)
            if self.rate_limit:
                next_receive = time.monotonic() + 1 / self.rate_limit
            if ack_mode == "none":
                continue
            try:
                first = message.redelivery_count() == 0
                if nack_ratio and first and self._nack_draw() < nack_ratio:
                    await consumer.negative_acknowledge(message)
                    counters.nacked_messages += 1
                    run.nacked_pending.add(str(message.message_id()))
                    continue
                if ack_mode == "cumulative":
                    await consumer.acknowledge_cumulative(message)
                else:
                    await consumer.acknowledge(message)
            except CLIENT_ERRORS:
                continue
            counters.acked_messages += 1
            run.acked_ever += 1
            if run.nacked_pending:
                run.nacked_pending.discard(str(message.message_id()))

    def _record(self, message: Any) -> None:
        run = self.run
        counters = run.counters
        run.end_to_end.record_us((time.time() * 1000 - message.publish_timestamp()) * 1000)
        counters.consumed_messages += 1
        counters.consumed_bytes += run.scenario.messageSize
        run.received_ever += 1
        if message.redelivery_count():
            counters.redelivered_messages += 1
        else:
            run.first_deliveries_ever += 1
        deliveries = run.deliveries
        if carries_identity_in_payload(run.scenario.messageSize):
            data = message.data()
            if len(data) >= ID_BYTES:
                deliveries.delivered_identity(identity_of(data), self.subscription_index)
        else:
            value = message.properties().get(ID_PROPERTY)
            deliveries.delivered_property(value, self.subscription_index)


async def _bounded(calls: list[Callable[[], Awaitable[None]]]) -> None:
    """Run the calls, ``OPEN_CONCURRENCY`` at once; the first failure is raised once all
    have ended."""
    gate = asyncio.Semaphore(OPEN_CONCURRENCY)
    errors: list[BrokerError] = []

    async def one(call: Callable[[], Awaitable[None]]) -> None:
        async with gate:
            try:
                await call()
            except BrokerError as error:
                errors.append(error)

    await asyncio.gather(*(one(call) for call in calls))
    if errors:
        raise errors[0]
