"""Dispatchers: read from a subscription's cursor (and its replay queue) into consumers'
receiver queues.

The base class owns the read loop; a subclass decides who gets what (``_send``), how
much to read (``_read_budget``) and what redelivery means for it (``redeliver``).
Failover and Key_Shared slot in the same way.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, overload

from sortedcontainers import SortedList, SortedSet

from broker.clock import Clock
from broker.dispatch.consumer import Consumer
from broker.dispatch.delayed import DelayedDeliveryConfig, DelayedDeliveryTracker
from broker.dispatch.stats import RateCounter
from broker.ledger.entry import Entry, EntryFormatError, check_entry, deliver_at_of
from broker.ledger.errors import ManagedLedgerError, ReadsThrottled
from broker.ledger.managed_cursor import ManagedCursor
from broker.ledger.position import Position
from broker.tasks import TaskOwner
from storage_stub.bookie.api import BookieError

log = logging.getLogger(__name__)

#: backoff between retries of a failed storage read, doubling up to the max
RETRY_MIN_S = 0.05
RETRY_MAX_S = 2.0


@dataclass(frozen=True, slots=True)
class DispatchConfig:
    max_read_batch_size: int = 100
    max_unacked_per_consumer: int = 50000
    max_unacked_per_subscription: int = 200000
    #: maxUnwrittenBytesPerConsumer: bytes a session holds for its client before it takes
    #: no more (0: no limit); the session applies it (``broker.session.consumer``)
    max_unwritten_bytes_per_consumer: int = 4 * 1024 * 1024
    #: maxMessageSize: the most a ZLIB payload is inflated to for a client that reads
    #: messages in the broker (HTTP, WebSocket, peek; ``broker.ledger.entry.inflate``)
    max_message_size: int = 5 * 1024 * 1024
    #: Key_Shared: stop reading new entries while this much waits in the replay queue
    key_shared_look_ahead_per_consumer: int = 4000
    key_shared_look_ahead_per_subscription: int = 40000
    delayed: DelayedDeliveryConfig = field(default_factory=DelayedDeliveryConfig)


class DispatchedSubscription(Protocol):
    """The subscription as its dispatcher sees it. ``Subscription`` is the one; it makes
    its dispatcher, so this module declares what it reads rather than importing it."""

    @property
    def name(self) -> str: ...
    @property
    def cursor(self) -> ManagedCursor: ...
    @property
    def redelivery_counts(self) -> dict[Position, int]: ...
    @property
    def msg_redeliver(self) -> RateCounter: ...


class ConsumerList(Sequence[Consumer]):
    """A dispatcher's consumers in the order they attached: a list whose ``in`` and
    ``remove`` are O(1) (an insertion-ordered dict), so a client hanging up with tens of
    thousands of consumers of one subscription, spread through the list among other
    connections' (its removals scanning the list each), costs time linear in their
    number: 40,000 Shared consumers of 8 connections held the loop 9.5 s to detach.
    ``[0]`` is O(1); another index O(index)."""

    __slots__ = ("_members",)

    def __init__(self) -> None:
        self._members: dict[Consumer, None] = {}

    def append(self, consumer: Consumer) -> None:
        self._members[consumer] = None

    def remove(self, consumer: Consumer) -> None:
        """ValueError if absent, as a list's."""
        try:
            del self._members[consumer]
        except KeyError:
            raise ValueError(f"{consumer!r} is not attached") from None

    def __contains__(self, consumer: object) -> bool:
        return consumer in self._members

    def __iter__(self) -> Iterator[Consumer]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)

    @overload
    def __getitem__(self, index: int) -> Consumer: ...
    @overload
    def __getitem__(self, index: slice) -> list[Consumer]: ...
    def __getitem__(self, index: int | slice) -> Consumer | list[Consumer]:
        if isinstance(index, slice):
            return list(self._members)[index]
        if index == 0 and self._members:
            return next(iter(self._members))
        return list(self._members)[index]


class Dispatcher(ABC):
    """One per subscription. ``wake()`` is called whenever dispatch may progress: new
    entries, freed permits, new consumers, redeliveries, acks, delayed messages due."""

    #: whether messages with a deliver-at time wait for it (Shared and Key_Shared, as
    #: in Pulsar; Exclusive and Failover deliver them at once)
    tracks_delayed = False

    def __init__(
        self, subscription: DispatchedSubscription, config: DispatchConfig, clock: Clock
    ) -> None:
        self.subscription = subscription
        self.cursor = subscription.cursor
        self.ledger = subscription.cursor.ledger
        self.config = config
        self.clock = clock
        self.consumers = ConsumerList()
        #: positions to send again before reading new entries, in position order
        self.replay: SortedSet = SortedSet()
        #: delayed messages held back (made on the first one, as Pulsar does)
        self.delayed: DelayedDeliveryTracker | None = None
        self._track = self.tracks_delayed and config.delayed.enabled
        self._wake = asyncio.Event()
        self._owner = TaskOwner(f"dispatcher {subscription.name}")
        self._owner.spawn(self._run(), name=f"dispatch {subscription.name}")
        self.ledger.add_entries_listener(self.wake)

    def wake(self) -> None:
        self._wake.set()

    async def close(self) -> None:
        self.ledger.remove_entries_listener(self.wake)
        if self.delayed is not None:
            self.delayed.close()
        await self._owner.close()

    # ------------------------------------------------------------------ consumers

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.wake()

    @abstractmethod
    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach a consumer and give its unacknowledged messages to the others."""

    @abstractmethod
    def redeliver(self, consumer: Consumer, positions: Iterable[Position] | None) -> None:
        """Send again ``positions`` (None: everything pending) of ``consumer``, counting
        one more redelivery for each."""

    def acknowledged(self, positions: Iterable[Position]) -> None:  # noqa: B027
        """These positions were acknowledged (Key_Shared releases their keys); nothing
        to do for the other types."""

    @abstractmethod
    def unacknowledged_again(self, positions: list[Position]) -> None:
        """An ack of ``positions`` failed after some were taken back from their consumer
        (the cursor skipped them meanwhile as acknowledged): deliver those again."""

    def reset(self) -> None:
        """The cursor was reset: take back everything handed out, forget the replay."""
        for consumer in self.consumers:
            consumer.take_unacked()
        self.replay.clear()
        if self.delayed is not None:
            self.delayed.clear()  # what is read again is tracked again

    def unacked_messages(self) -> int:
        return sum(len(consumer.pending) for consumer in self.consumers)

    def delayed_messages(self) -> int:
        """Messages held back for their deliver-at time (``msgDelayed``). O(1)."""
        return len(self.delayed) if self.delayed is not None else 0

    def held_positions(self) -> list[Position]:
        """Positions this dispatcher must still deliver although the cursor has read
        past them: its replay queue and its delayed messages (handed to the dispatcher
        that replaces it)."""
        held = list(self.replay)
        if self.delayed is not None:
            held += self.delayed.positions()
        return held

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        """Dispatch whenever woken. A storage failure is retried with backoff: nothing
        read is lost (replay positions go back; the cursor moves only on success)."""
        backoff_s = RETRY_MIN_S
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                while await self._dispatch_once():
                    pass
                backoff_s = RETRY_MIN_S
            except (BookieError, ReadsThrottled) as error:
                log.warning(
                    "dispatch of %s: read failed, retrying in %.2fs: %s",
                    self.subscription.name,
                    backoff_s,
                    error,
                )
                await asyncio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, RETRY_MAX_S)
                self.wake()

    async def _dispatch_once(self) -> bool:
        """One read and hand-over; False when nothing more can be done now."""
        budget = self._read_budget()
        if budget <= 0:
            return False
        cursor = self.cursor
        delayed = self.delayed
        if delayed is not None and delayed.has_due():
            self._release_delayed(delayed.pop_due(budget))
        if self.replay:
            count = min(budget, len(self.replay))
            positions = [self.replay.pop(0) for _ in range(count)]
            try:
                entries = await self.ledger.read_positions(positions, self.cursor.name)
            except BaseException:
                self.replay.update(positions)
                raise
            fresh = []
            for entry in entries:
                if cursor.is_acknowledged(entry.position):
                    self._dropped(entry)  # acknowledged while the read was in flight
                else:
                    fresh.append(entry)
            self._send(self._screened(fresh))
            return True
        if delayed is not None and delayed.should_pause():
            return False
        if not cursor.has_more_entries():
            return False
        entries = await cursor.read_entries(budget)
        if not entries:
            return False
        self._send(self._screened(entries))
        return True

    def _screened(self, entries: list[Entry]) -> list[Entry]:
        """What of ``entries`` to hand over now: not those that cannot be trusted
        (:meth:`_discard`), nor delayed ones not due (:meth:`_hold_delayed`).
        O(entries + consumers) plus one metadata parse of each entry not parsed before:
        its message count is kept on the entry, and its metadata too when a consumer
        here has polled (the hand-over to such a consumer keeps it, see
        ``Consumer.deliver``), so that the entry is not parsed twice."""
        keep = False
        for consumer in self.consumers:
            if consumer.polled:
                keep = True
                break
        untrusted = False
        for entry in entries:
            if keep:
                entry.keep_metadata()
            if not entry.trusted:
                untrusted = True
        if untrusted:
            entries = self._discard(entries)
        return self._hold_delayed(entries) if self._track else entries

    def _discard(self, entries: list[Entry]) -> list[Entry]:
        """The trusted ones of ``entries``. The others (metadata that does not parse, a
        batch header counting at most 0 messages or more than the entry holds) are
        acknowledged for this subscription, logged and let go, as Pulsar's dispatcher
        does with an entry whose metadata it cannot read
        (``AbstractBaseDispatcher.filterEntriesForConsumer``: acknowledged individually,
        never sent): no consumer is handed what its client could not read, the
        subscription goes on past it, and the ack is made durable in the background.
        **Difference from Pulsar**: Pulsar delivers an entry whose metadata parses
        whatever its batch count says (its Java client then discards the batch with a
        ``BatchDeSerializeError`` ack); brokerlab's HTTP and WebSocket consumers and its
        permits, which count a batch's messages, need that count true first. O(entries)."""
        kept: list[Entry] = []
        bad: list[Position] = []
        for entry in entries:
            if entry.trusted:
                kept.append(entry)
                continue
            position = entry.position
            bad.append(position)
            self._dropped(entry)
            try:
                check_entry(entry.data)
                reason = "unreadable"
            except EntryFormatError as error:
                reason = str(error)
            log.warning(
                "subscription %s: entry %s cannot be trusted, acknowledged and skipped: %s",
                self.subscription.name,
                position,
                reason,
            )
        counts = self.subscription.redelivery_counts
        for position in bad:
            counts.pop(position, None)
        self.cursor.acknowledge(bad)
        self._owner.spawn(self._persist_discarded(bad), name=f"discard {self.subscription.name}")
        return kept

    async def _persist_discarded(self, positions: list[Position]) -> None:
        """Make the acknowledgement of discarded entries durable. A failed write is
        logged (the cursor takes the ack back; the entries are discarded again when
        read again)."""
        try:
            await self.cursor.persist()
        except (BookieError, ManagedLedgerError, OSError) as error:
            log.warning(
                "subscription %s: ack of %d discarded entries not made durable: %s",
                self.subscription.name,
                len(positions),
                error,
            )

    def _hold_delayed(self, entries: list[Entry]) -> list[Entry]:
        """The entries to send now: those with a deliver-at time not yet due go to the
        delayed tracker and are let go (Pulsar releases the entry; the ``released``
        event). O(entries x metadata size): a ``find`` for the field's tag per entry,
        a parse only where it is there."""
        held: list[Entry] | None = None
        delayed = self.delayed
        for index, entry in enumerate(entries):
            deliver_at = deliver_at_of(entry.data)
            if deliver_at is None:
                if delayed is not None:
                    delayed.not_delayed()
                if held is not None:
                    held.append(entry)
                continue
            if delayed is None:
                delayed = self.delayed = DelayedDeliveryTracker(
                    self.config.delayed, self.clock, self.wake
                )
            if delayed.add(entry.position, deliver_at):
                if held is None:
                    held = entries[:index]
                self._dropped(entry)
            elif held is not None:
                held.append(entry)
        return entries if held is None else held

    def _release_delayed(self, positions: list[Position]) -> None:
        """Delayed messages now due: read them again through the replay queue, as
        Pulsar adds its tracker's due positions to its redelivery messages (one more
        read expected of each, the ``replay_added`` event, as for any replay)."""
        for position in positions:
            if not self.cursor.is_acknowledged(position):
                self._replay_later(position)

    def _dropped(self, entry: Entry) -> None:
        """An entry read for dispatch and let go before any consumer got it: Pulsar
        releases it, and a release counts one expected read down (PIP-430's
        ``EntryImpl.deallocate`` -> ``markRead``), as a hand-over does. O(1)."""
        position = entry.position
        self.ledger.events.released(self.cursor.name, position.ledger_id, position.entry_id)

    def _replay_later(self, position: Position) -> None:
        """Queue a position to send again; one more read of it is now expected (the
        ``replay_added`` event)."""
        self.replay.add(position)
        self.ledger.events.replay_added(self.cursor.name, position.ledger_id, position.entry_id)

    def _redelivery_count(self, position: Position) -> int:
        return self.subscription.redelivery_counts.get(position, 0)

    @abstractmethod
    def _read_budget(self) -> int:
        """How many entries to read now (0: wait)."""

    @abstractmethod
    def _send(self, entries: list[Entry]) -> None:
        """Hand entries to consumers; what cannot be handed over must stay deliverable."""


class SingleActiveConsumerDispatcher(Dispatcher):
    """Exclusive and Failover: one consumer receives everything, in order. Redelivery
    rewinds the cursor to the first unacknowledged entry, as Pulsar does to keep order.
    The active consumer is the one with the highest priority (lowest
    ``priorityLevel``), then the lowest name, then the earliest attached (never the
    random consumer id: the choice is the same on every run). The consumers are kept
    ranked, so attaching or detaching one is O(log n): the minimum taken over all of
    them at each attach and detach made a connection of 12,000 Failover consumers hang
    up in O(n^2), holding the loop for half a minute."""

    def __init__(
        self, subscription: DispatchedSubscription, config: DispatchConfig, clock: Clock
    ) -> None:
        super().__init__(subscription, config, clock)
        #: (priority level, name, order attached, consumer): the first is the active one
        self._ranked: SortedList = SortedList()
        self._ranks: dict[int, tuple[int, str, int, Consumer]] = {}  # by id(consumer)
        self._attached = itertools.count()

    def active_consumer(self) -> Consumer | None:
        """O(log n)."""
        ranked = self._ranked
        if not ranked:
            return None
        active: Consumer = ranked[0][3]
        return active

    def add_consumer(self, consumer: Consumer) -> None:
        before = self.active_consumer()
        super().add_consumer(consumer)
        # the order attached is unique: the consumers themselves are never compared
        rank = (consumer.priority_level, consumer.name, next(self._attached), consumer)
        self._ranks[id(consumer)] = rank
        self._ranked.add(rank)
        active = self.active_consumer()
        assert active is not None
        if before is not None and active is not before:
            self._rewind(before, count_redelivery=False)
            before.active_changed(False)
        if active is not consumer:  # attached before it: told first, as in attach order
            active.active_changed(True)
        consumer.active_changed(active is consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        was_active = self.active_consumer() is consumer
        self.consumers.remove(consumer)
        self._ranked.remove(self._ranks.pop(id(consumer)))
        if was_active:
            self._rewind(consumer, count_redelivery=True)
            active = self.active_consumer()
            if active is not None:
                active.active_changed(True)

    def redeliver(self, consumer: Consumer, positions: Iterable[Position] | None) -> None:
        if positions is not None:
            counts = self.subscription.redelivery_counts
            redelivered = 0
            for position in positions:
                if position in consumer.pending:
                    counts[position] = counts.get(position, 0) + 1
                    redelivered += 1
            self.subscription.msg_redeliver.add(redelivered)
        self._rewind(consumer, count_redelivery=positions is None)

    def unacknowledged_again(self, positions: list[Position]) -> None:
        # read again from the first unacknowledged entry, as a redelivery does
        active = self.active_consumer()
        if active is None:
            self.cursor.rewind()
        else:
            self._rewind(active, count_redelivery=False)

    def _rewind(self, consumer: Consumer, count_redelivery: bool) -> None:
        """Take back everything handed to ``consumer`` and read again from the first
        unacknowledged entry; positions the client had seen count one redelivery."""
        positions, unseen = consumer.take_unacked()
        if count_redelivery:
            counts = self.subscription.redelivery_counts
            for position in positions:
                if position not in unseen:
                    counts[position] = counts.get(position, 0) + 1
            self.subscription.msg_redeliver.add(len(positions) - len(unseen))
        self.cursor.rewind()
        self.wake()

    def _read_budget(self) -> int:
        active = self.active_consumer()
        if active is None:
            return 0
        return min(active.available_permits, self.config.max_read_batch_size)

    def _send(self, entries: list[Entry]) -> None:
        active = self.active_consumer()
        if active is None:
            # nobody to take them: let them go, read them again when a consumer comes
            for entry in entries:
                self._dropped(entry)
            self.cursor.rewind()
            return
        now = self.clock.monotonic_ns()
        for entry in entries:
            active.deliver(entry, self._redelivery_count(entry.position), now)


class SharedDispatcher(Dispatcher):
    """Shared: consumers of the highest priority (lowest ``priorityLevel``) with room
    take messages first, round robin among them, as in Pulsar; redeliveries go to the
    replay queue and are served before new entries; delayed messages wait in the
    delayed tracker (``broker.dispatch.delayed``) and join the replay queue when due."""

    tracks_delayed = True

    def __init__(
        self, subscription: DispatchedSubscription, config: DispatchConfig, clock: Clock
    ) -> None:
        super().__init__(subscription, config, clock)
        self._next: dict[int, int] = {}  # round-robin position per priority level

    def remove_consumer(self, consumer: Consumer) -> None:
        self.consumers.remove(consumer)
        self._to_replay(*consumer.take_unacked())

    def redeliver(self, consumer: Consumer, positions: Iterable[Position] | None) -> None:
        if positions is None:
            self._to_replay(*consumer.take_unacked())
            return
        chosen = [position for position in positions if position in consumer.pending]
        if not chosen:
            return
        wanted = set(chosen)
        unseen = {d.entry.position for d in consumer.queue if d.entry.position in wanted}
        kept = [d for d in consumer.queue if d.entry.position not in wanted]
        consumer.clear_queue()
        for delivery in kept:
            consumer.queue.append(delivery)
        if kept:
            consumer.wake_pollers()
        for position in chosen:
            del consumer.pending[position]
        self._to_replay(chosen, unseen)

    def unacknowledged_again(self, positions: list[Position]) -> None:
        """O(k x consumers) for k positions."""
        held = [consumer.pending for consumer in self.consumers]
        lost = [
            position
            for position in positions
            if position not in self.replay and not any(position in pending for pending in held)
        ]
        if lost:
            self._to_replay(lost, set(lost))

    def _to_replay(self, positions: list[Position], unseen: set[Position]) -> None:
        """Queue positions for redelivery; those the client had seen count one more."""
        counts = self.subscription.redelivery_counts
        cursor = self.cursor
        redelivered = 0
        for position in positions:
            if cursor.is_acknowledged(position):
                continue
            if position not in unseen:
                counts[position] = counts.get(position, 0) + 1
                redelivered += 1
            self._replay_later(position)
        self.subscription.msg_redeliver.add(redelivered)
        self.wake()

    def _next_with_room(self, levels: list[tuple[int, list[Consumer]]]) -> Consumer | None:
        """Round robin within the highest-priority level that has a consumer with room
        (``_capacity`` above 0)."""
        max_unacked = self.config.max_unacked_per_consumer
        for level, consumers in levels:
            start = self._next.get(level, 0)
            for step in range(len(consumers)):
                consumer = consumers[(start + step) % len(consumers)]
                if consumer.has_room() and len(consumer.pending) < max_unacked:
                    self._next[level] = (start + step + 1) % len(consumers)
                    return consumer
        return None

    def _capacity(self, consumer: Consumer) -> int:
        return min(
            consumer.available_permits,
            self.config.max_unacked_per_consumer - len(consumer.pending),
        )

    def _read_budget(self) -> int:
        """Entries to read: what the consumers can take (:meth:`Consumer.read_permits`,
        which counts in a front end's writable gate: an entry read past it would only
        wait in the replay queue for a second read), within the unacked bounds and
        ``dispatcherMaxReadBatchSize``. O(consumers)."""
        config = self.config
        unacked_limit = config.max_unacked_per_consumer
        permits = unacked = 0
        for consumer in self.consumers:  # unacked_messages() counted in the same pass
            held = len(consumer.pending)
            unacked += held
            capacity = min(consumer.read_permits(), unacked_limit - held)
            if capacity > 0:
                permits += capacity
        room = config.max_unacked_per_subscription - unacked
        return min(permits, room, config.max_read_batch_size)

    def _send(self, entries: list[Entry]) -> None:
        """O(entries x consumers) at worst; O(entries) when the first level has room."""
        if len(self.consumers) == 1:
            self._send_to_one(entries)
            return
        levels: dict[int, list[Consumer]] = {}
        for member in self.consumers:
            levels.setdefault(member.priority_level, []).append(member)
        ordered = [(level, levels[level]) for level in sorted(levels)]
        now = self.clock.monotonic_ns()
        index = 0
        total = len(entries)
        while index < total:
            target = self._next_with_room(ordered)
            if target is None:
                break
            entry = entries[index]
            target.deliver(entry, self._redelivery_count(entry.position), now)
            index += 1
        for entry in entries[index:]:
            # not handed over: the read expected of it is still to come, no new one
            self.replay.add(entry.position)

    def _send_to_one(self, entries: list[Entry]) -> None:
        """``_send`` with one consumer (round robin over one is that one while it has
        room): the same hand-over without the levels and the round robin's lookups, a
        third of the dispatcher's work per entry of an unbatched stream. O(entries)."""
        consumer = self.consumers[0]
        limit = self.config.max_unacked_per_consumer
        pending = consumer.pending
        counts = self.subscription.redelivery_counts
        now = self.clock.monotonic_ns()
        index = 0
        total = len(entries)
        while index < total and consumer.has_room() and len(pending) < limit:
            entry = entries[index]
            consumer.deliver(entry, counts.get(entry.position, 0) if counts else 0, now)
            index += 1
        for entry in entries[index:]:
            self.replay.add(entry.position)
