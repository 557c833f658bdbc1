"""The broker's periodic cursor check reaches the cache designs: at each stats period
every cursor's consumers, entries to read and backlog go to the live design and its
shadows, and the legacy rules re-decide which cursors are backlogged only then."""

from __future__ import annotations

from broker.cache import CacheConfig, create_stream
from broker.clock import ManualClock
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService, ConsumerOptions, ServiceConfig
from broker.ledger.entry import encode_message
from storage_stub.bookie.memory import InMemoryBookie, InMemoryMetadataStore
from tests.harness import eventually_async

TOPIC = TopicName("t", "ns", "checked")
STATS_PERIOD_S = 10


async def test_a_cursor_that_falls_behind_is_backlogged_at_the_next_stats_period() -> None:
    clock = ManualClock()
    cache = create_stream("legacy", CacheConfig(cursor_backlogged_threshold=5), clock, ["pip430"])
    service = BrokerService(
        ServiceConfig(stats_update_frequency_s=STATS_PERIOD_S),
        InMemoryBookie(),
        InMemoryMetadataStore(),
        cache,
        clock,
    )
    topic = await service.get_topic(TOPIC, create=True)
    # one permit: the dispatcher reads one entry and the cursor stays 19 entries behind
    consumer = await service.create_consumer(
        TOPIC, "lagging", ConsumerOptions(receiver_queue_size=1, subscription_type="Shared")
    )
    await topic.publish([encode_message(b"m%d" % i, clock.wall_ms()) for i in range(20)])
    await eventually_async(lambda: len(consumer.queue) == 1, "the one permitted entry dispatched")
    stats = cache.stats()
    assert stats["inserted"] == 20, "subscribed with nothing to read: active, adds cached"
    await service.upkeep()  # within the period: no check yet
    await topic.publish([encode_message(b"n", clock.wall_ms())])
    assert cache.stats()["inserted"] == 21
    clock.advance_ms(STATS_PERIOD_S * 1000)
    await service.upkeep()
    after = cache.stats()
    assert after["entries"] == 0, "backlogged at the check: no active cursor, cache cleared"
    await topic.publish([encode_message(b"o", clock.wall_ms())])
    assert cache.stats()["inserted"] == 21, "adds are no longer cached"
    # PIP-430, the shadow, ignores the backlog check: the cursor has a consumer
    assert cache.shadows[0].stats()["inserted"] == 22
    await service.close()
