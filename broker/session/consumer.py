"""The consumer session every front end shares.

:class:`ConsumerSession` is a dispatch :class:`~broker.dispatch.consumer.Consumer` with
what a client does to it: what it is given of an entry (a batch's messages not acked
yet), acks by entry, by message of a batch (batch-index acks) or cumulative, nacks,
redelivery, seek, unsubscribe, a reader's subscription dropped. Its receiver queue is
the broker's (the HTTP routes poll it, the WebSocket sender takes from it): the
dispatch consumer's ``deliver`` hands entries over into it, with the cache's
``released`` event.

:class:`PushConsumer` is a session whose receiver queue is the client's (the binary
protocol, the virtual-time clients): the client grants permits (messages) and each
entry is written out as it is handed over, through :meth:`PushConsumer.send`.

Backpressure in bytes, the same for every front end: a session holds at most
``maxUnwrittenBytesPerConsumer`` bytes handed to it and not yet written to its client
(:meth:`ConsumerSession.unwritten_bytes`: the receiver queue, or what a front end says
it still buffers), and a front end whose client stops reading closes the session's
``writable`` gate (:meth:`ConsumerSession.set_writable`, as Pulsar's dispatchers consult
the channel's writability); the dispatcher sees both through ``available_permits`` and
is woken when the gate opens again.

Messages are named by ``(entry position, batch index)``; batch index -1
(``WHOLE_ENTRY``) names the entry. A batch-index ack needs the batch's size: the
session records it on the subscription (``Subscription.batch_sizes``) when it gives the
client the batch's messages, in :meth:`ConsumerSession.unacked_messages`.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from broker.dispatch.consumer import NOT_RECEIVED, Consumer, Delivery
from broker.dispatch.errors import BrokerError, PreconditionFailedError, SubscriptionFencedError
from broker.dispatch.subscription import Subscription, in_order
from broker.ledger.entry import Entry, EntryFormatError, Message, UnsupportedCompressionError
from broker.ledger.managed_ledger import ManagedLedgerError
from broker.ledger.position import Position
from broker.session.acks import unacked_after
from broker.session.message_ids import WHOLE_ENTRY, Start
from storage_stub.bookie.api import BookieError

if TYPE_CHECKING:
    from broker.dispatch.service import BrokerService

log = logging.getLogger(__name__)

#: what a message id names: (entry position, batch index or -1 for the whole entry)
MessageRef = tuple[Position, int]


class ReceiverQueue(deque[Delivery]):
    """A receiver queue that counts the messages (a batched entry holds several) and
    the bytes it holds, and the moving average of messages per entry, so that permits
    are messages as in Pulsar and the bytes held are known. O(1) per operation."""

    def __init__(self) -> None:
        super().__init__()
        self.messages = 0
        self.bytes = 0
        self.average = 1.0

    def append(self, delivery: Delivery) -> None:
        super().append(delivery)
        entry = delivery.entry
        messages = entry.messages
        self.messages += messages
        self.bytes += len(entry.data)
        self.average += (messages - self.average) * 0.1

    def appendleft(self, delivery: Delivery) -> None:
        """Put a delivery taken from the head back there (its entry counted again)."""
        super().appendleft(delivery)
        entry = delivery.entry
        self.messages += entry.messages
        self.bytes += len(entry.data)

    def popleft(self) -> Delivery:
        delivery = super().popleft()
        entry = delivery.entry
        self.messages -= entry.messages
        self.bytes -= len(entry.data)
        return delivery

    def clear(self) -> None:
        super().clear()
        self.messages = 0
        self.bytes = 0


class ConsumerSession(Consumer):
    """A client's consumer on a subscription. Every operation costs what its
    docstring says plus the subscription's own work; none allocates per message
    handed over.

    The dispatcher reads :attr:`available_permits`: the client's permits
    (:meth:`client_permits`, in entries: the receiver queue's free places, or the front
    end's own count), none while the ``writable`` gate is closed,
    and no more entries than fit, at the average entry size seen, in what is left of
    ``max_unwritten_bytes`` (at least one while any room is left; one until the first
    entry has told how large they are)."""

    __slots__ = ("_entry_bytes", "max_unwritten_bytes", "writable")

    #: the whole subscription (the dispatch consumer reads only a narrow view of it)
    subscription: Subscription
    queue: ReceiverQueue

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queue = ReceiverQueue()
        #: the front end can take more (its client reads what it is sent)
        self.writable = True
        #: maxUnwrittenBytesPerConsumer (0: no limit)
        self.max_unwritten_bytes = self.subscription.config.max_unwritten_bytes_per_consumer
        #: moving average of the size of the entries handed over (0: none yet)
        self._entry_bytes = 0.0

    # ------------------------------------------------------------------ backpressure

    @property
    def available_permits(self) -> int:
        """Entries the dispatcher may hand over now. O(1)."""
        if not self.writable:
            return 0
        permits = self.client_permits()
        if permits <= 0:
            return 0
        average = self._entry_bytes
        limit = self.max_unwritten_bytes
        if limit:
            room = limit - self.unwritten_bytes()
            if room <= 0:
                return 0
            if average == 0:
                return 1  # the first entry tells how large they are
            if room < permits * average:
                return max(int(room / average), 1)
        return permits

    def has_room(self) -> bool:
        """``available_permits > 0`` without its averages: writable, client permits
        left, and bytes left under ``max_unwritten_bytes``. O(1)."""
        if not self.writable or self.client_permits() <= 0:
            return False
        limit = self.max_unwritten_bytes
        return not limit or self.unwritten_bytes() < limit

    def read_permits(self) -> int:
        """``available_permits``, and no more entries than the front end takes, at the
        average entry size seen, before it closes the ``writable`` gate (the entry that
        passes its mark still goes; :meth:`gate_room`). O(1)."""
        permits = self.available_permits
        average = self._entry_bytes
        if permits > 1 and average:
            gate = self.gate_room()
            if gate is not None and gate < (permits - 1) * average:
                return max(int(gate / average) + 1, 1)
        return permits

    def gate_room(self) -> int | None:
        """Bytes the front end takes before it closes the ``writable`` gate; None when
        it has no such gate (only the binary connection has one). O(1)."""
        return None

    def unwritten_bytes(self) -> int:
        """Bytes handed to this consumer that the broker still holds, not yet written
        to the client: its receiver queue's (a front end that buffers elsewhere adds
        that). O(1)."""
        return self.queue.bytes

    def give_back(self, deliveries: list[Delivery]) -> None:
        """Deliveries a poll took (``drain``) but does not answer: back at the head of
        the receiver queue in their order, as if never taken: still pending, as not
        yet received (so a close or a redelivery gives them back to the subscription
        with the rest); the next poll takes them. O(len(deliveries))."""
        queue = self.queue
        pending = self.pending
        for delivery in reversed(deliveries):
            queue.appendleft(delivery)
            pending[delivery.entry.position] = NOT_RECEIVED
        if queue:
            self._available.set()

    def set_writable(self, writable: bool) -> None:
        """The front end's client reads again (True) or has stopped reading (False):
        the dispatcher hands this consumer nothing while it is False, and is woken
        when it turns True. O(1)."""
        if writable == self.writable:
            return
        self.writable = writable
        if writable:
            self.wake_dispatcher()

    def wake_dispatcher(self) -> None:
        """Room was made (bytes written, the gate opened): dispatch may go on. O(1)."""
        dispatcher = self.subscription.dispatcher
        if dispatcher is not None:
            dispatcher.wake()

    def count_out(self, entry: Entry, messages: int, redelivery_count: int) -> None:
        """As the dispatch consumer's, and the average entry size. O(1)."""
        super().count_out(entry, messages, redelivery_count)
        size = len(entry.data)
        average = self._entry_bytes
        self._entry_bytes = size if average == 0 else average + (size - average) * 0.1

    # ------------------------------------------------------------------ what the client sees

    def unacked_messages(self, entry: Entry, after_index: int = -1) -> tuple[list[Message], int]:
        """The messages of ``entry`` to give the client, decoded once (kept on the
        entry), and the batch's size (0: unbatched). Of a batch, only the messages not
        acknowledged yet (batch-index acks) and after ``after_index`` (a reader that
        starts inside the batch); the size is recorded for the acks that will name
        them. O(messages in the entry); the decoded list itself when nothing is left
        out. EntryFormatError for bytes that are not an entry."""
        decoded = entry.decoded_messages(self.subscription.config.max_message_size)
        if not decoded or decoded[0].batch_index < 0:
            return decoded, 0
        size = decoded[0].batch_size
        subscription = self.subscription
        position = entry.position
        subscription.batch_sizes[position] = size
        ack_sets = subscription.ack_sets
        unacked = ack_sets.get(position, -1) if ack_sets else -1
        if unacked == -1 and after_index < 0:
            return decoded, size
        kept = [
            m for m in decoded if (unacked >> m.batch_index) & 1 and m.batch_index > after_index
        ]
        return kept, size

    async def unreadable(self, entry: Entry, error: EntryFormatError) -> None:
        """The messages of ``entry``, handed to this session, do not decode
        (:meth:`unacked_messages` raised ``error``): logged, and acknowledged when the
        entry is corrupt (a batch whose messages are not what its header says, a ZLIB
        payload that does not inflate), as Pulsar's client discards a corrupt message
        (an ack carrying a ``validation_error``, which Pulsar's broker applies as any
        ack): the subscription goes on past it, and the client's other messages come.
        Returns once the ack is durable; a failed write is logged, not raised (the
        entry stays pending, and is discarded again when delivered again). An entry in
        a compression the broker does not decompress is not corrupt (a Pulsar client
        reads it): it is only logged, and stays pending for this consumer. O(1)."""
        position = entry.position
        topic = self.subscription.topic.name
        if isinstance(error, UnsupportedCompressionError):
            log.warning("entry %s of %s is unreadable here: %s", position, topic, error)
            return
        log.warning(
            "entry %s of %s is corrupt, acknowledged for subscription %s and skipped: %s",
            position,
            topic,
            self.subscription.name,
            error,
        )
        durable = self.acknowledge_sets([position], [], False)
        if durable is None:
            return
        try:
            await durable
        except (BrokerError, BookieError, ManagedLedgerError, OSError) as failure:
            log.warning("ack of corrupt entry %s not made durable: %s", position, failure)

    def received(self, position: Position) -> bool:
        """Whether the client has the entry (not still in the broker's receiver queue,
        where a batch's size is not known yet). O(1)."""
        return self.pending.get(position, NOT_RECEIVED) != NOT_RECEIVED

    def holder_of(self, position: Position) -> Consumer | None:
        """The consumer of this subscription the entry was handed to: this one, or
        another (a message may be acked through another consumer of the subscription,
        as Pulsar's broker allows). O(1) when it is this one, else O(consumers)."""
        if position in self.pending:
            return self
        for other in self.subscription.consumers:
            if position in other.pending:
                return other
        return None

    def client_done(self, position: Position, batch_index: int) -> None:
        """The client acked or nacked a message it was given (a front end that
        limits what is sent and not acked frees room here). O(1)."""

    # ------------------------------------------------------------------ acks

    def acknowledge(
        self, whole: list[Position], indexed: list[MessageRef], cumulative: bool
    ) -> Coroutine[Any, Any, None] | None:
        """Acknowledge what the client names: ``whole`` entries and ``indexed``
        messages (entry, batch index). A message of a batch leaves the rest of the
        batch unacknowledged (cumulative: the messages after it); message 0 of an
        unbatched entry the client has names the entry; any other index the client was
        not given is ignored, as an unknown id. Applied at once, in call order;
        returns what makes it durable (None: nothing to do). InvalidRequestError,
        before anything changes, for a cumulative ack on Shared or Key_Shared.
        O(ids + pending entries for a cumulative ack)."""
        self._tell_holders(whole, indexed)
        sizes = self.subscription.batch_sizes
        partial: list[tuple[Position, int]] = []
        for position, index in indexed:
            size = sizes.get(position, 0)
            if index < size:
                partial.append((position, unacked_after(size, index, cumulative)))
            elif size == 0 and index == 0 and self._received_here(position):
                whole.append(position)
        return self.acknowledge_sets(whole, partial, cumulative)

    def acknowledge_sets(
        self, whole: list[Position], partial: list[tuple[Position, int]], cumulative: bool
    ) -> Coroutine[Any, Any, None] | None:
        """Acknowledge ``whole`` entries and messages of batches as Pulsar's ack sets
        say them: (entry, mask of what stays unacknowledged). An individual ack of an
        entry handed to another consumer of the subscription acknowledges it there.
        As :meth:`acknowledge` otherwise. O(ids)."""
        subscription = self.subscription
        if not cumulative:
            for position in whole:
                if position not in self.pending:
                    return self._acknowledge_by_holder(whole, partial)
            for position, _ in partial:
                if position not in self.pending:
                    return self._acknowledge_by_holder(whole, partial)
        return subscription.begin_acknowledge_messages(self, whole, partial, cumulative)

    def _acknowledge_by_holder(
        self, whole: list[Position], partial: list[tuple[Position, int]]
    ) -> Coroutine[Any, Any, None] | None:
        """Individual acks split by the consumer each entry was handed to. O(ids x
        consumers)."""
        groups: dict[Consumer, tuple[list[Position], list[tuple[Position, int]]]] = {}
        for position in whole:
            holder = self.holder_of(position)
            if holder is not None:
                groups.setdefault(holder, ([], []))[0].append(position)
        for position, mask in partial:
            holder = self.holder_of(position)
            if holder is not None:
                groups.setdefault(holder, ([], []))[1].append((position, mask))
        begin = self.subscription.begin_acknowledge_messages
        steps = [begin(holder, w, p, False) for holder, (w, p) in groups.items()]
        durable = [step for step in steps if step is not None]
        return in_order(durable) if durable else None

    def _tell_holders(self, whole: list[Position], indexed: list[MessageRef]) -> None:
        """:meth:`client_done` on the session each named message was handed to."""
        for position in whole:
            holder = self.holder_of(position)
            if isinstance(holder, ConsumerSession):
                holder.client_done(position, WHOLE_ENTRY)
        for position, index in indexed:
            holder = self.holder_of(position)
            if isinstance(holder, ConsumerSession):
                holder.client_done(position, index)

    def _received_here(self, position: Position) -> bool:
        holder = self.holder_of(position)
        return holder is not None and holder.pending[position] != NOT_RECEIVED

    def negative_acknowledge(self, whole: list[Position], indexed: list[MessageRef]) -> None:
        """Redeliver what the client names after its consumer's nack delay, one
        redelivery more. A message of a batch redelivers its entry (the messages
        acked meanwhile are left out then), once however many of its messages are
        named; ids the client was not given are ignored. O(ids)."""
        self._tell_holders(whole, indexed)
        positions = dict.fromkeys(whole)
        sizes = self.subscription.batch_sizes
        for position, index in indexed:
            if index < sizes.get(position, 0) or (index == 0 and self._received_here(position)):
                positions[position] = None
        by_holder: dict[Consumer, list[Position]] = {}
        for position in positions:
            holder = self.holder_of(position)
            if holder is not None:
                by_holder.setdefault(holder, []).append(position)
        for holder, mine in by_holder.items():
            self.subscription.negative_acknowledge(holder, mine)

    def redeliver(self, positions: list[Position] | None) -> None:
        """Send again ``positions`` (None: everything unacknowledged) at once, one
        redelivery more (a client that keeps its own nack delay). O(positions)."""
        if positions is None:
            self.subscription.redeliver_unacknowledged(self)
        else:
            self.subscription.redeliver_now(self, positions)

    # ------------------------------------------------------------------ subscription

    async def seek(
        self,
        service: BrokerService,
        target: Start | None = None,
        publish_time_ms: int | None = None,
    ) -> None:
        """Move the subscription's cursor to ``target`` (earliest, latest, or a
        position) or to the first message published at or after ``publish_time_ms``, in
        Pulsar's order (``PersistentSubscription.resetCursor``): the position is found,
        the subscription is fenced (no consumer attaches: SubscriptionFencedError), its
        consumers are closed (this one too; each front end tells its client, which
        reconnects and reads from the new position), the cursor is reset, and only then
        does the seek return, so the client's answer comes after the reset.
        SubscriptionFencedError while another seek runs. A failed reset changes nothing
        but the closed consumers. O(consumers) plus the reset."""
        subscription = self.subscription
        topic = subscription.topic
        ledger = topic.ledger
        if publish_time_ms is not None:
            position = await topic.find_position_by_publish_time(publish_time_ms)
        elif target == "earliest":
            position = ledger.first_position()
        elif target == "latest" or target is None:
            position = ledger.next_position(ledger.last_confirmed)
        else:
            position = target
        if subscription.fenced:
            raise SubscriptionFencedError(f"subscription {subscription.name} is being reset")
        subscription.fenced = True
        try:
            for member in list(subscription.consumers):
                service.close_consumer(member)
            await subscription.reset_cursor(position)
        finally:
            subscription.fenced = False

    async def unsubscribe(
        self,
        service: BrokerService,
        force: bool,
        settled: Coroutine[Any, Any, None] | None = None,
    ) -> None:
        """Delete the subscription: PreconditionFailedError (nothing changed) while
        other consumers are connected to it, unless ``force`` closes them. This
        consumer is closed too (its unacked messages go back); ``settled`` (the
        session's acks made durable, say) is awaited before the delete. O(consumers)."""
        subscription = self.subscription
        others = [c for c in subscription.consumers if c is not self]
        if others and not force:
            if settled is not None:
                settled.close()
            raise PreconditionFailedError(
                f"subscription {subscription.name} has other consumers connected"
            )
        for member in [*others, self]:
            service.close_consumer(member)
        if settled is not None:
            await settled
        await subscription.topic.delete_subscription(subscription.name)

    async def drop_subscription(self) -> None:
        """A reader's subscription goes with its reader (unless a consumer came back to
        it). Failures are logged: there is no one to tell."""
        subscription = self.subscription
        if subscription.consumers:
            return
        try:
            await subscription.topic.delete_subscription(subscription.name)
        except BrokerError:
            pass  # gone already (the topic was deleted), or a consumer came back
        except (BookieError, ManagedLedgerError, OSError) as error:
            log.warning("reader subscription %s not deleted: %s", subscription.name, error)


class PushConsumer(ConsumerSession):
    """A session whose receiver queue is the client's: the client grants permits
    (messages, :meth:`grant`) and every entry handed over is written out at once with
    :meth:`send`, pending from then. A batch takes as many permits as it holds messages,
    as in Pulsar; the dispatcher reads ``available_permits`` entries: the permits
    divided by the (moving) average of messages per entry seen, which the first entry
    handed over sets (as Pulsar's ``Consumer.avgMessagesPerEntry`` starts; one
    blended up from 1 took some 30 batches of 127 to approach their size, each
    dispatch meanwhile reading entries that did not fit, only to queue them for a
    replay read). A connected client is never idle (its connection tells when it is
    gone). State: O(1) beyond ``pending``."""

    __slots__ = ("_avg_batch", "permits")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.permits = 0
        #: moving average of messages per entry handed over (0: none yet)
        self._avg_batch = 0.0
        self.polls = 1
        # what is sent is out of the broker at once: no bytes to bound (a front end that
        # buffers what it sends, as the binary connection, sets the bound again)
        self.max_unwritten_bytes = 0

    def client_permits(self) -> int:
        """The permits in entries. O(1)."""
        permits = self.permits
        if permits <= 0:
            return 0
        average = self._avg_batch
        return permits if average <= 1.0 else max(int(permits / average), 1)

    def has_room(self) -> bool:
        """As the session's, with the permits counted here (``client_permits`` is above
        0 exactly when they are). O(1)."""
        if not self.writable or self.permits <= 0:
            return False
        limit = self.max_unwritten_bytes
        return not limit or self.unwritten_bytes() < limit

    def grant(self, permits: int) -> None:
        """The client has room for ``permits`` more messages: the dispatcher may send."""
        self.permits += permits
        self.wake_dispatcher()

    def unwritten_bytes(self) -> int:
        """What the front end still buffers for the client: nothing here (:meth:`send`
        hands each entry over at once). O(1)."""
        return 0

    def deliver(self, entry: Entry, redelivery_count: int, now_ns: int) -> None:
        """Hand the entry over: the read the cache expected has happened (``released``),
        it is pending from now, its messages use permits, and :meth:`send` writes it.
        O(1) plus ``send``."""
        position = entry.position
        self._released(self.subscription.name, position.ledger_id, position.entry_id)
        self.pending[position] = now_ns
        messages = entry.messages
        self.permits -= messages
        average = self._avg_batch
        if average == 0.0:
            self._avg_batch = messages
        elif messages != 1 or average != 1.0:
            self._avg_batch = average + (messages - average) * 0.1
        self.count_out(entry, messages, redelivery_count)
        self.send(entry, redelivery_count)

    def send(self, entry: Entry, redelivery_count: int) -> None:
        """Write the entry to the client (the front end's part). O(1)."""
