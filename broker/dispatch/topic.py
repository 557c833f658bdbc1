"""A persistent topic: its managed ledger and its subscriptions."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from broker.clock import Clock
from broker.dispatch.dispatcher import DispatchConfig
from broker.dispatch.errors import ConflictError, NotFoundError, PreconditionFailedError
from broker.dispatch.names import TopicName
from broker.dispatch.stats import BrokerTotals, RateCounter
from broker.dispatch.subscription import Subscription
from broker.ledger.entry import publish_time_of
from broker.ledger.managed_cursor import ManagedCursor
from broker.ledger.managed_ledger import ManagedLedger
from broker.ledger.position import Position
from storage_stub.bookie.api import total_size


class Producer(Protocol):
    """A front end's producer attached to a topic (the binary protocol's)."""

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
    ) -> None:
        self.name = name
        self.totals = totals if totals is not None else BrokerTotals()
        self.ledger = ledger
        self.config = config
        self.clock = clock
        self.subscriptions: dict[str, Subscription] = {
            cursor_name: Subscription(self, cursor, config, clock)
            for cursor_name, cursor in ledger.cursors.items()
        }
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
        self._admin_lock = asyncio.Lock()

    async def publish(self, entries: Sequence[bytes], messages: int = 0) -> Position:
        """Store entries durably; the position of the first one. ``messages``: how many
        messages they hold (batched entries hold several; 0: one per entry)."""
        first = await self.ledger.add_entries(entries)
        nbytes = total_size(entries)
        messages = messages or len(entries)
        self.msg_in.add(messages)
        self.bytes_in.add(nbytes)
        self.totals.produced += messages
        self.totals.produced_bytes += nbytes
        return first

    def close_producers(self) -> None:
        """The topic is unloading or being deleted: producers reconnect through lookup."""
        for producer in list(self.producers):
            producer.close_from_broker()
        self.producers.clear()

    async def create_subscription(self, name: str, start: str | Position) -> Subscription:
        """A new durable subscription whose first message is ``start``. ConflictError if
        it exists."""
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
        position if none): binary search, O(log n) single-entry reads through the cache
        by no cursor (reader ""), so nothing read is cached for a cursor."""
        ledger = self.ledger
        for info in ledger.ledgers:
            if info.entries == 0:
                continue
            last = await ledger.read_entries(Position(info.ledger_id, info.entries - 1), 1, "")
            if publish_time_of(last[0].data) < timestamp_ms:
                continue
            low, high = 0, info.entries - 1  # the answer is in low..high
            while low < high:
                middle = (low + high) // 2
                probe = await ledger.read_entries(Position(info.ledger_id, middle), 1, "")
                if publish_time_of(probe[0].data) >= timestamp_ms:
                    high = middle
                else:
                    low = middle + 1
            return Position(info.ledger_id, low)
        return ledger.next_position(ledger.last_confirmed)

    async def close(self) -> None:
        """Close subscriptions (consumers must be detached first) and the ledger."""
        for subscription in self.subscriptions.values():
            await subscription.close()
        await self.ledger.close()

    def refresh_rates(self, elapsed_s: float) -> None:
        self.msg_in.refresh(elapsed_s)
        self.bytes_in.refresh(elapsed_s)
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
                        "availablePermits": consumer.available_permits,
                        "unackedMessages": len(consumer.pending),
                        "msgRateOut": consumer.msg_out.rate,
                        "msgThroughputOut": consumer.bytes_out.rate,
                        "msgOutCounter": consumer.msg_out.total,
                        "bytesOutCounter": consumer.bytes_out.total,
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
        return {
            "msgRateIn": self.msg_in.rate,
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
