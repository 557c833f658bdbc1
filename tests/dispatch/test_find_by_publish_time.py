"""The search by publish time behind a reset to a time searches the entries stored when
it starts, as Pulsar's does (``ManagedCursorImpl.asyncFindNewestMatching`` fixes its end
at the last confirmed entry before the first read): entries stored while its reads are
in flight are after its answer, never skipped by it nor searched half."""

from __future__ import annotations

import asyncio

from broker.cache import CacheConfig, create_stream
from broker.clock import ManualClock
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService, ServiceConfig
from broker.dispatch.topic import PersistentTopic
from broker.ledger.entry import encode_message
from broker.ledger.position import Position
from storage_stub.bookie.memory import InMemoryMetadataStore
from tests.dispatch.test_dropped_entries import GatedReadBookie

TOPIC = TopicName("t", "ns", "by-time")


async def _topic(bookie: GatedReadBookie) -> PersistentTopic:
    clock = ManualClock()
    # no entry cache: every read of the search goes to the (gated) bookie
    cache = create_stream("pip430", CacheConfig(max_size_bytes=0), clock)
    service = BrokerService(ServiceConfig(), bookie, InMemoryMetadataStore(), cache, clock)
    return await service.get_topic(TOPIC, create=True)


async def _publish(topic: PersistentTopic, *publish_times: int) -> list[Position]:
    return [await topic.publish([encode_message(b"m%d" % time, time)]) for time in publish_times]


async def test_entries_stored_during_the_search_are_not_skipped() -> None:
    """Every stored entry was published before the time; while the search reads the
    last of them, two entries published after it are stored. The answer is the first of
    them (the end as the search began), not the end after them: a reset there would
    count them as acknowledged."""
    bookie = GatedReadBookie()
    topic = await _topic(bookie)
    await _publish(topic, 1000, 1000, 1000)
    bookie.hold = True
    search = asyncio.create_task(topic.find_position_by_publish_time(1500))
    await bookie.reading.wait()
    later = await _publish(topic, 2000, 2000)
    bookie.gate.set()
    assert await search == later[0]


async def test_entries_stored_during_the_search_do_not_widen_its_binary_search() -> None:
    """The one stored entry was published after the time; while the search reads it,
    two entries are stored whose publish times are before the time (their produce
    requests took their time before, and waited for a rollover or a topic load). The
    answer is the entry the search found, not one of those."""
    bookie = GatedReadBookie()
    topic = await _topic(bookie)
    [first] = await _publish(topic, 2000)
    bookie.hold = True
    search = asyncio.create_task(topic.find_position_by_publish_time(1500))
    await bookie.reading.wait()
    await _publish(topic, 1000, 1000)
    bookie.gate.set()
    assert await search == first
