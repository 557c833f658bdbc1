"""A subscription: a durable cursor, its consumers, their dispatcher, redelivery counts."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any, Protocol

from broker.clock import Clock
from broker.dispatch.consumer import NOT_RECEIVED, Consumer
from broker.dispatch.dispatcher import (
    DispatchConfig,
    Dispatcher,
    SharedDispatcher,
    SingleActiveConsumerDispatcher,
)
from broker.dispatch.errors import (
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    NotImplementedYetError,
    SubscriptionFencedError,
)
from broker.dispatch.key_shared import KeySharedDispatcher
from broker.dispatch.names import TopicName
from broker.dispatch.stats import BrokerTotals, RateCounter
from broker.ledger.entry import Entry
from broker.ledger.managed_cursor import ManagedCursor
from broker.ledger.managed_ledger import ManagedLedger
from broker.ledger.position import Position


class SubscribedTopic(Protocol):
    """The topic as its subscriptions (and their consumers) see it. ``PersistentTopic``
    is the one; it makes its subscriptions, so this module declares what they read
    rather than importing it."""

    @property
    def name(self) -> TopicName: ...
    @property
    def ledger(self) -> ManagedLedger: ...
    @property
    def totals(self) -> BrokerTotals: ...
    async def delete_subscription(self, name: str) -> None: ...
    async def find_position_by_publish_time(self, timestamp_ms: int) -> Position: ...


SUBSCRIPTION_TYPES = ("Exclusive", "Failover", "Shared", "Key_Shared")

_DISPATCHERS: dict[str, type[Dispatcher]] = {
    "Exclusive": SingleActiveConsumerDispatcher,
    "Failover": SingleActiveConsumerDispatcher,
    "Shared": SharedDispatcher,
    "Key_Shared": KeySharedDispatcher,
}


async def in_order(steps: list[Coroutine[Any, Any, None]]) -> None:
    """Await every step in turn, each one's failure handling included, then raise the
    first error (one failed cursor write fails the steps that shared it)."""
    first: Exception | None = None
    try:
        while steps:
            try:
                await steps.pop(0)
            except Exception as error:  # each step settles, failure handling included
                first = first or error
    finally:
        for rest in steps:  # cancelled: the rest never ran
            rest.close()
    if first is not None:
        raise first


def check_subscription_type(sub_type: str) -> None:
    """NotImplementedYetError for a type this broker cannot dispatch yet."""
    if sub_type not in _DISPATCHERS:
        raise NotImplementedYetError(f"subscription type {sub_type} is not implemented yet")


class Subscription:
    """Consumers of one subscription share its cursor. The subscription's type is the
    type of its connected consumers; with none connected, the next consumer sets it."""

    def __init__(
        self, topic: SubscribedTopic, cursor: ManagedCursor, config: DispatchConfig, clock: Clock
    ) -> None:
        self.topic = topic
        self.cursor = cursor
        self.name = cursor.name
        self.config = config
        self.clock = clock
        self.type: str | None = None
        self.dispatcher: Dispatcher | None = None
        #: position -> times it was sent again; forgotten once acknowledged
        self.redelivery_counts: dict[Position, int] = {}
        self.msg_redeliver = RateCounter()
        #: messages in each batched entry an HTTP consumer received (its batch-index
        #: acks need the size); gone once the entry is acknowledged
        self.batch_sizes: dict[Position, int] = {}
        self._timers: dict[Consumer, set[asyncio.TimerHandle]] = {}
        #: what consumers that left had been delivered (Pulsar keeps it, so the
        #: subscription's and topic's msgOutCounter never go down)
        self.msg_out_removed = 0
        self.bytes_out_removed = 0
        #: a seek is resetting the cursor: consumers may not attach (Pulsar's fenced
        #: subscription), and a reader's subscription is kept for its reader to return
        self.fenced = False

    @property
    def ack_sets(self) -> dict[Position, int]:
        """Batched entries some of whose messages are acknowledged: position -> bit mask
        of the messages still unacknowledged (Pulsar's ack set: bit i set = message i
        not acked). The cursor's, durable with it; gone once the entry is acked whole."""
        return self.cursor.batch_deleted

    @property
    def consumers(self) -> Sequence[Consumer]:
        """In the order they attached (O(1) to test membership: ``ConsumerList``)."""
        return self.dispatcher.consumers if self.dispatcher is not None else ()

    async def add_consumer(self, consumer: Consumer, sub_type: str) -> None:
        """Attach a consumer. ConflictError if Exclusive is taken or the type differs
        from the connected consumers' type; SubscriptionFencedError while a seek resets
        the cursor."""
        check_subscription_type(sub_type)
        if self.fenced:
            raise SubscriptionFencedError(
                f"subscription {self.name} is fenced: its cursor is being reset; retry"
            )
        if self.consumers:
            if sub_type != self.type:
                raise ConflictError(
                    f"subscription {self.name} has {self.type} consumers; "
                    f"a {sub_type} consumer cannot join"
                )
            if sub_type == "Exclusive":
                raise ConflictError(f"exclusive subscription {self.name} already has a consumer")
        # attach before any await, so a concurrent caller sees this consumer and its type
        old = None
        if self.dispatcher is None or self.type != sub_type:
            old = self.dispatcher
            self.dispatcher = _DISPATCHERS[sub_type](self, self.config, self.clock)
            if old is not None:
                # what the old one still had to deliver, delayed messages included
                # (the new type decides whether they still wait)
                self.dispatcher.replay.update(old.held_positions())
            self.type = sub_type
        self.dispatcher.add_consumer(consumer)
        self.cursor.ledger.activate_cursor(self.cursor)
        if old is not None:
            await old.close()

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach a consumer; its unacknowledged messages go to the others."""
        for handle in self._timers.pop(consumer, ()):
            handle.cancel()
        if self.dispatcher is not None and consumer in self.dispatcher.consumers:
            self.dispatcher.remove_consumer(consumer)
            self.msg_out_removed += consumer.msg_out.total
            self.bytes_out_removed += consumer.bytes_out.total
            if not self.dispatcher.consumers:
                self.cursor.ledger.deactivate_cursor(self.cursor)

    async def acknowledge(
        self, consumer: Consumer, positions: list[Position], cumulative: bool
    ) -> None:
        """Acknowledge positions pending for ``consumer`` (others are ignored); returns
        once the cursor is durable. The cursor skips them at once, but they stay pending
        for the consumer until then: if the write fails the ack had no effect (the
        cursor takes it back, the consumer still holds them, a retry writes it)."""
        finish = self.begin_acknowledge(consumer, positions, cumulative)
        if finish is not None:
            await finish

    def begin_acknowledge(
        self, consumer: Consumer, positions: list[Position], cumulative: bool
    ) -> Coroutine[Any, Any, None] | None:
        """The part of :meth:`acknowledge` that takes effect at once (the cursor skips
        the positions); returns what makes it durable, to await (None: nothing to do).
        A front end that must apply acks in the order commands arrive (the binary
        protocol: an ack, then a close) calls this where the command is read."""
        cursor = self.cursor
        pending = consumer.pending
        upto = None
        if cumulative:
            if self.type in ("Shared", "Key_Shared"):
                raise InvalidRequestError(
                    f"cumulative ack is not allowed on {self.type} subscriptions"
                )
            upto = max(positions)
            if upto not in pending:
                return None
            mine = [p for p in pending if p <= upto]
            cursor.acknowledge_cumulative(upto)
        else:
            mine = [position for position in positions if position in pending]
            if not mine:
                return None
            cursor.acknowledge(mine)
        return self._finish_acknowledge(consumer, mine, upto)

    async def _finish_acknowledge(
        self, consumer: Consumer, mine: list[Position], upto: Position | None
    ) -> None:
        cursor = self.cursor
        pending = consumer.pending
        try:
            await cursor.persist()
        except BaseException:
            if self.dispatcher is not None and any(p not in pending for p in mine):
                self.dispatcher.unacknowledged_again(mine)
            raise
        if upto is not None:
            mine = [p for p in pending if p <= upto]  # with any handed out meanwhile
        counts = self.redelivery_counts
        sizes = self.batch_sizes
        for position in mine:
            # a redelivery or a close meanwhile may have taken it back already
            if pending.pop(position, None) is not None:
                counts.pop(position, None)
            if sizes:
                sizes.pop(position, None)
        if self.dispatcher is not None:
            if upto is None:
                self.dispatcher.acknowledged(mine)
            self.dispatcher.wake()

    def begin_acknowledge_messages(
        self,
        consumer: Consumer,
        whole: list[Position],
        partial: list[tuple[Position, int]],
        cumulative: bool,
    ) -> Coroutine[Any, Any, None] | None:
        """What a front end's ack says, applied at once as :meth:`begin_acknowledge`:
        ``whole`` entries, and messages of batched entries as (entry, mask of what stays
        unacknowledged). A cumulative ack naming a message of a batch acknowledges every
        entry before that batch and, in the batch, what the mask says (the messages up
        to the named one). Returns what makes it durable (None: nothing to do).
        InvalidRequestError, before anything changes, for a cumulative ack on Shared or
        Key_Shared."""
        if cumulative and self.type in ("Shared", "Key_Shared"):
            raise InvalidRequestError(f"cumulative ack is not allowed on {self.type} subscriptions")
        steps: list[Coroutine[Any, Any, None] | None] = []
        if partial:
            if cumulative:
                first = min(position for position, _ in partial)
                earlier = [p for p in consumer.pending if p < first]
                if earlier:
                    steps.append(self.begin_acknowledge(consumer, [max(earlier)], True))
            steps.append(self.begin_acknowledge_batch_indexes(consumer, partial))
        if whole:
            steps.append(self.begin_acknowledge(consumer, whole, cumulative))
        durable = [step for step in steps if step is not None]
        return in_order(durable) if durable else None

    async def acknowledge_batch_indexes(
        self, consumer: Consumer, acks: list[tuple[Position, int]]
    ) -> None:
        """Acknowledge messages of batched entries pending for ``consumer``: each pair is
        (entry, mask of the messages still unacknowledged), merged into the entry's ack
        set as Pulsar's cursor does (AND). An entry left with nothing unacknowledged is
        acknowledged whole (durably, as :meth:`acknowledge`). O(acks)."""
        finish = self.begin_acknowledge_batch_indexes(consumer, acks)
        if finish is not None:
            await finish

    def begin_acknowledge_batch_indexes(
        self, consumer: Consumer, acks: list[tuple[Position, int]]
    ) -> Coroutine[Any, Any, None] | None:
        """:meth:`acknowledge_batch_indexes` as :meth:`begin_acknowledge` splits it."""
        pending = consumer.pending
        cursor = self.cursor
        complete = []
        partial = False
        for position, remaining in acks:
            if position not in pending:
                continue
            if cursor.acknowledge_batch(position, remaining):
                partial = True
            else:
                complete.append(position)
        if complete:
            # its write carries the partial acks made above too
            return self.begin_acknowledge(consumer, complete, cumulative=False)
        return cursor.persist() if partial else None

    def negative_acknowledge(self, consumer: Consumer, positions: list[Position]) -> None:
        """Redeliver ``positions`` after the consumer's nack delay, one redelivery more."""
        mine = [position for position in dict.fromkeys(positions) if position in consumer.pending]
        if not mine:
            return
        delay_s = consumer.nack_delay_ms / 1000
        if delay_s <= 0:
            self._redeliver(consumer, mine)
            return
        loop = asyncio.get_running_loop()
        timers = self._timers.setdefault(consumer, set())
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            assert handle is not None
            timers.discard(handle)
            self._redeliver(consumer, mine)

        handle = loop.call_later(delay_s, fire)
        timers.add(handle)

    def _redeliver(self, consumer: Consumer, positions: Iterable[Position] | None) -> None:
        if consumer.closed or self.dispatcher is None:
            return  # closing already handed its messages back
        if positions is not None:
            # each entry once: a position named twice (two messages of one batch) must
            # not be taken back twice
            positions = list(dict.fromkeys(positions))
        self.dispatcher.redeliver(consumer, positions)

    def redeliver_unacknowledged(self, consumer: Consumer) -> None:
        self._redeliver(consumer, None)

    def redeliver_now(self, consumer: Consumer, positions: list[Position]) -> None:
        """Redeliver ``positions`` of ``consumer`` at once (a client that keeps its own
        nack delay, as Pulsar's binary clients do)."""
        self._redeliver(consumer, positions)

    def redeliver_timed_out(self, consumer: Consumer, now_ns: int) -> None:
        """Redeliver messages pending longer than the consumer's ack timeout."""
        if consumer.ack_timeout_ms <= 0 or not consumer.pending:
            return
        deadline = now_ns - consumer.ack_timeout_ms * 1_000_000
        expired = [
            pos
            for pos, received_ns in consumer.pending.items()
            if NOT_RECEIVED < received_ns <= deadline
        ]
        if expired:
            self._redeliver(consumer, expired)

    async def reset_cursor(self, position: Position) -> None:
        """Move the cursor to ``position`` once that is durable; then what consumers
        hold is taken back. A failed reset changes nothing."""
        await self.cursor.reset(position)
        self.redelivery_counts.clear()
        if self.dispatcher is not None:
            self.dispatcher.reset()
            self.dispatcher.wake()

    # ------------------------------------------------------------------ admin

    async def peek(self, n: int) -> Entry:
        """The ``n``-th (from 1) unacknowledged entry, read without moving anything (by
        no cursor: nothing is cached for this subscription). NotFoundError when the
        backlog holds fewer. O(n + deleted ranges) plus one read."""
        position = self.cursor.nth_unacknowledged(n)
        if position is None:
            raise NotFoundError(
                f"Message not found: subscription {self.name} has {self.backlog()} "
                f"entries in its backlog, position {n} asked"
            )
        entries = await self.topic.ledger.read_entries(position, 1, "")
        if not entries:
            raise NotFoundError(f"Message not found at {position}")
        return entries[0]

    async def skip(self, count: int) -> int:
        """Pulsar's skipMessages: acknowledge the next ``count`` unacknowledged entries
        (every one when fewer remain); the entries skipped. Durable when it returns.
        O(count + deleted ranges)."""
        cursor = self.cursor
        before = cursor.backlog()
        target = cursor.nth_unacknowledged(count)
        await self.mark_delete_up_to(cursor.ledger.last_confirmed if target is None else target)
        return before - cursor.backlog()

    async def skip_all(self) -> int:
        """Pulsar's clearBacklog: everything published so far is acknowledged; the
        entries skipped. Durable when it returns. O(consumers' pending)."""
        before = self.cursor.backlog()
        await self.mark_delete_up_to(self.cursor.ledger.last_confirmed)
        return before - self.cursor.backlog()

    async def expire_messages(self, now_ms: int, ttl_s: int) -> int:
        """Pulsar's expireMessages: acknowledge every entry published more than
        ``ttl_s`` seconds before ``now_ms`` (a message expires once publish time + TTL <
        now). Publish times are taken as growing along the ledger (a binary search
        over them, as Pulsar's expiry monitor does). The entries expired."""
        cutoff = now_ms - ttl_s * 1000
        first_kept = await self.topic.find_position_by_publish_time(cutoff)
        last_expired = self._entry_before(first_kept)
        if last_expired is None:
            return 0
        before = self.cursor.backlog()
        await self.mark_delete_up_to(last_expired)
        return before - self.cursor.backlog()

    def _entry_before(self, position: Position) -> Position | None:
        """The confirmed entry just before ``position``; None if there is none.
        O(#ledgers)."""
        if position.entry_id > 0:
            return Position(position.ledger_id, position.entry_id - 1)
        for info in reversed(self.topic.ledger.ledgers):
            if info.ledger_id < position.ledger_id and info.entries > 0:
                return Position(info.ledger_id, info.entries - 1)
        return None

    async def mark_delete_up_to(self, position: Position) -> None:
        """Acknowledge every entry up to ``position`` as an admin operation would (no
        consumer asked): durable when it returns; what consumers hold up to there is
        acknowledged for them, so nothing of it is redelivered. Nothing happens when the
        cursor is past it already. A failed write changes nothing (the cursor takes the
        acknowledgement back). O(consumers' pending)."""
        cursor = self.cursor
        if position <= cursor.mark_delete_position:
            return
        cursor.acknowledge_cumulative(position)
        await cursor.persist()
        counts = self.redelivery_counts
        released: list[Position] = []
        for consumer in self.consumers:
            pending = consumer.pending
            held = [p for p in pending if p <= position]
            for held_position in held:
                del pending[held_position]
                counts.pop(held_position, None)
            released += held
        if self.dispatcher is not None:
            if released:
                self.dispatcher.acknowledged(released)
            self.dispatcher.wake()

    def backlog(self) -> int:
        return self.cursor.backlog()

    def unacked_messages(self) -> int:
        return self.dispatcher.unacked_messages() if self.dispatcher is not None else 0

    def delayed_messages(self) -> int:
        """Messages held back for their deliver-at time (Pulsar's ``msgDelayed``)."""
        return self.dispatcher.delayed_messages() if self.dispatcher is not None else 0

    async def close(self) -> None:
        for timers in self._timers.values():
            for handle in timers:
                handle.cancel()
        self._timers.clear()
        if self.dispatcher is not None:
            await self.dispatcher.close()
