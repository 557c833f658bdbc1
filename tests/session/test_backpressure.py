"""Backpressure in the session core, which every front end shares: the ``writable`` gate
and the bound in bytes on what a session holds for its client
(``maxUnwrittenBytesPerConsumer``). Driven directly, with in-memory storage; the front
ends' own parts (a binary connection's water marks, a WebSocket's drain) are tested
against a real broker in tests/integration/test_backpressure.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import pytest

from broker.dispatch.consumer import Delivery
from broker.dispatch.dispatcher import DispatchConfig, SharedDispatcher
from broker.dispatch.service import BrokerService, ConsumerOptions, ServiceConfig
from broker.ledger.entry import Entry, encode_message
from broker.ledger.position import Position
from broker.session.consumer import ConsumerSession, PushConsumer
from tests.harness import eventually_async
from tests.session.conftest import in_memory_service
from tests.session.test_consumer_session import TOPIC, batch, publish

#: the byte bound of these tests, and the size of their entries' payloads
BOUND = 10_000
PAYLOAD = 1_000


@pytest.fixture
async def bounded() -> AsyncIterator[BrokerService]:
    config = ServiceConfig(dispatch=DispatchConfig(max_unwritten_bytes_per_consumer=BOUND))
    async with in_memory_service(config) as broker:
        yield broker


def entry_data(index: int) -> bytes:
    return encode_message(index.to_bytes(4, "big") * (PAYLOAD // 4), 1000)


async def settled() -> None:
    """Let the dispatcher run whatever it would run now (no time passes)."""
    for _ in range(20):
        await asyncio.sleep(0)


class BufferingPushConsumer(PushConsumer):
    """A push session whose front end buffers what it sends until the test says its
    client took it (``taken``), as a connection's output does."""

    __slots__ = ("buffered", "sent")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_unwritten_bytes = self.subscription.config.max_unwritten_bytes_per_consumer
        self.sent: list[Position] = []
        self.buffered = 0

    def send(self, entry: Entry, redelivery_count: int) -> None:
        self.sent.append(entry.position)
        self.buffered += len(entry.data)

    def unwritten_bytes(self) -> int:
        return self.buffered

    def taken(self) -> None:
        self.buffered = 0
        self.wake_dispatcher()


async def push_consumer(service: BrokerService) -> BufferingPushConsumer:
    consumer = await service.create_consumer(
        TOPIC, "s", ConsumerOptions(initial_position="Earliest"), BufferingPushConsumer
    )
    assert isinstance(consumer, BufferingPushConsumer)
    return consumer


#: a push session class of these tests
PushT = TypeVar("PushT", bound="BufferingPushConsumer")


async def shared_push_consumer(
    service: BrokerService, kind: type[PushT]
) -> tuple[PushT, SharedDispatcher]:
    """A push session of ``kind`` on a Shared subscription from the earliest entry, and
    its dispatcher."""
    options = ConsumerOptions(initial_position="Earliest", subscription_type="Shared")
    consumer = await service.create_consumer(TOPIC, "s", options, kind)
    assert isinstance(consumer, kind)
    dispatcher = consumer.subscription.dispatcher
    assert isinstance(dispatcher, SharedDispatcher)
    return consumer, dispatcher


async def test_an_unwritable_session_is_handed_nothing_until_its_gate_opens(
    service: BrokerService,
) -> None:
    consumer = await push_consumer(service)
    consumer.grant(1000)
    consumer.set_writable(False)  # its client stopped reading
    positions = await publish(service, entry_data(0), entry_data(1), entry_data(2))
    await settled()
    assert consumer.sent == [] and consumer.available_permits == 0
    assert consumer.permits == 1000  # the client's permits are kept for later

    consumer.set_writable(True)  # wakes the dispatcher: nothing else happens meanwhile
    await eventually_async(lambda: len(consumer.sent) == 3, "everything sent once writable")
    assert consumer.sent == positions


async def test_a_session_takes_no_more_than_its_byte_bound_until_its_client_takes_it(
    bounded: BrokerService,
) -> None:
    consumer = await push_consumer(bounded)
    consumer.grant(1000)
    size = len(entry_data(0))
    positions = await publish(bounded, *(entry_data(i) for i in range(30)))
    await eventually_async(lambda: consumer.buffered >= BOUND - size, "the bound reached")
    await settled()
    # one read may overshoot by an entry (the room is counted in average entries)
    assert BOUND - size <= consumer.buffered <= BOUND + size
    assert consumer.available_permits == 0 and len(consumer.sent) < 30

    while len(consumer.sent) < 30:
        consumer.taken()
        await eventually_async(lambda: consumer.buffered > 0, "more sent once the client took it")
        assert consumer.buffered <= BOUND + size
    assert consumer.sent == positions


async def test_a_receiver_queue_nobody_polls_holds_no_more_than_the_byte_bound(
    bounded: BrokerService,
) -> None:
    # the HTTP consumer's case: the broker's receiver queue, drained by polls
    consumer = await bounded.create_consumer(
        TOPIC, "s", ConsumerOptions(initial_position="Earliest"), ConsumerSession
    )
    assert isinstance(consumer, ConsumerSession)
    size = len(entry_data(0))
    positions = await publish(bounded, *(entry_data(i) for i in range(30)))
    await eventually_async(lambda: consumer.queue.bytes >= BOUND - size, "the bound reached")
    await settled()
    assert consumer.queue.bytes <= BOUND + size
    assert consumer.queue.bytes == sum(len(d.entry.data) for d in consumer.queue)
    assert len(consumer.queue) < 30  # well below its receiver queue size (1000)

    received: list[Position] = []
    while len(received) < 30:
        taken = consumer.drain(1000, 1)
        received += [delivery.entry.position for delivery in taken]
        assert consumer.queue.bytes == 0
        consumer.wake_dispatcher()  # as a poll does
        if len(received) < 30:
            await eventually_async(lambda: bool(consumer.queue), "the queue filled again")
            assert consumer.queue.bytes <= BOUND + size
    assert received == positions


async def test_no_byte_bound_with_zero(service: BrokerService) -> None:
    consumer = await push_consumer(service)
    consumer.max_unwritten_bytes = 0
    consumer.buffered = 1 << 40
    consumer.grant(5)
    assert consumer.available_permits == 5


async def test_a_push_session_that_buffers_nothing_has_no_byte_bound(
    bounded: BrokerService,
) -> None:
    # a simulated client, say: what it is sent leaves the broker at once
    consumer = await bounded.create_consumer(
        TOPIC, "s", ConsumerOptions(initial_position="Earliest"), PushConsumer
    )
    assert isinstance(consumer, PushConsumer)
    assert consumer.max_unwritten_bytes == 0


async def test_shared_gives_an_unwritable_consumers_share_to_the_others(
    service: BrokerService,
) -> None:
    options = ConsumerOptions(initial_position="Earliest", subscription_type="Shared")
    stalled = await service.create_consumer(TOPIC, "s", options, BufferingPushConsumer)
    reading = await service.create_consumer(TOPIC, "s", options, BufferingPushConsumer)
    assert isinstance(stalled, BufferingPushConsumer)
    assert isinstance(reading, BufferingPushConsumer)
    stalled.grant(1000)
    reading.grant(1000)
    stalled.set_writable(False)
    positions = await publish(service, *(entry_data(i) for i in range(10)))
    await eventually_async(lambda: len(reading.sent) == 10, "everything sent to the one that reads")
    assert reading.sent == positions and stalled.sent == []

    stalled.set_writable(True)  # round robin again
    more = await publish(service, *(entry_data(i) for i in range(10, 14)))
    await eventually_async(lambda: len(reading.sent) + len(stalled.sent) == 14, "the rest sent")
    assert stalled.sent and sorted(reading.sent[10:] + stalled.sent) == more


class GatedPushConsumer(BufferingPushConsumer):
    """A push session whose front end closes the ``writable`` gate once what it buffers
    passes ``MARK`` (the entry that passes it still goes), as a binary connection's
    output does at its high water mark."""

    MARK = 2_500

    def send(self, entry: Entry, redelivery_count: int) -> None:
        super().send(entry, redelivery_count)
        if self.buffered > self.MARK:
            self.set_writable(False)

    def gate_room(self) -> int | None:
        return max(self.MARK - self.buffered, 0)

    def taken(self) -> None:
        self.buffered = 0
        self.set_writable(True)


async def test_shared_reads_for_a_gated_session_no_more_than_its_gate_lets_through(
    service: BrokerService,
) -> None:
    # Shared queues what a consumer could not take for a replay read: entries read
    # past the gate would be read twice
    consumer, dispatcher = await shared_push_consumer(service, GatedPushConsumer)
    consumer.grant(1000)
    first = await publish(service, entry_data(0))  # tells the entries' size
    await eventually_async(lambda: consumer.sent == first, "the first entry sent")
    consumer.taken()
    positions = first + await publish(service, *(entry_data(i) for i in range(1, 30)))
    while len(consumer.sent) < 30:
        await eventually_async(lambda: not consumer.writable, "sent up to the gate")
        await settled()
        assert len(dispatcher.replay) == 0  # nothing read that could not be handed over
        assert consumer.buffered <= GatedPushConsumer.MARK + len(entry_data(0))
        consumer.taken()
        if len(consumer.sent) < 30:
            await eventually_async(lambda: consumer.buffered > 0, "more sent once the gate opened")
    assert consumer.sent == positions


async def test_a_push_sessions_first_batch_sets_its_average_of_messages_per_entry(
    service: BrokerService,
) -> None:
    # as Pulsar's Consumer.avgMessagesPerEntry starts: the permits in entries are
    # right from the first batch on, and nothing is read that does not fit
    consumer, dispatcher = await shared_push_consumer(service, BufferingPushConsumer)
    ten = batch(*(bytes([i]) * 100 for i in range(10)))
    consumer.grant(10)
    first = await publish(service, ten)
    await eventually_async(lambda: consumer.sent == first, "the first batch sent")
    positions = await publish(service, *([ten] * 5))
    await settled()
    consumer.grant(25)  # two batches and part of a third
    await eventually_async(lambda: len(consumer.sent) == 4, "three more batches sent")
    await settled()
    assert consumer.sent == first + positions[:3] and consumer.permits == -5
    assert len(dispatcher.replay) == 0  # the two batches left were never read


async def test_has_room_is_whether_available_permits_is_above_zero(
    bounded: BrokerService,
) -> None:
    # the dispatcher's check before each entry it hands over, without the count
    push = await push_consumer(bounded)
    pulled = await bounded.create_consumer(
        TOPIC,
        "pulled",
        ConsumerOptions(initial_position="Earliest", receiver_queue_size=3),
        ConsumerSession,
    )
    assert isinstance(pulled, ConsumerSession)
    states = 0
    for writable in (True, False):
        for limit in (0, BOUND):
            for average in (0.0, 900.0, 4_000.0):
                for permits in (-3, 0, 1, 2, 40):
                    for buffered in (0, BOUND - 1, BOUND, 3 * BOUND):
                        push.writable = writable
                        push.max_unwritten_bytes = limit
                        push._entry_bytes = average
                        push.permits = permits
                        push.buffered = buffered
                        assert push.has_room() == (push.available_permits > 0)
                        states += 1
                for held in range(5):
                    pulled.queue.clear()
                    for index in range(held):
                        pulled.queue.append(Delivery(Entry(Position(1, index), entry_data(0)), 0))
                    pulled.writable = writable
                    pulled.max_unwritten_bytes = limit
                    pulled._entry_bytes = average
                    assert pulled.has_room() == (pulled.available_permits > 0)
                    states += 1
    assert states == 2 * 2 * 3 * (5 * 4 + 5)
