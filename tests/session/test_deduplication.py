"""Message deduplication in the producer session core, driven directly (the cases a
real client cannot produce on demand: a copy whose first is still in flight, a failed
write, chunks, a batch carrying its highest sequence id, the snapshot and replay)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from broker.clock import ManualClock
from broker.dispatch.deduplication import DUP, NOT_DUP, UNKNOWN, DeduplicationConfig
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService, ServiceConfig
from broker.ledger.entry import encode_message, entry_of
from broker.ledger.managed_cursor import DEDUPLICATION_CURSOR_NAME
from broker.ledger.position import Position
from broker.pulsar_api import MessageMetadata
from broker.session.producer import DUPLICATE_POSITION, ProducerSession, Sent
from tests.harness import in_memory_service

TOPIC = TopicName("public", "default", "dedup")


@pytest.fixture
async def service() -> AsyncIterator[BrokerService]:
    config = ServiceConfig(deduplication=DeduplicationConfig(enabled=True, entries_interval=3))
    async with in_memory_service(config) as broker:
        yield broker


def sent(sequence_id: int, highest: int | None = None, name: str = "app") -> Sent:
    entry = encode_message(
        f"m{sequence_id}".encode(), 1, producer_name=name, sequence_id=sequence_id
    )
    return (sequence_id, sequence_id if highest is None else highest, 1, entry, False)


def chunk(sequence_id: int, chunk_id: int, chunks: int) -> Sent:
    metadata = MessageMetadata(
        producer_name="app",
        sequence_id=sequence_id,
        publish_time=1,
        chunk_id=chunk_id,
        num_chunks_from_msg=chunks,
        total_chunk_msg_size=chunks,
        uuid="app-0",
    )
    entry = entry_of(metadata.SerializeToString(), b"c")
    return (sequence_id, sequence_id, 1, entry, True)


async def producer(service: BrokerService, name: str = "app") -> ProducerSession:
    session = ProducerSession(service, TOPIC, name)
    session.attach(await service.get_topic(TOPIC, create=True))
    return session


async def test_a_copy_is_unknown_while_its_first_is_in_flight_then_a_duplicate(
    service: BrokerService,
) -> None:
    first, second = await producer(service), await producer(service)
    topic = service.topics[TOPIC]
    store = topic.publish
    disk = asyncio.Event()

    async def slow_publish(
        entries: Sequence[bytes],
        messages: int = 0,
        sequenced: Any = None,
        publisher: Any = None,
        counts: Any = None,
    ) -> Position:
        await disk.wait()  # the write is on its way until the test lets it land
        return await store(entries, messages, sequenced, publisher, counts)

    topic.publish = slow_publish  # type: ignore[method-assign]
    writing = asyncio.ensure_future(first.publish_sequenced([sent(0)]))
    await asyncio.sleep(0)  # checked, and waiting for the disk
    assert await second.publish_sequenced([sent(0)]) == (DUPLICATE_POSITION, [UNKNOWN])
    disk.set()
    stored, verdicts = await writing
    assert verdicts == [NOT_DUP]
    _, verdicts = await second.publish_sequenced([sent(0)])
    assert verdicts == [DUP]
    assert topic.ledger.last_confirmed == stored  # one entry: the copies were not stored
    assert first.last_sequence_id() == 0


async def test_a_group_stores_its_new_sends_consecutively_and_skips_the_duplicates(
    service: BrokerService,
) -> None:
    session = await producer(service)
    first, verdicts = await session.publish_sequenced([sent(0), sent(1), sent(0), sent(2)])
    assert verdicts == [NOT_DUP, NOT_DUP, UNKNOWN, NOT_DUP]  # 0 again: 0 not yet stored
    ledger = service.topics[TOPIC].ledger
    assert ledger.last_confirmed.entry_id == first.entry_id + 2
    _, verdicts = await session.publish_sequenced([sent(1), sent(3)])
    assert verdicts == [DUP, NOT_DUP]


async def test_a_batch_is_known_by_its_lowest_and_highest_sequence_ids(
    service: BrokerService,
) -> None:
    session = await producer(service)
    _, verdicts = await session.publish_sequenced([sent(0, highest=9)])
    assert verdicts == [NOT_DUP] and session.last_sequence_id() == 9
    _, verdicts = await session.publish_sequenced([sent(5, highest=9), sent(10, highest=12)])
    assert verdicts == [DUP, NOT_DUP] and session.last_sequence_id() == 12


async def test_a_failed_write_makes_its_sends_new_again(service: BrokerService) -> None:
    session = await producer(service)
    await session.publish_sequenced([sent(0)])
    deduplication = service.topics[TOPIC].deduplication
    assert deduplication.check("app", 1, 1) == NOT_DUP  # as a send on its way...
    deduplication.failed("app")  # ...whose write failed: nothing of it stored
    assert deduplication.last_sequence_id("app") == 0
    _, verdicts = await session.publish_sequenced([sent(1)])
    assert verdicts == [NOT_DUP]


async def test_only_the_last_chunk_of_a_message_is_deduplicated(service: BrokerService) -> None:
    session = await producer(service)
    message = [chunk(7, 0, 3), chunk(7, 1, 3), chunk(7, 2, 3)]
    _, verdicts = await session.publish_sequenced(message)
    assert verdicts == [NOT_DUP] * 3 and session.last_sequence_id() == 7
    # resent whole: the partial chunks are stored again (the consumer's reassembly
    # drops them, as with Pulsar), the last is a duplicate
    _, verdicts = await session.publish_sequenced(message)
    assert verdicts == [NOT_DUP, NOT_DUP, DUP]


async def test_the_state_is_a_snapshot_in_the_cursor_plus_the_entries_after_it(
    service: BrokerService,
) -> None:
    """Every 3 entries a snapshot: 7 sends (two producers) leave one at the 6th entry
    and one entry after it; an unload and a load rebuild both producers' ids."""
    app, other = await producer(service), await producer(service, "other")
    for index in range(5):
        await app.publish_sequenced([sent(index)])
    await other.publish_sequenced([sent(40, name="other")])
    await app.publish_sequenced([sent(5)])
    topic = service.topics[TOPIC]
    await topic.deduplication._tasks.settled()  # the snapshot is written in the background
    cursor = topic.ledger.cursors[DEDUPLICATION_CURSOR_NAME]
    assert cursor.properties == {"app": 4, "other": 40}
    assert cursor.mark_delete_position.entry_id == 5  # the 6th entry
    app.detach()
    other.detach()
    await service.unload_topic(TOPIC)
    reloaded = await service.get_topic(TOPIC, create=False)
    assert reloaded.deduplication.status == "Enabled"
    assert DEDUPLICATION_CURSOR_NAME not in reloaded.subscriptions  # the broker's own
    again = await producer(service)
    assert again.last_sequence_id() == 5  # the snapshot's 4, then the replayed entry
    assert reloaded.deduplication.last_sequence_id("other") == 40
    _, verdicts = await again.publish_sequenced([sent(3), sent(6)])
    assert verdicts == [DUP, NOT_DUP]


async def test_turned_off_it_forgets_everything_and_deletes_its_cursor(
    service: BrokerService,
) -> None:
    session = await producer(service)
    await session.publish_sequenced([sent(0)])
    topic = service.topics[TOPIC]
    await topic.deduplication.check_status(False)
    assert topic.deduplication.status == "Disabled"
    assert DEDUPLICATION_CURSOR_NAME not in topic.ledger.cursors
    assert session.last_sequence_id() == -1
    position, verdicts = await session.publish_sequenced([sent(0)])
    assert verdicts is None and position != DUPLICATE_POSITION  # stored again


async def test_entries_stored_without_a_producer_count_towards_the_next_snapshot(
    service: BrokerService,
) -> None:
    """Writes with no producer session (HTTP produce, the simulated clients) are not
    deduplicated but count for snapshots, as every add does in Pulsar: the cursor
    moves on and does not hold trimming back."""
    session = await producer(service)
    await session.publish_sequenced([sent(0)])
    topic = service.topics[TOPIC]
    first = await topic.publish([encode_message(b"http", 1), encode_message(b"http", 1)])
    await topic.deduplication._tasks.settled()
    cursor = topic.ledger.cursors[DEDUPLICATION_CURSOR_NAME]
    assert cursor.mark_delete_position == Position(first.ledger_id, first.entry_id + 1)
    assert cursor.properties == {"app": 0}


async def test_a_producer_gone_for_the_inactivity_timeout_is_forgotten(
    service: BrokerService,
) -> None:
    stays, leaves = await producer(service), await producer(service, "leaves")
    await stays.publish_sequenced([sent(0)])
    await leaves.publish_sequenced([sent(7, name="leaves")])
    leaves.detach()
    topic = service.topics[TOPIC]
    clock = service.clock
    assert isinstance(clock, ManualClock)
    clock.advance_ms(360 * 60_000 - 1)  # brokerDeduplicationProducerInactivityTimeoutMinutes
    await topic.deduplication.upkeep()
    assert topic.deduplication.last_sequence_id("leaves") == 7
    clock.advance_ms(2)
    await topic.deduplication.upkeep()
    assert topic.deduplication.last_sequence_id("leaves") == -1
    assert stays.last_sequence_id() == 0  # connected: kept however long
    cursor = topic.ledger.cursors[DEDUPLICATION_CURSOR_NAME]
    assert cursor.properties == {"app": 0}  # the snapshot without it
