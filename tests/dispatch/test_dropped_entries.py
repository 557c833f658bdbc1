"""An entry read for dispatch and let go before any consumer got it is released, and
under PIP-430 a release is a read: its expected read count goes down, as Pulsar's
``EntryImpl.deallocate`` calls ``markRead`` (the dispatchers release what they drop)."""

from __future__ import annotations

import asyncio

from broker.cache import CacheConfig, create_stream
from broker.clock import ManualClock
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService, ConsumerOptions, ServiceConfig
from broker.ledger.entry import encode_message
from broker.ledger.position import Position
from storage_stub.bookie.memory import InMemoryBookie, InMemoryMetadataStore
from tests.harness import eventually_async

TOPIC = TopicName("t", "ns", "dropped")


class GatedReadBookie(InMemoryBookie):
    """Storage reads wait on a gate while ``hold`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.gate = asyncio.Event()
        self.reading = asyncio.Event()

    async def read_entries(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        if self.hold:
            self.reading.set()
            await self.gate.wait()
        return await super().read_entries(ledger_id, first, last)


async def test_a_replay_read_acknowledged_while_in_flight_counts_its_expected_reads_down() -> None:
    """Five messages go to consumer A from storage; A leaves, so they wait in the replay
    queue; their TTL passes six times and they leave the cache; B comes, and the replay read of
    them (a storage read) is
    held while the subscription is reset past them, acknowledging them. The read
    completes and caches them with one expected read each (B's cursor); the dispatcher
    drops them, already acknowledged, and the drop is their read: none is left."""
    clock = ManualClock()
    bookie = GatedReadBookie()
    cache = create_stream("pip430", CacheConfig(max_size_bytes=64 << 20), clock)
    service = BrokerService(ServiceConfig(), bookie, InMemoryMetadataStore(), cache, clock)
    topic = await service.get_topic(TOPIC, create=True)
    await topic.create_subscription("s", "earliest")
    clock.advance_ms(3_000)  # past the caching that goes on after a topic's load
    positions = []
    for index in range(5):
        positions.append(await topic.publish([encode_message(b"m%d" % index, 0)]))
    assert cache.stats()["entries"] == 0, "no active cursor when they were added"

    shared = ConsumerOptions(subscription_type="Shared", receiver_queue_size=10)
    first = await service.create_consumer(TOPIC, "s", shared)
    await eventually_async(lambda: len(first.pending) == 5, "A got the five")
    bookie.hold = True
    service.close_consumer(first)  # its five wait in the replay queue
    # each still expects the replay's read, so a TTL pass requeues it; past the fifth
    # extension it goes (managedLedgerCacheEvictionExtendTTLOf...MaxTimes=5)
    for _ in range(7):
        clock.advance_ms(1_100)
        cache.tick()
    assert cache.stats()["entries"] == 0
    second = await service.create_consumer(TOPIC, "s", shared)
    await asyncio.wait_for(bookie.reading.wait(), 5)  # the replay read is in flight
    subscription = await service.subscription(TOPIC, "s")
    last = positions[-1]
    await subscription.reset_cursor(Position(last.ledger_id, last.entry_id + 1))
    assert all(subscription.cursor.is_acknowledged(p) for p in positions)
    bookie.gate.set()
    await eventually_async(lambda: not topic.ledger.pending_reads, "the replay read completed")
    await eventually_async(lambda: cache.stats()["entries"] == 5, "the read's entries were cached")
    assert not second.pending, "nothing acknowledged was handed over"
    assert cache.live.manager.stats()["entriesWithExpectedReads"] == 0
    await service.close()
