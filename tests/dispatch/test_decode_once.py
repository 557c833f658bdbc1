"""An entry handed to an HTTP consumer that polls has its metadata decoded once: at the
hand-over, where the message count is taken, and its poll builds the messages from it
(``Entry.decoded_messages``). A receiver queue nobody has polled keeps only bytes."""

from __future__ import annotations

from typing import Any

import pytest

from broker.dispatch.consumer import Delivery
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService, ConsumerOptions
from broker.ledger import entry as entry_module
from broker.ledger.entry import encode_batch, encode_message
from tests.harness import eventually_async

TOPIC = TopicName("public", "default", "decoded")


class Decodes:
    """Counts the MessageMetadata decodes of entries."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        decode = entry_module.metadata_of

        def counted(data: bytes) -> Any:
            self.count += 1
            return decode(data)

        monkeypatch.setattr(entry_module, "metadata_of", counted)


async def publish(service: BrokerService) -> list[bytes]:
    """Five unbatched messages and a batch of three; the entries' bytes."""
    topic = await service.get_topic(TOPIC, create=True)
    entries = [encode_message(b"message %d" % i, 1000 + i, key=f"k{i}") for i in range(5)]
    entries.append(encode_batch([(b"a", None, None, 0), (b"b", "kb", {"p": "v"}, 7)], 2000))
    for data in entries:
        await topic.publish([data])
    return entries


def payloads(deliveries: list[Delivery]) -> list[bytes]:
    return [m.payload for d in deliveries for m in d.entry.decoded_messages()]


async def test_a_polling_consumer_decodes_each_entry_once(
    service: BrokerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    consumer = await service.create_consumer(TOPIC, "s", ConsumerOptions())
    assert consumer.drain(100, 0) == []  # its client polls: nothing yet
    decodes = Decodes(monkeypatch)
    entries = await publish(service)
    await eventually_async(
        lambda: len(consumer.queue) == len(entries), "the entries to be handed over"
    )

    deliveries = consumer.drain(100, 0)
    assert payloads(deliveries) == [b"message %d" % i for i in range(5)] + [b"a", b"b"]
    assert decodes.count == len(entries)
    assert consumer.msg_out.total == 7  # the count came from the same decode


async def test_a_receiver_queue_nobody_polled_keeps_no_decoded_metadata(
    service: BrokerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    consumer = await service.create_consumer(TOPIC, "s", ConsumerOptions())
    decodes = Decodes(monkeypatch)
    entries = await publish(service)
    await eventually_async(
        lambda: len(consumer.queue) == len(entries), "the entries to be handed over"
    )
    assert decodes.count == len(entries)  # the counts, nothing kept

    deliveries = consumer.drain(100, 0)
    assert payloads(deliveries) == [b"message %d" % i for i in range(5)] + [b"a", b"b"]
    assert decodes.count == 2 * len(entries)
