"""A consumer: a session on a subscription with a receiver queue (its permits)."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

from broker.dispatch.stats import BrokerTotals, RateCounter
from broker.ledger.entry import Entry
from broker.ledger.managed_cursor import ManagedCursor
from broker.ledger.position import Position


class CountingTopic(Protocol):
    """What a consumer reads of its topic: the broker totals it counts dispatch into."""

    @property
    def totals(self) -> BrokerTotals: ...


class ConsumedSubscription(Protocol):
    """What a dispatch consumer reads of its subscription: its name (the cache event
    names it), its cursor (whose ledger's events carry ``released``) and its topic's
    totals; and what the broker's upkeep asks of it through a consumer: detach it,
    redeliver what timed out. ``Subscription`` is the one; it makes dispatchers that
    hold consumers, so this module declares what it reads rather than importing it.
    Front ends hold a :class:`~broker.session.consumer.ConsumerSession`, which names
    the whole subscription."""

    @property
    def name(self) -> str: ...
    @property
    def cursor(self) -> ManagedCursor: ...
    @property
    def topic(self) -> CountingTopic: ...
    def remove_consumer(self, consumer: Consumer) -> None: ...
    def redeliver_timed_out(self, consumer: Consumer, now_ns: int) -> None: ...


#: ``pending`` value of a delivery still in the receiver queue
NOT_RECEIVED = -1


class Delivery:
    """An entry in a consumer's receiver queue."""

    __slots__ = ("entry", "redelivery_count")

    def __init__(self, entry: Entry, redelivery_count: int) -> None:
        self.entry = entry
        self.redelivery_count = redelivery_count


class Consumer:
    """The broker dispatches into ``queue`` (at most ``receiver_queue_size`` deliveries);
    a poll drains it. ``pending`` holds every position handed to this consumer and not
    yet acknowledged, with the monotonic time the client received it (NOT_RECEIVED while
    it waits in the queue): the ack timeout runs from receipt, as in Pulsar's client."""

    __slots__ = (
        "_available",
        "_released",
        "ack_timeout_ms",
        "address",
        "auto_consume_schema",
        "bytes_out",
        "client_version",
        "closed",
        "connected_since_ms",
        "consumer_id",
        "last_active_ns",
        "metadata",
        "msg_out",
        "nack_delay_ms",
        "name",
        "pending",
        "polled",
        "polls",
        "priority_level",
        "queue",
        "receiver_queue_size",
        "subscription",
    )

    def __init__(
        self,
        consumer_id: str,
        name: str,
        subscription: ConsumedSubscription,
        receiver_queue_size: int,
        priority_level: int,
        ack_timeout_ms: int,
        nack_delay_ms: int,
        now_ns: int,
    ) -> None:
        self.consumer_id = consumer_id
        self.name = name
        self.subscription = subscription
        #: the topic's cache event for an entry handed over (the ledger is the topic's)
        self._released = subscription.cursor.ledger.events.released
        self.receiver_queue_size = receiver_queue_size
        self.priority_level = priority_level
        self.ack_timeout_ms = ack_timeout_ms
        self.nack_delay_ms = nack_delay_ms
        self.queue: deque[Delivery] = deque()
        self.pending: dict[Position, int] = {}
        self.last_active_ns = now_ns
        #: long polls in progress; a consumer that is polling is never idle
        self.polls = 0
        #: its client has polled: entries handed over keep their decoded metadata for
        #: the poll that takes them (one decode, here); a receiver queue nobody has
        #: polled yet holds only bytes
        self.polled = False
        self.closed = False
        #: its client consumes with AUTO_CONSUME (takes whatever schema the topic has):
        #: it does not count as a user of the topic when a schema is first registered
        self.auto_consume_schema = False
        self.msg_out = RateCounter()
        self.bytes_out = RateCounter()
        self._available = asyncio.Event()
        #: the stats' facts of its client: address (``/127.0.0.1:50000``), when it
        #: connected (wall ms), client version, the metadata it subscribed with
        self.address = ""
        self.connected_since_ms = 0
        self.client_version = ""
        self.metadata: dict[str, str] = {}

    @property
    def available_permits(self) -> int:
        """Entries the dispatcher may hand over now (a session also holds back for its
        client's sake: ``broker.session.consumer``). O(1)."""
        return self.client_permits()

    def has_room(self) -> bool:
        """Whether ``available_permits`` is above 0: the dispatcher's check before each
        entry it hands over, which needs no count. O(1)."""
        return self.available_permits > 0

    def read_permits(self) -> int:
        """Entries worth reading for this consumer now: ``available_permits``, or fewer
        where its front end would stop taking them sooner (a session's gate, see
        ``broker.session.consumer``). The Shared dispatcher reads by it; an entry read
        and not handed over waits in its replay queue to be read again. O(1)."""
        return self.available_permits

    def client_permits(self) -> int:
        """Free places in the receiver queue (the stats' ``availablePermits``). O(1)."""
        return self.receiver_queue_size - len(self.queue)

    def deliver(self, entry: Entry, redelivery_count: int, now_ns: int) -> None:
        """Hand an entry over: into the receiver queue, and pending until acked; the read
        the cache designs expected for it has now happened (the ``released`` event). O(1)
        plus one decode of the entry's metadata (kept on the entry once this consumer has
        polled: its poll reads the messages with ``Entry.decoded_messages``)."""
        position = entry.position
        self._released(self.subscription.name, position.ledger_id, position.entry_id)
        # messages, as msgInCounter counts them (first: a queue that counts messages then
        # finds the count on the entry, not decoded a second time)
        messages = entry.keep_metadata() if self.polled else entry.messages
        self.queue.append(Delivery(entry, redelivery_count))
        self.pending[entry.position] = NOT_RECEIVED
        self.count_out(entry, messages, redelivery_count)
        self._available.set()

    def count_out(self, entry: Entry, messages: int, redelivery_count: int) -> None:
        """Count an entry of ``messages`` messages handed over: this consumer's rates
        and the broker's dispatch totals. O(1)."""
        nbytes = len(entry.data)
        self.msg_out.add(messages)
        self.bytes_out.add(nbytes)
        totals = self.subscription.topic.totals
        totals.dispatched += 1
        totals.dispatched_bytes += nbytes
        if redelivery_count:
            totals.redelivered += 1

    def drain(self, max_messages: int, now_ns: int) -> list[Delivery]:
        """Take up to ``max_messages`` deliveries from the receiver queue; the client
        has them as of ``now_ns``. O(n). The deliveries' ``entry.decoded_messages()``
        are their messages, decoded once."""
        self.polled = True
        queue = self.queue
        count = min(max_messages, len(queue))
        taken = [queue.popleft() for _ in range(count)]
        pending = self.pending
        for delivery in taken:
            pending[delivery.entry.position] = now_ns
        if not queue:
            self._available.clear()
        return taken

    async def wait_for_messages(self, timeout_s: float) -> None:
        """Return when the receiver queue is non-empty, or after ``timeout_s``."""
        if self.queue or timeout_s <= 0:
            return
        try:
            async with asyncio.timeout(timeout_s):
                await self._available.wait()
        except TimeoutError:
            pass

    def take_unacked(self) -> tuple[list[Position], set[Position]]:
        """Empty ``pending`` and the receiver queue: every unacked position, and those
        of them still in the queue (never seen by the client). O(pending)."""
        unseen = {delivery.entry.position for delivery in self.queue}
        positions = list(self.pending)
        self.pending.clear()
        self.clear_queue()
        return positions, unseen

    def clear_queue(self) -> None:
        """Forget what was handed over (a rewind or close); the caller redelivers."""
        self.queue.clear()
        self._available.clear()

    def wake_pollers(self) -> None:
        """Release any long poll (the consumer was closed)."""
        self._available.set()

    def detached(self) -> None:
        """The broker closed this consumer (unload, topic delete, idle): a connected
        client is told so; an HTTP consumer's next request finds it gone."""

    def active_changed(self, active: bool) -> None:
        """Failover/Exclusive: this consumer became the active one or stopped being it."""
