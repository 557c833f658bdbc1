"""A persistent topic: its managed ledger and its subscriptions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from broker.clock import Clock
from broker.dispatch.deduplication import DeduplicationConfig, MessageDeduplication
from broker.dispatch.dispatcher import DispatchConfig
from broker.dispatch.errors import (
    ConflictError,
    NotFoundError,
    PreconditionFailedError,
    ReservedNameError,
)
from broker.dispatch.names import TopicName
from broker.dispatch.stats import BrokerTotals, PublisherStats, RateCounter, iso_time
from broker.dispatch.subscription import Subscription
from broker.ledger.entry import EntryFormatError, publish_time_of
from broker.ledger.managed_cursor import SYSTEM_CURSORS, ManagedCursor
from broker.ledger.managed_ledger import ManagedLedger
from broker.ledger.position import Position
from broker.tasks import FifoLock
from storage_stub.bookie.api import total_size


def _published_from(data: bytes, timestamp_ms: int) -> bool:
    """Whether the entry was published at or after ``timestamp_ms``; True for one whose
    metadata does not parse, as Pulsar's message finder takes an entry it cannot read
    for one not published earlier (a poison entry neither fails the search nor moves
    it). O(metadata size)."""
    try:
        return publish_time_of(data) >= timestamp_ms
    except EntryFormatError:
        return True


class Producer(Protocol):
    """A front end's producer attached to a topic (the binary protocol's)."""

    @property
    def stats(self) -> PublisherStats:
        """Its part of the topic's stats (``publishers``)."""
        ...

    def close_from_broker(self) -> None:
        """The topic is going (unload, delete): tell the client and stop publishing."""


class PersistentTopic:
    def __init__(
        self,
        name: TopicName,
        ledger: ManagedLedger,
        config: DispatchConfig,
        clock: Clock,
        totals: BrokerTotals | None = None,
        deduplication: DeduplicationConfig | None = None,
    ) -> None:
        self.name = name
        self.totals = totals if totals is not None else BrokerTotals()
        self.ledger = ledger
        self.config = config
        self.clock = clock
        self.subscriptions: dict[str, Subscription] = {
            cursor_name: Subscription(self, cursor, config, clock)
            for cursor_name, cursor in ledger.cursors.items()
            if cursor_name not in SYSTEM_CURSORS
        }
        #: message deduplication (off until the service's ``check_status`` turns it on)
        self.deduplication = MessageDeduplication(
            ledger, deduplication or DeduplicationConfig(), clock
        )
        #: the offload route's last outcome: NOT_RUN, RUNNING, SUCCESS or ERROR
        self.offload_status = "NOT_RUN"
        self.offload_error = ""
        self.msg_in = RateCounter()
        self.bytes_in = RateCounter()
        #: what deleted subscriptions had been delivered (Pulsar keeps it too)
        self.msg_out_removed = 0
        self.bytes_out_removed = 0
        #: producers of connected clients (HTTP produce has none), in the order they
        #: came (a dict as an insertion-ordered set: an unload tells them in that order,
        #: so their reconnects are the same on every run)
        self.producers: dict[Producer, None] = {}
        #: producers waiting for exclusive access (WaitForExclusive), in their order;
        #: not counted among ``producers`` (as in Pulsar) but told when the topic goes;
        #: stats' ``waitingPublishers``
        self.waiting_producers: dict[Producer, None] = {}
        #: FIFO, O(1) for a waiter to leave: a SUBSCRIBE flood then a disconnect
        #: cancels every waiter at once
        self._admin_lock = FifoLock()

    async def publish(
        self,
        entries: Sequence[bytes],
        messages: int = 0,
        sequenced: tuple[str, list[int]] | None = None,
        publisher: PublisherStats | None = None,
        counts: Sequence[int] | None = None,
    ) -> Position:
        """Store entries durably; the position of the first one. ``messages``: how many
        messages they hold (batched entries hold several; 0: one per entry).
        ``sequenced``: a producer name and the highest sequence ids of its sends among
        them, recorded as stored when the topic deduplicates. Every entry stored, by any
        front end, counts towards the next deduplication snapshot (as every add does in
        Pulsar), so the ``pulsar.dedup`` cursor never holds trimming back for good.
        ``publisher``: the producer's stats, counting them too. ``counts``: each
        entry's messages, where its front end checked its metadata (the binary
        protocol's ``check_entry``), kept with the cached entry for the dispatcher."""
        first = await self.ledger.add_entries(entries, counts)
        deduplication = self.deduplication
        if deduplication.enabled:
            if sequenced is not None:
                producer, highests = sequenced
                for highest in highests:
                    deduplication.persisted_one(producer, highest)
            count = len(entries)
            deduplication.entries_stored(count, first.ledger_id, first.entry_id + count - 1)
        nbytes = total_size(entries)
        messages = messages or len(entries)
        self.msg_in.add(messages)
        self.bytes_in.add(nbytes)
        if publisher is not None:
            publisher.msg_in.add(messages)
            publisher.bytes_in.add(nbytes)
        self.totals.produced += messages
        self.totals.produced_bytes += nbytes
        return first

    def policy_changed(self, name: str) -> None:
        """A namespace or topic policy ``name`` reaching this topic changed (read it
        through the broker's PolicyStore). Nothing to do yet for any policy."""

    def close_producers(self) -> None:
        """The topic is unloading or being deleted: producers, and those waiting for
        exclusive access, reconnect through lookup."""
        for producer in [*self.producers, *self.waiting_producers]:
            producer.close_from_broker()
        self.producers.clear()
        self.waiting_producers.clear()

    async def create_subscription(self, name: str, start: str | Position) -> Subscription:
        """A new durable subscription whose first message is ``start``. ConflictError if
        it exists; ReservedNameError for the broker's own cursor names, as Pulsar."""
        if name in SYSTEM_CURSORS:
            raise ReservedNameError(
                f"Subscription with reserved subscription name {name} attempted"
            )
        self.ledger.touch()  # before any await: an inactive-topic check must not delete it now
        async with self._admin_lock:
            if name in self.subscriptions:
                raise ConflictError(f"subscription {name} already exists on {self.name}")
            cursor = await ManagedCursor.create(self.ledger, name, start)
            subscription = Subscription(self, cursor, self.config, self.clock)
            self.subscriptions[name] = subscription
            return subscription

    async def get_or_create_subscription(self, name: str, start: str | Position) -> Subscription:
        existing = self.subscriptions.get(name)
        if existing is not None:
            return existing
        try:
            return await self.create_subscription(name, start)
        except ConflictError:
            return self.subscriptions[name]

    def check_cursors(self) -> None:
        """The stats period's check of every cursor (Pulsar's ``checkBackloggedCursors``
        and ``checkCursorsToCacheEntries``), for the cache designs' rules."""
        subscriptions = self.subscriptions

        def has_consumers(name: str) -> bool:
            subscription = subscriptions.get(name)
            return subscription is not None and bool(subscription.consumers)

        self.ledger.check_cursors(has_consumers)

    def has_clients(self) -> bool:
        """Producers or consumers connected. O(subscriptions)."""
        return bool(self.producers) or any(s.consumers for s in self.subscriptions.values())

    def busy(self) -> bool:
        """Work in progress that an unload or an inactive-topic deletion must not cut:
        adds in flight, an admin change of subscriptions, an offload. O(1)."""
        return (
            self.ledger.adds_in_flight > 0
            or self._admin_lock.locked()
            or self.offload_status == "RUNNING"
        )

    def subscription(self, name: str) -> Subscription:
        subscription = self.subscriptions.get(name)
        if subscription is None:
            raise NotFoundError(f"subscription {name} not found on {self.name}")
        return subscription

    async def delete_subscription(self, name: str) -> None:
        async with self._admin_lock:
            subscription = self.subscription(name)
            if subscription.consumers:
                raise PreconditionFailedError(
                    f"subscription {name} has {len(subscription.consumers)} connected consumers"
                )
            # the record first: a failed delete leaves the subscription as it was
            await subscription.cursor.delete()
            del self.subscriptions[name]
            # kept, as Pulsar keeps it: the topic's msgOutCounter never goes down
            self.msg_out_removed += subscription.msg_out_removed
            self.bytes_out_removed += subscription.bytes_out_removed
            await subscription.close()

    async def find_position_by_publish_time(self, timestamp_ms: int) -> Position:
        """The first position published at or after ``timestamp_ms`` (the next write
        position if none): binary search, O(#ledgers + log n) single-entry reads through
        the cache by no cursor (reader ""), so nothing read is cached for a cursor.

        It searches the entries stored when it starts: the ledgers, their entry counts
        and the end are taken before the first read, as Pulsar's search fixes its end at
        the last confirmed entry. Entries stored while it reads come after its answer:
        they are neither skipped (an end read afterwards would pass them) nor searched
        half (a ledger's count read again would put entries never compared in range).
        Publish times are taken when a produce request is read, so an entry stored
        after the search may still be older than ``timestamp_ms`` (Pulsar's clients
        stamp messages before sending: the same holds there)."""
        ledger = self.ledger
        end = ledger.next_position(ledger.last_confirmed)
        searched = [(info.ledger_id, info.entries) for info in ledger.ledgers if info.entries]
        for ledger_id, entries in searched:
            last = await ledger.read_entries(Position(ledger_id, entries - 1), 1, "")
            if not _published_from(last[0].data, timestamp_ms):
                continue
            low, high = 0, entries - 1  # the answer is in low..high
            while low < high:
                middle = (low + high) // 2
                probe = await ledger.read_entries(Position(ledger_id, middle), 1, "")
                if _published_from(probe[0].data, timestamp_ms):
                    high = middle
                else:
                    low = middle + 1
            return Position(ledger_id, low)
        return end

    async def close(self) -> None:
        """Close subscriptions (consumers must be detached first) and the ledger."""
        for subscription in self.subscriptions.values():
            await subscription.close()
        await self.deduplication.close()
        await self.ledger.close()

    def refresh_rates(self, elapsed_s: float) -> None:
        self.msg_in.refresh(elapsed_s)
        self.bytes_in.refresh(elapsed_s)
        for producer in self.producers:
            producer.stats.refresh(elapsed_s)
        for subscription in self.subscriptions.values():
            subscription.msg_redeliver.refresh(elapsed_s)
            for consumer in subscription.consumers:
                consumer.msg_out.refresh(elapsed_s)
                consumer.bytes_out.refresh(elapsed_s)

    # ------------------------------------------------------------------ stats

    def stats(self) -> dict[str, Any]:
        subscriptions: dict[str, Any] = {}
        msg_rate_out = throughput_out = 0.0
        msg_out, bytes_out = self.msg_out_removed, self.bytes_out_removed
        ledger = self.ledger
        slowest: Position | None = None
        for name, subscription in self.subscriptions.items():
            consumers = []
            sub_rate_out = 0.0
            sub_msg_out = subscription.msg_out_removed
            sub_bytes_out = subscription.bytes_out_removed
            for consumer in subscription.consumers:
                consumers.append(
                    {
                        "consumerName": consumer.name,
                        "availablePermits": consumer.client_permits(),
                        "unackedMessages": len(consumer.pending),
                        "msgRateOut": consumer.msg_out.rate,
                        "msgThroughputOut": consumer.bytes_out.rate,
                        "msgOutCounter": consumer.msg_out.total,
                        "bytesOutCounter": consumer.bytes_out.total,
                        "address": consumer.address,
                        "connectedSince": iso_time(consumer.connected_since_ms),
                        "clientVersion": consumer.client_version,
                        "metadata": consumer.metadata,
                    }
                )
                sub_rate_out += consumer.msg_out.rate
                throughput_out += consumer.bytes_out.rate
                sub_msg_out += consumer.msg_out.total
                sub_bytes_out += consumer.bytes_out.total
            msg_rate_out += sub_rate_out
            msg_out += sub_msg_out
            bytes_out += sub_bytes_out
            mark_delete = subscription.cursor.mark_delete_position
            if slowest is None or mark_delete < slowest:
                slowest = mark_delete
            subscriptions[name] = {
                "type": subscription.type or "None",
                "msgBacklog": subscription.backlog(),
                "msgRateOut": sub_rate_out,
                "msgRateRedeliver": subscription.msg_redeliver.rate,
                "msgOutCounter": sub_msg_out,
                "bytesOutCounter": sub_bytes_out,
                "unackedMessages": subscription.unacked_messages(),
                "msgDelayed": subscription.delayed_messages(),
                "consumers": consumers,
            }
        rate_in = self.msg_in.rate
        return {
            "msgRateIn": rate_in,
            "msgThroughputIn": self.bytes_in.rate,
            "msgRateOut": msg_rate_out,
            "msgThroughputOut": throughput_out,
            "msgInCounter": self.msg_in.total,
            "bytesInCounter": self.bytes_in.total,
            "msgOutCounter": msg_out,
            "bytesOutCounter": bytes_out,
            "storageSize": ledger.total_size(),
            "backlogSize": ledger.size_after(slowest) if slowest is not None else 0,
            "offloadedStorageSize": sum(i.size for i in ledger.ledgers if i.offloaded),
            "averageMsgSize": self.bytes_in.rate / rate_in if rate_in > 0 else 0.0,
            "publishers": [producer.stats.to_json() for producer in self.producers],
            "waitingPublishers": len(self.waiting_producers),
            "deduplicationStatus": self.deduplication.status,
            "subscriptions": subscriptions,
        }

    def internal_stats(self) -> dict[str, Any]:
        ledger = self.ledger
        current = ledger.current_ledger
        return {
            "entriesAddedCounter": ledger.entries_added_counter,
            "numberOfEntries": sum(info.entries for info in ledger.ledgers),
            "totalSize": ledger.total_size(),
            "currentLedgerEntries": current.entries if current is not None else 0,
            "currentLedgerSize": current.size if current is not None else 0,
            "lastConfirmedEntry": str(ledger.last_confirmed),
            "ledgers": [
                {
                    "ledgerId": info.ledger_id,
                    "entries": info.entries,
                    "size": info.size,
                    "offloaded": info.offloaded,
                }
                for info in ledger.ledgers
            ],
            "cursors": {
                name: {
                    "markDeletePosition": str(cursor.mark_delete_position),
                    "readPosition": str(cursor.read_position),
                    "individuallyDeletedMessages": str(cursor.individually_deleted),
                    "messagesConsumedCounter": cursor.messages_consumed_counter,
                }
                for name, cursor in ledger.cursors.items()
            },
        }
