"""Clients in the broker's process: producers and consumers that reach the broker
through the calls its binary front end makes, with no socket between them.

They behave as Pulsar's Java client does, each value a stated parameter of the
scenario's ``[virtual]`` table:

- A producer looks its topic's owner up, opens the topic there and registers with it;
  each send carries the next sequence id and the client's publish time; sends made
  while a publish is in flight go out together in the next one, as the binary front
  end groups what is queued on a connection. At most ``maxPendingMessages`` are
  unacknowledged: a send beyond that waits (blockIfQueueFull). When the broker closes
  the producer (an unload, a restart) it looks the topic up again with the client's
  backoff and resends what is pending, in order; a send not stored within
  ``sendTimeoutMs`` fails.
- A consumer subscribes with its receiver queue and grants that many permits; the
  broker hands entries over as its dispatcher finds permits; the application takes
  ``receiveBatchSize`` at a time, and once half the queue has been taken the client
  grants those permits again (FLOW). Acknowledgments are flushed every
  ``ackGroupingMs`` (or at ``maxAckGroupSize``), kept across a lost session, and a
  message redelivered while its ack waits is dropped as a duplicate; negative
  acknowledgments come back after the consumer's nack delay. A consumer closed by the
  broker (or by a broker's death) subscribes again after the client's backoff and the
  scenario's ``reconnectDelayMs`` (and jitter).

Nothing here reads real time: every wait is on the event loop's clock, so on the
virtual loop the clients run on virtual time with the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

from broker.dispatch.errors import BrokerError as BrokerSideError
from broker.dispatch.errors import UnavailableError
from broker.dispatch.names import TopicName
from broker.dispatch.ownership import NotOwnerError
from broker.dispatch.service import BrokerService, ConsumerOptions
from broker.dispatch.stats import PublisherStats
from broker.http.errors import code_of, status_of
from broker.ledger.entry import Entry, encode_message
from broker.ledger.managed_ledger import ManagedLedgerError
from broker.ledger.position import Position
from broker.session.consumer import PushConsumer
from broker.tasks import TaskOwner
from loadgen.client import BrokerError, Unavailable
from loadgen.keys import DelayedMessages, KeyDistributor, key_name
from loadgen.run import reconnect_delay_s
from loadgen.scenario import VirtualOptions
from storage_stub.bookie.api import BookieError

if TYPE_CHECKING:
    from broker.cluster import Cluster
    from broker.dispatch.subscription import Subscription
    from broker.dispatch.topic import PersistentTopic
    from loadgen.run import Run

log = logging.getLogger(__name__)

#: what a client retries after its backoff: the topic's broker is down, moving it, or
#: closed it under the call
RETRYABLE = (UnavailableError, NotOwnerError, ManagedLedgerError, BookieError)


class Backoff:
    """The client's reconnect backoff: ``initial``, doubling up to ``maximum``; reset
    after a success. No jitter: a run's retries are the same on every run."""

    __slots__ = ("_next", "initial", "maximum")

    def __init__(self, initial_s: float, maximum_s: float) -> None:
        self.initial = initial_s
        self.maximum = max(maximum_s, initial_s)
        self._next = initial_s

    def next(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self.maximum)
        return delay

    def reset(self) -> None:
        self._next = self.initial


class BrokerCpu:
    """One broker's CPU, for the costs a run models: work is done one piece at a time,
    so pieces arriving faster than it works queue. O(1) per piece."""

    __slots__ = ("busy_until_ns",)

    def __init__(self) -> None:
        self.busy_until_ns = 0

    def reserve(self, cost_ns: int, now_ns: int) -> int:
        """Queue ``cost_ns`` of work at ``now_ns``; when it will be done."""
        self.busy_until_ns = max(self.busy_until_ns, now_ns) + cost_ns
        return self.busy_until_ns

    async def work(self, cost_ns: int) -> None:
        """Return once ``cost_ns`` of this CPU's time, after what is queued, is done."""
        now_ns = round(asyncio.get_running_loop().time() * 1e9)
        await asyncio.sleep((self.reserve(cost_ns, now_ns) - now_ns) / 1e9)


# ---------------------------------------------------------------------- producers


class PartitionProducer:
    """A producer's connection to one partition (topic): the sends waiting for a
    publish, and the topic as last opened (None: look it up again)."""

    __slots__ = ("_writing", "name", "owner", "queue", "stats", "topic")

    def __init__(self, owner: ProducerClient, name: TopicName) -> None:
        self.owner = owner
        self.name = name
        #: its part of the topic's stats, as a client producer's
        self.stats = PublisherStats(f"simulated-{name.local_name}", 0)
        self.topic: PersistentTopic | None = None
        #: (entry, scheduled ns, sequence id) sent and not yet published, in send order
        self.queue: list[tuple[bytes, int, int]] = []
        self._writing = False

    def close_from_broker(self) -> None:
        """The topic unloads: the next publish looks it up again."""
        self.topic = None

    def kick(self) -> None:
        if not self._writing:
            self._writing = True
            self.owner.tasks.spawn(self._write(), name=f"publish {self.name}")

    async def _open(self) -> PersistentTopic | None:
        """Look the topic up and open it at its owner, retrying with the backoff while
        its broker is down or moving it; None once the run stops."""
        owner = self.owner
        backoff = Backoff(
            owner.options.reconnectBackoffMs / 1000, owner.options.reconnectMaxBackoffMs / 1000
        )
        while not owner.run.stopping and self.queue:
            try:
                service = owner.cluster.service_for(self.name)
                topic = await service.get_topic(self.name, create=True)
                service.add_producer(topic, self)
            except RETRYABLE:
                await asyncio.sleep(backoff.next())
                self._expire()
                continue
            self.topic = topic
            return topic
        return None

    def _expire(self) -> None:
        """Fail the sends waiting longer than the client's send timeout (publish
        errors, as a Java client's sends time out while its broker is away). O(expired)."""
        owner = self.owner
        timeout_ns = owner.send_timeout_ns
        if not timeout_ns or not self.queue:
            return
        oldest_kept = owner.run.clock.now_ns() - timeout_ns
        expired = 0
        for _, scheduled_ns, _ in self.queue:
            if scheduled_ns > oldest_kept:
                break
            expired += 1
        if expired:
            del self.queue[:expired]
            owner.failed(expired)

    async def _write(self) -> None:
        """Publish what is queued, everything queued at once, until nothing is. Once the
        run stops, what is queued is still published if the topic's broker takes it (as
        requests in flight end and count); what it cannot take is a publish error."""
        owner = self.owner
        run = owner.run
        try:
            while self.queue:
                try:
                    topic = self.topic or await self._open()
                except BrokerSideError as error:  # refused, not unavailable: not retried
                    log.warning("producer on %s refused: %s", self.name, error)
                    topic = None
                if topic is None:  # refused, or the run stopped while it was unreachable
                    owner.failed(len(self.queue))
                    self.queue = []
                    return
                group, self.queue = self.queue, []
                if owner.cpu_cost_ns:
                    await owner.cpu_of(topic).work(owner.cpu_cost_ns * len(group))
                try:
                    await topic.publish(
                        [entry for entry, _, _ in group], len(group), publisher=self.stats
                    )
                except RETRYABLE:
                    if self.topic is topic:
                        self.topic = None
                        topic.producers.pop(self, None)
                    if run.stopping:
                        owner.failed(len(group))
                        continue
                    # nothing of the group is stored: send it again, first, after a look-up
                    self.queue = group + self.queue
                    continue
                except BrokerSideError as error:
                    log.warning("publish to %s refused: %s", self.name, error)
                    owner.failed(len(group))
                    continue
                owner.published(group)
        finally:
            self._writing = False


class ProducerClient:
    """One producer of one topic (its partitions), sending one message at a time at the
    scenario's rate: round robin over the partitions, or by key (key index modulo
    partitions) when keyed, as the HTTP driver routes."""

    def __init__(
        self,
        run: Run,
        cluster: Cluster,
        cpus: Sequence[BrokerCpu],
        name: str,
        partitions: list[str],
        rate: float,
        seed: int,
    ) -> None:
        scenario = run.scenario
        self.run = run
        self.cluster = cluster
        self.options: VirtualOptions = scenario.virtual
        self.name = name
        self.partitions = partitions
        #: one message per send
        self.interval_ns = int(1e9 / rate) if rate > 0 else 0
        self.tasks = TaskOwner(f"producer {name}")
        self.cpu_cost_ns = round(self.options.publishCostUs * 1000)
        self.send_timeout_ns = self.options.sendTimeoutMs * 1_000_000
        self._cpus = cpus
        self._connections = [
            PartitionProducer(self, TopicName.parse(topic)) for topic in partitions
        ]
        self._keys = KeyDistributor(
            scenario.keyDistributor, scenario.keys, scenario.zipfExponent, seed
        )
        self._payload = random.Random(seed).randbytes(scenario.messageSize)
        #: which messages are delayed (delayedRatio), each due deliverAfterMs after its send
        self._delayed = DelayedMessages(scenario.delayedRatio, seed)
        self._delay_ms = scenario.deliverAfterMs
        self._next_partition = 0
        #: its slot in the run's deliveries, which numbers its messages (their sequence
        #: ids, from 0)
        self._slot = run.deliveries.producer(name)
        pending = scenario.pulsar.pendingQueueSize or self.options.maxPendingMessages
        self._max_pending = pending
        self._pending = 0
        self._room = asyncio.Event()

    def cpu_of(self, topic: PersistentTopic) -> BrokerCpu:
        return self._cpus[self.cluster.ownership.owner(topic.name).index]

    async def open(self) -> None:
        """Nothing to open ahead: each partition is looked up on its first send."""

    def _send(self, scheduled_ns: int) -> None:
        """Queue one message on its partition's connection. O(1) plus the entry's
        encoding (protobuf metadata, CRC32C over the payload)."""
        key = self._keys.next()
        connections = self._connections
        if key is None:
            connection = connections[self._next_partition % len(connections)]
            self._next_partition += 1
        else:
            connection = connections[key % len(connections)]
        now_ms = round(self.run.clock.wall_ms())
        sequence_id = self.run.deliveries.issue(self._slot)
        entry = encode_message(
            self._payload,
            now_ms,
            key=None if key is None else key_name(key),
            producer_name=self.name,
            sequence_id=sequence_id,
            deliver_at=now_ms + self._delay_ms if self._delayed.next() else None,
        )
        self._pending += 1
        connection.queue.append((entry, scheduled_ns, sequence_id))
        connection.kick()

    def published(self, group: list[tuple[bytes, int, int]]) -> None:
        """Receipts for a group: latency from each message's scheduled time."""
        run = self.run
        now_ns = run.clock.now_ns()
        record = run.publish.record_us
        published = run.deliveries.published
        slot = self._slot
        for _, scheduled_ns, sequence_id in group:
            record((now_ns - scheduled_ns) / 1000)
            published(slot, sequence_id)
        count = len(group)
        counters = run.counters
        counters.published_messages += count
        counters.published_bytes += count * run.scenario.messageSize
        run.sent_ever += count
        if run.stop_at_sent is not None and run.sent_ever >= run.stop_at_sent:
            run.stopping = True
        self._release(count)

    def failed(self, count: int) -> None:
        self.run.counters.publish_errors += count
        self._release(count)

    def _release(self, count: int) -> None:
        self._pending -= count
        if self._pending < self._max_pending:
            self._room.set()

    async def run_until(self, deadline_ns: int, first_send_ns: int) -> None:
        """Send on schedule until ``deadline_ns`` (the run's clock), open loop: latency
        counts from the scheduled time, so a send held back by a full pending queue
        shows as latency."""
        run = self.run
        clock = run.clock
        scheduled = first_send_ns
        tick_ns = round(self.options.sendTickMs * 1_000_000)
        try:
            while not run.stopping:
                now = clock.now_ns()
                if self.interval_ns and scheduled > now:
                    # the next send's instant, or the tick it falls in (rounded up)
                    wake = -(-scheduled // tick_ns) * tick_ns if tick_ns else scheduled
                    await asyncio.sleep((wake - now) / 1e9)
                    now = clock.now_ns()
                if now >= deadline_ns or run.stopping:
                    break
                if run.in_flight_cap and run.in_flight() >= run.in_flight_cap:
                    await asyncio.sleep(run.scenario.inFlightPauseMs / 1000)
                    scheduled = clock.now_ns()
                    continue
                if self._pending >= self._max_pending:
                    self._room.clear()
                    await self._room.wait()
                    continue
                if not self.interval_ns:
                    scheduled = now
                self._send(scheduled)
                scheduled += self.interval_ns
        finally:
            # what was sent is published (or the run stops): its receipts are counted
            await self.tasks.settled()


# ---------------------------------------------------------------------- consumers


class SimulatedConsumer(PushConsumer):
    """The broker's side of an in-process consumer: the binary front end's push
    session (permits the client grants, each entry sent as it is handed over), whose
    ``send`` puts the entry straight into the client's receiver queue. A connected
    client is never idle."""

    __slots__ = ("client",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.client: ConsumerClient | None = None

    def send(self, entry: Entry, redelivery_count: int) -> None:
        """Into the client's receiver queue. O(1)."""
        client = self.client
        if client is not None:
            client.arrived(entry, redelivery_count)

    def detached(self) -> None:
        client = self.client
        if client is not None:
            client.lost(self)

    def wake_pollers(self) -> None:
        """The broker closed this consumer; a killed broker says no more (a live client
        learns it from its connection closing): either way the client has lost it."""
        super().wake_pollers()
        client = self.client
        if self.closed and client is not None:
            client.lost(self)


class ConsumerClient:
    """One consumer of one subscription on one topic (partition): the loadgen's
    consumer, its client library and its connection in one.

    The application's receives are callbacks on the loop, not a task: an entry handed
    over schedules one (``call_soon``, or at the rate limit's next instant), which takes
    up to ``receiveBatchSize`` entries and schedules the next while any are left. Only
    connecting is a task (``run_forever``), as subscribing waits on the broker. O(1) loop
    work per receive besides the entries' own.

    Acknowledgments are grouped as the Java client's tracker groups them: flushed every
    ``ackGroupingMs`` from the session's start (or at once when ``maxAckGroupSize`` are
    waiting); kept when the connection is lost, and sent on the next session; an entry
    redelivered while its ack is still waiting is a duplicate, dropped on arrival (its
    permit given back) and acknowledged with the group."""

    def __init__(
        self,
        run: Run,
        cluster: Cluster,
        topic: str,
        subscription_index: int,
        name: str,
        rate_limit: float,
        cpus: Sequence[BrokerCpu] = (),
    ) -> None:
        scenario = run.scenario
        self.run = run
        self.cluster = cluster
        self._cpus = cpus
        self._cpu: BrokerCpu | None = None
        self.topic = TopicName.parse(topic)
        self.subscription_index = subscription_index
        self.subscription = run.subscriptions[subscription_index]
        self.name = name
        self.rate_limit = rate_limit
        self.options: VirtualOptions = scenario.virtual
        behaviour = scenario.consumers
        self._batch = behaviour.receiveBatchSize
        self._refill = max(behaviour.receiverQueueSize // 2, 1)
        self._ack_mode = behaviour.ackMode
        self._nack_ratio = behaviour.nackRatio
        self._grouping_s = self.options.ackGroupingMs / 1000
        self._dispatch_cost_ns = round(self.options.dispatchCostUs * 1000)
        #: entries handed over in this loop round, waiting for the broker's CPU
        self._sending: list[tuple[Entry, int]] = []
        self.session: SimulatedConsumer | None = None
        self._service: BrokerService | None = None
        #: when the session began (seconds, the loop's): acks flush on its cadence
        self._session_began_s = 0.0
        #: the receiver queue: (entry, redelivery count) handed over, not yet taken
        self.incoming: deque[tuple[Entry, int]] = deque()
        #: the connection's state changed (lost, or closed by the application)
        self._changed = asyncio.Event()
        self._wanted = asyncio.Event()
        self._wanted.set()
        self._paused = False
        self._lost = False
        self._stopped = False
        self._receiving: asyncio.Handle | None = None
        self._next_receive_s = 0.0
        #: permits taken by the application, not yet granted again
        self._to_flow = 0
        #: acknowledged by the application, not yet applied by the broker, in ack order;
        #: they outlive a session
        self._acks: list[Position] = []
        #: those of them the broker did not apply where they were sent (a session lost,
        #: a redelivery elsewhere): what arrives again of these is a duplicate
        self._acked: set[Position] = set()
        self._cumulative: Position | None = None
        self._ack_timer: asyncio.TimerHandle | None = None
        self.tasks = TaskOwner(f"consumer {name}")
        self._nack_draw = random.Random(f"{scenario.seed}:{topic}:{name}").random
        self._jitter_draw = random.Random(f"{scenario.seed}:{topic}:{name}:jitter").random

    # ------------------------------------------------------------------ broker side

    def arrived(self, entry: Entry, redelivery_count: int) -> None:
        """The broker handed an entry over. O(1). With a dispatch cost, what is handed
        over in one loop round reaches the receiver queue together, once the broker's
        CPU has done it (after what it had queued)."""
        if self._dispatch_cost_ns:
            if not self._sending:
                asyncio.get_running_loop().call_soon(self._dispatched, self.session)
            self._sending.append((entry, redelivery_count))
            return
        if self._acked or self._cumulative is not None:
            self._enqueue(entry, redelivery_count)
        else:  # nothing it could duplicate
            self.incoming.append((entry, redelivery_count))
        if self._receiving is None and self.incoming:
            self._schedule_receive()

    def _enqueue(self, entry: Entry, redelivery_count: int) -> None:
        """Into the receiver queue, unless its ack is still waiting (a duplicate: its
        permit comes back, and the waiting ack now applies to this session)."""
        if self._is_acked(entry.position):
            self._to_flow += entry.messages
            if self._to_flow >= self._refill:
                permits, self._to_flow = self._to_flow, 0
                self._grant(permits)
            self._schedule_flush()
            return
        self.incoming.append((entry, redelivery_count))

    def _is_acked(self, position: Position) -> bool:
        cumulative = self._cumulative
        return position in self._acked or (cumulative is not None and position <= cumulative)

    def _dispatched(self, session: SimulatedConsumer | None) -> None:
        sending, self._sending = self._sending, []
        if self.session is not session or session is None or self._cpu is None:
            return
        loop = asyncio.get_running_loop()
        now_ns = round(loop.time() * 1e9)
        ready_ns = self._cpu.reserve(self._dispatch_cost_ns * len(sending), now_ns)
        loop.call_at(ready_ns / 1e9, self._landed, session, sending)

    def _landed(self, session: SimulatedConsumer, sent: list[tuple[Entry, int]]) -> None:
        if self.session is not session:
            return  # the session is gone, and what it was sent with it
        for entry, redelivery_count in sent:
            self._enqueue(entry, redelivery_count)
        if self._receiving is None and self.incoming:
            self._schedule_receive()

    def lost(self, session: SimulatedConsumer) -> None:
        """The broker closed the session (an unload, a restart, a seek): what was in the
        receiver queue goes with it; the acks not yet applied wait for the next one."""
        if self.session is not session:
            return
        self._forget_session()
        self._acked.update(self._acks)
        self._lost = True
        self._changed.set()

    def _forget_session(self) -> None:
        self.session = None
        self._service = None
        self._cpu = None
        self._sending = []
        self.incoming.clear()
        self._to_flow = 0
        for handle in (self._ack_timer, self._receiving):
            if handle is not None:
                handle.cancel()
        self._ack_timer = self._receiving = None

    # ------------------------------------------------------------------ the loadgen's consumer

    async def disconnect(self) -> None:
        """Close the consumer as its application does: pending acks go out first, and
        what the broker cannot apply any more is given up."""
        self._wanted.clear()
        session, service = self.session, self._service
        if session is None or service is None:
            return
        self._flush_acks()
        self._forget_session()
        self._acks, self._acked, self._cumulative = [], set(), None
        session.client = None
        service.close_consumer(session)
        self._changed.set()

    def reconnect(self) -> None:
        self._wanted.set()

    def pause(self) -> None:
        self._paused = True
        if self._receiving is not None:
            self._receiving.cancel()
            self._receiving = None

    def resume(self) -> None:
        self._paused = False
        if self.incoming and self._receiving is None:
            self._schedule_receive()

    async def run_forever(self) -> None:
        """Keep the consumer connected while it is wanted: subscribe, and after the
        broker closes it subscribe again, as the Java client reconnects: after the
        backoff (100 ms, doubling while refused, reset once connected) and the
        connection's own delay (``reconnectDelayMs`` and its jitter)."""
        run = self.run
        behaviour = run.scenario.consumers
        options = self.options
        backoff = Backoff(options.reconnectBackoffMs / 1000, options.reconnectMaxBackoffMs / 1000)
        retrying = False
        try:
            while not run.stopping:
                if not self._wanted.is_set():
                    await self._wanted.wait()
                    continue
                if self.session is not None:
                    self._changed.clear()
                    await self._changed.wait()
                    continue
                if self._lost or retrying:
                    await asyncio.sleep(
                        backoff.next() + reconnect_delay_s(behaviour, self._jitter_draw)
                    )
                self._lost = False
                error = await self._connect()
                run.connected(self, error)
                retrying = error is not None
                if error is not None:
                    run.counters.consume_errors += 1
                    continue
                backoff.reset()
        finally:
            self._stopped = True
            self._forget_session()
            await self.tasks.close()

    async def _connect(self) -> BrokerError | None:
        """Subscribe at the topic's owner and grant the receiver queue's permits; the
        error that refused it (None: connected)."""
        scenario = self.run.scenario
        behaviour = scenario.consumers
        options = ConsumerOptions(
            name=self.name,
            subscription_type=scenario.subscriptionType,
            receiver_queue_size=behaviour.receiverQueueSize,
            initial_position="Earliest",
            nack_delay_ms=behaviour.negativeAckRedeliveryDelayMs,
        )
        try:
            service = self.cluster.service_for(self.topic)
            session = await service.create_consumer(
                self.topic, self.subscription, options, SimulatedConsumer
            )
        except (BrokerSideError, *RETRYABLE) as error:
            return as_loadgen_error(error)
        assert isinstance(session, SimulatedConsumer)
        if not self._wanted.is_set() or self.run.stopping:
            service.close_consumer(session)  # a disconnect came while subscribing
            return None
        session.client = self
        self.session = session
        self._service = service
        self._session_began_s = asyncio.get_running_loop().time()
        if self._cpus:
            self._cpu = self._cpus[service.index]
        self._grant(behaviour.receiverQueueSize)
        return None

    def _grant(self, permits: int) -> None:
        """FLOW: ``permits`` more messages may come."""
        session = self.session
        if session is None:
            return
        session.grant(permits)

    # ------------------------------------------------------------------ receiving

    def _schedule_receive(self) -> None:
        if self._stopped or self._paused or self.session is None:
            return
        loop = asyncio.get_running_loop()
        if self.rate_limit and self._next_receive_s > loop.time():
            self._receiving = loop.call_at(self._next_receive_s, self._receive)
        else:
            self._receiving = loop.call_soon(self._receive)

    def _receive(self) -> None:
        """The application takes up to ``receiveBatchSize`` entries, records them, acks
        (or nacks) them; the client grants permits again once half the queue is taken.
        O(batch)."""
        self._receiving = None
        incoming = self.incoming
        if self._stopped or self._paused or self.session is None or not incoming:
            return
        taken = [incoming.popleft() for _ in range(min(self._batch, len(incoming)))]
        self._record(taken)
        self._to_flow += sum(entry.messages for entry, _ in taken)
        if self._to_flow >= self._refill:
            permits, self._to_flow = self._to_flow, 0
            self._grant(permits)
        if self.rate_limit:
            self._next_receive_s = asyncio.get_running_loop().time() + len(taken) / self.rate_limit
        self._acknowledge(taken)
        if incoming:
            self._schedule_receive()

    def _record(self, taken: list[tuple[Entry, int]]) -> None:
        """Counts and end-to-end latency (runs of equal latency recorded at once)."""
        run = self.run
        counters = run.counters
        now_ms = run.clock.wall_ms()
        record = run.end_to_end.record_us
        deliveries = run.deliveries
        slot_of = deliveries.slot_of
        subscription = self.subscription_index
        first = 0
        latency_ms = -1.0
        same = 0
        for entry, redelivery_count in taken:
            value = now_ms - entry.publish_time()
            producer, sequence_id = entry.origin()
            slot = slot_of(producer)
            if slot is not None:
                deliveries.delivered(slot, sequence_id, subscription)
            if value != latency_ms:
                if same:
                    record(latency_ms * 1000, same)
                latency_ms, same = value, 0
            same += 1
            if redelivery_count == 0:
                first += 1
        if same:
            record(latency_ms * 1000, same)
        count = len(taken)
        counters.consumed_messages += count
        counters.consumed_bytes += count * run.scenario.messageSize
        counters.redelivered_messages += count - first
        run.first_deliveries_ever += first
        run.received_ever += count

    # ------------------------------------------------------------------ acks

    def _acknowledge(self, taken: list[tuple[Entry, int]]) -> None:
        """The application's acks (counted now, as the Java client's acknowledge returns
        at once) and nacks (sent at once: the broker redelivers after the nack delay)."""
        run = self.run
        session = self.session
        if self._ack_mode == "none" or session is None:
            return
        counters = run.counters
        acked_ids: list[str] = []
        if self._ack_mode == "cumulative":
            last = taken[-1][0].position
            if self._cumulative is None or last > self._cumulative:
                self._cumulative = last
            acked = len(taken)
        else:
            nack_ratio = self._nack_ratio
            nacks: list[Position] = []
            acks = self._acks
            for entry, redelivery_count in taken:
                position = entry.position
                if nack_ratio and redelivery_count == 0 and self._nack_draw() < nack_ratio:
                    nacks.append(position)
                    continue
                acks.append(position)
                if run.nacked_pending:
                    acked_ids.append(str(position))
            if nacks:
                session.subscription.negative_acknowledge(session, nacks)
                counters.nacked_messages += len(nacks)
                run.nacked_pending.update(str(position) for position in nacks)
            acked = len(taken) - len(nacks)
        counters.acked_messages += acked
        run.acked_ever += acked
        if acked_ids:
            run.nacked_pending.difference_update(acked_ids)
        if self._grouping_s <= 0 or len(self._acks) >= self.options.maxAckGroupSize:
            self._flush_acks()
        else:
            self._schedule_flush()

    def _schedule_flush(self) -> None:
        """At the next instant of the session's flush cadence (every ``ackGroupingMs``
        from its start, as the Java client's fixed-delay flush), unless one is due."""
        if self._ack_timer is not None or self.session is None:
            return
        if self._grouping_s <= 0:
            self._flush_acks()
            return
        loop = asyncio.get_running_loop()
        began, every = self._session_began_s, self._grouping_s
        due = began + (int((loop.time() - began) / every) + 1) * every
        self._ack_timer = loop.call_at(due, self._flush_acks)

    def _flush_acks(self) -> None:
        """Send what waits to the session: what the broker holds for it is applied at
        once and made durable in the background (as the binary front end does with an
        ACK command); what it does not hold waits for a session that does (redelivered
        here, it arrives as a duplicate), and is given up once the subscription's cursor
        has it acknowledged (another consumer acked it). O(acks waiting)."""
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        session = self.session
        if session is None or session.closed:
            return
        subscription = session.subscription
        pending = session.pending
        if self._acks:
            mine: list[Position] = []
            waiting: list[Position] = []
            is_acknowledged = subscription.cursor.is_acknowledged
            for position in self._acks:
                if position in pending:
                    mine.append(position)
                elif not is_acknowledged(position):
                    waiting.append(position)
            self._acks = waiting
            if waiting or self._acked:
                self._acked = set(waiting)
            if mine:
                self._send_ack(subscription, session, mine, False)
        cumulative = self._cumulative
        if cumulative is not None and cumulative in pending:
            self._cumulative = None
            self._send_ack(subscription, session, [cumulative], True)
        elif cumulative is not None and subscription.cursor.is_acknowledged(cumulative):
            self._cumulative = None

    def _send_ack(
        self,
        subscription: Subscription,
        session: SimulatedConsumer,
        positions: list[Position],
        cumulative: bool,
    ) -> None:
        try:
            # whole entries (the clients send unbatched messages): what an ACK command
            # of message ids without ack sets does
            finish = subscription.begin_acknowledge(session, positions, cumulative)
        except BrokerSideError as error:  # cumulative on Shared: refused, as in Pulsar
            log.warning("ack of %s ignored: %s", self.name, error)
            return
        if finish is not None:
            self.tasks.spawn(_durable(finish), name=f"ack {self.name}")


async def _durable(finish: Awaitable[None]) -> None:
    """Await an ack's write; a failed one had no effect (its messages come again)."""
    with contextlib.suppress(BrokerSideError, BookieError, ManagedLedgerError, OSError):
        await finish


def as_loadgen_error(error: Exception) -> BrokerError:
    """A broker error as the load generator sees one over HTTP: its status and code;
    whatever a client retries is 503 (:class:`Unavailable`)."""
    if isinstance(error, RETRYABLE):
        return Unavailable(503, code_of(503), str(error))
    status = status_of(error)
    return BrokerError(status, code_of(status), str(error))
