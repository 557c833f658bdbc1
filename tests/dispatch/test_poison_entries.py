"""The dispatcher's side of poison entries (see tests/protocol/test_poison_entries.py and
tests/http/test_poison_entries.py for the clients'): an entry it cannot trust is never
handed to a consumer, and its acknowledgement is written on its own, not only when a
consumer's ack happens to write the cursor."""

from __future__ import annotations

import pytest

from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService, ConsumerOptions
from broker.ledger.entry import encode_message
from broker.ledger.managed_cursor import ManagedCursor
from broker.ledger.position import Position
from tests.harness import eventually_async
from tests.protocol.raw import lying_batch, unparsable_metadata

TOPIC = TopicName("public", "default", "poison")


@pytest.mark.parametrize("sub_type", ["Exclusive", "Failover", "Shared", "Key_Shared"])
async def test_skipped_entries_are_never_handed_over_and_their_ack_is_durable(
    service: BrokerService, sub_type: str
) -> None:
    topic = await service.get_topic(TOPIC, create=True)
    first = await topic.ledger.add_entries(
        [
            encode_message(b"first", 1),
            lying_batch(b"lie", 1, 2**31 - 1),
            encode_message(b"second", 2),
            unparsable_metadata(b"garbled"),
        ]
    )
    poison = [Position(first.ledger_id, first.entry_id + i) for i in (1, 3)]
    options = ConsumerOptions(subscription_type=sub_type, initial_position="Earliest")
    consumer = await service.create_consumer(TOPIC, "s", options)
    await eventually_async(
        lambda: len(consumer.queue) == 2, "the two good entries to be handed over"
    )
    assert [m.payload for d in consumer.drain(10, 0) for m in d.entry.decoded_messages()] == [
        b"first",
        b"second",
    ]
    assert consumer.msg_out.total == 2  # never the 2**31 - 1 the lying batch claims
    assert all(position not in consumer.pending for position in poison)

    async def durable() -> bool:
        written = await ManagedCursor.recover(topic.ledger, "s")
        return all(written.is_acknowledged(position) for position in poison)

    await eventually_async(durable, "the skipped entries' ack to be written")
