"""The http driver: producers and consumers over the broker's REST produce and consume
routes (docs/api.md), each side on its own connection pool; subscriptions made and reset
through the HTTP admin."""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import orjson
import pybase64

from loadgen.bounded import backoff_s
from loadgen.client import BrokerClient, BrokerError, Unavailable
from loadgen.deliveries import ID_BYTES, ID_PROPERTY, carries_identity_in_payload, identity_of
from loadgen.keys import DelayedMessages, KeyDistributor, key_name
from loadgen.run import Run, create_subscriptions, reconnect_delay_s, reset_subscriptions

#: requests one producer keeps in flight before it waits
MAX_IN_FLIGHT = 8
#: base64 characters of a payload's identity bytes
ID_CHARS = ID_BYTES * 4 // 3


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


class ProducerWorker:
    """One producer of one topic: requests of ``messagesPerRequest`` messages at
    ``rate`` messages/s (0: as fast as ``MAX_IN_FLIGHT`` requests allow), round robin
    over the topic's partitions, or by key (key index modulo partitions) when keyed.
    Each message carries its identity (loadgen.deliveries) at the start of its JSON, in
    its payload's first bytes (or its ``loadgen-id`` property, for a payload too short):
    the rest of a message's JSON is built once per key."""

    __slots__ = (
        "_delayed",
        "_delayed_fragments",
        "_fragments",
        "_id_head",
        "_in_flight",
        "_in_payload",
        "_keys",
        "_next_partition",
        "_prefix",
        "_slot",
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
        self._slot = run.deliveries.producer(name)
        payload = random.Random(seed).randbytes(scenario.messageSize)
        self._in_payload = carries_identity_in_payload(scenario.messageSize)
        self._prefix = orjson.dumps({"producerName": name})[:-1] + b',"messages":['
        #: a message's JSON up to its identity: '{"payload":"' (the identity's base64,
        #: then the rest of the payload's), or '{"properties":{"loadgen-id":"'
        if self._in_payload:
            self._id_head = b'{"payload":"'
            encoded = pybase64.b64encode(payload[ID_BYTES:]).decode()
        else:
            self._id_head = orjson.dumps({"properties": {ID_PROPERTY: ""}})[:-3]
            encoded = pybase64.b64encode(payload).decode()
        #: by key, what follows an identity up to the next one: the message's end
        #: ('...","key":"..."}') and the next message's start, so that a body is one
        #: join of identities and fragments (one copy of the payloads)
        messages: dict[int | None, dict[str, Any]] = {None: {"payload": encoded}}
        if self._keys.keyed:
            for key in range(scenario.keys):
                messages[key] = {"payload": encoded, "key": key_name(key)}
        self._fragments = {key: self._fragment_of(fields) for key, fields in messages.items()}
        #: delayed messages (delayedRatio): the same with deliverAfterMs, drawn message by
        #: message from the seed
        self._delayed = DelayedMessages(scenario.delayedRatio, seed)
        self._delayed_fragments: dict[int | None, bytes] = {}
        if scenario.delayedRatio > 0:
            delay = {"deliverAfterMs": scenario.deliverAfterMs}
            self._delayed_fragments = {
                key: self._fragment_of({**fields, **delay}) for key, fields in messages.items()
            }

    def _fragment_of(self, fields: dict[str, Any]) -> bytes:
        """What follows a message's identity up to the next message's."""
        if self._in_payload:
            # '{"payload":"<rest of the payload>"...}' after '{"payload":"<identity>'
            end = orjson.dumps(fields)[len(self._id_head) :]
        else:
            end = b'"},' + orjson.dumps(fields)[1:]
        return end + b"," + self._id_head

    def _identities(self, first: int, count: int) -> list[bytes]:
        """The identities of the producer's messages ``first`` to ``first + count - 1``
        as their JSON carries them: base64 of the payload's first bytes (encoded
        together: the bytes of each are a whole number of base64 groups), or decimal.
        O(count)."""
        deliveries = self.run.deliveries
        step = deliveries.producers
        start = deliveries.identity(self._slot, first)
        identities = range(start, start + count * step, step)
        if not self._in_payload:
            return [b"%d" % identity for identity in identities]
        encoded = pybase64.b64encode(b"".join(i.to_bytes(ID_BYTES, "big") for i in identities))
        return [encoded[at : at + ID_CHARS] for at in range(0, len(encoded), ID_CHARS)]

    async def open(self) -> None:
        """Nothing to open: each request is on its own."""

    def _next_request(self) -> tuple[str, bytes, int, int]:
        """The next request: its topic (partition), body, number of messages and the
        sequence number of the first (the others follow it). O(messages) plus their
        bytes' copy."""
        partitions = self.partitions
        count = self.run.scenario.messagesPerRequest
        delays = self._delayed_fragments
        if not self._keys.keyed:
            topic = partitions[self._next_partition % len(partitions)]
            self._next_partition += 1
            if delays:
                return topic, *self._body([self._fragment(None) for _ in range(count)])
            first = self.run.deliveries.issue(self._slot, count)
            # one copy of the payloads: the body's start and end go with the first and
            # the last identity (a 100 kB concatenation costs more than the join)
            between = self._fragments[None]
            identities = self._identities(first, count)
            identities[0] = self._prefix + self._id_head + identities[0]
            identities[-1] += self._last(between)
            return topic, between.join(identities), count, first
        fragment = self._fragment
        draw = self._keys.next
        if len(partitions) == 1:
            return partitions[0], *self._body([fragment(draw()) for _ in range(count)])
        # keyed and partitioned: a request goes to one partition, with keys of that
        # partition only (drawn from the distribution, keeping the partition's keys)
        partition = self._next_partition % len(partitions)
        self._next_partition += 1
        chosen: list[bytes] = []
        attempts = 0
        while len(chosen) < count and attempts < count * len(partitions) * 8:
            key = draw()
            attempts += 1
            if key is not None and key % len(partitions) == partition:
                chosen.append(fragment(key))
        if not chosen:
            chosen = [fragment(partition % self.run.scenario.keys)]
        return partitions[partition], *self._body(chosen)

    def _body(self, fragments: list[bytes]) -> tuple[bytes, int, int]:
        """A request of these messages (each its fragment), each given the next sequence
        number: the body, its messages and the first number. One copy of the payloads."""
        count = len(fragments)
        first = self.run.deliveries.issue(self._slot, count)
        parts = [self._prefix + self._id_head]
        for identity, fragment in zip(self._identities(first, count), fragments, strict=True):
            parts.append(identity)
            parts.append(fragment)
        parts[-1] = self._last(parts[-1])
        return b"".join(parts), count, first

    def _last(self, fragment: bytes) -> bytes:
        """The last message's fragment: its end, and the body's."""
        return fragment[: -len(self._id_head) - 1] + b"]}"

    def _fragment(self, key: int | None) -> bytes:
        """One message's fragment (what follows its identity): with
        ``deliverAfterMs`` when drawn delayed (delayedRatio). O(1)."""
        delays = self._delayed_fragments
        if delays and self._delayed.next():
            return delays[key]
        return self._fragments[key]

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
                topic, body, count, first = self._next_request()
                task = asyncio.create_task(self._send(topic, body, count, first, scheduled))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                scheduled += self.interval_ns
        finally:
            # let requests in flight finish, so what was stored is counted
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _send(
        self, topic: str, body: bytes, count: int, first: int, scheduled_ns: int
    ) -> None:
        """Send one request (messages ``first``, ``first + 1``, ... of the producer);
        while the topic's broker is unavailable (restarting, its topic moving) send it
        again, as a Pulsar producer keeps its pending messages and resends them after
        reconnecting, until the run stops."""
        run = self.run
        counters = run.counters
        failures = 0
        try:
            while True:
                try:
                    results = await self.client.produce_each(topic, body)
                    break
                except Unavailable:
                    if run.stopping:
                        counters.publish_errors += count
                        return
                    await asyncio.sleep(backoff_s(failures))
                    failures += 1
                except BrokerError:
                    counters.publish_errors += count
                    return
        finally:
            self._in_flight.release()
            run.produce_slots.release()
        run.publish.record_us((run.clock.now_ns() - scheduled_ns) / 1000, count)
        published = run.deliveries.published
        stored = 0
        for index, ok in enumerate(results):
            if ok:
                published(self._slot, first + index)
                stored += 1
        counters.published_messages += stored
        counters.published_bytes += stored * run.scenario.messageSize
        counters.publish_errors += count - stored
        run.sent_ever += stored
        if run.stop_at_sent is not None and run.sent_ever >= run.stop_at_sent:
            run.stopping = True


class ConsumerWorker:
    """One consumer session of one subscription on one topic (partition)."""

    __slots__ = (
        "_failures",
        "_jitter_draw",
        "_lost",
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
        #: connection attempts refused in a row (the backoff grows with them)
        self._failures = 0
        #: the session was closed under the consumer: reconnect after the scenario's delay
        self._lost = False

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
        """Poll, record and acknowledge until the run stops: while wanted (not
        disconnected) and not paused, reconnecting whenever the session is lost."""
        run = self.run
        behaviour = run.scenario.consumers
        next_poll = 0.0
        while not run.stopping:
            if not self._wanted.is_set():
                await self._wanted.wait()
                continue
            if not self._resumed.is_set():
                await self._resumed.wait()
                continue
            if self.consumer_id is None:
                await self._connect_or_back_off()
            consumer_id = self.consumer_id
            if consumer_id is None:
                continue
            if self.rate_limit:
                delay = next_poll - run.now_s()
                if delay > 0:
                    await asyncio.sleep(delay)
            messages = await self._poll(consumer_id, behaviour.receiveBatchSize)
            if not messages:
                continue
            self._record(messages)
            if self.rate_limit:
                next_poll = run.now_s() + len(messages) / self.rate_limit
            if behaviour.ackMode != "none":
                await self._acknowledge(consumer_id, messages)

    async def _connect_or_back_off(self) -> None:
        """One attempt to (re)connect, after the scenario's reconnect delay when the
        session was lost; after a refusal, the backoff of its consecutive failures."""
        run = self.run
        behaviour = run.scenario.consumers
        if self._lost and (behaviour.reconnectDelayMs or behaviour.reconnectJitterMs):
            await asyncio.sleep(reconnect_delay_s(behaviour, self._jitter_draw))
        self._lost = False
        try:
            async with run.connecting:
                await self.connect()
        except BrokerError as error:
            run.connected(self, error)
            run.counters.consume_errors += 1
            await asyncio.sleep(backoff_s(self._failures))
            self._failures += 1
            return
        self._failures = 0
        run.connected(self, None)
        if not self._wanted.is_set():
            # a disconnect event came while connecting: honour it
            await self.disconnect()

    async def _poll(self, consumer_id: str, batch: int) -> list[Any]:
        """One long poll; on a session closed under it (unload, restart, idle timeout) or
        a broker unreachable, no messages and the session forgotten, to be recreated as a
        Pulsar client does."""
        try:
            messages: list[Any] = await self.client.receive(
                consumer_id, batch, self.run.poll_timeout_ms
            )
        except BrokerError:
            if self.consumer_id == consumer_id:
                self.consumer_id = None
                self.client.forget_consumer(consumer_id)
                self._lost = True
            return []
        return messages

    def _ack_ids(self, messages: list[Any], cumulative: bool) -> tuple[list[str], list[str]]:
        """The ids to acknowledge and those to acknowledge negatively: the last one alone
        when cumulative; else each first delivery nacked with the scenario's nackRatio."""
        if cumulative:
            return [messages[-1]["messageId"]], []
        nack_ratio = self.run.scenario.consumers.nackRatio
        if not nack_ratio:
            return [message["messageId"] for message in messages], []
        ids: list[str] = []
        nacks: list[str] = []
        for message in messages:
            first = message.get("redeliveryCount", 0) == 0
            if first and self._nack_draw() < nack_ratio:
                nacks.append(message["messageId"])
            else:
                ids.append(message["messageId"])
        return ids, nacks

    async def _acknowledge(self, consumer_id: str, messages: list[Any]) -> None:
        run = self.run
        counters = run.counters
        cumulative = run.scenario.consumers.ackMode == "cumulative"
        ids, nacks = self._ack_ids(messages, cumulative)
        with contextlib.suppress(BrokerError):
            if nacks:
                await self.client.nack(consumer_id, nacks)
                counters.nacked_messages += len(nacks)
                run.nacked_pending.update(nacks)
            if ids:
                await self.client.ack(consumer_id, ids, cumulative)
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
        deliveries = run.deliveries
        subscription = self.subscription_index
        in_payload = carries_identity_in_payload(size)
        first = 0
        for message in messages:
            record((now_ms - message["publishTime"]) * 1000)
            if message.get("redeliveryCount", 0) == 0:
                first += 1
            if in_payload:
                head = message["payload"][:ID_CHARS]
                if len(head) == ID_CHARS:
                    identity = identity_of(pybase64.b64decode(head))
                    deliveries.delivered_identity(identity, subscription)
            else:
                properties = message.get("properties") or {}
                deliveries.delivered_property(properties.get(ID_PROPERTY), subscription)
        counters.consumed_messages += len(messages)
        counters.consumed_bytes += len(messages) * size
        counters.redelivered_messages += len(messages) - first
        run.first_deliveries_ever += first
        run.received_ever += len(messages)
