"""Never-polled consumers prefetch into their receiver queues as Pulsar's do (up to
receiverQueueSize entries each), and the broker holds those queues for its HTTP
consumers: consumers on many subscriptions of one topic share one copy of each entry
(bytes, position, Entry), however each subscription read it, and the copies go when the
last queue holding them does."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest

from broker.cache import DEFAULT_DESIGN, CacheConfig, create_stream
from broker.clock import ManualClock
from broker.dispatch.consumer import Consumer
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService, ConsumerOptions, ServiceConfig
from broker.ledger.entry import encode_message
from storage_stub.bookie import open_storage
from storage_stub.config import StorageConfig
from tests.harness import eventually_async

TOPIC = TopicName("public", "default", "prefetched")
MESSAGES = 50
SUBSCRIPTIONS = 20


@pytest.fixture
async def service(tmp_path: pathlib.Path) -> AsyncIterator[BrokerService]:
    """A broker on disk storage with no entry cache: every read is a storage read, which
    returns fresh bytes."""
    storage = await open_storage(StorageConfig(storageMode="disk", syncMode="none"), tmp_path)
    no_cache = create_stream(DEFAULT_DESIGN, CacheConfig(max_size_bytes=0), ManualClock())
    broker = BrokerService(
        ServiceConfig(), storage.bookie, storage.metadata, no_cache, ManualClock()
    )
    try:
        yield broker
    finally:
        await broker.close()
        await storage.close()


async def test_never_polled_consumers_of_many_subscriptions_share_each_prefetched_entry(
    service: BrokerService,
) -> None:
    topic = await service.get_topic(TOPIC, create=True)
    for i in range(MESSAGES):
        await topic.publish([encode_message(b"payload %d" % i, 0)])
    for i in range(SUBSCRIPTIONS):
        await topic.create_subscription(f"s{i}", "earliest")
    consumers: list[Consumer] = [
        await service.create_consumer(TOPIC, f"s{i}", ConsumerOptions())
        for i in range(SUBSCRIPTIONS)
    ]
    await eventually_async(
        lambda: all(len(c.queue) == MESSAGES for c in consumers), "every receiver queue to fill"
    )

    entries = {id(d.entry) for c in consumers for d in c.queue}
    payloads = {id(d.entry.data) for c in consumers for d in c.queue}
    assert (len(entries), len(payloads)) == (MESSAGES, MESSAGES)
    assert [d.entry.data for d in consumers[0].queue] == [
        encode_message(b"payload %d" % i, 0) for i in range(MESSAGES)
    ]
    assert len(topic.ledger.live_entries) == MESSAGES

    for consumer in consumers:
        service.close_consumer(consumer)
    consumers.clear()
    assert len(topic.ledger.live_entries) == 0, "nothing is kept once no queue holds it"
