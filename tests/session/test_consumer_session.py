"""The consumer session every front end shares, driven directly (no sockets): each
behaviour is tested here once; the front ends' tests cover only their translation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.dispatch.errors import (
    InvalidRequestError,
    NotFoundError,
    PreconditionFailedError,
    SubscriptionFencedError,
)
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService, ConsumerOptions
from broker.ledger.entry import Entry, encode_batch, encode_message
from broker.ledger.position import Position
from broker.session.consumer import ConsumerSession, PushConsumer
from tests.harness import eventually_async

TOPIC = TopicName("public", "default", "sessions")


async def consumer_of(
    service: BrokerService, subscription: str = "s", **options: Any
) -> ConsumerSession:
    options.setdefault("initial_position", "Earliest")
    consumer = await service.create_consumer(
        TOPIC, subscription, ConsumerOptions(**options), ConsumerSession
    )
    assert isinstance(consumer, ConsumerSession)
    return consumer


async def publish(service: BrokerService, *entries: bytes) -> list[Position]:
    topic = await service.get_topic(TOPIC, create=True)
    positions = []
    for data in entries:
        first = await topic.publish([data], 1)
        positions.append(Position(first.ledger_id, first.entry_id))
    return positions


def batch(*payloads: bytes) -> bytes:
    return encode_batch([(payload, None, None, 0) for payload in payloads], 1000)


def single(payload: bytes) -> bytes:
    return encode_message(payload, 1000)


async def receive(consumer: ConsumerSession, entries: int) -> list[tuple[str, int, int]]:
    """Take ``entries`` entries as a client does: (payload, batch index, redelivery
    count) of each message the session gives it."""
    await eventually_async(lambda: len(consumer.queue) >= entries, f"{entries} entries handed over")
    received = []
    for delivery in consumer.drain(entries, 1):
        messages, _ = consumer.unacked_messages(delivery.entry)
        for message in messages:
            received.append(
                (message.payload.decode(), message.batch_index, delivery.redelivery_count)
            )
    return received


async def durable(work: Any) -> None:
    if work is not None:
        await work


# ---------------------------------------------------------------------- batch-index acks


async def test_a_redelivered_batch_carries_only_the_messages_not_acked(
    service: BrokerService,
) -> None:
    consumer = await consumer_of(service)
    [position] = await publish(service, batch(b"a", b"b", b"c"))
    assert await receive(consumer, 1) == [("a", 0, 0), ("b", 1, 0), ("c", 2, 0)]
    # the session, not the front end, recorded the size the ack needs
    assert consumer.subscription.batch_sizes[position] == 3

    await durable(consumer.acknowledge([], [(position, 1)], False))
    consumer.redeliver(None)
    assert await receive(consumer, 1) == [("a", 0, 1), ("c", 2, 1)]
    assert consumer.subscription.backlog() == 1


async def test_the_last_message_acked_acknowledges_its_batch(service: BrokerService) -> None:
    consumer = await consumer_of(service)
    [position] = await publish(service, batch(b"a", b"b"))
    await receive(consumer, 1)
    await durable(consumer.acknowledge([], [(position, 0)], False))
    await durable(consumer.acknowledge([], [(position, 1)], False))
    assert consumer.subscription.backlog() == 0
    assert position not in consumer.pending
    assert position not in consumer.subscription.batch_sizes


async def test_a_cumulative_ack_of_a_batch_message_acks_it_and_everything_before(
    service: BrokerService,
) -> None:
    consumer = await consumer_of(service)
    first, second = await publish(service, single(b"x"), batch(b"a", b"b", b"c"))
    await receive(consumer, 2)
    await durable(consumer.acknowledge([], [(second, 1)], True))
    consumer.redeliver(None)
    assert await receive(consumer, 1) == [("c", 2, 1)]
    assert first not in consumer.pending


async def test_cumulative_acks_on_shared_are_refused_before_anything_changes(
    service: BrokerService,
) -> None:
    consumer = await consumer_of(service, subscription_type="Shared")
    [position] = await publish(service, batch(b"a", b"b"))
    await receive(consumer, 1)
    with pytest.raises(InvalidRequestError):
        consumer.acknowledge([], [(position, 0)], True)
    assert consumer.subscription.ack_sets == {}
    assert position in consumer.pending


async def test_ids_the_client_was_not_given_are_ignored(service: BrokerService) -> None:
    consumer = await consumer_of(service, receiver_queue_size=5)
    plain, batched = await publish(service, single(b"x"), batch(b"a", b"b"))
    await eventually_async(lambda: len(consumer.queue) == 2, "two entries handed over")
    # the batch waits in the receiver queue: its size is not known, its indexes unknown
    assert consumer.acknowledge([], [(batched, 0), (plain, 0)], False) is None
    await receive(consumer, 2)
    # beyond the batch, or an index other than 0 of an unbatched entry
    assert consumer.acknowledge([], [(batched, 2), (plain, 1)], False) is None
    assert consumer.subscription.backlog() == 2
    # message 0 of a received unbatched entry is the entry
    await durable(consumer.acknowledge([], [(plain, 0)], False))
    assert consumer.subscription.backlog() == 1


async def test_an_ack_through_another_consumer_of_the_subscription_acks_for_its_holder(
    service: BrokerService,
) -> None:
    first = await consumer_of(service, subscription_type="Shared", receiver_queue_size=1)
    second = await consumer_of(service, subscription_type="Shared", receiver_queue_size=1)
    await publish(service, single(b"x"), single(b"y"))
    await eventually_async(
        lambda: len(first.queue) == 1 and len(second.queue) == 1, "one entry each"
    )
    [held] = [delivery.entry.position for delivery in second.drain(1, 1)]
    await durable(first.acknowledge([held], [], False))
    assert held not in second.pending
    assert first.subscription.backlog() == 1


# ---------------------------------------------------------------------- nacks, redelivery


async def test_nacking_two_messages_of_a_batch_redelivers_it_once(
    service: BrokerService,
) -> None:
    consumer = await consumer_of(service, nack_delay_ms=0)
    [position] = await publish(service, batch(b"a", b"b", b"c"))
    await receive(consumer, 1)
    await durable(consumer.acknowledge([], [(position, 0)], False))
    consumer.negative_acknowledge([], [(position, 1), (position, 2), (position, 7)])
    assert await receive(consumer, 1) == [("b", 1, 1), ("c", 2, 1)]
    assert consumer.subscription.redelivery_counts[position] == 1


async def test_a_nack_of_an_id_never_given_redelivers_nothing(service: BrokerService) -> None:
    consumer = await consumer_of(service, nack_delay_ms=0)
    [position] = await publish(service, batch(b"a", b"b"))
    await receive(consumer, 1)
    consumer.negative_acknowledge([Position(99, 0)], [(position, 5)])
    await asyncio.sleep(0)
    assert not consumer.queue and consumer.received(position)
    assert consumer.subscription.redelivery_counts == {}


# ---------------------------------------------------------------------- hand-over, permits


class RecordingPushConsumer(PushConsumer):
    """A push session whose client records what it is sent."""

    __slots__ = ("sent",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: list[tuple[Position, int]] = []

    def send(self, entry: Entry, redelivery_count: int) -> None:
        self.sent.append((entry.position, redelivery_count))


async def test_a_push_session_sends_against_permits_counted_in_messages(
    service: BrokerService,
) -> None:
    consumer = await service.create_consumer(
        TOPIC, "s", ConsumerOptions(initial_position="Earliest"), RecordingPushConsumer
    )
    assert isinstance(consumer, RecordingPushConsumer)
    released: list[tuple[str, int, int]] = []
    consumer._released = lambda *event: released.append(event)
    positions = await publish(service, batch(b"a", b"b", b"c"), single(b"x"))
    assert consumer.sent == [] and consumer.available_permits == 0

    consumer.grant(1)  # room for one message: the batch goes, as in Pulsar, whole
    await eventually_async(lambda: len(consumer.sent) == 1, "the batch sent")
    assert consumer.sent == [(positions[0], 0)]
    # the hand-over is the read the cache expected (PIP-430's released event)
    assert released == [("s", positions[0].ledger_id, positions[0].entry_id)]
    # its three messages took three permits: the client owes two
    assert consumer.permits == -2 and consumer.available_permits == 0
    consumer.grant(2)
    assert consumer.available_permits == 0
    assert set(consumer.pending) == {positions[0]}

    consumer.grant(1)
    await eventually_async(lambda: len(consumer.sent) == 2, "the next entry sent")
    assert consumer.sent[1] == (positions[1], 0)


# ---------------------------------------------------------------------- seek, unsubscribe


async def test_seek_closes_the_consumers_then_resets_and_they_read_from_the_target(
    service: BrokerService,
) -> None:
    consumer = await consumer_of(service, subscription_type="Shared")
    subscription = consumer.subscription
    positions = await publish(service, single(b"x"), single(b"y"), single(b"z"))
    await receive(consumer, 3)
    await durable(consumer.acknowledge(positions, [], False))
    other = await consumer_of(service, subscription_type="Shared")

    # as Pulsar's resetCursor: the consumers are closed first, and none may attach
    # until the cursor is reset
    attached_during_reset: list[BaseException] = []
    reset = subscription.reset_cursor

    async def reset_and_try_to_attach(position: Position) -> None:
        assert consumer.closed and other.closed and subscription.fenced
        try:
            await consumer_of(service, subscription_type="Shared")
        except SubscriptionFencedError as error:
            attached_during_reset.append(error)
        await reset(position)

    subscription.reset_cursor = reset_and_try_to_attach  # type: ignore[method-assign]
    await consumer.seek(service, positions[1])
    del subscription.reset_cursor
    assert len(attached_during_reset) == 1 and not subscription.fenced

    again = await consumer_of(service)
    assert [payload for payload, _, _ in await receive(again, 2)] == ["y", "z"]
    await again.seek(service, "earliest")
    assert again.closed and subscription.backlog() == 3
    await (await consumer_of(service)).seek(service, "latest")
    assert subscription.backlog() == 0


async def test_unsubscribe_refuses_while_others_are_connected_unless_forced(
    service: BrokerService,
) -> None:
    consumer = await consumer_of(service, subscription_type="Shared")
    other = await consumer_of(service, subscription_type="Shared")
    topic = consumer.subscription.topic
    with pytest.raises(PreconditionFailedError, match="other consumers"):
        await consumer.unsubscribe(service, force=False)
    assert "s" in topic.subscriptions and not consumer.closed

    await consumer.unsubscribe(service, force=True)
    assert consumer.closed and other.closed
    assert "s" not in topic.subscriptions


async def test_a_readers_subscription_goes_with_it(service: BrokerService) -> None:
    consumer = await consumer_of(service, subscription="reader-1")
    topic = consumer.subscription.topic
    service.close_consumer(consumer)
    await consumer.drop_subscription()
    assert "reader-1" not in topic.subscriptions
    with pytest.raises(NotFoundError):
        topic.subscription("reader-1")
