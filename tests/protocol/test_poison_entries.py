"""Poison entries over the binary protocol: an entry whose checksum is right but whose
metadata or batch cannot be trusted. Sent by a producer, it is refused with SEND_ERROR
MetadataError and nothing is stored (the producer and its connection go on); already
stored (written to the ledger directly, as a broker of another make or a bug might have
left it), it is acknowledged and skipped by the dispatcher, as Pulsar's does with an
entry whose metadata it cannot read, and the official client receives the good messages
around it instead of the same unreadable message forever."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Callable
from typing import Any

import pytest

from broker.dispatch.names import TopicName
from broker.ledger.entry import encode_message
from broker.pulsar_api import ServerError, Type
from tests.harness import (
    ServedBroker,
    Spawn,
    eventually,
    in_process_node,
    new_topic,
    persistent,
)
from tests.protocol.raw import (
    RawConnection,
    broken_batch_message,
    entry,
    frame,
    lying_batch,
    producer,
    send,
    send_frame,
    unparsable_metadata,
)

POISON = {
    "a batch header claiming 2**31 - 1 messages": lying_batch(b"lie", 7, 2**31 - 1),
    "a batch header claiming 0 messages": lying_batch(b"lie", 7, 0),
    "a batch header claiming -1 messages": lying_batch(b"lie", 7, -1),
    "metadata that does not parse": unparsable_metadata(b"garbled"),
    "a batch message whose metadata does not parse": broken_batch_message(b"half", 7),
}


def stored_entries(broker: ServedBroker, topic: str) -> int:
    stats = broker.ok("GET", f"/admin/v2/persistent/{topic}/internalStats")
    return int(stats["numberOfEntries"])


@pytest.mark.parametrize("poison", list(POISON), ids=list(POISON))
def test_a_send_of_a_poison_entry_is_refused_and_stores_nothing(
    broker: ServedBroker, raw: RawConnection, poison: str
) -> None:
    topic = new_topic("poison-send")
    raw.handshake()
    raw.write(frame(producer(persistent(topic), 3, 1)))
    raw.expect(Type.PRODUCER_SUCCESS)

    raw.write(send_frame(send(3, 7), POISON[poison]))
    error = raw.expect(Type.SEND_ERROR).send_error
    assert (error.producer_id, error.sequence_id) == (3, 7)
    assert error.error == ServerError.MetadataError == 1
    assert error.message

    # the producer and its connection go on; the refused entry took no place
    raw.write(send_frame(send(3, 8), entry(b"good", 8)))
    receipt = raw.expect(Type.SEND_RECEIPT).send_receipt
    assert (receipt.sequence_id, receipt.message_id.entryId) == (8, 0)
    assert stored_entries(broker, topic) == 1


def test_a_send_whose_num_messages_differs_from_its_metadata_is_refused(
    broker: ServedBroker, raw: RawConnection
) -> None:
    topic = new_topic("poison-count")
    raw.handshake()
    raw.write(frame(producer(persistent(topic), 4, 1)))
    raw.expect(Type.PRODUCER_SUCCESS)
    claims_many = send(4, 1)
    claims_many.send.num_messages = 2**31 - 1
    raw.write(send_frame(claims_many, entry(b"one message", 1)))

    error = raw.expect(Type.SEND_ERROR).send_error
    assert (error.sequence_id, error.error) == (1, ServerError.MetadataError)
    assert "num_messages" in error.message
    raw.write(send_frame(send(4, 2), entry(b"good", 2)))
    assert raw.expect(Type.SEND_RECEIPT).send_receipt.sequence_id == 2
    assert stored_entries(broker, topic) == 1
    stats = broker.ok("GET", f"/admin/v2/persistent/{topic}/stats")
    assert stats["msgInCounter"] == 1  # counted from the metadata, not the claim


# ---------------------------------------------------------------------- stored already


async def _store_directly(data_dir: pathlib.Path, topic: str, entries: list[bytes]) -> None:
    """Write ``entries`` to the topic's ledger as they are, past every produce check,
    with a broker in this process over ``data_dir``, then stop it."""
    async with in_process_node(data_dir) as (_, node):
        assert node.service is not None
        loaded = await node.service.get_topic(TopicName.parse(persistent(topic)), create=True)
        await loaded.ledger.add_entries(entries)


def good(payload: bytes) -> bytes:
    return encode_message(payload, 1_700_000_000_000, producer_name="good")


def test_the_official_client_receives_the_good_messages_around_poison_entries(
    tmp_path: pathlib.Path, pulsar_client: Callable[..., Any], broker_spawn: Spawn | None
) -> None:
    topic = new_topic("poison-stored")
    stored = [
        good(b"before"),
        lying_batch(b"lie", 1, 2**31 - 1),
        good(b"between"),
        unparsable_metadata(b"garbled"),
        lying_batch(b"lie", 2, 0),
        good(b"after"),
    ]
    import pulsar

    asyncio.run(_store_directly(tmp_path, topic, stored))
    broker = ServedBroker(tmp_path, spawn=broker_spawn).start()
    try:
        client = pulsar_client(broker.service_url)
        consumer = client.subscribe(
            persistent(topic),
            "s",
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=10,
        )
        received = []
        for _ in range(3):
            message = consumer.receive(timeout_millis=20_000)
            received.append(message.data())
            consumer.acknowledge(message)
        assert received == [b"before", b"between", b"after"]

        # the poison entries were acknowledged for the subscription, and it goes on
        def drained() -> bool:
            stats = broker.ok("GET", f"/admin/v2/persistent/{topic}/stats")
            return bool(stats["subscriptions"]["s"]["msgBacklog"] == 0)

        eventually(drained, "the subscription's backlog to drain")
        producer = client.create_producer(persistent(topic))
        producer.send(b"later")
        later = consumer.receive(timeout_millis=20_000)
        assert later.data() == b"later"
        consumer.acknowledge(later)
        assert "cannot be trusted, acknowledged and skipped" in broker.log()
    finally:
        broker.kill()
